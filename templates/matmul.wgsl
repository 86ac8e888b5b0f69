{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
// Tiled matrix product: a {{ t.tile }}x{{ t.tile }} output tile per workgroup of {{ t.threads }} threads in {{ t.slices }} slice(s) of
// {{ t.tgy }}x{{ t.tg }}, {{ t.rlanes.len() }}x{{ t.clanes.len() }} outputs per thread held in registers (unrolled, so no array is spilled to local
// memory), K in steps of {{ t.ks }} through workgroup memory. {% if t.slices > 1 %}Each slice takes its own {{ t.kc }} of K and the
// slices' partial tiles are summed at the end, so a product with few output tiles still keeps 256 threads busy
// per tile. {% endif %}A and B are read through strides, so transposes cost nothing{% if a4 && b4 %}, four elements a load along
// their contiguous axes{% else if a4 %}, A four elements a load along its contiguous axis{% else if b4 %}, B four elements a load along
// its contiguous axis{% endif %}.{% if im2col.is_some() %} This one is a
// convolution computed as a product (implicit GEMM): A is the weight [M, C·kh·kw], B the input's im2col matrix
// [C·kh·kw, oh·ow] gathered as it is loaded, never stored.{% endif %}{% if seg2.is_some() %} A second convolution
// with the same output is summed in: its weight and input continue A and B along K.{% endif %}{% if dw.is_some() %} B is a
// depthwise convolution's output, computed as it is loaded and never stored.{% endif %}

{% if !a4 -%}
// One element of the slice's A tile for k-step k0: element e of the tile ({{ t.tile }} rows x {{ t.ks }} k).
{%- if a_mmajor %}
// A's rows are contiguous in memory (a transposed operand): neighbouring threads take neighbouring rows.
{%- endif %}
fn load_a(a_base: u32, row0: u32, k_begin: u32, k0: u32, e: u32) -> f32 {
{%- if a_mmajor %}
    let am = e % {{ t.tile }}u;
    let ak = e / {{ t.tile }}u;
{%- else %}
    let am = e / {{ t.ks }}u;
    let ak = e % {{ t.ks }}u;
{%- endif %}
    let ka = k_begin + k0 + ak;
    var av = 0.0;
    if (row0 + am < {{ m }}u && ka < {{ k }}u && k0 + ak < {{ t.kc }}u) {
{%- if let Some(s) = seg2 %}
        if (ka >= {{ s.k_first }}u) {
            return {{ s.a_var }}[(row0 + am) * {{ s.a_sm }}u + ka - {{ s.k_first }}u];
        }
{%- endif %}
        av = {{ a_ld.open }}a_base + (row0 + am) * {{ a_sm }}u + ka * {{ a_sk }}u{{ a_ld.close }};
{%- if !a_pro.is_empty() %}
        av = {{ a_pro }};
{%- endif %}
    }
    return av;
}

{% endif -%}
{% macro im2col(cv, var, base, kb) %}
        // B is the im2col matrix of the convolution's input, read in place: row kb is (channel, ky, kx),
        // column the output pixel; taps that fall in the padding read zero.
        let kr = {{ kb }} % {{ cv.khw }}u;
        let p = col0 + bn;
        let iy = i32(p / {{ cv.g.ow }}u) * {{ cv.g.sy }} - {{ cv.g.pt }} + i32(kr / {{ cv.g.kw }}u) * {{ cv.g.dy }};
        let ix = i32(p % {{ cv.g.ow }}u) * {{ cv.g.sx }} - {{ cv.g.pl }} + i32(kr % {{ cv.g.kw }}u) * {{ cv.g.dx }};
        if (iy >= 0 && iy < {{ cv.g.h }} && ix >= 0 && ix < {{ cv.g.w }}) {
            bv = {{ var }}[{{ base }} + ({{ kb }} / {{ cv.khw }}u) * {{ cv.hw }}u + u32(iy * {{ cv.g.w }} + ix)];
        }
{%- endmacro -%}
{% if !b4 -%}
// One element of the slice's B tile for k-step k0: element e of the tile ({{ t.ks }} k x {{ t.tile }} columns).
{%- if b_kmajor %}
// B's columns are contiguous in memory (a transposed operand, as Gemm's transB): neighbouring threads take
// neighbouring k of one column.
{%- endif %}
fn load_b(b_base: u32, col0: u32, k_begin: u32, k0: u32, e: u32, batch: u32) -> f32 {
{%- if b_kmajor %}
    let bk = e % {{ t.ks }}u;
    let bn = e / {{ t.ks }}u;
{%- else %}
    let bk = e / {{ t.tile }}u;
    let bn = e % {{ t.tile }}u;
{%- endif %}
    let kb = k_begin + k0 + bk;
    var bv = 0.0;
    if (kb < {{ k }}u && k0 + bk < {{ t.kc }}u && col0 + bn < {{ n }}u) {
{%- if let Some(s) = seg2 %}
        if (kb >= {{ s.k_first }}u) {
            // The summed convolution's rows of K.
            let kb2 = kb - {{ s.k_first }}u;
            let b2_base = batch * {{ s.b_batch }}u;
{%- if let Some(cv) = s.im2col %}
{%- call im2col(cv, s.b_var, "b2_base", "kb2") %}{% endcall %}
{%- else %}
            bv = {{ s.b_var }}[b2_base + kb2 * {{ s.b_sk }}u + col0 + bn];
{%- endif %}
            return bv;
        }
{%- endif %}
{%- if let Some(cv) = im2col %}
{%- call im2col(cv, b_var, "b_base", "kb") %}{% endcall %}
{%- else if let Some(dw) = dw %}
        // B is a depthwise convolution's output, computed here from its input: channel kb over its window at
        // output pixel col0 + bn (taps in the padding read zero), biased, then its scalar epilogue.
        let p = col0 + bn;
        let oy = i32(p / {{ dw.win.g.ow }}u) * {{ dw.win.g.sy }} - {{ dw.win.g.pt }};
        let ox = i32(p % {{ dw.win.g.ow }}u) * {{ dw.win.g.sx }} - {{ dw.win.g.pl }};
        var s = {% if dw.bias_var.is_empty() %}0.0{% else %}{{ dw.bias_var }}[kb]{% endif %};
        for (var t = 0u; t < {{ dw.win.khw }}u; t = t + 1u) {
            let iy = oy + i32(t / {{ dw.win.g.kw }}u) * {{ dw.win.g.dy }};
            let ix = ox + i32(t % {{ dw.win.g.kw }}u) * {{ dw.win.g.dx }};
            if (iy >= 0 && iy < {{ dw.win.g.h }} && ix >= 0 && ix < {{ dw.win.g.w }}) {
                s = fma({{ b_var }}[b_base + kb * {{ dw.win.hw }}u + u32(iy * {{ dw.win.g.w }} + ix)], {{ dw.w_var }}[kb * {{ dw.win.khw }}u + t], s);
            }
        }
        bv = {{ dw.post }};
{%- else %}
        bv = {{ b_ld.open }}b_base + kb * {{ b_sk }}u + (col0 + bn) * {{ b_sn }}u{{ b_ld.close }};
{%- endif %}
{%- if !b_pro.is_empty() %}
        bv = {{ b_pro }};
{%- endif %}
    }
    return bv;
}

{% endif -%}
{% if a4 -%}
// Four neighbouring elements of the slice's A tile for k-step k0 in one load: vec4 q of the tile, along A's
// contiguous axis ({% if a_mmajor %}four rows of one k{% else %}four k of one row{% endif %}), which the product's sizes and strides keep in whole vec4s.
fn load_a4(a_base: u32, row0: u32, k_begin: u32, k0: u32, q: u32) -> vec4<f32> {
{%- if a_mmajor %}
    let am = (q % {{ t.tile4 }}u) * 4u;
    let ak = q / {{ t.tile4 }}u;
{%- else %}
    let am = q / {{ t.ks4 }}u;
    let ak = (q % {{ t.ks4 }}u) * 4u;
{%- endif %}
    let ka = k_begin + k0 + ak;
    if (row0 + am < {{ m }}u && ka < {{ k }}u && k0 + ak < {{ t.kc }}u) {
        return {{ a_ld4.open }}a_base + (row0 + am) * {{ a_sm }}u + ka * {{ a_sk }}u{{ a_ld4.close }};
    }
    return vec4<f32>(0.0);
}

{% endif -%}
{% if b4 -%}
// Four neighbouring elements of the slice's B tile for k-step k0 in one load: vec4 q of the tile, along B's
// contiguous axis ({% if b_kmajor %}four k of one column{% else %}four columns of one k{% endif %}).
fn load_b4(b_base: u32, col0: u32, k_begin: u32, k0: u32, q: u32) -> vec4<f32> {
{%- if b_kmajor %}
    let bk = (q % {{ t.ks4 }}u) * 4u;
    let bn = q / {{ t.ks4 }}u;
{%- else %}
    let bk = q / {{ t.tile4 }}u;
    let bn = (q % {{ t.tile4 }}u) * 4u;
{%- endif %}
    let kb = k_begin + k0 + bk;
    if (kb < {{ k }}u && k0 + bk < {{ t.kc }}u && col0 + bn < {{ n }}u) {
        return {{ b_ld4.open }}b_base + kb * {{ b_sk }}u + (col0 + bn) * {{ b_sn }}u{{ b_ld4.close }};
    }
    return vec4<f32>(0.0);
}

{% endif -%}
{% if t.vec > 1 -%}
// Workgroup memory holds vec4s: a thread reads its runs of four rows of A and four columns of B at once. Each
// staged k-row is {{ t.row_len }} floats ({{ t.tile }} and 4 of padding), so that a transposed operand's stores, {{ t.ks }} k-rows
// apart, fall in different banks.
var<workgroup> smem: array<vec4<f32>, {{ t.smem_vec4s }}>;

fn stage(i: u32, v: f32) {
    smem[i / 4u][i % 4u] = v;
}

fn staged(i: u32) -> f32 {
    return smem[i / 4u][i % 4u];
}
{%- else -%}
var<workgroup> smem: array<f32, {{ t.smem_len }}>;
{%- endif %}

@compute @workgroup_size({{ t.threads }})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let batch = wid.z;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let row0 = wid.y * {{ t.tile }}u;
    let col0 = wid.x * {{ t.tile }}u;
    // This thread's slice, its index in the slice, and its place in the slice's {{ t.tgy }}x{{ t.tg }} grid.
    let slice = tid / {{ t.slice_threads }}u;
    let st = tid % {{ t.slice_threads }}u;
    let ly = st / {{ t.tg }}u;
    let lx = st % {{ t.tg }}u;
{%- if t.vec > 1 %}
{%- if t.rruns == t.cruns %}
    // Its outputs: {{ t.rruns }} run(s) of {{ t.vec }} rows from row {{ t.vec }}·ly and of {{ t.vec }} columns from column {{ t.vec }}·lx{% if t.rruns > 1 %}, {{ t.rrun_stride }} apart{% endif %}.
{%- else %}
    // Its outputs: {{ t.rruns }} run(s) of {{ t.vec }} rows from row {{ t.vec }}·ly{% if t.rruns > 1 %}, {{ t.rrun_stride }} apart{% endif %}, and {{ t.cruns }} of {{ t.vec }} columns from column {{ t.vec }}·lx{% if t.cruns > 1 %}, {{ t.crun_stride }} apart{% endif %}.
{%- endif %}
{%- endif %}
    // The slice's A tile ({{ t.tile }} rows x {{ t.ks }} k, k-major) and B tile ({{ t.ks }} k x {{ t.tile }} columns) in workgroup memory.
    let a_at = slice * {{ t.steps_len }}u;
    let b_at = a_at + {{ t.step_len }}u;
    let k_begin = slice * {{ t.kc }}u;
{%- for r in t.rlanes %}{% for c in t.clanes %}
    var acc{{ r.i }}{{ c.i }} = 0.0;
{%- endfor %}{% endfor %}
    // Software pipelining: the next k-step's tiles are fetched into registers while this one's are multiplied
    // out of workgroup memory, so global-memory latency overlaps arithmetic even with one workgroup per SM.
{%- if a4 %}
    // A's vec4 and where its four elements are staged ({{ a_put_step }} apart).
    var pa = load_a4(a_base, row0, k_begin, 0u, st);
{%- if a_mmajor %}
    let a_put = a_at + (st / {{ t.tile4 }}u) * {{ t.row_len }}u + (st % {{ t.tile4 }}u) * 4u;
{%- else %}
    let a_put = a_at + (st % {{ t.ks4 }}u) * 4u * {{ t.row_len }}u + st / {{ t.ks4 }}u;
{%- endif %}
{%- endif %}
{%- if b4 %}
    // B's vec4 and where its four elements are staged ({{ b_put_step }} apart).
    var pb = load_b4(b_base, col0, k_begin, 0u, st);
{%- if b_kmajor %}
    let b_put = b_at + (st % {{ t.ks4 }}u) * 4u * {{ t.row_len }}u + st / {{ t.ks4 }}u;
{%- else %}
    let b_put = b_at + (st / {{ t.tile4 }}u) * {{ t.row_len }}u + (st % {{ t.tile4 }}u) * 4u;
{%- endif %}
{%- endif %}
{%- for l in t.load_lanes %}
{%- if !a4 %}
    var pa{{ l.i }} = load_a(a_base, row0, k_begin, 0u, st + {{ l.off }}u);
{%- endif %}
{%- if !b4 %}
    var pb{{ l.i }} = load_b(b_base, col0, k_begin, 0u, st + {{ l.off }}u, batch);
{%- endif %}
{%- endfor %}
{%- if rms.is_some() %}
    // The folded RMSNormalization: this thread's share of each A row's sum of squares (element e of a k-step's
    // tile lies in row e / {{ t.ks }}{% if a4 %}; this thread's vec4 holds elements 4·st to 4·st + 3, of one row{% endif %}).
{%- if a4 %}
    var ssq = vec4<f32>(0.0);
{%- else %}
{%- for l in t.load_lanes %}
    var ssq{{ l.i }} = 0.0;
{%- endfor %}
{%- endif %}
{%- endif %}
    for (var k0 = 0u; k0 < {{ t.kc }}u; k0 = k0 + {{ t.ks }}u) {
{%- if let Some(r) = rms %}
        // The norm's weights scale A's k-columns as they are staged (the sums of squares take A as loaded).
{%- if a4 %}
        // The thread's vec4 holds k = 4·(st % {{ t.ks4 }}) to 3 more of a row; past K, A is zero, so the index is clamped.
        let gk = k_begin + k0 + (st % {{ t.ks4 }}u) * 4u;
        let g = vec4<f32>({{ r.scale }}[min(gk, {{ r.last_k }}u)], {{ r.scale }}[min(gk + 1u, {{ r.last_k }}u)], {{ r.scale }}[min(gk + 2u, {{ r.last_k }}u)], {{ r.scale }}[min(gk + 3u, {{ r.last_k }}u)]);
        ssq = fma(pa, pa, ssq);
{%- else %}
        // Every lane of a thread loads k = st % {{ t.ks }} of a row (lanes are a multiple of {{ t.ks }} elements apart);
        // past K, A is zero, so the index is clamped.
        let g = {{ r.scale }}[min(k_begin + k0 + st % {{ t.ks }}u, {{ r.last_k }}u)];
{%- endif %}
{%- endif %}
{%- if a4 %}
{%- if t.vec > 1 && a_put_step == 1 %}
        smem[a_put / 4u] = pa{% if rms.is_some() %} * g{% endif %};
{%- else %}
{%- for j in a_puts %}
{%- if t.vec > 1 %}
        stage(a_put + {{ j.off }}u, pa[{{ j.i }}]{% if rms.is_some() %} * g[{{ j.i }}]{% endif %});
{%- else %}
        smem[a_put + {{ j.off }}u] = pa[{{ j.i }}]{% if rms.is_some() %} * g[{{ j.i }}]{% endif %};
{%- endif %}
{%- endfor %}
{%- endif %}
{%- endif %}
{%- if b4 %}
{%- if t.vec > 1 && b_put_step == 1 %}
        smem[b_put / 4u] = pb;
{%- else %}
{%- for j in b_puts %}
{%- if t.vec > 1 %}
        stage(b_put + {{ j.off }}u, pb[{{ j.i }}]);
{%- else %}
        smem[b_put + {{ j.off }}u] = pb[{{ j.i }}];
{%- endif %}
{%- endfor %}
{%- endif %}
{%- endif %}
{%- for l in t.load_lanes %}
{%- if a4 %}
{%- else if t.vec > 1 %}
{%- if a_mmajor %}
        stage(a_at + ((st + {{ l.off }}u) / {{ t.tile }}u) * {{ t.row_len }}u + (st + {{ l.off }}u) % {{ t.tile }}u, pa{{ l.i }});
{%- else %}
        stage(a_at + ((st + {{ l.off }}u) % {{ t.ks }}u) * {{ t.row_len }}u + (st + {{ l.off }}u) / {{ t.ks }}u, pa{{ l.i }}{% if rms.is_some() %} * g{% endif %});
{%- endif %}
{%- else if a_mmajor %}
        smem[a_at + st + {{ l.off }}u] = pa{{ l.i }};
{%- else %}
        smem[a_at + ((st + {{ l.off }}u) % {{ t.ks }}u) * {{ t.tile }}u + (st + {{ l.off }}u) / {{ t.ks }}u] = pa{{ l.i }}{% if rms.is_some() %} * g{% endif %};
{%- endif %}
{%- if b4 %}
{%- else if t.vec > 1 %}
{%- if b_kmajor %}
        stage(b_at + ((st + {{ l.off }}u) % {{ t.ks }}u) * {{ t.row_len }}u + (st + {{ l.off }}u) / {{ t.ks }}u, pb{{ l.i }});
{%- else %}
        stage(b_at + ((st + {{ l.off }}u) / {{ t.tile }}u) * {{ t.row_len }}u + (st + {{ l.off }}u) % {{ t.tile }}u, pb{{ l.i }});
{%- endif %}
{%- else if b_kmajor %}
        smem[b_at + ((st + {{ l.off }}u) % {{ t.ks }}u) * {{ t.tile }}u + (st + {{ l.off }}u) / {{ t.ks }}u] = pb{{ l.i }};
{%- else %}
        smem[b_at + st + {{ l.off }}u] = pb{{ l.i }};
{%- endif %}
{%- if rms.is_some() && !a4 %}
        ssq{{ l.i }} = fma(pa{{ l.i }}, pa{{ l.i }}, ssq{{ l.i }});
{%- endif %}
{%- endfor %}
        workgroupBarrier();
        if (k0 + {{ t.ks }}u < {{ t.kc }}u) {
{%- if a4 %}
            pa = load_a4(a_base, row0, k_begin, k0 + {{ t.ks }}u, st);
{%- endif %}
{%- if b4 %}
            pb = load_b4(b_base, col0, k_begin, k0 + {{ t.ks }}u, st);
{%- endif %}
{%- for l in t.load_lanes %}
{%- if !a4 %}
            pa{{ l.i }} = load_a(a_base, row0, k_begin, k0 + {{ t.ks }}u, st + {{ l.off }}u);
{%- endif %}
{%- if !b4 %}
            pb{{ l.i }} = load_b(b_base, col0, k_begin, k0 + {{ t.ks }}u, st + {{ l.off }}u, batch);
{%- endif %}
{%- endfor %}
        }
        // The k-step unrolled: no loop counter, and every workgroup-memory index a constant offset.
{%- for kk in 0..t.ks %}
        {
            let kk = {{ kk }}u;
{%- if t.vec > 1 %}
{%- for p in t.run_pairs %}
{%- if let Some(off) = p.r_off %}
            let ar4_{{ p.i }} = smem[a_at / 4u + kk * {{ t.row_vec4s }}u + ly + {{ off }}u];
{%- endif %}
{%- if let Some(off) = p.c_off %}
            let br4_{{ p.i }} = smem[b_at / 4u + kk * {{ t.row_vec4s }}u + lx + {{ off }}u];
{%- endif %}
{%- endfor %}
{%- for r in t.rlanes %}{% for c in t.clanes %}
            acc{{ r.i }}{{ c.i }} = fma(ar4_{{ r.run }}.{{ r.comp }}, br4_{{ c.run }}.{{ c.comp }}, acc{{ r.i }}{{ c.i }});
{%- endfor %}{% endfor %}
{%- else %}
{%- for r in t.rlanes %}
            let ar{{ r.i }} = smem[a_at + kk * {{ t.tile }}u + ly + {{ r.off }}u];
{%- if let Some(off) = r.col_off %}
            let br{{ r.i }} = smem[b_at + kk * {{ t.tile }}u + lx + {{ off }}u];
{%- endif %}
{%- endfor %}
{%- for r in t.rlanes %}{% for c in t.clanes %}
            acc{{ r.i }}{{ c.i }} = fma(ar{{ r.i }}, br{{ c.i }}, acc{{ r.i }}{{ c.i }});
{%- endfor %}{% endfor %}
{%- endif %}
        }
{%- endfor %}
        workgroupBarrier();
    }
{%- if let Some(r) = rms %}
    // Each row's sum of squares over all of K (every slice, {{ t.ks }} partials each), then its inverse RMS.
{%- if a4 %}
{%- for j in a_puts %}
{%- if t.vec > 1 %}
    stage(slice * {{ t.step_len }}u + st * 4u + {{ j.i }}u, ssq[{{ j.i }}]);
{%- else %}
    smem[slice * {{ t.step_len }}u + st * 4u + {{ j.i }}u] = ssq[{{ j.i }}];
{%- endif %}
{%- endfor %}
{%- else %}
{%- for l in t.load_lanes %}
{%- if t.vec > 1 %}
    stage(slice * {{ t.step_len }}u + st + {{ l.off }}u, ssq{{ l.i }});
{%- else %}
    smem[slice * {{ t.step_len }}u + st + {{ l.off }}u] = ssq{{ l.i }};
{%- endif %}
{%- endfor %}
{%- endif %}
    workgroupBarrier();
    if (tid < {{ t.tile }}u) {
        var total = 0.0;
        for (var s = 0u; s < {{ t.ssq_terms }}u; s = s + 1u) {
{%- if t.vec > 1 %}
            total = total + staged((s / {{ t.ks }}u) * {{ t.step_len }}u + tid * {{ t.ks }}u + s % {{ t.ks }}u);
{%- else %}
            total = total + smem[(s / {{ t.ks }}u) * {{ t.step_len }}u + tid * {{ t.ks }}u + s % {{ t.ks }}u];
{%- endif %}
        }
{%- if t.vec > 1 %}
        stage({{ t.rinv_at }}u + tid, 1.0 / sqrt(total / {{ r.k }}.0 + {{ r.eps }}));
{%- else %}
        smem[{{ t.rinv_at }}u + tid] = 1.0 / sqrt(total / {{ r.k }}.0 + {{ r.eps }});
{%- endif %}
    }
    workgroupBarrier();
{%- for q in t.rlanes %}
{%- if t.vec > 1 %}
    let rinv{{ q.i }} = staged({{ t.rinv_at }}u + ly * {{ t.vec }}u + {{ q.off }}u);
{%- else %}
    let rinv{{ q.i }} = smem[{{ t.rinv_at }}u + ly + {{ q.off }}u];
{%- endif %}
{%- endfor %}
    workgroupBarrier();
{%- endif %}
{%- if t.slices > 1 %}
    // Slices 1.. leave their partial tiles in workgroup memory; slice 0 adds them up and stores.
    if (slice > 0u) {
{%- for r in t.rlanes %}{% for c in t.clanes %}
{%- if t.vec > 1 %}
        stage((slice - 1u) * {{ t.tile_len }}u + (ly * {{ t.vec }}u + {{ r.off }}u) * {{ t.tile }}u + lx * {{ t.vec }}u + {{ c.off }}u, acc{{ r.i }}{{ c.i }});
{%- else %}
        smem[(slice - 1u) * {{ t.tile_len }}u + (ly + {{ r.off }}u) * {{ t.tile }}u + lx + {{ c.off }}u] = acc{{ r.i }}{{ c.i }};
{%- endif %}
{%- endfor %}{% endfor %}
    }
    workgroupBarrier();
    if (slice > 0u) {
        return;
    }
    for (var s = 0u; s < {{ t.slices_after }}u; s = s + 1u) {
{%- for r in t.rlanes %}{% for c in t.clanes %}
{%- if t.vec > 1 %}
        acc{{ r.i }}{{ c.i }} = acc{{ r.i }}{{ c.i }} + staged(s * {{ t.tile_len }}u + (ly * {{ t.vec }}u + {{ r.off }}u) * {{ t.tile }}u + lx * {{ t.vec }}u + {{ c.off }}u);
{%- else %}
        acc{{ r.i }}{{ c.i }} = acc{{ r.i }}{{ c.i }} + smem[s * {{ t.tile_len }}u + (ly + {{ r.off }}u) * {{ t.tile }}u + lx + {{ c.off }}u];
{%- endif %}
{%- endfor %}{% endfor %}
    }
{%- endif %}
{%- for r in t.rlanes %}{% for c in t.clanes %}
    {
        let m = row0 + ly{% if t.vec > 1 %} * {{ t.vec }}u{% endif %} + {{ r.off }}u;
        let n = col0 + lx{% if t.vec > 1 %} * {{ t.vec }}u{% endif %} + {{ c.off }}u;
        if (m < {{ m }}u && n < {{ n }}u) {
            var v = {{ alpha }} * acc{{ r.i }}{{ c.i }}{% if rms.is_some() %} * rinv{{ r.i }}{% endif %};
{%- if has_bias %}
{%- if let Some((groups, rows)) = bias_groups %}
            v = v + {{ beta }} * {{ bias_ld.open }}(batch % {{ groups }}u) * {{ rows }}u + m * {{ bias_sm }}u + n * {{ bias_sn }}u{{ bias_ld.close }};
{%- else %}
            v = v + {{ beta }} * {{ bias_ld.open }}m * {{ bias_sm }}u + n * {{ bias_sn }}u{{ bias_ld.close }};
{%- endif %}
{%- endif %}
{%- if let Some(s) = seg2 %}{% if !s.bias_var.is_empty() %}
            v = v + {{ s.bias_var }}[m];
{%- endif %}{% endif %}
            let o = batch * {{ mn }}u + m * {{ n }}u + n;
            {{ fu.store("o", "v") }}
        }
    }
{%- endfor %}{% endfor %}
}
