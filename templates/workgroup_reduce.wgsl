{#- The includer sets `reduce_threads`: its workgroup size, a power of two; `reduce_width` and `reduce_chunks`,
    two powers of two whose product it is; and `reduce_sg`: whether this is a subgroup form (then `reduce_parts`
    is twice the most subgroups of 4 or more invocations, `reduce_subgroups`, it can hold). -#}
{%- if reduce_sg %}
// Reductions across a workgroup of {{ reduce_threads }} invocations: each subgroup's own first (subgroupMax, subgroupAdd), then
// its first lane leaves the result in workgroup memory and, after one barrier, each subgroup reduces the
// subgroups' results, each lane a share of them. Those go to one half of `part` and the next reduction's to the
// other: a reduction writes before its barrier, while a slower invocation may still read the reduction before
// (never the one before that, since it passed that reduction's barrier first). The callers pass the
// `subgroup_size` builtin, which Tint takes as uniform (a private variable it does not).
var<workgroup> part: array<f32, {{ reduce_parts }}>;
var<private> part_half: u32;

fn reduce_part(s: f32) -> u32 {
    let at = part_half * {{ reduce_subgroups }}u;
    part_half = 1u - part_half;
    if (sg_lane == 0u) {
        part[at + sg_id] = s;
    }
    workgroupBarrier();
    return at;
}

fn reduce_max(ssize: u32, v: f32) -> f32 {
    let at = reduce_part(subgroupMax(v));
    // Lane l takes the results l, l + ssize, …, starting from the first (there is at least one).
    let n = max({{ reduce_threads }}u / ssize, 1u);
    var r = part[at];
    for (var i = 0u; i < n; i = i + ssize) {
        r = max(r, part[at + min(i + sg_lane, n - 1u)]);
    }
    return subgroupMax(r);
}

fn reduce_sum(ssize: u32, v: f32) -> f32 {
    let at = reduce_part(subgroupAdd(v));
    // Lane l adds the results l, l + ssize, … (one read where the subgroups are 16 invocations or more).
    let n = max({{ reduce_threads }}u / ssize, 1u);
    var r = 0.0;
    for (var i = 0u; i < n; i = i + ssize) {
        if (i + sg_lane < n) {
            r = r + part[at + i + sg_lane];
        }
    }
    return subgroupAdd(r);
}
{%- else -%}
// Reductions across a workgroup of {{ reduce_threads }} invocations through workgroup memory; every invocation gets the result.
// Two levels and two barriers: invocations 0..{{ reduce_chunks }} each reduce {{ reduce_width }} values {{ reduce_chunks }} apart (so that their
// reads fall in distinct banks), all loaded at once, then every invocation reduces those {{ reduce_chunks }} results (a pairwise tree
// would take a barrier per halving). No barrier is needed after: a next reduction writes `part_chunks` only
// after its first barrier, which every invocation reaches after its reads of this one's.
var<workgroup> part: array<f32, {{ reduce_threads }}>;
var<workgroup> part_chunks: array<f32, {{ reduce_chunks }}>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    if (lid < {{ reduce_chunks }}u) {
        var m = part[lid];
{%- for i in 1..reduce_width %}
        m = max(m, part[lid + {{ i }}u * {{ reduce_chunks }}u]);
{%- endfor %}
        part_chunks[lid] = m;
    }
    workgroupBarrier();
    var r = part_chunks[0];
{%- for i in 1..reduce_chunks %}
    r = max(r, part_chunks[{{ i }}]);
{%- endfor %}
    return r;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    if (lid < {{ reduce_chunks }}u) {
        part_chunks[lid] = {% for i in 0..reduce_width %}{% if i > 0 %} + {% endif %}part[lid + {{ i }}u * {{ reduce_chunks }}u]{% endfor %};
    }
    workgroupBarrier();
    return {% for i in 0..reduce_chunks %}{% if i > 0 %} + {% endif %}part_chunks[{{ i }}]{% endfor %};
}
{%- endif %}
