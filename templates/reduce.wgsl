{% include "header.wgsl" %}
// One workgroup per output element; 64 threads stride over the reduced elements, then a tree reduction.
var<workgroup> part: array<{{ ty }}, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let o = wid.y * {{ groups_x }}u + wid.x;
    if (o >= {{ numel }}u) {
        return;
    }
    let base = 0u{% for d in kept %} + ((o / {{ d.div }}u) % {{ d.extent }}u) * {{ d.stride }}u{% endfor %};
    var acc: {{ ty }} = {{ init }};
    for (var r = lid; r < {{ count }}u; r = r + 64u) {
        let raw = x[base{% for d in reduced %} + ((r / {{ d.div }}u) % {{ d.extent }}u) * {{ d.stride }}u{% endfor %}];
        let v = {{ prologue }};
        acc = {{ combine_acc_v }};
    }
    part[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let a = part[lid];
            let v = part[lid + s];
            part[lid] = {{ combine_a_v }};
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[o] = {{ finish }};
    }
}
