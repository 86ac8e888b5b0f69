{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// A's row is computed here as it is staged (its elementwise kernel folded in), so it never reaches memory.
{%- include "fused.wgsl" %}
{%- endif %}
{%- include "fused.wgsl" %}
// Matrix-vector product (one row of A) over a narrow B stored K-major: each output's weights are one stored row
// of {{ p.row_words }} 32-bit words, {{ p.per_word }} {% if p.half.is_some() %}float16 values{% else %}{{ p.bits }}-bit codes{% endif %} each. A word is a few bytes of B against {{ p.per_word }} elements of A, so A's row is
// staged in workgroup memory {{ kc }} elements at a time{% if !a_pro.is_empty() %} (through its prologue){% endif %}{% if rms.is_some() %}, times the folded norm's weights{% endif %}, once per workgroup.
// Each workgroup of 256 threads computes {{ t.cols }} outputs: {{ t.groups }} groups of {{ t.lanes }} lanes, each group {{ t.per_group }} column(s)
// whose words its lanes walk side by side, every element of A read serving all of them. Partial sums meet in
// workgroup memory at the end.

var<workgroup> a_tile: array<f32, {{ kc }}>;
{%- if p.half.is_none() %}
// The sum of A's elements under each word: a block's zero point counts against it once.
var<workgroup> a_sum: array<f32, {{ kc_words }}>;
{%- endif %}
var<workgroup> sums: array<f32, {{ sums_len }}>;
{%- if rms.is_some() %}
var<workgroup> rinv: f32;
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

// Word kw of column col's row{% if !blocks.is_empty() %} (column col of block {{ loop.index0 }}){% endif %} against A's elements from `at` in workgroup memory{% if p.half.is_none() %}: the codes
// times the block's scale, less its zero point times A's sum under the word{% endif %}.
fn term{{ arm.suffix }}(col: u32, kw: u32, at: u32) -> f32 {
    let w = {{ arm.var }}[{{ arm.col }} * {{ p.row_words }}u + kw];
{%- match p.half %}
{%- when Some with ("f16") %}
    let bv = unpack2x16float(w);
    return fma(a_tile[at], bv.x, a_tile[at + 1u] * bv.y);
{%- when Some with (_) %}
    let bv = bitcast<vec2<f32>>(vec2<u32>(w << 16u, w & 0xffff0000u));
    return fma(a_tile[at], bv.x, a_tile[at + 1u] * bv.y);
{%- when None %}
    var dot = 0.0;
{%- for l in p.lanes %}
    dot = fma(a_tile[at + {{ l.j }}u], f32((w >> {{ l.shift }}u) & {{ p.code_mask }}u), dot);
{%- endfor %}
    let blk = {{ arm.col }} * {{ p.blocks_per_row }}u + kw / {{ p.words_per_block }}u;
{%- if p.scale_f16 %}
    let scale = unpack2x16float({{ arm.var }}[{{ p.scales_at }}u + (blk >> 1u)])[blk & 1u];
{%- else %}
    let scale = bitcast<f32>({{ arm.var }}[{{ p.scales_at }}u + blk]);
{%- endif %}
{%- if let Some(z) = p.zeros_at %}
    let zero = f32(({{ arm.var }}[{{ z }}u + (blk >> {{ p.word_shift }}u)] >> ((blk & {{ p.lane_mask }}u) * {{ p.bits }}u)) & {{ p.code_mask }}u);
{%- else %}
    let zero = {{ p.zero }};
{%- endif %}
    return (dot - zero * a_sum[at / {{ p.per_word }}u]) * scale;
{%- endmatch %}
}
{%- endfor %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let lane = tid % {{ t.lanes }}u;
    let group = tid / {{ t.lanes }}u;
    // This group's first column; columns past the last read the last one's weights and are not stored.
    let col0 = wid.x * {{ t.cols }}u + group * {{ t.per_group }}u;
{%- for c in cs %}
    let cl{{ c.c }} = min(col0 + {{ c.c }}u, {{ n_last }}u);
    var acc{{ c.c }} = 0.0;
{%- endfor %}
{%- if rms.is_some() %}
    // The folded RMSNormalization's sum of squares of A's row, this thread's share, taken as A is staged.
    var ssq = 0.0;
{%- endif %}
    for (var k0 = 0u; k0 < {{ k }}u; k0 = k0 + {{ kc }}u) {
        let words = min({{ kc }}u, {{ k }}u - k0) / {{ p.per_word }}u;
        workgroupBarrier();
        for (var w = tid; w < words; w = w + 256u) {
{%- if p.half.is_none() %}
            var s = 0.0;
{%- endif %}
            for (var j = 0u; j < {{ p.per_word }}u; j = j + 1u) {
                let kb = w * {{ p.per_word }}u + j;
                var av = a_at(k0 + kb);
{%- if rms.is_some() %}
                ssq = fma(av, av, ssq);
{%- endif %}
{%- if !rms_scale.is_empty() %}
                av = av * {{ rms_scale }}[k0 + kb];
{%- endif %}
                a_tile[kb] = av;
{%- if p.half.is_none() %}
                s = s + av;
{%- endif %}
            }
{%- if p.half.is_none() %}
            a_sum[w] = s;
{%- endif %}
        }
        workgroupBarrier();
        let kw0 = k0 / {{ p.per_word }}u;
{%- if !blocks.is_empty() %}
        // B in {{ blocks.len() }} blocks of {{ per }} columns, this group's all in one: the loop written once per block.
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
        for (var kw = lane; kw < words; kw = kw + {{ t.lanes }}u) {
            let at = kw * {{ p.per_word }}u;
{%- for c in cs %}
            acc{{ c.c }} = acc{{ c.c }} + term{{ arm.suffix }}(cl{{ c.c }}, kw0 + kw, at);
{%- endfor %}
        }
{%- if !blocks.is_empty() %}
        }
{%- endif %}
{%- endfor %}
{%- if !blocks.is_empty() %}
        }
{%- endif %}
    }
{%- if let Some(r) = rms %}
    sums[tid] = ssq;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (tid < s) {
            sums[tid] = sums[tid] + sums[tid + s];
        }
        workgroupBarrier();
    }
    if (tid == 0u) {
        rinv = 1.0 / sqrt(sums[0] / {{ r.k }}.0 + {{ r.eps }});
    }
    workgroupBarrier();
{%- endif %}
{%- for c in cs %}
    sums[{{ c.base }}u + tid] = acc{{ c.c }};
{%- endfor %}
    workgroupBarrier();
    // Each group's lanes summed pairwise.
    for (var s = {{ half_lanes }}u; s > 0u; s = s >> 1u) {
        if (lane < s) {
{%- for c in cs %}
            sums[{{ c.base }}u + tid] = sums[{{ c.base }}u + tid] + sums[{{ c.base }}u + tid + s];
{%- endfor %}
        }
        workgroupBarrier();
    }
    if (lane != 0u) {
        return;
    }
{%- for c in cs %}
    if (col0 + {{ c.c }}u < {{ n }}u) {
        let n = col0 + {{ c.c }}u;
        var v = {{ alpha }} * sums[{{ c.base }}u + tid]{% if rms.is_some() %} * rinv{% endif %};
{%- if has_bias %}
        v = v + {{ beta }} * {{ bias_ld.open }}n * {{ bias_sn }}u{{ bias_ld.close }};
{%- endif %}
        let o = n;
        {{ fu.store("o", "v") }}
    }
{%- endfor %}
}
