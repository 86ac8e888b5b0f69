{% include "header.wgsl" %}
// TopK ({% if largest %}largest{% else %}smallest{% endif %} {{ k }} of {{ n }} along an axis spaced {{ inner }} apart): each element
// counts the elements that precede it in the order (ties: lower index first) and, if its rank is under k, writes
// itself there. One element per thread; no shared state.
{% include "main_1d.wgsl" %}
    let j = (i / {{ inner }}u) % {{ n }}u;
    let outer = i / {{ span }}u;
    let inner = i % {{ inner }}u;
    let base = outer * {{ span }}u + inner;
    let v = x[i];
    var rank = 0u;
    for (var t = 0u; t < {{ n }}u; t = t + 1u) {
        let w = x[base + t * {{ inner }}u];
        if (w {{ cmp }} v || (w == v && t < j)) {
            rank = rank + 1u;
        }
    }
    if (rank < {{ k }}u) {
        let o = outer * {{ out_span }}u + rank * {{ inner }}u + inner;
        values[o] = v;
        indices[o] = i32(j);
    }
}
