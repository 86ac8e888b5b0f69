{%- match l.kind %}
{%- when LoaderKind::F16 %}
// {{ l.var }} holds float16 values, two a word (element i in half i % 2, low first).
fn ld_{{ l.var }}(i: u32) -> f32 {
    return unpack2x16float({{ l.var }}[i >> 1u])[i & 1u];
}
{%- if l.vec4 %}
// Elements i .. i + 3 (i a multiple of 4).
fn ld4_{{ l.var }}(i: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float({{ l.var }}[i >> 1u]), unpack2x16float({{ l.var }}[(i >> 1u) + 1u]));
}
{%- endif %}
{%- when LoaderKind::Bf16 %}
// {{ l.var }} holds bfloat16 values, two a word (element i in half i % 2, low first): a bfloat16 is the high half
// of the float32 it rounds.
fn ld_{{ l.var }}(i: u32) -> f32 {
    let w = {{ l.var }}[i >> 1u];
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
{%- if l.vec4 %}
// Elements i .. i + 3 (i a multiple of 4).
fn ld4_{{ l.var }}(i: u32) -> vec4<f32> {
    let w0 = {{ l.var }}[i >> 1u];
    let w1 = {{ l.var }}[(i >> 1u) + 1u];
    return bitcast<vec4<f32>>(vec4<u32>(w0 << 16u, w0 & 0xffff0000u, w1 << 16u, w1 & 0xffff0000u));
}
{%- endif %}
{%- when LoaderKind::Blocks with (q) %}
// {{ l.var }} holds {{ q.bits }}-bit codes, {{ q.per_word }} a word, in rows of {{ q.row }} elements (each row from a word boundary), then one
// {% if q.scale_f16 %}float16{% else %}float32{% endif %} scale per block of {{ q.block }} elements of a row{% if q.zeros_at.is_some() %}, then one zero-point code per block{% endif %}:
// element = (code - zero point) * scale.
fn ld_{{ l.var }}(i: u32) -> f32 {
{%- if q.aligned %}
    // Rows fill whole words and blocks: element i is code i, in block i / {{ q.block }}.
    let e = i;
    let blk = i / {{ q.block }}u;
{%- else %}
    let r = i / {{ q.row }}u;
    let k = i % {{ q.row }}u;
    let e = r * {{ q.row_codes }}u + k;
    let blk = r * {{ q.blocks_per_row }}u + k / {{ q.block }}u;
{%- endif %}
    let code = ({{ l.var }}[e >> {{ q.word_shift }}u] >> ((e & {{ q.lane_mask }}u) * {{ q.bits }}u)) & {{ q.code_mask }}u;
{%- if q.scale_f16 %}
    let scale = unpack2x16float({{ l.var }}[{{ q.scales_at }}u + (blk >> 1u)])[blk & 1u];
{%- else %}
    let scale = bitcast<f32>({{ l.var }}[{{ q.scales_at }}u + blk]);
{%- endif %}
{%- if let Some(z) = q.zeros_at %}
    let zero = ({{ l.var }}[{{ z }}u + (blk >> {{ q.word_shift }}u)] >> ((blk & {{ q.lane_mask }}u) * {{ q.bits }}u)) & {{ q.code_mask }}u;
    return (f32(code) - f32(zero)) * scale;
{%- else %}
    return (f32(code) - {{ q.zero }}) * scale;
{%- endif %}
}
{%- endmatch %}
