@compute @workgroup_size(64)
{%- if sg %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sid: u32, @builtin(subgroup_invocation_id) slane: u32, @builtin(subgroup_size) ssize: u32) {
    // The reductions' subgroup (a row's elements are shared out by local_invocation_index: no subgroup order is
    // assumed; a subgroup larger than the workgroup is one partial subgroup, which the reductions allow).
    sg_id = sid;
    sg_lane = slane;
    sg_size = ssize;
{%- else %}
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
{%- endif %}
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
