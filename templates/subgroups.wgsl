{#- Included first (before any declaration) by templates with a subgroup form; the includer has `sg`. -#}
{%- if sg -%}
enable subgroups;

// This module is a kernel's subgroup form: the invocation's subgroup, its lane there and the subgroup size, from
// main's builtins, for the helper functions.
var<private> sg_id: u32;
var<private> sg_lane: u32;
var<private> sg_size: u32;

{% endif -%}
