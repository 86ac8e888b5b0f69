{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Tiled matrix product: a {{ tile }}x{{ tile }} output tile per workgroup of 16x16 threads, {{ loads }}x{{ loads }} outputs per thread
// held in registers (unrolled, so no array is spilled to local memory), K in steps of 16 through workgroup
// memory. A and B are read through strides, so transposes cost nothing. The tile is the largest that still gives
// the GPU enough workgroups.
var<workgroup> a_tile: array<f32, {{ tile_elems }}>;
var<workgroup> b_tile: array<f32, {{ tile_elems }}>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let batch = wid.z;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let row0 = wid.y * {{ tile }}u;
    let col0 = wid.x * {{ tile }}u;
    let tid = lid.y * 16u + lid.x;
{%- for r in lanes %}{% for c in lanes %}
    var acc{{ r.i }}{{ c.i }} = 0.0;
{%- endfor %}{% endfor %}
    for (var k0 = 0u; k0 < {{ k }}u; k0 = k0 + 16u) {
        for (var l = 0u; l < {{ loads }}u; l = l + 1u) {
            let e = tid + l * 256u;
            // A tile: {{ tile }} rows x 16 k, stored k-major.
            let am = e / 16u;
            let ak = e % 16u;
            var av = 0.0;
            if (row0 + am < {{ m }}u && k0 + ak < {{ k }}u) {
                av = a[a_base + (row0 + am) * {{ a_sm }}u + (k0 + ak) * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
                av = {{ a_pro }};
{%- endif %}
            }
            a_tile[ak * {{ tile }}u + am] = av;
            // B tile: 16 k x {{ tile }} columns.
            let bk = e / {{ tile }}u;
            let bn = e % {{ tile }}u;
            var bv = 0.0;
            if (k0 + bk < {{ k }}u && col0 + bn < {{ n }}u) {
                bv = {{ b_var }}[b_base + (k0 + bk) * {{ b_sk }}u + (col0 + bn) * {{ b_sn }}u];
{%- if !b_pro.is_empty() %}
                bv = {{ b_pro }};
{%- endif %}
            }
            b_tile[bk * {{ tile }}u + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
{%- for r in lanes %}
            let ar{{ r.i }} = a_tile[kk * {{ tile }}u + lid.y + {{ r.off }}u];
            let br{{ r.i }} = b_tile[kk * {{ tile }}u + lid.x + {{ r.off }}u];
{%- endfor %}
{%- for r in lanes %}{% for c in lanes %}
            acc{{ r.i }}{{ c.i }} = fma(ar{{ r.i }}, br{{ c.i }}, acc{{ r.i }}{{ c.i }});
{%- endfor %}{% endfor %}
        }
        workgroupBarrier();
    }
{%- for r in lanes %}{% for c in lanes %}
    {
        let m = row0 + lid.y + {{ r.off }}u;
        let n = col0 + lid.x + {{ c.off }}u;
        if (m < {{ m }}u && n < {{ n }}u) {
            var v = {{ alpha }} * acc{{ r.i }}{{ c.i }};
{%- if has_bias %}
            v = v + {{ beta }} * {{ bias_var }}[m * {{ bias_sm }}u + n * {{ bias_sn }}u];
{%- endif %}
            let o = batch * {{ mn }}u + m * {{ n }}u + n;
{%- if fu.defined %}
            out[o] = fused(v, o);
{%- else %}
            out[o] = v;
{%- endif %}
        }
    }
{%- endfor %}{% endfor %}
}
