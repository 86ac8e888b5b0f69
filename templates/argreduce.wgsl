{% include "header.wgsl" %}
// Arg{{ kind }} along an axis of {{ n }} elements spaced {{ inner }} apart; one output element per thread.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ groups_x }}u + wid.x) * 256u + lid;
    if (i >= {{ numel }}u) {
        return;
    }
    let base = (i / {{ inner }}u) * {{ span }}u + i % {{ inner }}u;
    var best = x[base];
    var at = 0;
    for (var j = 1u; j < {{ n }}u; j = j + 1u) {
        let v = x[base + j * {{ inner }}u];
        if (v {{ cmp }} best) {
            best = v;
            at = i32(j);
        }
    }
    out[i] = at;
}
