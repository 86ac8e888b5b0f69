{%- if fu.defined %}
// The fused elementwise body: `acc` is the anchor's value (unused without one), `i` the flat output index.
fn {{ fu.name() }}(acc: f32, i: u32) -> {{ fu.ty }} {
{%- for c in fu.coords %}
    let {{ c.name }} = i32((i / {{ c.stride }}u) % {{ c.extent }}u);
{%- endfor %}
{%- for l in fu.loads %}
    let {{ l.name }} = {{ l.ld.open }}{{ l.offset }}{% for t in l.terms %}{% if t.modulo > 0 %} + ({{ t.coord }} % {{ t.modulo }}) * {{ t.stride }}{% else %} + {{ t.coord }} * {{ t.stride }}{% endif %}{% endfor %}{{ l.ld.close }};
{%- endfor %}
{%- for s in fu.stmts %}
    let {{ s.name }} = {{ s.expr }};
{%- endfor %}
    return {{ fu.result }};
}
{%- endif %}
{%- if fu.placed() %}
// {{ fu.store_note }}
fn store_at(o: u32) -> u32 {
    return {{ fu.store_offset }}u{% for t in fu.store %} + ((o / {{ t.stride }}u) % {{ t.extent }}u) * {{ t.out_stride }}u{% endfor %};
}
{%- endif %}
