{% include "header.wgsl" %}
// Sample: one token per row of {{ n }} logits; one workgroup of 256 threads per row. Keeps the logits at or above
// the k-th largest (all of them when k is 0 or at least {{ n }}), found by a radix select over order-preserving
// keys, 4 bits a round; then picks argmax(logit / temperature + Gumbel noise), an exact draw from the softmax of
// the kept logits. The noise hashes (seed, counter, index), so a seed draws the same tokens on every device; a
// temperature of 0 or less picks the largest kept logit. Ties go to the first index.
var<workgroup> bins: array<atomic<u32>, 16>;
var<workgroup> found: array<u32, 2>;
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

// Float order as unsigned order (NaNs aside).
fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// PCG's output permutation as a hash (Jarzynski and Olano, "Hash Functions for GPU Rendering", 2020).
fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
    let base = row * {{ n }}u;
    let t = temperature[0];
    let k = u32(max(i32(params[0]), 0));
    let stream = pcg(pcg(bitcast<u32>(params[1])) ^ bitcast<u32>(counter[{{ counter_last }}]));

    // The k-th largest key, 4 bits a round from the top: `prefix` holds the bits decided so far and `want` how
    // many of the keys sharing them still rank above the k-th.
    var prefix = 0u;
    if (k > 0u && k < {{ n }}u) {
        var want = k;
        // Each thread's digit counts, zeroed as they are flushed (a var declared in the loop's body was not zeroed
        // again each round under Chromium's SwiftShader, as WGSL requires).
        var counts: array<u32, 16>;
        for (var r = 0u; r < 8u; r = r + 1u) {
            let shift = 28u - 4u * r;
            let high = select(0xFFFFFFFFu << (shift + 4u), 0u, r == 0u);
            if (lid < 16u) {
                atomicStore(&bins[lid], 0u);
            }
            workgroupBarrier();
            for (var j = lid; j < {{ n }}u; j = j + 256u) {
                let c = key(x[base + j]);
                if (((c ^ prefix) & high) == 0u) {
                    let d = (c >> shift) & 15u;
                    counts[d] = counts[d] + 1u;
                }
            }
            for (var d = 0u; d < 16u; d = d + 1u) {
                if (counts[d] > 0u) {
                    atomicAdd(&bins[d], counts[d]);
                    counts[d] = 0u;
                }
            }
            workgroupBarrier();
            if (lid == 0u) {
                var above = 0u;
                var d = 15u;
                loop {
                    let c = atomicLoad(&bins[d]);
                    if (above + c >= want || d == 0u) {
                        found[0] = prefix | (d << shift);
                        found[1] = want - above;
                        break;
                    }
                    above = above + c;
                    d = d - 1u;
                }
            }
            workgroupBarrier();
            // Thread 0 writes `found` again only after the next round's barriers, when every thread has read it.
            prefix = found[0];
            want = found[1];
        }
    }

    var best = 0.0;
    var at = 0xFFFFFFFFu;
    for (var j = lid; j < {{ n }}u; j = j + 256u) {
        let v = x[base + j];
        if (key(v) >= prefix) {
            var s = v;
            if (t > 0.0) {
                let u = (f32(pcg(stream ^ pcg(base + j)) >> 8u) + 0.5) * 5.9604645e-8;
                s = v / t - log(-log(u));
            }
            if (at == 0xFFFFFFFFu || s > best) {
                best = s;
                at = j;
            }
        }
    }
    best_v[lid] = best;
    best_i[lid] = at;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let v = best_v[lid + s];
            let i = best_i[lid + s];
            let mine = best_i[lid];
            if (i != 0xFFFFFFFFu && (mine == 0xFFFFFFFFu || v > best_v[lid] || (v == best_v[lid] && i < mine))) {
                best_v[lid] = v;
                best_i[lid] = i;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[row] = i32(best_i[0]);
    }
}
