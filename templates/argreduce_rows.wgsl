{% include "header.wgsl" %}
// Arg{{ kind }} along an axis of {{ n }} elements spaced {{ inner }} apart; one workgroup of 256 threads per output
// element (a long axis: an LLM's vocabulary). Each thread scans a strided share, then a tree keeps the best value,
// ties going to the {% if last %}last{% else %}first{% endif %} index as in one sequential scan.
var<workgroup> best_v: array<{{ ty }}, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
    let base = (row / {{ inner }}u) * {{ span }}u + row % {{ inner }}u;
{%- if vec4 %}
    // The row as vec4s: thread lid takes elements 4q .. 4q + 3 for q = lid, lid + 256, …, in index order.
    // Every thread starts from the row's elements (rows have at least 1024), so no sentinel value is needed.
    let base4 = base / 4u;
    let first = x[base4 + lid];
    var best = first.x;
    var at = lid * 4u;
{%- for e in 1..4 %}
    if (first[{{ e }}] {{ cmp }} best) {
        best = first[{{ e }}];
        at = lid * 4u + {{ e }}u;
    }
{%- endfor %}
    // Eight independent vec4 loads per step, compared in index order: one workgroup reads the whole row, so what
    // bounds it is how many bytes each thread keeps in flight (one scalar at a time took 0.235 ms for an LLM's
    // 151,936 logits on an H100, eight 48 µs).
    var q = lid + 256u;
    for (; q + 1792u < {{ n4 }}u; q = q + 2048u) {
{%- for u in loads %}
        let v{{ u.i }} = x[base4 + q + {{ u.off }}u];
{%- endfor %}
{%- for u in loads %}
{%- for e in 0..4 %}
        if (v{{ u.i }}[{{ e }}] {{ cmp }} best) {
            best = v{{ u.i }}[{{ e }}];
            at = (q + {{ u.off }}u) * 4u + {{ e }}u;
        }
{%- endfor %}
{%- endfor %}
    }
    for (; q < {{ n4 }}u; q = q + 256u) {
        let v = x[base4 + q];
{%- for e in 0..4 %}
        if (v[{{ e }}] {{ cmp }} best) {
            best = v[{{ e }}];
            at = q * 4u + {{ e }}u;
        }
{%- endfor %}
    }
{%- else %}
    // Every thread starts from one of the row's elements (rows have at least 256), so no sentinel value is needed.
    var best = x[base + lid * {{ inner }}u];
    var at = lid;
    // Eight independent loads per step, compared in index order: one workgroup reads the whole row, so what
    // bounds it is how many loads each thread keeps in flight (one at a time took 0.235 ms for an LLM's 151,936
    // logits on an H100).
    var j = lid + 256u;
    for (; j + 1792u < {{ n }}u; j = j + 2048u) {
{%- for u in loads %}
        let v{{ u.i }} = x[base + (j + {{ u.off }}u) * {{ inner }}u];
{%- endfor %}
{%- for u in loads %}
        if (v{{ u.i }} {{ cmp }} best) {
            best = v{{ u.i }};
            at = j + {{ u.off }}u;
        }
{%- endfor %}
    }
    for (; j < {{ n }}u; j = j + 256u) {
        let v = x[base + j * {{ inner }}u];
        if (v {{ cmp }} best) {
            best = v;
            at = j;
        }
    }
{%- endif %}
    best_v[lid] = best;
    best_i[lid] = at;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let v = best_v[lid + s];
            let k = best_i[lid + s];
            if (v {{ strict }} best_v[lid] || (v == best_v[lid] && k {{ tie }} best_i[lid])) {
                best_v[lid] = v;
                best_i[lid] = k;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[row] = i32(best_i[0]);
    }
}
