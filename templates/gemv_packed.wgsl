{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// A's row is computed here as it is staged (its elementwise kernel folded in), so it never reaches memory.
{%- include "fused.wgsl" %}
{%- endif %}
{%- include "fused.wgsl" %}
// Matrix-vector product (one row of A) over a narrow B stored K-major: each output's weights are one stored row
// of {{ p.row_words }} 32-bit words, {{ p.per_word }} {% if p.half.is_some() %}float16 values{% else %}{{ p.bits }}-bit codes{% endif %} a word, read {{ p.unit_words }} word(s) ({{ p.unit_elems }} elements) at a time. Those are a few
// bytes of B against as many elements of A, so A's row is staged in workgroup memory {{ kc }} elements at a time{% if !a_pro.is_empty() %}
// (through its prologue){% endif %}{% if rms.is_some() %} (times the folded norm's weights){% endif %}, once per workgroup, and read as vec4s.
// Each workgroup of 256 threads computes {{ t.cols }} outputs{% if t.tiles > 1 %} at a time, {{ t.tiles }} times{% endif %}: {{ t.groups }} groups of {{ t.lanes }} lanes, each group {{ t.per_group }} column(s)
// whose rows its lanes walk side by side, every element of A read serving all of them. Partial sums meet in
// workgroup memory at the end.

var<workgroup> a_tile: array<vec4<f32>, {{ kc_vecs }}>;
{%- if p.half.is_none() %}
// The sum of A's elements under each word: a block's zero point counts against it once.
var<workgroup> a_sum: array<f32, {{ kc_words }}>;
{%- endif %}
var<workgroup> sums: array<f32, {{ sums_len }}>;
{%- if rms.is_some() %}
{%- let reduce_threads = 256 %}
{%- let reduce_width = 16 %}
{%- let reduce_chunks = 16 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 64 %}
{%- let reduce_parts = 128 %}
{% include "workgroup_reduce.wgsl" %}
{%- endif %}

// A's element kb{% if !a_pro.is_empty() %}, through its prologue{% endif %}.
fn a_at(kb: u32) -> f32 {
{%- if operand.is_some() %}
    var av = operand_a(0.0, {{ a_off }}u + kb);
{%- else %}
    var av = {{ a_ld.open }}{{ a_off }}u + kb * {{ a_sk }}u{{ a_ld.close }};
{%- endif %}
{%- if !a_pro.is_empty() %}
    av = {{ a_pro }};
{%- endif %}
    return av;
}
{%- for arm in arms %}
{%- if p.unit_words > 1 %}

// Word i of {{ arm.var }}, bound as {{ p.unit_ty }}s.
fn word_{{ arm.var }}(i: u32) -> u32 {
    return {{ arm.var }}[i >> {{ p.unit_shift }}u][i & {{ p.unit_mask }}u];
}
{%- else %}

fn word_{{ arm.var }}(i: u32) -> u32 {
    return {{ arm.var }}[i];
}
{%- endif %}
{%- endfor %}

@compute @workgroup_size(256)
{%- if sg %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sid: u32, @builtin(subgroup_invocation_id) slane: u32, @builtin(subgroup_size) ssize: u32) {
{%- include "subgroup_ids.wgsl" %}
{%- else %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
{%- endif %}
    let lane = tid % {{ t.lanes }}u;
    let group = tid / {{ t.lanes }}u;
    // This group's first column; columns past the last read the last one's weights and are not stored.
    let col0 = wid.x * {{ t.workgroup_cols() }}u + group * {{ t.per_group }}u;
{%- for c in cs %}
    {% if t.tiles > 1 %}var{% else %}let{% endif %} cl{{ c.c }} = min(col0 + {{ c.c }}u, {{ n_last }}u);
    var acc{{ c.c }} = 0.0;
{%- endfor %}
{%- if rms.is_some() %}
    // The folded RMSNormalization's sum of squares of A's row, this thread's share, taken as A is loaded.
    var ssq = 0.0;
{%- endif %}
    // A chunk's loads into registers: this lane's units of B (units lane, lane + {{ t.lanes }}, …; past the chunk's end
    // the last one again, not summed){% if p.half.is_none() %} with their blocks' scales and zero points{% endif %}, and this thread's elements of
    // A (words tid, tid + 256, …). Chunk 0's are loaded before the loop and each next chunk's while the current one
    // is summed, so that no load waits behind a workgroup barrier.
{%- for it in iters %}
{%- for c in cs %}
    var wv{{ it.i }}_{{ c.c }}: {{ p.unit_ty }};
{%- if p.half.is_none() %}
{%- for gr in p.groups %}
    var sc{{ it.i }}_{{ c.c }}_{{ gr.g }}: f32;
    var zp{{ it.i }}_{{ c.c }}_{{ gr.g }}: f32;
{%- endfor %}
{%- endif %}
{%- endfor %}
{%- endfor %}
{%- for sw in stage_words %}
{%- for sl in sw.slots %}
    var as{{ sl.i }} = 0.0;
{%- endfor %}
{%- endfor %}
{%- for ld in loads %}
{%- if !ld.open.is_empty() %}
    {{ ld.open }}
{%- endif %}
    {
        let k0 = {{ ld.k0 }};
        let words = min({{ kc }}u, {{ k }}u - k0) / {{ p.per_word }}u;
        let units = words / {{ p.unit_words }}u;
        let u0 = k0 / {{ p.unit_elems }}u;
{%- for it in iters %}
        let ui{{ it.i }} = min(lane + {{ it.off }}u, units - 1u);
{%- endfor %}
{%- if !blocks.is_empty() %}
        // B in {{ blocks.len() }} blocks of {{ per }} columns, this group's all in one.
        switch (col0 / {{ per }}u) {
{%- endif %}
{%- for arm in arms %}
{%- if !blocks.is_empty() %}
{%- if loop.last %}
        default: {
{%- else %}
        case {{ loop.index0 }}u: {
{%- endif %}
{%- endif %}
{%- for it in iters %}
{%- for c in cs %}
        wv{{ it.i }}_{{ c.c }} = {{ arm.var }}[(cl{{ c.c }} - {{ arm.offset }}u) * {{ p.row_units }}u + u0 + ui{{ it.i }}];
{%- if p.half.is_none() %}
{%- for gr in p.groups %}
        {
            let blk = (cl{{ c.c }} - {{ arm.offset }}u) * {{ p.blocks_per_row }}u + ((u0 + ui{{ it.i }}) * {{ p.unit_words }}u + {{ gr.first_word }}u) / {{ p.words_per_block }}u;
{%- if p.scale_f16 %}
            sc{{ it.i }}_{{ c.c }}_{{ gr.g }} = unpack2x16float(word_{{ arm.var }}({{ p.scales_at }}u + (blk >> 1u)))[blk & 1u];
{%- else %}
            sc{{ it.i }}_{{ c.c }}_{{ gr.g }} = bitcast<f32>(word_{{ arm.var }}({{ p.scales_at }}u + blk));
{%- endif %}
{%- if let Some(z) = p.zeros_at %}
            zp{{ it.i }}_{{ c.c }}_{{ gr.g }} = f32((word_{{ arm.var }}({{ z }}u + (blk >> {{ p.word_shift }}u)) >> ((blk & {{ p.lane_mask }}u) * {{ p.bits }}u)) & {{ p.code_mask }}u);
{%- else %}
            zp{{ it.i }}_{{ c.c }}_{{ gr.g }} = {{ p.zero }};
{%- endif %}
        }
{%- endfor %}
{%- endif %}
{%- endfor %}
{%- endfor %}
{%- if !blocks.is_empty() %}
        }
{%- endif %}
{%- endfor %}
{%- if !blocks.is_empty() %}
        }
{%- endif %}
{%- if ld.stage_a %}
{%- for sw in stage_words %}
        if (tid + {{ sw.word_off }}u < words) {
            let e0 = k0 + (tid + {{ sw.word_off }}u) * {{ p.per_word }}u;
{%- for sl in sw.slots %}
            {
                var av = a_at(e0 + {{ sl.j }}u);
{%- if rms.is_some() %}
                ssq = fma(av, av, ssq);
{%- endif %}
{%- if let Some(r) = rms %}
                av = av * {{ r.scale }}[e0 + {{ sl.j }}u];
{%- endif %}
                as{{ sl.i }} = av;
            }
{%- endfor %}
        }
{%- endfor %}
{%- endif %}
    }
{%- if !ld.close.is_empty() %}
    {{ ld.close }}
{%- endif %}
{%- if loop.first %}
    for (var k0 = 0u; k0 < {{ k }}u; k0 = k0 + {{ kc }}u) {
        let words = min({{ kc }}u, {{ k }}u - k0) / {{ p.per_word }}u;
        let units = words / {{ p.unit_words }}u;
{%- for it in iters %}
        let ui{{ it.i }} = min(lane + {{ it.off }}u, units - 1u);
{%- endfor %}
        workgroupBarrier();
        // This chunk's elements of A, from registers into workgroup memory, and each word's sum.
{%- for sw in stage_words %}
        if (tid + {{ sw.word_off }}u < words) {
            let w = tid + {{ sw.word_off }}u;
{%- for sl in sw.slots %}
            {
                let v = (w * {{ p.per_word }}u + {{ sl.j }}u) >> 2u;
                a_tile[(v % {{ p.unit_vecs }}u) * {{ a_units }}u + v / {{ p.unit_vecs }}u][(w * {{ p.per_word }}u + {{ sl.j }}u) & 3u] = as{{ sl.i }}{{ p.a_scales[sl.j] }};
            }
{%- endfor %}
{%- if p.half.is_none() %}
            a_sum[(w % {{ p.unit_words }}u) * {{ a_units }}u + w / {{ p.unit_words }}u] = {% for sl in sw.slots %}{% if !loop.first %} + {% endif %}as{{ sl.i }}{% endfor %};
{%- endif %}
        }
{%- endfor %}
        workgroupBarrier();
{%- if t.tiles > 1 %}
    }
{%- if let Some(r) = rms %}
    let rinv = 1.0 / sqrt(reduce_sum({% if sg %}ssize{% else %}tid{% endif %}, ssq) / {{ r.k }}.0 + {{ r.eps }});
{%- endif %}
    // A is staged, whole: the workgroup's {{ t.tiles }} tiles of {{ t.cols }} columns one after another, each next tile's
    // loads of B issued before this one's sums and reduction.
    let units = {{ k }}u / {{ p.per_word }}u / {{ p.unit_words }}u;
{%- for it in iters %}
    let ui{{ it.i }} = min(lane + {{ it.off }}u, units - 1u);
{%- endfor %}
    for (var tile = 0u; tile < {{ t.tiles }}u; tile = tile + 1u) {
        let tcol0 = col0 + tile * {{ t.cols }}u;
{%- endif %}
        // This chunk's B, before the next chunk's loads overwrite the registers.
{%- for it in iters %}
{%- for c in cs %}
        let cwv{{ it.i }}_{{ c.c }} = wv{{ it.i }}_{{ c.c }};
{%- if p.half.is_none() %}
{%- for gr in p.groups %}
        let csc{{ it.i }}_{{ c.c }}_{{ gr.g }} = sc{{ it.i }}_{{ c.c }}_{{ gr.g }};
        let czp{{ it.i }}_{{ c.c }}_{{ gr.g }} = zp{{ it.i }}_{{ c.c }}_{{ gr.g }};
{%- endfor %}
{%- endif %}
{%- endfor %}
{%- endfor %}
{%- endif %}
{%- endfor %}
{%- for it in iters %}
        if (lane + {{ it.off }}u < units) {
            // A's elements under unit ui{{ it.i }}, from workgroup memory (vec4 q of every unit side by side, so that
            // the lanes' loads fall in distinct banks).
{%- for q in p.a_vecs %}
            let av{{ q }} = a_tile[{{ q }}u * {{ a_units }}u + ui{{ it.i }}];
{%- endfor %}
{%- for c in cs %}
            {
                let wv = cwv{{ it.i }}_{{ c.c }};
{%- for d in p.decode %}
                {{ d }}
{%- endfor %}
{%- for gr in p.groups %}
                var dot{{ gr.g }} = 0.0;
{%- endfor %}
{%- for e in p.elems %}
                dot{{ e.g }} = fma(av{{ e.q }}.{{ e.comp }}, {{ e.b }}, dot{{ e.g }});
{%- endfor %}
{%- if p.half.is_some() %}
                acc{{ c.c }} = acc{{ c.c }} + {% for gr in p.groups %}{% if !loop.first %} + {% endif %}dot{{ gr.g }}{% endfor %};
{%- else %}
{%- for gr in p.groups %}
                {
                    // Block of words {{ gr.first_word }} .. of the unit: (codes · A − zero point · ΣA) · scale.
                    let asum = {% for w in gr.words %}{% if !loop.first %} + {% endif %}a_sum[{{ w }}u * {{ a_units }}u + ui{{ it.i }}]{% endfor %};
                    acc{{ c.c }} = fma(dot{{ gr.g }} - czp{{ it.i }}_{{ c.c }}_{{ gr.g }} * asum, csc{{ it.i }}_{{ c.c }}_{{ gr.g }}, acc{{ c.c }});
                }
{%- endfor %}
{%- endif %}
            }
{%- endfor %}
        }
{%- endfor %}
{%- if t.tiles == 1 %}
    }
{%- if let Some(r) = rms %}
    let rinv = 1.0 / sqrt(reduce_sum({% if sg %}ssize{% else %}tid{% endif %}, ssq) / {{ r.k }}.0 + {{ r.eps }});
{%- endif %}
{%- endif %}
{%- if sg %}
    // Each group's lanes summed in their subgroup: a butterfly of shuffles over the group's {{ t.lanes }} lanes, or over the
    // whole subgroup where it is narrower, leaves every lane its subgroup's share of each column's sum.
{%- for c in cs %}
    var total{{ c.c }} = acc{{ c.c }};
{%- if t.tiles > 1 %}
    acc{{ c.c }} = 0.0;
{%- endif %}
{%- endfor %}
    for (var m = 1u; m < min({{ t.lanes }}u, ssize); m = m << 1u) {
{%- for c in cs %}
        total{{ c.c }} = total{{ c.c }} + subgroupShuffleXor(total{{ c.c }}, m);
{%- endfor %}
    }
{%- if wide_groups %}
    // A group wider than a subgroup: its subgroups' shares meet in workgroup memory and lane 0 adds them up.
    if (sg_lane == 0u) {
{%- for c in cs %}
        sums[{{ c.base }}u + sg_id] = total{{ c.c }};
{%- endfor %}
    }
    workgroupBarrier();
{%- endif %}
{%- else %}
{%- for c in cs %}
    sums[{{ c.base }}u + tid] = acc{{ c.c }};
{%- if t.tiles > 1 %}
    acc{{ c.c }} = 0.0;
{%- endif %}
{%- endfor %}
    workgroupBarrier();
    // Each group's lanes summed pairwise down to {{ tail }} partial sums, which lane 0 adds up itself (a barrier per
    // halving costs more than the reads).
    for (var s = {{ half_lanes }}u; s >= {{ tail }}u; s = s >> 1u) {
        if (lane < s) {
{%- for c in cs %}
            sums[{{ c.base }}u + tid] = sums[{{ c.base }}u + tid] + sums[{{ c.base }}u + tid + s];
{%- endfor %}
        }
        workgroupBarrier();
    }
{%- endif %}
{%- if t.tiles > 1 %}
    if (lane == 0u) {
{%- else %}
    if (lane != 0u) {
        return;
    }
{%- endif %}
{%- if !sg %}
{%- for c in cs %}
    let total{{ c.c }} = {% for i in 0..tail %}{% if i > 0 %} + {% endif %}sums[{{ c.base }}u + tid + {{ i }}u]{% endfor %};
{%- endfor %}
{%- else if wide_groups %}
    for (var p = 1u; p < {{ t.lanes }}u / ssize; p = p + 1u) {
{%- for c in cs %}
        total{{ c.c }} = total{{ c.c }} + sums[{{ c.base }}u + sg_id + p];
{%- endfor %}
    }
{%- endif %}
{%- for c in cs %}
    if ({{ self.tile_col0() }} + {{ c.c }}u < {{ n }}u) {
        let n = {{ self.tile_col0() }} + {{ c.c }}u;
        var v = {{ alpha }} * total{{ c.c }}{% if rms.is_some() %} * rinv{% endif %};
{%- if has_bias %}
        v = v + {{ beta }} * {{ bias_ld.open }}n * {{ bias_sn }}u{{ bias_ld.close }};
{%- endif %}
        let o = n;
        {{ fu.store("o", "v") }}
    }
{%- endfor %}
{%- if t.tiles > 1 %}
    }
{%- if !sg || wide_groups %}
    // Lane 0 has read the sums before the next tile writes them.
    workgroupBarrier();
{%- endif %}
    }
{%- endif %}
}
