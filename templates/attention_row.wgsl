{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Attention for one query row (a decode step): a workgroup of 256 threads per row, {{ blocks }} rows. The row's
// query goes to workgroup memory; each thread scores keys tid, tid + 256, … (Q·K, then the score epilogue:
// scale, mask) into workgroup memory, which holds all {{ n }} scores; the workgroup reduces their maximum and
// the softmax denominator; then {{ slices }} slices of {{ cols }} threads each sum p·V over every {{ slices }}th key
// for one value column, and the slices' sums are added in workgroup memory.
var<workgroup> q_row: array<f32, {{ dk }}>;
var<workgroup> scores: array<f32, {{ n }}>;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let batch = wid.y * {{ groups_x }}u + wid.x;
    if (batch >= {{ blocks }}u) {
        return;
    }
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let v_base = {{ v_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.v_stride }}u{% endfor %};
    let neg_inf = bitcast<f32>(non_finite_bits.y);
    for (var d = tid; d < {{ dk }}u; d = d + 256u) {
        var av = a[a_base + d * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
        av = {{ a_pro }};
{%- endif %}
        q_row[d] = av;
    }
    workgroupBarrier();
    var tmax = neg_inf;
    for (var j = tid; j < {{ n }}u; j = j + 256u) {
        var dot = 0.0;
        for (var d = 0u; d < {{ dk }}u; d = d + 1u) {
            var bv = {{ b_var }}[b_base + d * {{ b_sk }}u + j * {{ b_sn }}u];
{%- if !b_pro.is_empty() %}
            bv = {{ b_pro }};
{%- endif %}
            dot = fma(q_row[d], bv, dot);
        }
        let v = {{ alpha }} * dot;
{%- if fu.defined %}
        let s = fused(v, batch * {{ n }}u + j);
{%- else %}
        let s = v;
{%- endif %}
        scores[j] = s;
        tmax = max(tmax, s);
    }
    red[tid] = tmax;
    workgroupBarrier();
    for (var w = 128u; w > 0u; w = w >> 1u) {
        if (tid < w) {
            red[tid] = max(red[tid], red[tid + w]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    // While every score is -inf, shift by 0 so exp gives 0 rather than NaN.
    let shift = select(mx, 0.0, mx == neg_inf);
    var l = 0.0;
    for (var j = tid; j < {{ n }}u; j = j + 256u) {
        let p = exp(scores[j] - shift);
        scores[j] = p;
        l = l + p;
    }
    red[tid] = l;
    workgroupBarrier();
    for (var w = 128u; w > 0u; w = w >> 1u) {
        if (tid < w) {
            red[tid] = red[tid] + red[tid + w];
        }
        workgroupBarrier();
    }
    let denom = red[0];
    workgroupBarrier();
    let col = tid % {{ cols }}u;
    let slice = tid / {{ cols }}u;
    var acc = 0.0;
    if (col < {{ dv }}u) {
        for (var j = slice; j < {{ n }}u; j = j + {{ slices }}u) {
            acc = fma(scores[j], {{ v_var }}[v_base + j * {{ v_sk }}u + col * {{ v_sn }}u], acc);
        }
    }
    red[tid] = acc;
    workgroupBarrier();
    for (var w = {{ slices / 2 }}u; w > 0u; w = w >> 1u) {
        if (slice < w) {
            red[tid] = red[tid] + red[tid + w * {{ cols }}u];
        }
        workgroupBarrier();
    }
    if (slice == 0u && col < {{ dv }}u) {
{%- if nan_to_zero %}
        // Every score -inf: the softmax is NaN, which the model's Where(IsNaN(p), 0, p) turns into zeros.
        let inv = select(1.0 / denom, 0.0, denom == 0.0);
{%- else %}
        let inv = 1.0 / denom;
{%- endif %}
        let oo = batch * {{ dv }}u + col;
        out[{{ fu.at("oo") }}] = red[tid] * inv;
    }
}
