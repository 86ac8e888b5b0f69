{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- if let Some(fu) = operand %}
// The new rows are computed here as they are loaded (their elementwise kernel folded in), so they go straight
// into the cache.
{%- include "fused.wgsl" %}
{%- endif %}
{%- for p in parts %}
// CacheWrite along axis {{ p.axis }} into `{{ p.cache }}`, in place: new element i goes to its own row past the first row
// `{{ row_var }}[0]` (clamped to 0..={{ p.last_row }}); the cache's other rows keep their values.
{%- endfor %}
{%- if parts.len() > 1 %}
// The caches' new elements one after the other: {% for p in parts %}{% if !loop.first %}, {% endif %}{{ p.numel }}{% endfor %}.
{%- endif %}
{% include "main_1d.wgsl" %}
{%- if parts.len() == 1 %}
{%- let p = parts[0] %}
    let r = u32(clamp({{ row_var }}[0], 0, {{ p.last_row }}));
{%- for c in p.coords %}
    let {{ c.name }} = (i / {{ c.stride }}u) % {{ c.extent }}u;
{%- endfor %}
    {{ p.cache }}[{{ p.dst }}] = {{ p.src }};
{%- else %}
{%- for p in parts %}
{%- if loop.first %}
    if (i < {{ p.end }}u) {
{%- else %}
    } else if (i < {{ p.end }}u) {
{%- endif %}
        let i = i - {{ p.first }}u;
        let r = u32(clamp({{ row_var }}[0], 0, {{ p.last_row }}));
{%- for c in p.coords %}
        let {{ c.name }} = (i / {{ c.stride }}u) % {{ c.extent }}u;
{%- endfor %}
        {{ p.cache }}[{{ p.dst }}] = {{ p.src }};
{%- endfor %}
    }
{%- endif %}
}
