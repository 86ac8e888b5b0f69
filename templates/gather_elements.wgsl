{% include "header.wgsl" %}
// GatherElements along axis {{ axis }}: out[c] = data[c with c_axis = indices[c]]; indices wrap once and clamp.
{% include "main_1d.wgsl" %}
{%- for c in coords %}
    let c{{ loop.index0 }} = i32((i / {{ c.stride }}u) % {{ c.extent }}u);
{%- endfor %}
    var idx = indices[i];
    if (idx < 0) {
        idx = idx + {{ axis_len }};
    }
    idx = clamp(idx, 0, {{ axis_len }} - 1);
    out[i] = data[idx * {{ axis_stride }}{% for t in terms %} + c{{ t.coord }} * {{ t.stride }}{% endfor %}];
}
