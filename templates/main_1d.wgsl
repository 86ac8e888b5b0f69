// One invocation per element: `i` is the flat index, past the end returns.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ groups_x }}u + wid.x) * 256u + lid;
    if (i >= {{ numel }}u) {
        return;
    }
