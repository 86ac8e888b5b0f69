{% include "header.wgsl" %}
// CacheWrite along axis {{ axis }}, in place: new element i goes to its own row past the first row `row[0]`
// (clamped to 0..={{ last_row }}); the cache's other rows keep their values.
{% include "main_1d.wgsl" %}
    let r = u32(clamp(row[0], 0, {{ last_row }}));
{%- for c in coords %}
    let {{ c.name }} = (i / {{ c.stride }}u) % {{ c.extent }}u;
{%- endfor %}
    cache[{{ dst }}] = x[{{ src }}];
}
