{#- The includer sets `reduce_threads`: its workgroup size, a power of two, and `reduce_half`, half of it. -#}
// Reductions across a workgroup of {{ reduce_threads }} invocations through workgroup memory; every invocation gets the result.
var<workgroup> part: array<f32, {{ reduce_threads }}>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = {{ reduce_half }}u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            part[lid] = max(part[lid], part[lid + s]);
        }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = {{ reduce_half }}u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            part[lid] = part[lid] + part[lid + s];
        }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return r;
}
