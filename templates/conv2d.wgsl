{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Direct 2-D convolution (1-D runs with height 1): one output element per thread.
// x: [{{ n }}, {{ c }}, {{ g.h }}, {{ g.w }}], w: [{{ m }}, {{ cg }}, {{ g.kh }}, {{ g.kw }}], out: [{{ n }}, {{ m }}, {{ g.oh }}, {{ g.ow }}].
{% include "main_1d.wgsl" %}
    let ox = i32(i % {{ g.ow }}u);
    let oy = i32((i / {{ g.ow }}u) % {{ g.oh }}u);
    let oc = (i / {{ ohw }}u) % {{ m }}u;
    let b = i / {{ mohw }}u;
    let c0 = (oc / {{ m_per_group }}u) * {{ cg }}u;
{%- if has_bias %}
    var acc = bias[oc];
{%- else %}
    var acc = 0.0;
{%- endif %}
    for (var c = 0u; c < {{ cg }}u; c = c + 1u) {
        let x_base = (b * {{ c }}u + c0 + c) * {{ hw }}u;
        let w_base = (oc * {{ cg }}u + c) * {{ khw }}u;
        for (var ky = 0; ky < {{ g.kh }}; ky = ky + 1) {
            let iy = oy * {{ g.sy }} - {{ g.pt }} + ky * {{ g.dy }};
            if (iy < 0 || iy >= {{ g.h }}) {
                continue;
            }
            for (var kx = 0; kx < {{ g.kw }}; kx = kx + 1) {
                let ix = ox * {{ g.sx }} - {{ g.pl }} + kx * {{ g.dx }};
                if (ix < 0 || ix >= {{ g.w }}) {
                    continue;
                }
                acc = acc + x[x_base + u32(iy * {{ g.w }} + ix)] * weight[w_base + u32(ky * {{ g.kw }} + kx)];
            }
        }
    }
{%- if fu.defined %}
    out[i] = fused(acc, i);
{%- else %}
    out[i] = acc;
{%- endif %}
}
