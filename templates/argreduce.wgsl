{% include "header.wgsl" %}
// Arg{{ kind }} along an axis of {{ n }} elements spaced {{ inner }} apart; one output element per thread.
{% include "main_1d.wgsl" %}
    let base = (i / {{ inner }}u) * {{ span }}u + i % {{ inner }}u;
    var best = x[base];
    var at = 0;
    for (var j = 1u; j < {{ n }}u; j = j + 1u) {
        let v = x[base + j * {{ inner }}u];
        if (v {{ cmp }} best) {
            best = v;
            at = i32(j);
        }
    }
    out[i] = at;
}
