{% include "header.wgsl" %}
// Arg{{ kind }}, first half: rows of {{ n }} elements in chunks of {{ chunk }} ({{ chunks }} a row, {{ rows }} row(s)), a
// workgroup of 256 threads per chunk. Each thread scans its share of the chunk four elements at a time in index
// order, a tree keeps the chunk's best value, ties going to the {% if last %}last{% else %}first{% endif %} index as in one sequential scan,
// and the chunk's (value, index) pair is stored for ArgMerge, the index as f32 (exact: rows are shorter than 2^24).
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.y * {{ groups_x }}u + wid.x;
    if (g >= {{ groups }}u) {
        return;
    }
    let row = g / {{ chunks }}u;
    let c = g % {{ chunks }}u;
    // The chunk's vec4s: q4 .. end4 of the row's.
    let q4 = c * {{ chunk4 }}u;
    let end4 = min(q4 + {{ chunk4 }}u, {{ n4 }}u);
    let base4 = row * {{ n4 }}u;
    // A thread without an element of the chunk keeps none (index NONE), which every element beats.
    var best = 0.0;
    var at = {{ none }}u;
    for (var q = q4 + lid; q < end4; q = q + 256u) {
        let v = x[base4 + q];
{%- for e in 0..4 %}
        if (at == {{ none }}u || v[{{ e }}] {{ cmp }} best) {
            best = v[{{ e }}];
            at = q * 4u + {{ e }}u;
        }
{%- endfor %}
    }
{% include "arg_tree.wgsl" %}
    if (lid == 0u) {
        out[g * 2u] = best_v[0];
        out[g * 2u + 1u] = f32(best_i[0]);
    }
}
