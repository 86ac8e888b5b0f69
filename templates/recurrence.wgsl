{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
// {{ cell }}: {{ t }} steps of {{ hid }} hidden units, {{ d }} direction(s) x {{ b }} batch element(s). One workgroup
// per direction and batch element walks every step in this one dispatch; thread lid owns units lid + 256*m, and
// a step's {{ gates }} gates per unit are the projected input (gx, biases included) plus the previous state times the
// transposed recurrent weights (rt: neighbouring threads read neighbouring words). The state h is shared through
// workgroup memory; steps at or past a batch element's length write zeros and keep the state.
var<workgroup> hs: array<f32, {{ hid }}>;
{%- if gru && !gru_lbr %}
var<workgroup> rh: array<f32, {{ hid }}>;
{%- endif %}

{{ acts }}
fn clip_(x: f32) -> f32 {
    return {{ clip }};
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let wg = wid.y * {{ groups_x }}u + wid.x;
    if (wg >= {{ dirs_batch }}u) {
        return;
    }
    let d = wg / {{ b }}u;
    let bi = wg % {{ b }}u;
{%- if reverse %}
    let rev = true;
{%- else %}
    let rev = d == 1u;
{%- endif %}
{%- if has_lens %}
    let len = u32(clamp(i32(lens[bi]), 0, {{ t }}));
{%- else %}
    let len = {{ t }}u;
{%- endif %}
    var c: array<f32, {{ upt }}>;
    for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
        let u = lid + 256u * m;
        if (u < {{ hid }}u) {
{%- if has_state0 %}
            hs[u] = s0[(d * {{ b }}u + bi) * {{ hid }}u + u];
{%- if lstm %}
            c[m] = s0[(({{ d }}u + d) * {{ b }}u + bi) * {{ hid }}u + u];
{%- endif %}
{%- else %}
            hs[u] = 0.0;
{%- endif %}
        }
    }
    workgroupBarrier();
    for (var s = 0u; s < {{ t }}u; s = s + 1u) {
        let live = s < len;
        let t = select(s, len - 1u - s, rev);
        var hn: array<f32, {{ upt }}>;
{%- if gru && !gru_lbr %}
        // z and r first; r * h is shared before the h gate's product reads it.
        var zg: array<f32, {{ upt }}>;
        if (live) {
            for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
                let u = lid + 256u * m;
                if (u < {{ hid }}u) {
                    let base = ((d * {{ t }}u + t) * {{ b }}u + bi) * {{ gh }}u + u;
                    var az = gx[base];
                    var ar = gx[base + {{ hid }}u];
                    for (var k = 0u; k < {{ hid }}u; k = k + 1u) {
                        let hk = hs[k];
                        let row = (d * {{ hid }}u + k) * {{ gh }}u + u;
                        az = az + hk * rt[row];
                        ar = ar + hk * rt[row + {{ hid }}u];
                    }
                    zg[m] = act0(clip_(az), d);
                    rh[u] = act0(clip_(ar), d) * hs[u];
                }
            }
        }
        workgroupBarrier();
        if (live) {
            for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
                let u = lid + 256u * m;
                if (u < {{ hid }}u) {
                    var ah = gx[((d * {{ t }}u + t) * {{ b }}u + bi) * {{ gh }}u + {{ hid2 }}u + u];
                    for (var k = 0u; k < {{ hid }}u; k = k + 1u) {
                        ah = ah + rh[k] * rt[(d * {{ hid }}u + k) * {{ gh }}u + {{ hid2 }}u + u];
                    }
                    let hh = act1(clip_(ah), d);
                    hn[m] = (1.0 - zg[m]) * hh + zg[m] * hs[u];
                }
            }
        }
{%- else %}
        if (live) {
            for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
                let u = lid + 256u * m;
                if (u < {{ hid }}u) {
                    let base = ((d * {{ t }}u + t) * {{ b }}u + bi) * {{ gh }}u + u;
{%- for g in gate_lanes %}
                    var a{{ g.i }} = {% if gru_lbr && g.i == 2 %}0.0{% else %}gx[base + {{ g.off }}u]{% endif %};
{%- endfor %}
                    // {{ unroll }} k at a time, every load issued before the sums use them: one workgroup walks
                    // the whole product, so its speed is the loads it keeps in flight.
                    for (var k = 0u; k < {{ hid_unrolled }}u; k = k + {{ unroll }}u) {
                        let row = (d * {{ hid }}u + k) * {{ gh }}u + u;
{%- for j in 0..unroll %}
                        let h{{ j }} = hs[k + {{ j }}u];
{%- endfor %}
{%- for g in gate_lanes %}
{%- for j in g.rows %}
                        let r{{ g.i }}_{{ j.i }} = rt[row + {{ j.off }}u];
{%- endfor %}
{%- endfor %}
{%- for g in gate_lanes %}
                        a{{ g.i }} = a{{ g.i }}{% for j in 0..unroll %} + h{{ j }} * r{{ g.i }}_{{ j }}{% endfor %};
{%- endfor %}
                    }
{%- if hid_unrolled != hid %}
                    for (var k = {{ hid_unrolled }}u; k < {{ hid }}u; k = k + 1u) {
                        let hk = hs[k];
                        let row = (d * {{ hid }}u + k) * {{ gh }}u + u;
{%- for g in gate_lanes %}
                        a{{ g.i }} = a{{ g.i }} + hk * rt[row + {{ g.off }}u];
{%- endfor %}
                    }
{%- endif %}
{%- if lstm %}
                    // Gates i, o, f, c; peepholes (i, o, f) read the cell state.
                    let cp = c[m];
{%- if has_p %}
                    let pb = d * {{ hid3 }}u + u;
                    let gi = act0(clip_(a0 + p[pb] * cp), d);
{%- else %}
                    let gi = act0(clip_(a0), d);
{%- endif %}
{%- if input_forget %}
                    let gf = 1.0 - gi;
{%- else if has_p %}
                    let gf = act0(clip_(a2 + p[pb + {{ hid2 }}u] * cp), d);
{%- else %}
                    let gf = act0(clip_(a2), d);
{%- endif %}
                    let cn = gf * cp + gi * act1(clip_(a3), d);
{%- if has_p %}
                    let go = act0(clip_(a1 + p[pb + {{ hid }}u] * cn), d);
{%- else %}
                    let go = act0(clip_(a1), d);
{%- endif %}
                    c[m] = cn;
                    hn[m] = go * act2(cn, d);
{%- else if gru %}
                    // Gates z, r, h; linear_before_reset: r scales the recurrent product and its bias.
                    let z = act0(clip_(a0), d);
                    let r = act0(clip_(a1), d);
                    let xh = gx[base + {{ hid2 }}u];
{%- if has_rbh %}
                    let hh = act1(clip_(xh + r * (a2 + rbh[d * {{ hid }}u + u])), d);
{%- else %}
                    let hh = act1(clip_(xh + r * a2), d);
{%- endif %}
                    hn[m] = (1.0 - z) * hh + z * hs[u];
{%- else %}
                    hn[m] = act0(clip_(a0), d);
{%- endif %}
                }
            }
        }
{%- endif %}
        workgroupBarrier();
        for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
            let u = lid + 256u * m;
            if (u < {{ hid }}u) {
                if (live) {
                    hs[u] = hn[m];
                    y[((t * {{ d }}u + d) * {{ b }}u + bi) * {{ hid }}u + u] = hn[m];
                } else {
                    y[((s * {{ d }}u + d) * {{ b }}u + bi) * {{ hid }}u + u] = 0.0;
                }
            }
        }
        workgroupBarrier();
    }
    for (var m = 0u; m < {{ upt }}u; m = m + 1u) {
        let u = lid + 256u * m;
        if (u < {{ hid }}u) {
            s_out[(d * {{ b }}u + bi) * {{ hid }}u + u] = hs[u];
{%- if lstm %}
            s_out[(({{ d }}u + d) * {{ b }}u + bi) * {{ hid }}u + u] = c[m];
{%- endif %}
        }
    }
}
