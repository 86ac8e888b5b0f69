{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
// LayerNormalization over rows of {{ n }} contiguous elements; one workgroup of 64 threads per row;
// mean first, then the variance around it (two passes: no cancellation){% if !held.is_empty() %}, over the row read once into
// registers (thread lid holds elements lid + 64·i){% endif %}.
{%- let reduce_threads = 64 %}
{%- let reduce_width = 8 %}
{%- let reduce_chunks = 8 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 16 %}
{%- let reduce_parts = 32 %}
{% include "workgroup_reduce.wgsl" %}

{% include "main_rows.wgsl" %}
    let base = row * {{ n }}u;
{%- if !held.is_empty() %}
{%- for c in held %}
{%- if c.partial %}
    var v{{ c.i }} = 0.0;
    if (lid + {{ c.off }}u < {{ n }}u) {
        v{{ c.i }} = x[base + lid + {{ c.off }}u];
    }
{%- else %}
    let v{{ c.i }} = x[base + lid + {{ c.off }}u];
{%- endif %}
{%- endfor %}
{%- if rms %}
    // RMSNormalization: no mean is subtracted.
    let mean = 0.0;
{%- else %}
    var s = 0.0;
{%- for c in held %}
    s = s + v{{ c.i }};
{%- endfor %}
    let mean = reduce_sum({% if sg %}ssize{% else %}lid{% endif %}, s) / {{ n_f }};
{%- endif %}
    var q = 0.0;
{%- for c in held %}
{%- if c.partial %}
    if (lid + {{ c.off }}u < {{ n }}u) {
        let d = v{{ c.i }} - mean;
        q = q + d * d;
    }
{%- else %}
    let d{{ c.i }} = v{{ c.i }} - mean;
    q = q + d{{ c.i }} * d{{ c.i }};
{%- endif %}
{%- endfor %}
    let inv = inverseSqrt(reduce_sum({% if sg %}ssize{% else %}lid{% endif %}, q) / {{ n_f }} + {{ epsilon }});
{%- else %}
{%- if rms %}
    // RMSNormalization: no mean is subtracted.
    let mean = 0.0;
{%- else %}
    var s = 0.0;
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        s = s + x[base + j];
    }
    let mean = reduce_sum({% if sg %}ssize{% else %}lid{% endif %}, s) / {{ n_f }};
{%- endif %}
    var q = 0.0;
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        let d = x[base + j] - mean;
        q = q + d * d;
    }
    let inv = inverseSqrt(reduce_sum({% if sg %}ssize{% else %}lid{% endif %}, q) / {{ n_f }} + {{ epsilon }});
{%- endif %}
{%- if has_mean %}
    if (lid == 0u) {
        mean_out[row] = mean;
    }
{%- endif %}
{%- if has_inv %}
    if (lid == 0u) {
        inv_out[row] = inv;
    }
{%- endif %}
{%- if !held.is_empty() %}
{%- for c in held %}
{%- if c.partial %}
    if (lid + {{ c.off }}u < {{ n }}u) {
{%- else %}
    {
{%- endif %}
        let j = lid + {{ c.off }}u;
        var y = (v{{ c.i }} - mean) * inv * scale[j % {{ scale_len }}u];
{%- if has_bias %}
        y = y + bias[j % {{ bias_len }}u];
{%- endif %}
        out[base + j] = y;
    }
{%- endfor %}
{%- else %}
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        var y = (x[base + j] - mean) * inv * scale[j % {{ scale_len }}u];
{%- if has_bias %}
        y = y + bias[j % {{ bias_len }}u];
{%- endif %}
        out[base + j] = y;
    }
{%- endif %}
}
