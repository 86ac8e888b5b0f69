{#- A subgroup form's numbering of its invocations, at the top of main (whose builtins are `sid`, `slane` and
    `ssize`): `tid` runs over the workgroup with each subgroup's lanes side by side, whatever order the device gives
    them, and the helper functions read the three values from private variables. -#}

    // Invocations numbered by subgroup, so that each subgroup's lanes are neighbours (the workgroup is whole
    // subgroups); the helpers read the subgroup from the private variables.
    sg_id = sid;
    sg_lane = slane;
    sg_size = ssize;
    let tid = sid * ssize + slane;
