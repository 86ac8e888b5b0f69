{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// A's row is computed here as it is loaded (its elementwise kernel folded in): every workgroup computes the
// elements it reads, so the row never reaches memory.
{%- include "fused.wgsl" %}
{%- endif %}
{%- include "fused.wgsl" %}
// Matrix-vector product (one row of A): each workgroup of 256 threads computes {{ t.cols }} output(s), its threads in
// {{ t.groups }} groups of {{ t.lanes }} lanes; neighbouring lanes read neighbouring elements of B, so every read coalesces.
{%- if t.kmajor %}
// B's columns are contiguous (K-major): each group owns one output and its lanes walk K side by side.
{%- else %}
// B's rows are contiguous: the lanes own neighbouring outputs ({{ t.vec }} each{% if t.vec == 4 %}, read as one vec4{% endif %}) and
// the groups split K between them.
{%- endif %}
// Partial sums meet in workgroup memory at the end; {{ unroll }} independent sums per thread keep {{ unroll }} loads
// of B in flight, and B is read once.

{%- for arm in arms %}
{%- if blocks.is_empty() %}
// One term of the product: A's element kb times B's element (kb, col), through the operand prologues.
{%- else %}
// One term of the product over block {{ loop.index0 }} of B (its columns {{ arm.offset }} ..): A's element kb times
// block's element (kb, col - {{ arm.offset }}).
{%- endif %}
fn term{{ arm.suffix }}(a_base: u32, b_base: u32, kb: u32, col: u32) -> {{ acc_ty }} {
{%- if operand.is_some() %}
    // A's element at a_base + kb: this batch's row, computed here.
    var av = operand_a(0.0, a_base + kb);
{%- else %}
    var av = {{ a_ld.open }}a_base + kb * {{ a_sk }}u{{ a_ld.close }};
{%- endif %}
{%- if !a_pro.is_empty() %}
    av = {{ a_pro }};
{%- endif %}
{%- if t.vec == 4 %}
    // Four neighbouring columns col .. col + 3 (col a multiple of 4).
    var bv = {{ arm.ld4.open }}b_base + kb * {{ b_sk }}u + {{ arm.col }}{{ arm.ld4.close }};
{%- else %}
    var bv = {{ arm.ld.open }}b_base + kb * {{ b_sk }}u + {{ arm.col }} * {{ b_sn }}u{{ arm.ld.close }};
{%- endif %}
{%- if !b_pro.is_empty() %}
    bv = {{ b_pro }};
{%- endif %}
    return av * bv;
}
{%- endfor %}

var<workgroup> sums: array<{{ acc_ty }}, 256>;
{%- if rms.is_some() %}
{%- let reduce_threads = 256 %}
{%- let reduce_width = 16 %}
{%- let reduce_chunks = 16 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 64 %}
{%- let reduce_parts = 128 %}
{% include "workgroup_reduce.wgsl" %}
{%- endif %}

@compute @workgroup_size(256)
{%- if sg %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sid: u32, @builtin(subgroup_invocation_id) slane: u32, @builtin(subgroup_size) ssize: u32) {
{%- include "subgroup_ids.wgsl" %}
{%- else %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
{%- endif %}
    let batch = wid.z;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let lane = tid % {{ t.lanes }}u;
    let group = tid / {{ t.lanes }}u;
{%- if t.kmajor %}
    let col = wid.x * {{ t.cols }}u + group;
    // This thread's K: lane, lane + {{ t.lanes }}, ...
    let k_first = lane;
    let k_step = {{ t.lanes }}u;
{%- else %}
    let col = wid.x * {{ t.cols }}u + lane * {{ t.vec }}u;
    // This thread's K: group, group + {{ t.groups }}, ...
    let k_first = group;
    let k_step = {{ t.groups }}u;
{%- endif %}
{%- for u in 0..unroll %}
    var acc{{ u }} = {{ acc_ty }}(0.0);
{%- endfor %}
{%- if !blocks.is_empty() %}
    // B in {{ blocks.len() }} blocks of {{ per }} columns: the loop over K once per block, so that the loads of one
    // stay straight-line code (a branch per load would wait on each in turn).
    switch (min(col, {{ last_col }}u) / {{ per }}u) {
{%- endif %}
{%- for arm in arms %}
{%- if !blocks.is_empty() %}
{%- if loop.last %}
    default: {
{%- else %}
    case {{ loop.index0 }}u: {
{%- endif %}
{%- endif %}
    if (col < {{ n }}u) {
        var kb = k_first;
        for (; kb + {{ unroll_last }}u * k_step < {{ k }}u; kb = kb + {{ unroll }}u * k_step) {
{%- for u in 0..unroll %}
            acc{{ u }} = acc{{ u }} + term{{ arm.suffix }}(a_base, b_base, kb + {{ u }}u * k_step, col);
{%- endfor %}
        }
        for (; kb < {{ k }}u; kb = kb + k_step) {
            acc0 = acc0 + term{{ arm.suffix }}(a_base, b_base, kb, col);
        }
    }
{%- if !blocks.is_empty() %}
    }
{%- endif %}
{%- endfor %}
{%- if !blocks.is_empty() %}
    }
{%- endif %}
{%- if let Some(r) = rms %}
    // The folded RMSNormalization: the row's sum of squares over all of K, then its inverse RMS, which only scales
    // the sums below: taken after the product's loop, whose reads of A it then finds cached, so no load of B
    // waits behind its barriers.
    var ssq = 0.0;
    for (var kb = tid; kb < {{ k }}u; kb = kb + 256u) {
{%- if operand.is_some() %}
        let x = operand_a(0.0, a_base + kb);
{%- else %}
        let x = {{ a_ld.open }}a_base + kb * {{ a_sk }}u{{ a_ld.close }};
{%- endif %}
        ssq = fma(x, x, ssq);
    }
    let rinv = 1.0 / sqrt(reduce_sum({% if sg %}ssize{% else %}tid{% endif %}, ssq) / {{ r.k }}.0 + {{ r.eps }});
{%- endif %}
{%- if sg %}
    var total = {% for u in 0..unroll %}{% if u > 0 %} + {% endif %}acc{{ u }}{% endfor %};
{%- if t.kmajor %}
    // Each group's lanes summed in their subgroup: a butterfly of shuffles over the group's {{ t.lanes }} lanes, or over the
    // whole subgroup where it is narrower, leaves every lane its subgroup's share of the group's sum.
    for (var m = 1u; m < min({{ t.lanes }}u, ssize); m = m << 1u) {
        total = total + subgroupShuffleXor(total, m);
    }
{%- if wide_groups %}
    // A group wider than a subgroup: its subgroups' shares meet in workgroup memory and lane 0 adds them up.
    if (sg_lane == 0u) {
        sums[sg_id] = total;
    }
    workgroupBarrier();
    if (lane != 0u || col >= {{ n }}u) {
        return;
    }
    for (var p = 1u; p < {{ t.lanes }}u / ssize; p = p + 1u) {
        total = total + sums[sg_id + p];
    }
{%- else %}
    if (lane != 0u || col >= {{ n }}u) {
        return;
    }
{%- endif %}
{%- else %}
    // The groups of one subgroup summed by a butterfly of shuffles across them ({{ t.lanes }}, twice that, … lanes apart);
    // group 0 then adds the other subgroups' sums (or, where a group is a subgroup or wider, every group's).
    for (var m = {{ t.lanes }}u; m < ssize; m = m << 1u) {
        total = total + subgroupShuffleXor(total, m);
    }
{%- if t.groups > 1 %}
    sums[tid] = total;
    workgroupBarrier();
    if (group != 0u || col >= {{ n }}u) {
        return;
    }
    let step = max(ssize / {{ t.lanes }}u, 1u);
    for (var g = step; g < {{ t.groups }}u; g = g + step) {
        total = total + sums[tid + g * {{ t.lanes }}u];
    }
{%- else %}
    if (col >= {{ n }}u) {
        return;
    }
{%- endif %}
{%- endif %}
{%- else %}
    sums[tid] = {% for u in 0..unroll %}{% if u > 0 %} + {% endif %}acc{{ u }}{% endfor %};
    workgroupBarrier();
{%- if t.kmajor %}
    // Each group's lanes summed pairwise down to {{ tail }} partial sums, which lane 0 adds up itself (a barrier per
    // halving costs more than the reads).
    for (var s = {{ lanes_half }}u; s >= {{ tail }}u; s = s >> 1u) {
        if (lane < s) {
            sums[tid] = sums[tid] + sums[tid + s];
        }
        workgroupBarrier();
    }
    if (lane != 0u || col >= {{ n }}u) {
        return;
    }
    let total = {% for i in 0..tail %}{% if i > 0 %} + {% endif %}sums[tid + {{ i }}u]{% endfor %};
{%- else %}
    // The groups' partial sums of each output, pairwise down to {{ tail }}, which group 0 adds up itself.
    for (var s = {{ groups_half }}u; s >= {{ tail }}u; s = s >> 1u) {
        if (group < s) {
            sums[tid] = sums[tid] + sums[tid + s * {{ t.lanes }}u];
        }
        workgroupBarrier();
    }
    if (group != 0u || col >= {{ n }}u) {
        return;
    }
    let total = {% for i in 0..tail %}{% if i > 0 %} + {% endif %}sums[tid + {{ i }}u * {{ t.lanes }}u]{% endfor %};
{%- endif %}
{%- endif %}
{%- for c in 0..t.vec %}
    {
        let n = col + {{ c }}u;
        var v = {{ alpha }} * total{% if t.vec == 4 %}[{{ c }}]{% endif %}{% if rms.is_some() %} * rinv{% endif %};
{%- if has_bias %}
        v = v + {{ beta }} * {{ bias_ld.open }}n * {{ bias_sn }}u{{ bias_ld.close }};
{%- endif %}
        let o = batch * {{ n }}u + n;
        {{ fu.store("o", "v") }}
    }
{%- endfor %}
}
