{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// {% if project.is_some() %}An inverted-residual block in one kernel: a{% else %}A{% endif %} 1x1 expansion ({{ cin }} → {{ e }} channels) → depthwise {{ g.kh }}x{{ g.kw }}
// convolution (stride {{ g.sy }}x{{ g.sx }}){% if let Some(p) = project %} → 1x1 projection ({{ e }} → {{ p.cout }} channels){% endif %}.
// Each workgroup takes {{ t.ty }}x{{ t.tx }} output positions of one image and, {{ t.ec }} expanded channels at a time,
// computes the expansion over their {{ t.hy }}x{{ t.hx }} input window into workgroup memory (recomputed where
// neighbouring tiles' windows overlap) and the depthwise outputs from there: the expansion never reaches memory.
{%- if t.x_chunk == cin %}
// The input window itself, all {{ cin }} channels, is loaded into workgroup memory once.
{%- else %}
// The input window passes through workgroup memory {{ t.x_chunk }} channels at a time.
{%- endif %}
{%- if let Some(p) = project %}
// The depthwise outputs stay in workgroup memory too: each position has {{ t.lanes }} threads that sum
// {{ t.per_lane }} projected channel(s) each over all expanded channels in registers.
{%- endif %}
var<workgroup> xt: array<f32, {{ xt_len }}>;
var<workgroup> xe: array<f32, {{ xe_len }}>;
{%- if let Some(p) = project %}
var<workgroup> dv: array<f32, {{ dv_len }}>;
{%- endif %}

{%- macro stage_x(cb, ind) %}
{{ ind }}    for (var it = 0u; it < {{ xt_iters }}u; it = it + 1u) {
{{ ind }}        if (it * 256u + lid >= {{ xt_len }}u) {
{{ ind }}            break;
{{ ind }}        }
{{ ind }}        let j = min(it * 256u + lid, {{ xt_last }}u);
{{ ind }}        let c = {{ cb }} + j / {{ win }}u;
{{ ind }}        let r = j % {{ win }}u;
{{ ind }}        let iy = iy0 + i32(r / {{ t.hx }}u);
{{ ind }}        let ix = ix0 + i32(r % {{ t.hx }}u);
{{ ind }}        var v = 0.0;
{{ ind }}        if (c < {{ cin }}u && iy >= 0 && iy < {{ g.h }} && ix >= 0 && ix < {{ g.w }}) {
{{ ind }}            v = x[x_base + c * {{ hw }}u + u32(iy * {{ g.w }} + ix)];
{{ ind }}        }
{{ ind }}        xt[j] = v;
{{ ind }}    }
{%- endmacro %}
{%- macro expand_fma(u, c, cw) %}
{%- if we_step == 4 %}
                let q{{ u.i }} = {{ we_var }}[(w{{ u.i }} + {{ cw }}) / 4u];
{%- for (i, f) in [(0, "x"), (1, "y"), (2, "z"), (3, "w")] %}
                v{{ u.i }} = fma(xt[({{ c }} + {{ i }}u) * {{ win }}u + r{{ u.i }}], q{{ u.i }}.{{ f }}, v{{ u.i }});
{%- endfor %}
{%- else %}
                v{{ u.i }} = fma(xt[{{ c }} * {{ win }}u + r{{ u.i }}], {{ we_var }}[w{{ u.i }} + {{ cw }}], v{{ u.i }});
{%- endif %}
{%- endmacro %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.z;
    let oy0 = i32(wid.x / {{ tiles_x }}u) * {{ t.ty }};
    let ox0 = i32(wid.x % {{ tiles_x }}u) * {{ t.tx }};
    let iy0 = oy0 * {{ g.sy }} - {{ g.pt }};
    let ix0 = ox0 * {{ g.sx }} - {{ g.pl }};
    let x_base = b * {{ x_batch }}u;
{%- if t.x_chunk == cin %}
    // The input window, all channels, zero outside the image.
{%- call stage_x("0u", "") %}{% endcall %}
    workgroupBarrier();
{%- endif %}
{%- if let Some(p) = project %}
    let pos = lid % {{ tile_pos }}u;
    let lane = lid / {{ tile_pos }}u;
{%- for q in p.qs %}
    var acc{{ q.i }} = 0.0;
{%- endfor %}
    for (var e0 = 0u; e0 < {{ e }}u; e0 = e0 + {{ t.ec }}u) {
{%- else %}
    {
        let e0 = wid.y * {{ t.ec }}u;
{%- endif %}
        // The expansion over the window, channel-major, four values per thread at a time; taps in the depthwise
        // padding are zero.
        for (var it = 0u; it < {{ xe_iters }}u; it = it + 1u) {
            let jb = it * 1024u + lid;
{%- for u in us %}
            let j{{ u.i }} = min(jb + {{ u.off }}u, {{ xe_last }}u);
            let w{{ u.i }} = min(e0 + j{{ u.i }} / {{ win }}u, {{ e_last }}u) * {{ cin }}u;
            let r{{ u.i }} = j{{ u.i }} % {{ win }}u;
            var v{{ u.i }} = 0.0;
{%- endfor %}
{%- if t.x_chunk == cin %}
            for (var cs = 0u; cs < {{ c_steps }}u; cs = cs + 1u) {
                let c = cs * {{ we_step }}u;
{%- for u in us %}
{%- call expand_fma(u, "c", "c") %}{% endcall %}
{%- endfor %}
            }
{%- else %}
            for (var cb = 0u; cb < {{ cin }}u; cb = cb + {{ t.x_chunk }}u) {
                workgroupBarrier();
{%- call stage_x("cb", "            ") %}{% endcall %}
                workgroupBarrier();
                for (var cs = 0u; cs < {{ c_steps }}u; cs = cs + 1u) {
                    let c = cs * {{ we_step }}u;
                    let cw = min(cb + c, {{ cw_last }}u);
{%- for u in us %}
{%- call expand_fma(u, "c", "cw") %}{% endcall %}
{%- endfor %}
                }
            }
{%- endif %}
{%- for u in us %}
            {
                let ce = e0 + j{{ u.i }} / {{ win }}u;
                let iy = iy0 + i32(r{{ u.i }} / {{ t.hx }}u);
                let ix = ix0 + i32(r{{ u.i }} % {{ t.hx }}u);
                let inside = ce < {{ e }}u && iy >= 0 && iy < {{ g.h }} && ix >= 0 && ix < {{ g.w }};
                var v = v{{ u.i }}{% if !be_var.is_empty() %} + {{ be_var }}[min(ce, {{ e_last }}u)]{% endif %};
                v = {{ post_e }};
                if (jb + {{ u.off }}u < {{ xe_len }}u) {
                    xe[j{{ u.i }}] = select(0.0, v, inside);
                }
            }
{%- endfor %}
        }
        workgroupBarrier();
        // The depthwise outputs of the tile.
        for (var it = 0u; it < {{ dv_iters }}u; it = it + 1u) {
            if (it * 256u + lid >= {{ dv_len }}u) {
                break;
            }
            let j = min(it * 256u + lid, {{ dv_last }}u);
            let el = j / {{ tile_pos }}u;
            let ce = e0 + el;
            let r = j % {{ tile_pos }}u;
            let ly = r / {{ t.tx }}u;
            let lx = r % {{ t.tx }}u;
            var s = 0.0;
            if (ce < {{ e }}u) {
                s = {% if bd_var.is_empty() %}0.0{% else %}{{ bd_var }}[ce]{% endif %};
                let xb = el * {{ win }}u + ly * {{ row_step }}u + lx * {{ g.sx }}u;
                for (var ky = 0u; ky < {{ g.kh }}u; ky = ky + 1u) {
                    for (var kx = 0u; kx < {{ g.kw }}u; kx = kx + 1u) {
                        s = fma(xe[xb + ky * {{ tap_step }}u + kx * {{ g.dx }}u], {{ wd_var }}[ce * {{ khw }}u + ky * {{ g.kw }}u + kx], s);
                    }
                }
{%- if project.is_some() %}
                s = {{ post_d }};
{%- endif %}
            }
{%- if project.is_some() %}
            dv[j] = s;
{%- else %}
            let oy = u32(oy0) + ly;
            let ox = u32(ox0) + lx;
            if (ce < {{ e }}u && oy < {{ g.oh }}u && ox < {{ g.ow }}u) {
                let o = (b * {{ e }}u + ce) * {{ ohw }}u + oy * {{ g.ow }}u + ox;
                {{ fu.store("o", "s") }}
            }
{%- endif %}
        }
{%- if let Some(p) = project %}
        workgroupBarrier();
        // The projection: this thread's channels at its position, summed over the step's expanded channels.
{%- if p.vec4 %}
        // Four expanded channels at a time: the projection weights are read as vec4 (E = {{ e }} is a multiple of 4).
        for (var el4 = 0u; el4 < {{ ec4 }}u; el4 = el4 + 1u) {
            let el = el4 * 4u;
{%- for i in [0, 1, 2, 3] %}
            let d{{ i }} = dv[(el + {{ i }}u) * {{ tile_pos }}u + pos];
{%- endfor %}
            let ce = min(e0 + el, {{ e_last4 }}u);
{%- for q in p.qs %}
            {
                let w = {{ p.wp_var }}[(min(lane + {{ q.off }}u, {{ p.cout_last }}u) * {{ e }}u + ce) / 4u];
                acc{{ q.i }} = fma(d3, w.w, fma(d2, w.z, fma(d1, w.y, fma(d0, w.x, acc{{ q.i }}))));
            }
{%- endfor %}
        }
{%- else %}
        for (var el = 0u; el < {{ t.ec }}u; el = el + 1u) {
            let d = dv[el * {{ tile_pos }}u + pos];
            let ce = min(e0 + el, {{ e_last }}u);
{%- for q in p.qs %}
            acc{{ q.i }} = fma(d, {{ p.wp_var }}[min(lane + {{ q.off }}u, {{ p.cout_last }}u) * {{ e }}u + ce], acc{{ q.i }});
{%- endfor %}
        }
{%- endif %}
{%- endif %}
    }
{%- if let Some(p) = project %}
    let oy = u32(oy0) + pos / {{ t.tx }}u;
    let ox = u32(ox0) + pos % {{ t.tx }}u;
    if (oy < {{ g.oh }}u && ox < {{ g.ow }}u) {
{%- for q in p.qs %}
        {
            let co = lane + {{ q.off }}u;
            if (co < {{ p.cout }}u) {
                let v = acc{{ q.i }}{% if !p.bp_var.is_empty() %} + {{ p.bp_var }}[co]{% endif %};
                let o = (b * {{ p.cout }}u + co) * {{ ohw }}u + oy * {{ g.ow }}u + ox;
                {{ fu.store("o", "v") }}
            }
        }
{%- endfor %}
    }
{%- endif %}
}
