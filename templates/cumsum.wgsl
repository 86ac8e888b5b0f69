{% include "header.wgsl" %}
// Cum{% if prod %}Prod{% else %}Sum{% endif %} along an axis of {{ n }} elements spaced {{ inner }} apart ({% if exclusive %}exclusive{% else %}inclusive{% endif %}, {% if reverse %}reverse{% else %}forward{% endif %}); one output per thread.
{% include "main_1d.wgsl" %}
    let j = (i / {{ inner }}u) % {{ n }}u;
    let base = (i / {{ span }}u) * {{ span }}u + i % {{ inner }}u;
{%- if reverse %}
    var k = j{% if exclusive %} + 1u{% endif %};
    let end = {{ n }}u;
{%- else %}
    var k = 0u;
    let end = j{% if !exclusive %} + 1u{% endif %};
{%- endif %}
    var acc = {{ zero }};
    for (; k < end; k = k + 1u) {
        acc = acc {% if prod %}*{% else %}+{% endif %} x[base + k * {{ inner }}u];
    }
    out[i] = acc;
}
