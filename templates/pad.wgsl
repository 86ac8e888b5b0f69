{% include "header.wgsl" %}
// Pad ({{ mode }}): each output coordinate maps back to an input coordinate, or to the constant.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ groups_x }}u + wid.x) * 256u + lid;
    if (i >= {{ numel }}u) {
        return;
    }
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
