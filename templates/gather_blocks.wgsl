{% include "header.wgsl" %}
// out[p, i] = table[clamp(wrap(indices[p])), i], the table's {{ axis_len }} rows stored as {{ blocks.len() }} blocks of {{ rows }}: each
// element reads its row from the block that holds it.
{% include "main_1d.wgsl" %}
    let p = i / {{ inner }}u;
    let col = i % {{ inner }}u;
    var idx = indices[p];
    if (idx < 0) {
        idx = idx + {{ axis_len }};
    }
    idx = clamp(idx, 0, {{ axis_len }} - 1);
    let at = (u32(idx) % {{ rows }}u) * {{ inner }}u + col;
    switch (u32(idx) / {{ rows }}u) {
{%- for b in blocks %}
{%- if loop.last %}
        default: {
{%- else %}
        case {{ loop.index0 }}u: {
{%- endif %}
            out[i] = {{ b.open }}at{{ b.close }};
        }
{%- endfor %}
    }
}
