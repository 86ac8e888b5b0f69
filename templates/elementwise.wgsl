{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
{%- include "fused.wgsl" %}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ groups_x }}u + wid.x) * 256u + lid;
    if (i >= {{ numel }}u) {
        return;
    }
{%- for c in store_coords %}
    let c{{ loop.index0 }} = i32((i / {{ c.stride }}u) % {{ c.extent }}u);
{%- endfor %}
    out[{{ store.offset }}{% for t in store.terms %} + c{{ t.coord }} * {{ t.stride }}{% endfor %}] = fused(0.0, i);
}
