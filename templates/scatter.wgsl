{% include "header.wgsl" %}
// {{ kind }} (reduction: {{ reduction }}): one output element per thread, starting from data and applying every
// update that targets it in update order, so results are deterministic without atomics.
{% include "main_1d.wgsl" %}
    var v = data[i];
{%- if nd %}
    // ScatterND: update tuple t addresses the slice of {{ slice }} elements at Σ idx[t, j] · stride_j.
    for (var t = 0u; t < {{ tuples }}u; t = t + 1u) {
        var base = 0;
{%- for d in dims %}
        {
            var q = indices[t * {{ depth }}u + {{ loop.index0 }}u];
            if (q < 0) {
                q = q + {{ d.extent }};
            }
            base = base + clamp(q, 0, {{ d.extent }} - 1) * {{ d.stride }};
        }
{%- endfor %}
        if (i32(i) >= base && i32(i) < base + {{ slice }}) {
            let u = updates[t * {{ slice }}u + (i - u32(base))];
            v = {{ combine }};
        }
    }
{%- else %}
    // ScatterElements along axis {{ axis }}: update u targets its own coordinates with the axis one replaced.
{%- for c in out_coords %}
    let c{{ loop.index0 }} = (i / {{ c.stride }}u) % {{ c.extent }}u;
{%- endfor %}
    for (var u = 0u; u < {{ updates_len }}u; u = u + 1u) {
        var q = indices[u];
        if (q < 0) {
            q = q + {{ axis_len }};
        }
        let hit = u32(clamp(q, 0, {{ axis_len }} - 1)) == c{{ axis }}{% for c in upd_coords %} && ((u / {{ c.stride }}u) % {{ c.extent }}u) == c{{ c.coord }}{% endfor %};
        if (hit) {
            let w = updates[u];
            v = {{ combine_w }};
        }
    }
{%- endif %}
    out[i] = v;
}
