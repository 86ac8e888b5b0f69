{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Tiled matrix product: a {{ tile }}x{{ tile }} output tile per workgroup of 256 threads in {{ slices }} slice(s) of
// {{ tg }}x{{ tg }}, {{ lanes.len() }}x{{ lanes.len() }} outputs per thread held in registers (unrolled, so no array is spilled to local
// memory), K in steps of 16 through workgroup memory. {% if slices > 1 %}Each slice takes its own {{ kc }} of K and the
// slices' partial tiles are summed at the end, so a product with few output tiles still keeps 256 threads busy
// per tile. {% endif %}A and B are read through strides, so transposes cost nothing.
var<workgroup> smem: array<f32, {{ smem_len }}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let batch = wid.z;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let row0 = wid.y * {{ tile }}u;
    let col0 = wid.x * {{ tile }}u;
    // This thread's slice, its index in the slice, and its place in the slice's {{ tg }}x{{ tg }} grid.
    let slice = tid / {{ tg * tg }}u;
    let st = tid % {{ tg * tg }}u;
    let ly = st / {{ tg }}u;
    let lx = st % {{ tg }}u;
    // The slice's A tile ({{ tile }} rows x 16 k, k-major) and B tile (16 k x {{ tile }} columns) in workgroup memory.
    let a_at = slice * {{ tile * 32 }}u;
    let b_at = a_at + {{ tile * 16 }}u;
    let k_begin = slice * {{ kc }}u;
{%- for r in lanes %}{% for c in lanes %}
    var acc{{ r.i }}{{ c.i }} = 0.0;
{%- endfor %}{% endfor %}
    for (var k0 = 0u; k0 < {{ kc }}u; k0 = k0 + 16u) {
        for (var l = 0u; l < {{ loads }}u; l = l + 1u) {
            let e = st + l * {{ tg * tg }}u;
            let am = e / 16u;
            let ak = e % 16u;
            let ka = k_begin + k0 + ak;
            var av = 0.0;
            if (row0 + am < {{ m }}u && ka < {{ k }}u && k0 + ak < {{ kc }}u) {
                av = a[a_base + (row0 + am) * {{ a_sm }}u + ka * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
                av = {{ a_pro }};
{%- endif %}
            }
            smem[a_at + ak * {{ tile }}u + am] = av;
            let bk = e / {{ tile }}u;
            let bn = e % {{ tile }}u;
            let kb = k_begin + k0 + bk;
            var bv = 0.0;
            if (kb < {{ k }}u && k0 + bk < {{ kc }}u && col0 + bn < {{ n }}u) {
                bv = {{ b_var }}[b_base + kb * {{ b_sk }}u + (col0 + bn) * {{ b_sn }}u];
{%- if !b_pro.is_empty() %}
                bv = {{ b_pro }};
{%- endif %}
            }
            smem[b_at + bk * {{ tile }}u + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
{%- for r in lanes %}
            let ar{{ r.i }} = smem[a_at + kk * {{ tile }}u + ly + {{ r.off }}u];
            let br{{ r.i }} = smem[b_at + kk * {{ tile }}u + lx + {{ r.off }}u];
{%- endfor %}
{%- for r in lanes %}{% for c in lanes %}
            acc{{ r.i }}{{ c.i }} = fma(ar{{ r.i }}, br{{ c.i }}, acc{{ r.i }}{{ c.i }});
{%- endfor %}{% endfor %}
        }
        workgroupBarrier();
    }
{%- if slices > 1 %}
    // Slices 1.. leave their partial tiles in workgroup memory; slice 0 adds them up and stores.
    if (slice > 0u) {
{%- for r in lanes %}{% for c in lanes %}
        smem[(slice - 1u) * {{ tile * tile }}u + (ly + {{ r.off }}u) * {{ tile }}u + lx + {{ c.off }}u] = acc{{ r.i }}{{ c.i }};
{%- endfor %}{% endfor %}
    }
    workgroupBarrier();
    if (slice > 0u) {
        return;
    }
    for (var s = 0u; s < {{ slices - 1 }}u; s = s + 1u) {
{%- for r in lanes %}{% for c in lanes %}
        acc{{ r.i }}{{ c.i }} = acc{{ r.i }}{{ c.i }} + smem[s * {{ tile * tile }}u + (ly + {{ r.off }}u) * {{ tile }}u + lx + {{ c.off }}u];
{%- endfor %}{% endfor %}
    }
{%- endif %}
{%- for r in lanes %}{% for c in lanes %}
    {
        let m = row0 + ly + {{ r.off }}u;
        let n = col0 + lx + {{ c.off }}u;
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
