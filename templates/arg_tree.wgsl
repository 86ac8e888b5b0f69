{#- The includer has `best` and `at` (NONE where a thread holds no element) per thread, and `lid`. -#}
// Each thread's best (value, index) to workgroup memory, then a tree keeps the best of all: a thread without an
// element (index NONE) loses to any, ties go to the {% if last %}last{% else %}first{% endif %} index. The result is best_v[0], best_i[0].
    best_v[lid] = best;
    best_i[lid] = at;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let v = best_v[lid + s];
            let k = best_i[lid + s];
            let mine = best_i[lid];
            if (k != {{ none }}u && (mine == {{ none }}u || v {{ strict }} best_v[lid] || (v == best_v[lid] && k {{ tie }} mine))) {
                best_v[lid] = v;
                best_i[lid] = k;
            }
        }
        workgroupBarrier();
    }
