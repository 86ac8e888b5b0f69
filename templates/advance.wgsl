{% include "header.wgsl" %}
// After a decode step, on the GPU: its chosen token `{{ token }}[0]` becomes the next step's `{{ ids.var }}` and the
// history's entry at the next position, and the loop's cache row{% if let Some(p) = positions %}, position ({{ p.var }}){% endif %} and mask move to that position, so that the
// next step follows in the same compute pass. The history holds {{ capacity }} tokens; past it nothing is written.
@compute @workgroup_size(1)
fn main() {
    let next = u32({{ row.var }}[0]) + 1u;
    if (next >= {{ capacity }}u) {
        return;
    }
    let t = {{ token }}[0];
    {{ tokens.var }}[next] = {{ tokens.ty }}(t);
    {{ ids.var }}[0] = {{ ids.ty }}(t);
    {{ row.var }}[0] = {{ row.ty }}(next);
    {{ mask.var }}[next] = {{ mask.ty }}(1);
{%- if let Some(p) = positions %}
    {{ p.var }}[0] = {{ p.ty }}(next);
{%- endif %}
}
