{% include "header.wgsl" %}
// Arg{{ kind }}, second half: each row's {{ chunks }} chunk pairs (value, index as f32) from ArgChunks, one workgroup of
// 256 threads a row ({{ rows }} row(s)), a thread a chunk; a tree keeps the best value, ties going to the
// {% if last %}last{% else %}first{% endif %} index, which is the {% if last %}last{% else %}first{% endif %} chunk's: the index of one sequential scan of the row.
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * {{ groups_x }}u + wid.x;
    if (row >= {{ rows }}u) {
        return;
    }
    var best = 0.0;
    var at = {{ none }}u;
    if (lid < {{ chunks }}u) {
        let p = (row * {{ chunks }}u + lid) * 2u;
        best = x[p];
        at = u32(x[p + 1u]);
    }
{% include "arg_tree.wgsl" %}
    if (lid == 0u) {
        out[row] = i32(best_i[0]);
    }
}
