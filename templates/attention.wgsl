{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Attention for a block of 16 query rows per workgroup of 256 threads (16 per row), with an online softmax: keys
// in tiles of 64 (each thread scores 4 keys of its row: Q·K through workgroup memory, then the score epilogue,
// scale and mask), a running maximum per row, and {{ lanes.len() }} accumulator(s) per thread over the {{ dv }} value
// columns. Scores and probabilities never leave the workgroup; K and V loads are shared by the 16 rows.
var<workgroup> q_tile: array<f32, 256>;
// 64 keys by 16 columns of K (rows padded to 17 so each thread walking its key's row hits its own bank), then
// {{ v_chunk }} keys by {{ dv_pad }} columns of V: one array, since the two are never live at once.
var<workgroup> kv_tile: array<f32, {{ kv_len }}>;
var<workgroup> p_tile: array<f32, 1024>;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let block = wid.y * {{ groups_x }}u + wid.x;
    if (block >= {{ blocks }}u) {
        return;
    }
    let batch = block / {{ m_blocks }}u;
    let r = tid / 16u;
    let c = tid % 16u;
    let m = (block % {{ m_blocks }}u) * 16u + r;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let v_base = {{ v_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.v_stride }}u{% endfor %};
    let neg_inf = bitcast<f32>(0xff800000u);
    var mx = neg_inf;
    // This thread's share of its row's softmax denominator (the row's threads rescale by the same factor).
    var l = 0.0;
{%- for o in lanes %}
    var acc{{ o.i }} = 0.0;
{%- endfor %}
    for (var n0 = 0u; n0 < {{ n }}u; n0 = n0 + 64u) {
        var dot0 = 0.0;
        var dot1 = 0.0;
        var dot2 = 0.0;
        var dot3 = 0.0;
        for (var d0 = 0u; d0 < {{ dk }}u; d0 = d0 + 16u) {
            // Q: 16 rows x 16 columns, one element per thread.
            var av = 0.0;
            if (m < {{ m }}u && d0 + c < {{ dk }}u) {
                av = a[a_base + m * {{ a_sm }}u + (d0 + c) * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
                av = {{ a_pro }};
{%- endif %}
            }
            q_tile[tid] = av;
            // K: 64 keys x 16 columns, four elements per thread, neighbouring threads on neighbouring columns.
            for (var j = 0u; j < 4u; j = j + 1u) {
                let e = tid + j * 256u;
                let kk = e / 16u;
                let dd = e % 16u;
                var bv = 0.0;
                if (n0 + kk < {{ n }}u && d0 + dd < {{ dk }}u) {
                    bv = {{ b_var }}[b_base + (d0 + dd) * {{ b_sk }}u + (n0 + kk) * {{ b_sn }}u];
{%- if !b_pro.is_empty() %}
                    bv = {{ b_pro }};
{%- endif %}
                }
                kv_tile[kk * 17u + dd] = bv;
            }
            workgroupBarrier();
            for (var dd = 0u; dd < 16u; dd = dd + 1u) {
                let q = q_tile[r * 16u + dd];
                dot0 = fma(q, kv_tile[c * 17u + dd], dot0);
                dot1 = fma(q, kv_tile[(c + 16u) * 17u + dd], dot1);
                dot2 = fma(q, kv_tile[(c + 32u) * 17u + dd], dot2);
                dot3 = fma(q, kv_tile[(c + 48u) * 17u + dd], dot3);
            }
            workgroupBarrier();
        }
        // Scores of keys c, c+16, c+32, c+48 (unrolled: no array to spill): epilogue, or -inf past the ends.
        var tmax = neg_inf;
{%- for j in quads %}
        var s{{ j }} = neg_inf;
        if (n0 + c + {{ j * 16 }}u < {{ n }}u && m < {{ m }}u) {
            let v = {{ alpha }} * dot{{ j }};
{%- if fu.defined %}
            s{{ j }} = fused(v, batch * {{ mn }}u + m * {{ n }}u + n0 + c + {{ j * 16 }}u);
{%- else %}
            s{{ j }} = v;
{%- endif %}
        }
        tmax = max(tmax, s{{ j }});
{%- endfor %}
        // The row's maximum over its 16 threads.
        red[tid] = tmax;
        workgroupBarrier();
        for (var w = 8u; w > 0u; w = w >> 1u) {
            if (c < w) {
                red[tid] = max(red[tid], red[tid + w]);
            }
            workgroupBarrier();
        }
        let new_mx = max(mx, red[r * 16u]);
        // While every score of the row so far is -inf, shift by 0 so exp gives 0 rather than NaN.
        let shift = select(new_mx, 0.0, new_mx < -3.40282347e38);
        let scale = exp(mx - shift);
        l = l * scale;
{%- for j in quads %}
        let p{{ j }} = exp(s{{ j }} - shift);
        l = l + p{{ j }};
        p_tile[r * 64u + c + {{ j * 16 }}u] = p{{ j }};
{%- endfor %}
        mx = new_mx;
        workgroupBarrier();
{%- for o in lanes %}
        acc{{ o.i }} = acc{{ o.i }} * scale;
{%- endfor %}
        // P·V over the tile, V staged {{ v_chunk }} keys at a time (zeros past the last key and column; p is 0 there).
        for (var j0 = 0u; j0 < 64u; j0 = j0 + {{ v_chunk }}u) {
            for (var e = tid; e < {{ v_chunk * dv_pad }}u; e = e + 256u) {
                let jj = e / {{ dv_pad }}u;
                let col = e % {{ dv_pad }}u;
                var vv = 0.0;
                if (n0 + j0 + jj < {{ n }}u && col < {{ dv }}u) {
                    vv = {{ v_var }}[v_base + (n0 + j0 + jj) * {{ v_sk }}u + col * {{ v_sn }}u];
                }
                kv_tile[e] = vv;
            }
            workgroupBarrier();
            for (var jj = 0u; jj < {{ v_chunk }}u; jj = jj + 1u) {
                let pj = p_tile[r * 64u + j0 + jj];
{%- for o in lanes %}
                acc{{ o.i }} = fma(pj, kv_tile[jj * {{ dv_pad }}u + c + {{ o.off }}u], acc{{ o.i }});
{%- endfor %}
            }
            workgroupBarrier();
        }
    }
    // The row's denominator over its 16 threads.
    red[tid] = l;
    workgroupBarrier();
    for (var w = 8u; w > 0u; w = w >> 1u) {
        if (c < w) {
            red[tid] = red[tid] + red[tid + w];
        }
        workgroupBarrier();
    }
    let denom = red[r * 16u];
{%- if nan_to_zero %}
    // Every score -inf: the softmax is NaN, which the model's Where(IsNaN(p), 0, p) turns into zeros.
    let inv = select(1.0 / denom, 0.0, denom == 0.0);
{%- else %}
    let inv = 1.0 / denom;
{%- endif %}
    if (m < {{ m }}u) {
        let o = (batch * {{ m }}u + m) * {{ dv }}u + c;
{%- for o in lanes %}
        if (c + {{ o.off }}u < {{ dv }}u) {
            out[o + {{ o.off }}u] = acc{{ o.i }} * inv;
        }
{%- endfor %}
    }
}
