{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Attention for one query row per workgroup of 64 threads, with an online softmax: keys in tiles of 64 (a score
// per thread: Q·K, then the score epilogue, scale and mask), a running maximum and sum, and {{ lanes.len() }}
// accumulator(s) per thread over the {{ dv }} value columns. Scores and probabilities never leave the workgroup.
var<workgroup> q_row: array<f32, {{ dk_pad }}>;
// A 64-key by 16-column slice of K, loaded with neighbouring threads on neighbouring columns (padded rows: no
// bank conflicts when each thread then walks its own key's row).
var<workgroup> k_tile: array<f32, 1088>;
var<workgroup> p_tile: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
    let batch = row / {{ m }}u;
    let m = row % {{ m }}u;
    let a_base = {{ a_off }}u + m * {{ a_sm }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let v_base = {{ v_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.v_stride }}u{% endfor %};
    for (var d = tid; d < {{ dk_pad }}u; d = d + 64u) {
        var av = 0.0;
        if (d < {{ dk }}u) {
            av = a[a_base + d * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
            av = {{ a_pro }};
{%- endif %}
        }
        q_row[d] = av;
    }
    workgroupBarrier();
    let neg_inf = bitcast<f32>(0xff800000u);
    var mx = neg_inf;
    // This thread's share of the softmax denominator (every thread rescales by the same factor each tile).
    var l = 0.0;
{%- for c in lanes %}
    var acc{{ c.i }} = 0.0;
{%- endfor %}
    for (var n0 = 0u; n0 < {{ n }}u; n0 = n0 + 64u) {
        let key = n0 + tid;
        var dot = 0.0;
        for (var d0 = 0u; d0 < {{ dk_pad }}u; d0 = d0 + 16u) {
            for (var j = 0u; j < 16u; j = j + 1u) {
                let e = tid + j * 64u;
                let kk = e / 16u;
                let dd = e % 16u;
                var bv = 0.0;
                if (n0 + kk < {{ n }}u && d0 + dd < {{ dk }}u) {
                    bv = {{ b_var }}[b_base + (d0 + dd) * {{ b_sk }}u + (n0 + kk) * {{ b_sn }}u];
{%- if !b_pro.is_empty() %}
                    bv = {{ b_pro }};
{%- endif %}
                }
                k_tile[kk * 17u + dd] = bv;
            }
            workgroupBarrier();
            for (var dd = 0u; dd < 16u; dd = dd + 1u) {
                dot = fma(q_row[d0 + dd], k_tile[tid * 17u + dd], dot);
            }
            workgroupBarrier();
        }
        var s = neg_inf;
        if (key < {{ n }}u) {
            let v = {{ alpha }} * dot;
{%- if fu.defined %}
            s = fused(v, batch * {{ mn }}u + m * {{ n }}u + key);
{%- else %}
            s = v;
{%- endif %}
        }
        red[tid] = s;
        workgroupBarrier();
        for (var w = 32u; w > 0u; w = w >> 1u) {
            if (tid < w) {
                red[tid] = max(red[tid], red[tid + w]);
            }
            workgroupBarrier();
        }
        let new_mx = max(mx, red[0]);
        // While every score so far is -inf, shift by 0 so exp gives 0 rather than NaN.
        let shift = select(new_mx, 0.0, new_mx < -3.40282347e38);
        let p = exp(s - shift);
        let scale = exp(mx - shift);
        l = l * scale + p;
        p_tile[tid] = p;
        mx = new_mx;
        workgroupBarrier();
        let keys = min(64u, {{ n }}u - n0);
{%- for c in lanes %}
        acc{{ c.i }} = acc{{ c.i }} * scale;
{%- endfor %}
        for (var j = 0u; j < keys; j = j + 1u) {
            let pj = p_tile[j];
            let vrow = v_base + (n0 + j) * {{ v_sk }}u;
{%- for c in lanes %}
            if (tid + {{ c.off }}u < {{ dv }}u) {
                acc{{ c.i }} = fma(pj, {{ v_var }}[vrow + (tid + {{ c.off }}u) * {{ v_sn }}u], acc{{ c.i }});
            }
{%- endfor %}
        }
        workgroupBarrier();
    }
    red[tid] = l;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {
        if (tid < w) {
            red[tid] = red[tid] + red[tid + w];
        }
        workgroupBarrier();
    }
    let denom = red[0];
{%- if nan_to_zero %}
    // Every score -inf: the softmax is NaN, which the model's Where(IsNaN(p), 0, p) turns into zeros.
    let inv = select(1.0 / denom, 0.0, denom == 0.0);
{%- else %}
    let inv = 1.0 / denom;
{%- endif %}
{%- for c in lanes %}
    if (tid + {{ c.off }}u < {{ dv }}u) {
        out[row * {{ dv }}u + tid + {{ c.off }}u] = acc{{ c.i }} * inv;
    }
{%- endfor %}
}
