{% include "header.wgsl" %}
// Pad ({{ mode }}): each output coordinate maps back to an input coordinate, or to the constant.
{% include "main_1d.wgsl" %}
    var src = 0;
    var inside = true;
{%- for d in dims %}
    {
        var k = i32((i / {{ d.out_stride }}u) % {{ d.out_extent }}u) - {{ d.begin }};
{%- if mode == "constant" %}
        inside = inside && k >= 0 && k < {{ d.extent }};
{%- else if mode == "reflect" %}
        if (k < 0) {
            k = -k;
        }
        if (k >= {{ d.extent }}) {
            k = 2 * ({{ d.extent }} - 1) - k;
        }
        k = clamp(k, 0, {{ d.extent }} - 1);
{%- else if mode == "edge" %}
        k = clamp(k, 0, {{ d.extent }} - 1);
{%- else %}
        k = ((k % {{ d.extent }}) + {{ d.extent }}) % {{ d.extent }};
{%- endif %}
        src = src + k * {{ d.stride }};
    }
{%- endfor %}
    if (inside) {
        out[i] = x[src];
    } else {
        out[i] = {{ value }};
    }
}
