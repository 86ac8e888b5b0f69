{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// out[o, p, i] = data[o, clamp(wrap(indices[p])), i]: indices from data never address outside `data`.
{% include "main_1d.wgsl" %}
    let outer = i / {{ positions_inner }}u;
    let p = (i / {{ inner }}u) % {{ positions }}u;
    let inner = i % {{ inner }}u;
    var idx = indices[p];
    if (idx < 0) {
        idx = idx + {{ axis_len }};
    }
    idx = clamp(idx, 0, {{ axis_len }} - 1);
    let v = {{ data_ld.open }}(outer * {{ axis_len }}u + u32(idx)) * {{ inner }}u + inner{{ data_ld.close }};
{%- if fu.defined %}
    out[i] = fused(v, i);
{%- else %}
    out[i] = v;
{%- endif %}
}
