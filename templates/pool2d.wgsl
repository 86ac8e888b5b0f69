{% include "header.wgsl" %}
// {{ kind }} pooling over 2-D windows (1-D runs with height 1): one output element per thread.
{% include "main_1d.wgsl" %}
    let ox = i32(i % {{ g.ow }}u);
    let oy = i32((i / {{ g.ow }}u) % {{ g.oh }}u);
    let plane = i / {{ ohw }}u;
    let x_base = plane * {{ hw }}u;
{%- if is_max %}
    // onnxruntime's identity: the lowest finite f32, also the result of a window that lies entirely in padding.
    var acc = -3.4028234663852886e38f;
{%- else if lp > 0 %}
    var acc = 0.0;
{%- else %}
    var acc = 0.0;
    var count = 0.0;
{%- endif %}
    for (var ky = 0; ky < {{ g.kh }}; ky = ky + 1) {
        let iy = oy * {{ g.sy }} - {{ g.pt }} + ky * {{ g.dy }};
        for (var kx = 0; kx < {{ g.kw }}; kx = kx + 1) {
            let ix = ox * {{ g.sx }} - {{ g.pl }} + kx * {{ g.dx }};
            let inside = iy >= 0 && iy < {{ g.h }} && ix >= 0 && ix < {{ g.w }};
{%- if is_max %}
            if (inside) {
                acc = max(acc, x[x_base + u32(iy * {{ g.w }} + ix)]);
            }
{%- else if lp > 0 %}
            if (inside) {
                acc = acc + pow(abs(x[x_base + u32(iy * {{ g.w }} + ix)]), {{ lp }}.0);
            }
{%- else %}
            if (inside) {
                acc = acc + x[x_base + u32(iy * {{ g.w }} + ix)];
            }
{%- if count_include_pad %}
            // Pads count, positions past the end padding (ceil_mode) do not.
            if (iy < {{ g.h }} + {{ g.pb }} && ix < {{ g.w }} + {{ g.pr }}) {
                count = count + 1.0;
            }
{%- else %}
            if (inside) {
                count = count + 1.0;
            }
{%- endif %}
{%- endif %}
        }
    }
{%- if is_max %}
    out[i] = acc;
{%- else if lp > 0 %}
    out[i] = pow(acc, 1.0 / {{ lp }}.0);
{%- else %}
    out[i] = acc / max(count, 1.0);
{%- endif %}
}
