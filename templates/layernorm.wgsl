{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
// LayerNormalization over rows of {{ n }} contiguous elements; one workgroup of 64 threads per row;
// mean first, then the variance around it (two passes: no cancellation).
{%- let reduce_threads = 64 %}
{%- let reduce_width = 8 %}
{%- let reduce_chunks = 8 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 16 %}
{%- let reduce_parts = 32 %}
{% include "workgroup_reduce.wgsl" %}

{% include "main_rows.wgsl" %}
    let base = row * {{ n }}u;
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
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        var y = (x[base + j] - mean) * inv * scale[j % {{ scale_len }}u];
{%- if has_bias %}
        y = y + bias[j % {{ bias_len }}u];
{%- endif %}
        out[base + j] = y;
    }
}
