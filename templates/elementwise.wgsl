{% include "header.wgsl" %}
{%- include "helpers.wgsl" %}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * {{ groups_x }}u + wid.x) * 256u + lid;
    if (i >= {{ numel }}u) {
        return;
    }
{%- for c in coords %}
    let c{{ loop.index0 }} = i32((i / {{ c.stride }}u) % {{ c.extent }}u);
{%- endfor %}
{%- for l in loads %}
    let {{ l.name }} = {{ l.var }}[{{ l.offset }}{% for t in l.terms %}{% if t.modulo > 0 %} + (c{{ t.coord }} % {{ t.modulo }}) * {{ t.stride }}{% else %} + c{{ t.coord }} * {{ t.stride }}{% endif %}{% endfor %}];
{%- endfor %}
{%- for s in stmts %}
    let {{ s.name }} = {{ s.expr }};
{%- endfor %}
    out[{{ store.offset }}{% for t in store.terms %} + c{{ t.coord }} * {{ t.stride }}{% endfor %}] = {{ result }};
}
