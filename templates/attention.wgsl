{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}
{%- if !loaders.is_empty() %}
// K or V is a Concat read in place: each element from the input that holds it.
{{ loaders }}
{%- endif %}
// Attention for a block of {{ rows }} query rows per workgroup of 256 threads, with an online softmax. Thread (r, c)
// owns {{ row_lanes.len() }} row(s) (r, r + 16, …) and, per tile of 64 keys, scores four neighbouring keys of each,
// 4·c to 4·c + 3 (Q·K through workgroup memory, K's four keys read as one vec4, then the score epilogue: scale,
// mask), keeps a running maximum and its share of the denominator per row, and accumulates {{ lanes.len() }}
// neighbouring value columns of the {{ dv }} per row, from column {{ lanes.len() }}·c. Scores and probabilities
// never leave the workgroup; K and V are loaded once per block of rows. Everything per thread is unrolled into
// scalars; the loops over a step's 16 columns and a chunk's keys are left as loops (the driver's compiler unrolls
// them where that pays, and a fully unrolled body makes Tint and SwiftShader slow to compile).
var<workgroup> q_tile: array<f32, {{ q_tile_len }}>;
// 16 columns of K by 64 keys (each column's keys padded to {{ k_row }} floats, so the stores of one column's
// neighbouring threads spread over the banks), then {{ v_chunk }} keys by {{ dv_pad }} columns of V: one array of
// vec4s, since the two are never live at once.
var<workgroup> kv_tile: array<vec4<f32>, {{ kv_vec4s }}>;
var<workgroup> p_tile: array<f32, {{ p_tile_len }}>;
{%- if let Some(sk) = skip %}
// Key tiles some row of the block may see (one bit a tile of 64 keys), or-ed by every thread into `live_any`
// and read back uniformly from `live`; `redo` says that some row's keys must all be scored after all.
var<workgroup> live_bits: array<u32, 256>;
var<workgroup> live_any: array<atomic<u32>, {{ sk.words.len() }}>;
var<workgroup> live: array<u32, {{ sk.words.len() }}>;
var<workgroup> redo: u32;
{%- endif %}

fn stage_kv(i: u32, v: f32) {
    kv_tile[i / 4u][i % 4u] = v;
}
{% macro load_qk(d0) %}
{%- for i in row_lanes %}
            qa{{ i.i }} = 0.0;
            if (m{{ i.i }} < {{ m }}u && {{ d0 }} + c < {{ dk }}u) {
                var av = a[a_base + m{{ i.i }} * {{ a_sm }}u + ({{ d0 }} + c) * {{ a_sk }}u];
{%- if !a_pro.is_empty() %}
                av = {{ a_pro }};
{%- endif %}
                qa{{ i.i }} = av;
            }
{%- endfor %}
{%- for j in k_loads %}
            kb{{ j.i }} = 0.0;
            if (n0 + r + {{ j.off }}u < {{ n }}u && {{ d0 }} + c < {{ dk }}u) {
{%- if let Some(args) = b_cat %}
                var bv = concat_b(n0 + r + {{ j.off }}u, {{ d0 }} + c{{ args }});
{%- else %}
                var bv = {{ b_ld.open }}b_base + ({{ d0 }} + c) * {{ b_sk }}u + (n0 + r + {{ j.off }}u) * {{ b_sn }}u{{ b_ld.close }};
{%- endif %}
{%- if !b_pro.is_empty() %}
                bv = {{ b_pro }};
{%- endif %}
                kb{{ j.i }} = bv;
            }
{%- endfor %}
{%- endmacro %}
{% macro load_v(j0) %}
{%- for l in v_loads %}
            vb{{ l.i }} = 0.0;
            {
                let e = tid + {{ l.off }}u;
                let jj = e / {{ dv_pad }}u;
                let col = e % {{ dv_pad }}u;
                if (e < {{ v_tile_len }}u && n0 + {{ j0 }} + jj < {{ n }}u && col < {{ dv }}u) {
{%- if let Some(args) = v_cat %}
                    vb{{ l.i }} = concat_v(n0 + {{ j0 }} + jj, col{{ args }});
{%- else %}
                    vb{{ l.i }} = {{ v_ld.open }}v_base + (n0 + {{ j0 }} + jj) * {{ v_sk }}u + col * {{ v_sn }}u{{ v_ld.close }};
{%- endif %}
                }
            }
{%- endfor %}
{%- endmacro %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let block = wid.y * {{ groups_x }}u + wid.x;
    if (block >= {{ blocks }}u) {
        return;
    }
    let batch = block / {{ m_blocks }}u;
    let r = tid / 16u;
    let c = tid % 16u;
    // The first of this thread's keys in a tile, and of its value columns.
    let c4 = c * 4u;
    let cl = c * {{ lanes.len() }}u;
    let row0 = (block % {{ m_blocks }}u) * {{ rows }}u;
    let a_base = {{ a_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.a_stride }}u{% endfor %};
    let b_base = {{ b_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.b_stride }}u{% endfor %};
    let v_base = {{ v_off }}u{% for d in batch %} + ((batch / {{ d.div }}u) % {{ d.extent }}u) * {{ d.v_stride }}u{% endfor %};
{%- if !cat_bases.is_empty() %}
    // Each part's base of a Concat read in place, by key.
{{ cat_bases }}
{%- endif %}
    let neg_inf = bitcast<f32>(non_finite_bits.y);
{%- for i in row_lanes %}
    let m{{ i.i }} = row0 + r + {{ i.off }}u;
    var mx{{ i.i }} = neg_inf;
    // This thread's share of the row's softmax denominator (the row's threads rescale by the same factor).
    var l{{ i.i }} = 0.0;
{%- for o in lanes %}
    var acc{{ i.i }}_{{ o.i }} = 0.0;
{%- endfor %}
{%- endfor %}
{%- if let Some(sk) = skip %}
    // Which key tiles hold a key that some row of the block may see: the score epilogue at v = ±1e20 does not give
    // at most -1e30 at both (it is monotone in v, so every score in that range is masked where both are; NaN counts
    // as seen).
{%- for w in sk.words %}
    {
        var bits = 0u;
        for (var t = 0u; t < {{ w.tiles }}u; t = t + 1u) {
            let k0 = ({{ w.first }}u + t) * 64u;
            var seen = false;
{%- for i in row_lanes %}{% for j in quads %}
            if (k0 + c4 + {{ j.off }}u < {{ n }}u && m{{ i.i }} < {{ m }}u) {
                let at = batch * {{ mn }}u + m{{ i.i }} * {{ n }}u + k0 + c4 + {{ j.off }}u;
                let hi = fused(1e20, at);
                let lo = fused(-1e20, at);
                seen = seen || !(hi <= -1e30 && lo <= -1e30);
            }
{%- endfor %}{% endfor %}
            bits = bits | select(0u, 1u << t, seen);
        }
        if (bits != 0u) {
            atomicOr(&live_any[{{ w.i }}], bits);
        }
    }
{%- endfor %}
    workgroupBarrier();
    if (tid == 0u) {
{%- for w in sk.words %}
        live[{{ w.i }}] = atomicLoad(&live_any[{{ w.i }}]);
{%- endfor %}
    }
{%- for w in sk.words %}
    let live{{ w.i }} = workgroupUniformLoad(&live[{{ w.i }}]);
{%- endfor %}
    // Whether sweep 0 leaves any tile out: if not, it scores every key and there is nothing to score again.
    let skips = false{% for w in sk.words %} || live{{ w.i }} != {{ w.all }}u{% endfor %};
    // Sweep 0 scores the live tiles only; sweep 1, every tile, where a row's maximum stayed below -1e29 (then a
    // skipped tile's exp(s - max) might not vanish).
    for (var sweep = 0u; sweep < 2u; sweep = sweep + 1u) {
{%- for i in row_lanes %}
    mx{{ i.i }} = neg_inf;
    l{{ i.i }} = 0.0;
{%- for o in lanes %}
    acc{{ i.i }}_{{ o.i }} = 0.0;
{%- endfor %}
{%- endfor %}
{%- endif %}
    for (var n0 = 0u; n0 < {{ n }}u; n0 = n0 + 64u) {
{%- if let Some(sk) = skip %}
        let word0 = live0;
{%- for w in sk.words %}{% if w.i > 0 %}
        let word{{ w.i }} = select(word{{ w.prev }}, live{{ w.i }}, n0 >= {{ w.first_key }}u);
{%- endif %}{% endfor %}
        if (sweep == 0u && (word{{ sk.last }} & (1u << ((n0 / 64u) % 32u))) == 0u) {
            continue;
        }
{%- endif %}
{%- for i in row_lanes %}{% for j in quads %}
        var dot{{ i.i }}_{{ j.i }} = 0.0;
{%- endfor %}{% endfor %}
        // Software pipelining: each step's columns of Q and K (and of V below) are fetched into registers while
        // the step before is multiplied out of workgroup memory.
{%- for i in row_lanes %}
        var qa{{ i.i }} = 0.0;
{%- endfor %}
{%- for j in k_loads %}
        var kb{{ j.i }} = 0.0;
{%- endfor %}
        {
            // The first step's.
{%- call load_qk("0u") %}{% endcall %}
        }
        for (var d0 = 0u; d0 < {{ dk }}u; d0 = d0 + 16u) {
            // Q: {{ rows }} rows x 16 columns; K: 64 keys x 16 columns, column by column.
{%- for i in row_lanes %}
            q_tile[tid + {{ i.t }}u] = qa{{ i.i }};
{%- endfor %}
{%- for j in k_loads %}
            stage_kv(c * {{ k_row }}u + r + {{ j.off }}u, kb{{ j.i }});
{%- endfor %}
            workgroupBarrier();
            if (d0 + 16u < {{ dk }}u) {
{%- call load_qk("d0 + 16u") %}{% endcall %}
            }
            for (var dd = 0u; dd < 16u; dd = dd + 1u) {
                let k4 = kv_tile[dd * {{ k_row4 }}u + c];
{%- for i in row_lanes %}
                let q{{ i.i }} = q_tile[(r + {{ i.off }}u) * 16u + dd];
{%- for j in quads %}
                dot{{ i.i }}_{{ j.i }} = fma(q{{ i.i }}, k4[{{ j.i }}], dot{{ i.i }}_{{ j.i }});
{%- endfor %}
{%- endfor %}
            }
            workgroupBarrier();
        }
        // V's first {{ v_chunk }} keys, fetched while the scores are turned into probabilities.
{%- for l in v_loads %}
        var vb{{ l.i }} = 0.0;
{%- endfor %}
        {
{%- call load_v("0u") %}{% endcall %}
        }
        // Scores of keys 4·c to 4·c + 3 of each row: epilogue, or -inf past the ends. Then each row's maximum over
        // its 16 threads, each thread reading the row's 16 partial maxima from q_tile (free until the next tile).
{%- for i in row_lanes %}
        var tmax{{ i.i }} = neg_inf;
{%- for j in quads %}
        var s{{ i.i }}_{{ j.i }} = neg_inf;
        if (n0 + c4 + {{ j.off }}u < {{ n }}u && m{{ i.i }} < {{ m }}u) {
            let v = {{ alpha }} * dot{{ i.i }}_{{ j.i }};
{%- if fu.defined %}
            s{{ i.i }}_{{ j.i }} = fused(v, batch * {{ mn }}u + m{{ i.i }} * {{ n }}u + n0 + c4 + {{ j.off }}u);
{%- else %}
            s{{ i.i }}_{{ j.i }} = v;
{%- endif %}
        }
        tmax{{ i.i }} = max(tmax{{ i.i }}, s{{ i.i }}_{{ j.i }});
{%- endfor %}
        q_tile[tid + {{ i.t }}u] = tmax{{ i.i }};
{%- endfor %}
        workgroupBarrier();
{%- for i in row_lanes %}
        {
            var new_mx = mx{{ i.i }};
            for (var t = 0u; t < 16u; t = t + 1u) {
                new_mx = max(new_mx, q_tile[r * 16u + {{ i.t }}u + t]);
            }
            // While every score of the row so far is -inf, shift by 0 so exp gives 0 rather than NaN.
            let shift = select(new_mx, 0.0, new_mx == neg_inf);
            let scale = exp(mx{{ i.i }} - shift);
            l{{ i.i }} = l{{ i.i }} * scale;
{%- for j in quads %}
            let p{{ j.i }} = exp(s{{ i.i }}_{{ j.i }} - shift);
            l{{ i.i }} = l{{ i.i }} + p{{ j.i }};
            p_tile[(r + {{ i.off }}u) * 64u + c4 + {{ j.off }}u] = p{{ j.i }};
{%- endfor %}
            mx{{ i.i }} = new_mx;
{%- for o in lanes %}
            acc{{ i.i }}_{{ o.i }} = acc{{ i.i }}_{{ o.i }} * scale;
{%- endfor %}
        }
{%- endfor %}
        // P·V over the tile, V staged {{ v_chunk }} keys at a time (zeros past the last key and column; p is 0 there);
        // the first barrier also publishes the probabilities.
        for (var j0 = 0u; j0 < 64u; j0 = j0 + {{ v_chunk }}u) {
{%- for l in v_loads %}
            if (tid + {{ l.off }}u < {{ v_tile_len }}u) {
                stage_kv(tid + {{ l.off }}u, vb{{ l.i }});
            }
{%- endfor %}
            workgroupBarrier();
            if (j0 + {{ v_chunk }}u < 64u) {
{%- call load_v("j0 + " ~ v_chunk ~ "u") %}{% endcall %}
            }
            for (var jj = 0u; jj < {{ v_chunk }}u; jj = jj + 1u) {
{%- if let Some(v4) = v_vec4s %}
                // The thread's {{ lanes.len() }} columns of key j0 + jj, {{ v4.len() }} vec4(s).
{%- for q in v4 %}
                let v4_{{ q.i }} = kv_tile[jj * {{ dv_pad4 }}u + c * {{ v4.len() }}u + {{ q.off }}u];
{%- endfor %}
{%- else %}
{%- for o in lanes %}
                let vi{{ o.i }} = jj * {{ dv_pad }}u + cl + {{ o.i }}u;
{%- endfor %}
{%- endif %}
{%- for i in row_lanes %}
                let pj{{ i.i }} = p_tile[(r + {{ i.off }}u) * 64u + j0 + jj];
{%- for o in lanes %}
                acc{{ i.i }}_{{ o.i }} = fma(pj{{ i.i }}, {{ o.read }}, acc{{ i.i }}_{{ o.i }});
{%- endfor %}
{%- endfor %}
            }
            workgroupBarrier();
        }
    }
{%- if skip.is_some() %}
    // A real row whose maximum stayed below -1e29 has its keys all scored again.
    var low = false;
{%- for i in row_lanes %}
    low = low || (m{{ i.i }} < {{ m }}u && mx{{ i.i }} < -1e29);
{%- endfor %}
    live_bits[tid] = select(0u, 1u, low);
    workgroupBarrier();
    if (tid == 0u) {
        var any = 0u;
        for (var t = 0u; t < 256u; t = t + 16u) {
            any = any | live_bits[t];
        }
        redo = any;
    }
    let again = workgroupUniformLoad(&redo);
    if (sweep == 1u || again == 0u || !skips) {
        break;
    }
    }
{%- endif %}
    // Each row's denominator over its 16 threads.
{%- for i in row_lanes %}
    q_tile[tid + {{ i.t }}u] = l{{ i.i }};
{%- endfor %}
    workgroupBarrier();
{%- for i in row_lanes %}
    if (m{{ i.i }} < {{ m }}u) {
        var denom = 0.0;
        for (var t = 0u; t < 16u; t = t + 1u) {
            denom = denom + q_tile[r * 16u + {{ i.t }}u + t];
        }
{%- if nan_to_zero %}
        // Every score -inf: the softmax is NaN, which the model's Where(IsNaN(p), 0, p) turns into zeros.
        let inv = select(1.0 / denom, 0.0, denom == 0.0);
{%- else %}
        let inv = 1.0 / denom;
{%- endif %}
        let o = (batch * {{ m }}u + m{{ i.i }}) * {{ dv }}u + cl;
{%- for o in lanes %}
        if (cl + {{ o.i }}u < {{ dv }}u) {
            let oo = o + {{ o.i }}u;
            out[{{ fu.at("oo") }}] = acc{{ i.i }}_{{ o.i }} * inv;
        }
{%- endfor %}
    }
{%- endfor %}
}
