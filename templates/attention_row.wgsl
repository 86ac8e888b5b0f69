{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// The query row is computed here as it is loaded (its elementwise kernel folded in).
{%- include "fused.wgsl" %}
{%- endif %}
{%- include "fused.wgsl" %}
{%- if let Some(c) = cache %}
{%- if let Some(fu) = c.operand %}
// The new keys are computed here (their elementwise kernel folded in).
{%- include "fused.wgsl" %}
{%- endif %}
// This step's cache writes, done here: workgroup 0 writes the new row of `b` (K) and of `v` (V) at row
// `new_row` = `{{ c.row_var }}[0]` clamped to 0..={{ c.last_row }}; every workgroup computes its own head's new key and value into
// workgroup memory and takes key `new_row` from there, reading another row in its place, so no workgroup reads a
// row that one writes. Only keys 0..=new_row are scored: the rows after the new one hold no token and the model's
// mask masks them out (a CacheWrite's contract, which `--kv-cache`'s layout proof establishes), so they would
// add exact zeros.
var<private> new_row: u32;
var<private> key_end: u32;
var<private> alt_row: u32;
var<workgroup> k_new: array<vec4<f32>, {{ dk4 }}>;
var<workgroup> v_new: array<vec4<f32>, {{ dv4 }}>;
{%- for p in c.parts %}
{%- let name = p.name %}

// New {{ name }} element i, where it goes at first row r, and which new element cache offset o of the new row holds.
fn new_{{ name }}(i: u32) -> f32 {
{%- for x in p.part.coords %}
    let {{ x.name }} = (i / {{ x.stride }}u) % {{ x.extent }}u;
{%- endfor %}
    return {{ p.part.src }};
}
fn new_{{ name }}_at(i: u32, r: u32) -> u32 {
{%- for x in p.part.coords %}
    let {{ x.name }} = (i / {{ x.stride }}u) % {{ x.extent }}u;
{%- endfor %}
    return {{ p.part.dst }};
}
fn new_{{ name }}_of(o: u32) -> u32 {
    return {{ p.of }};
}
{%- endfor %}

// The key or value row read for key j.
fn row_read(j: u32) -> u32 {
    return select(j, alt_row, j == new_row);
}
{%- endif %}
// Attention for one query row (a decode step): a workgroup of 256 threads per row, {{ blocks }} rows, {{ n }} keys.
// The query goes to workgroup memory; each thread scores keys tid, tid + 256, … (Q·K as {{ dk4 }} four-wide loads of
// each of two keys, all in flight, then the score epilogue: scale, mask) into workgroup memory, which holds every score;
// the workgroup reduces their maximum and the softmax denominator; then {{ slices }} slices of {{ lanes }} threads
// each sum p·V four value columns wide over every {{ slices }}th key, {{ unroll }} keys in flight, and the slices'
// sums meet in workgroup memory. Every load of K and V is independent of the others, so a workgroup streams its
// cache with many loads in flight instead of one at a time.
{%- let reduce_threads = 256 %}
{%- let reduce_width = 16 %}
{%- let reduce_chunks = 16 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 64 %}
{%- let reduce_parts = 128 %}
{% include "workgroup_reduce.wgsl" %}
var<workgroup> q_row: array<vec4<f32>, {{ dk4 }}>;
var<workgroup> scores: array<f32, {{ n }}>;
var<workgroup> pv_red: array<vec4<f32>, 256>;

// Elements 4·d4 .. 4·d4 + 3 of the key at `base`.
fn key4(base: u32, d4: u32) -> vec4<f32> {
{%- if k_vec4 %}
    return {{ b_var }}[(base + d4 * 4u) / 4u];
{%- else %}
    var r = vec4<f32>(0.0);
    for (var e = 0u; e < 4u; e = e + 1u) {
        var bv = {{ b_var }}[base + (d4 * 4u + e) * {{ b_sk }}u];
{%- if !b_pro.is_empty() %}
        bv = {{ b_pro }};
{%- endif %}
        r[e] = bv;
    }
    return r;
{%- endif %}
}

// Value columns 4·c4 .. 4·c4 + 3 of the key at `base`.
fn value4(base: u32, c4: u32) -> vec4<f32> {
{%- if v_vec4 %}
    return {{ v_var }}[(base + c4 * 4u) / 4u];
{%- else %}
    return vec4<f32>({% for e in 0..4 %}{% if e > 0 %}, {% endif %}{{ v_var }}[base + (c4 * 4u + {{ e }}u) * {{ v_sn }}u]{% endfor %});
{%- endif %}
}

@compute @workgroup_size(256)
{%- if sg %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sid: u32, @builtin(subgroup_invocation_id) slane: u32, @builtin(subgroup_size) ssize: u32) {
{%- include "subgroup_ids.wgsl" %}
{%- else %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
{%- endif %}
    let batch = wid.y * {{ groups_x }}u + wid.x;
    if (batch >= {{ blocks }}u) {
        return;
    }
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let v_base = {{ v_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.v_stride }}u{% endfor %};
    let neg_inf = bitcast<f32>(non_finite_bits.y);
    if (tid < {{ dk4 }}u) {
        var q = vec4<f32>(0.0);
        for (var e = 0u; e < 4u; e = e + 1u) {
            let d = tid * 4u + e;
{%- if operand.is_some() %}
            var av = operand_a(0.0, a_base + d);
{%- else %}
            var av = a[a_base + d * {{ a_sk }}u];
{%- endif %}
{%- if !a_pro.is_empty() %}
            av = {{ a_pro }};
{%- endif %}
            q[e] = av;
        }
        q_row[tid] = q;
    }
{%- if let Some(c) = cache %}
    new_row = u32(clamp({{ c.row_var }}[0], 0, {{ c.last_row }}));
    alt_row = select(0u, 1u, new_row == 0u);
    key_end = new_row + 1u;
    if (tid < {{ dk4 }}u) {
        var kn = vec4<f32>(0.0);
        for (var e = 0u; e < 4u; e = e + 1u) {
            kn[e] = new_key(new_key_of(b_base + new_row * {{ b_sn }}u + (tid * 4u + e) * {{ b_sk }}u));
        }
        k_new[tid] = kn;
    }
    if (tid < {{ dv4 }}u) {
        var vn = vec4<f32>(0.0);
        for (var e = 0u; e < 4u; e = e + 1u) {
            vn[e] = new_value(new_value_of(v_base + new_row * {{ v_sk }}u + (tid * 4u + e) * {{ v_sn }}u));
        }
        v_new[tid] = vn;
    }
    if (batch == 0u) {
{%- for p in c.parts %}
        for (var i = tid; i < {{ p.part.numel }}u; i = i + 256u) {
            let d = new_{{ p.name }}_at(i, new_row);
            {{ p.store }} = new_{{ p.name }}(i);
        }
{%- endfor %}
    }
{%- endif %}
    // This thread's first key's row (key tid; past the last key, the last again, not scored), loaded before the
    // barrier so that it arrives while the query is staged.
{%- if cache.is_some() %}
    let first_base = b_base + row_read(min(tid, {{ keys }} - 1u)) * {{ b_sn }}u;
{%- else %}
    let first_base = b_base + min(tid, {{ keys }} - 1u) * {{ b_sn }}u;
{%- endif %}
{%- for d in 0..dk4 %}
    let kf{{ d }} = key4(first_base, {{ d }}u);
{%- endfor %}
    workgroupBarrier();
    var tmax = neg_inf;
    // Two keys per thread at a time (tid + 512·t and 256 more; past the end, the last key again, not stored), so
    // {{ k_loads }} four-wide loads are in flight.
    for (var j0 = tid; j0 < {{ keys }}; j0 = j0 + 512u) {
        let j1 = j0 + 256u;
{%- if cache.is_some() %}
        let base0 = b_base + row_read(j0) * {{ b_sn }}u;
        let base1 = b_base + row_read(min(j1, {{ last_key }}u)) * {{ b_sn }}u;
{%- else %}
        let base0 = b_base + j0 * {{ b_sn }}u;
        let base1 = b_base + min(j1, {{ last_key }}u) * {{ b_sn }}u;
{%- endif %}
        var dot0 = vec4<f32>(0.0);
        var dot1 = vec4<f32>(0.0);
        if (j0 == tid) {
            // The first key from the registers loaded above; the second read only where it is a key.
{%- for d in 0..dk4 %}
            dot0 = fma(q_row[{{ d }}u], kf{{ d }}, dot0);
{%- endfor %}
            if (j1 < {{ keys }}) {
                for (var d = 0u; d < {{ dk4 }}u; d = d + 1u) {
                    dot1 = fma(q_row[d], key4(base1, d), dot1);
                }
            }
        } else {
            for (var d0 = 0u; d0 < {{ dk4 }}u; d0 = d0 + {{ k_unroll }}u) {
{%- for u in 0..k_unroll %}
                let k{{ u }} = key4(base0, d0 + {{ u }}u);
                let m{{ u }} = key4(base1, d0 + {{ u }}u);
{%- endfor %}
{%- for u in 0..k_unroll %}
                dot0 = fma(q_row[d0 + {{ u }}u], k{{ u }}, dot0);
                dot1 = fma(q_row[d0 + {{ u }}u], m{{ u }}, dot1);
{%- endfor %}
            }
        }
{%- if cache.is_some() %}
        // The new key, from workgroup memory.
        if (j0 == new_row || j1 == new_row) {
            var dn = vec4<f32>(0.0);
            for (var d = 0u; d < {{ dk4 }}u; d = d + 1u) {
                dn = fma(q_row[d], k_new[d], dn);
            }
            if (j0 == new_row) {
                dot0 = dn;
            } else {
                dot1 = dn;
            }
        }
{%- endif %}
{%- for kk in 0..2 %}
        if (j{{ kk }} < {{ keys }}) {
            let dot_s = {{ alpha }} * (dot{{ kk }}.x + dot{{ kk }}.y + dot{{ kk }}.z + dot{{ kk }}.w);
{%- if fu.defined %}
            let s = fused(dot_s, batch * {{ n }}u + j{{ kk }});
{%- else %}
            let s = dot_s;
{%- endif %}
            scores[j{{ kk }}] = s;
            tmax = max(tmax, s);
        }
{%- endfor %}
    }
    // p·V: lane c4 owns value columns 4·c4 .. 4·c4 + 3; slice s takes keys s, s + {{ slices }}, …; the first {{ unroll }} of
    // this thread's value rows are loaded now (past the last key, the last again, not summed), so that they arrive
    // while the softmax's reductions run instead of after them.
    let c4 = tid % {{ lanes }}u;
    let slice = tid / {{ lanes }}u;
{%- for u in pv_keys %}
    var pv{{ u.i }} = vec4<f32>(0.0);
{%- endfor %}
    if (c4 < {{ dv4 }}u) {
{%- for u in pv_keys %}
{%- if cache.is_some() %}
        pv{{ u.i }} = value4(v_base + row_read(min(slice + {{ u.off }}u, {{ keys }} - 1u)) * {{ v_sk }}u, c4);
{%- else %}
        pv{{ u.i }} = value4(v_base + min(slice + {{ u.off }}u, {{ keys }} - 1u) * {{ v_sk }}u, c4);
{%- endif %}
{%- endfor %}
    }
    let mx = reduce_max({% if sg %}ssize{% else %}tid{% endif %}, tmax);
    // While every score is -inf, shift by 0 so exp gives 0 rather than NaN.
    let shift = select(mx, 0.0, mx == neg_inf);
    var l = 0.0;
    for (var j = tid; j < {{ keys }}; j = j + 256u) {
        let p = exp(scores[j] - shift);
        scores[j] = p;
        l = l + p;
    }
    let denom = reduce_sum({% if sg %}ssize{% else %}tid{% endif %}, l);
{%- for u in pv_keys %}
    var acc{{ u.i }} = vec4<f32>(0.0);
{%- endfor %}
    if (c4 < {{ dv4 }}u) {
        // The first keys, from the rows loaded above.
{%- for u in pv_keys %}
        if (slice + {{ u.off }}u < {{ keys }}) {
{%- if cache.is_some() %}
            acc{{ u.i }} = vec4<f32>(select(scores[slice + {{ u.off }}u], 0.0, slice + {{ u.off }}u == new_row)) * pv{{ u.i }};
{%- else %}
            acc{{ u.i }} = vec4<f32>(scores[slice + {{ u.off }}u]) * pv{{ u.i }};
{%- endif %}
        }
{%- endfor %}
        var j = slice + {{ pv_stride }}u;
        for (; j + {{ pv_last }}u < {{ keys }}; j = j + {{ pv_stride }}u) {
{%- if cache.is_some() %}
{%- for u in pv_keys %}
            let v{{ u.i }} = value4(v_base + row_read(j + {{ u.off }}u) * {{ v_sk }}u, c4);
{%- endfor %}
{%- for u in pv_keys %}
            acc{{ u.i }} = fma(vec4<f32>(select(scores[j + {{ u.off }}u], 0.0, j + {{ u.off }}u == new_row)), v{{ u.i }}, acc{{ u.i }});
{%- endfor %}
{%- else %}
{%- for u in pv_keys %}
            let v{{ u.i }} = value4(v_base + (j + {{ u.off }}u) * {{ v_sk }}u, c4);
{%- endfor %}
{%- for u in pv_keys %}
            acc{{ u.i }} = fma(vec4<f32>(scores[j + {{ u.off }}u]), v{{ u.i }}, acc{{ u.i }});
{%- endfor %}
{%- endif %}
        }
        for (; j < {{ keys }}; j = j + {{ slices }}u) {
{%- if cache.is_some() %}
            let p = select(scores[j], 0.0, j == new_row);
            acc0 = fma(vec4<f32>(p), value4(v_base + row_read(j) * {{ v_sk }}u, c4), acc0);
{%- else %}
            acc0 = fma(vec4<f32>(scores[j]), value4(v_base + j * {{ v_sk }}u, c4), acc0);
{%- endif %}
        }
{%- if cache.is_some() %}
        // The new value, from workgroup memory.
        if (slice == 0u) {
            acc0 = fma(vec4<f32>(scores[new_row]), v_new[c4], acc0);
        }
{%- endif %}
    }
{%- if sg %}
    var pv = {% for u in pv_keys %}{% if u.i > 0 %} + {% endif %}acc{{ u.i }}{% endfor %};
    // The slices of one subgroup summed by a butterfly of shuffles across them ({{ lanes }}, twice that, … lanes apart);
    // slice 0 then adds the other subgroups' sums (or, where a slice is a subgroup or wider, every slice's).
    for (var m = {{ lanes }}u; m < ssize; m = m << 1u) {
        pv = pv + subgroupShuffleXor(pv, m);
    }
    pv_red[tid] = pv;
    workgroupBarrier();
    let step = max(ssize / {{ lanes }}u, 1u);
    if (slice == 0u && c4 < {{ dv4 }}u) {
        for (var w = step; w < {{ slices }}u; w = w + step) {
            pv = pv + pv_red[tid + w * {{ lanes }}u];
        }
{%- else %}
    pv_red[tid] = {% for u in pv_keys %}{% if u.i > 0 %} + {% endif %}acc{{ u.i }}{% endfor %};
    workgroupBarrier();
    // Pairwise down to {{ slices_tail }} sums, which slice 0 adds up itself (a barrier per halving costs more than the reads).
    for (var w = {{ slices_half }}u; w >= {{ slices_tail }}u; w = w >> 1u) {
        if (slice < w) {
            pv_red[tid] = pv_red[tid] + pv_red[tid + w * {{ lanes }}u];
        }
        workgroupBarrier();
    }
    if (slice == 0u && c4 < {{ dv4 }}u) {
        let pv = {% for i in 0..slices_tail %}{% if i > 0 %} + {% endif %}pv_red[tid + {{ i }}u * {{ lanes }}u]{% endfor %};
{%- endif %}
{%- if nan_to_zero %}
        // Every score -inf: the softmax is NaN, which the model's Where(IsNaN(p), 0, p) turns into zeros.
        let inv = select(1.0 / denom, 0.0, denom == 0.0);
{%- else %}
        let inv = 1.0 / denom;
{%- endif %}
        let o = pv * inv;
        for (var e = 0u; e < 4u; e = e + 1u) {
            let oo = batch * {{ dv }}u + c4 * 4u + e;
            out[{{ fu.at("oo") }}] = o[e];
        }
    }
}
