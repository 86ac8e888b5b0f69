{% include "subgroups.wgsl" -%}
{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// {% if log %}LogSoftmax{% else %}Softmax{% endif %} over rows of {{ n }} elements spaced {{ inner }} apart; one workgroup of 64 threads per row.
{%- let reduce_threads = 64 %}
{%- let reduce_width = 8 %}
{%- let reduce_chunks = 8 %}
{%- let reduce_sg = sg %}
{%- let reduce_subgroups = 16 %}
{%- let reduce_parts = 32 %}
{% include "workgroup_reduce.wgsl" %}

{% include "main_rows.wgsl" %}
    let base = (row / {{ inner }}u) * {{ row_span }}u + row % {{ inner }}u;
    // Every thread starts from the row's first element, so the maximum needs no -inf (and is exact for any row).
    var m = x[base];
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        m = max(m, x[base + j * {{ inner }}u]);
    }
    m = reduce_max({% if sg %}ssize{% else %}lid{% endif %}, m);
    var s = 0.0;
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        s = s + exp(x[base + j * {{ inner }}u] - m);
    }
    s = reduce_sum({% if sg %}ssize{% else %}lid{% endif %}, s);
    for (var j = lid; j < {{ n }}u; j = j + 64u) {
        let idx = base + j * {{ inner }}u;
{%- if log %}
        let y = x[idx] - m - log(s);
{%- else %}
        let y = exp(x[idx] - m) / s;
{%- endif %}
{%- if fu.defined %}
        out[idx] = fused(y, idx);
{%- else %}
        out[idx] = y;
{%- endif %}
    }
}
