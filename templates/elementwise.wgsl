{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}

{% include "main_1d.wgsl" %}
{%- for c in store_coords %}
    let c{{ loop.index0 }} = i32((i / {{ c.stride }}u) % {{ c.extent }}u);
{%- endfor %}
    out[{{ store.offset }}{% for t in store.terms %} + c{{ t.coord }} * {{ t.stride }}{% endfor %}] = fused(0.0, i);
}
