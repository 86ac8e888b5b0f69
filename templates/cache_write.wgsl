{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// The new rows are computed here as they are loaded (their elementwise kernel folded in), so they go straight
// into the cache.
{%- include "fused.wgsl" %}
{%- endif %}
// CacheWrite along axis {{ axis }}, in place: new element i goes to its own row past the first row `{{ row_var }}[0]`
// (clamped to 0..={{ last_row }}); the cache's other rows keep their values.
{% include "main_1d.wgsl" %}
    let r = u32(clamp({{ row_var }}[0], 0, {{ last_row }}));
{%- for c in coords %}
    let {{ c.name }} = (i / {{ c.stride }}u) % {{ c.extent }}u;
{%- endfor %}
    cache[{{ dst }}] = {{ src }};
}
