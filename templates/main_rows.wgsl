@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
