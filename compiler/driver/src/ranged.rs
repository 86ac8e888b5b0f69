//! Ranged dims in the driver (`--dim NAME=MIN..MAX`): checking the ranges, compiling each dim's probe, finding
//! which kernels' workgroups follow a dim, and the plan's `ranges` section. The graph rewrite itself is
//! `wgslc_passes::apply_ranges` (`passes/src/ranged.rs`); docs/design/ranged.md has the whole design.

use crate::{import_model, CompileError, CompileOptions};
use std::collections::HashMap;
use std::path::Path;
use wgslc_emit::Validated;
use wgslc_ir::Graph;

/// What a compile with ranged dims adds to the artifact.
pub struct RangedCompile {
    pub ranged: wgslc_passes::Ranged,
    /// Per kernel (emission order): the workgroup axis that follows a dim, where one does.
    pub scales: Vec<Option<wgslc_artifact::GridScale>>,
}

/// The ranged dims as the graph knows them, each with its probe (the model imported and run to `at` with that dim
/// at [`wgslc_passes::probe_value`], the others at their max). Exporters name one length with several symbols
/// (torch's dynamo exporter gives each input its own): a dim whose probe alone does not compile is probed together
/// with the other dims of the same range, then with as few of them as still compile, and the group is one dim
/// (named `a=b`), whose inputs must then agree at run time.
pub(crate) fn probe_dims(
    model: &Path,
    opts: &CompileOptions,
    at: &str,
) -> Result<(Vec<wgslc_passes::DimRange>, Vec<Graph>), CompileError> {
    let probe = |names: &[&str], b: usize| -> Result<Graph, String> {
        let mut p = opts.clone();
        for n in names {
            p.dims.insert(n.to_string(), b);
        }
        let (mut pg, _) = import_model(model, &p, crate::CacheLayout::Window).map_err(|e| e.to_string())?;
        wgslc_passes::run_passes(&mut pg, None, Some(at), &opts.fuse_options()).map_err(|e| e.to_string())?;
        Ok(pg)
    };
    let ranges = &opts.ranges;
    let (mut dims, mut probes) = (Vec::new(), Vec::new());
    let mut done = vec![false; ranges.len()];
    for i in 0..ranges.len() {
        if done[i] {
            continue;
        }
        let r = &ranges[i];
        let b = wgslc_passes::probe_value(r);
        let alone = match probe(&[&r.name], b) {
            Ok(pg) => {
                done[i] = true;
                dims.push(r.clone());
                probes.push(pg);
                continue;
            }
            Err(e) => e,
        };
        let name = |j: usize| ranges[j].name.as_str();
        let mut group: Vec<usize> =
            (i..ranges.len()).filter(|&j| !done[j] && (ranges[j].min, ranges[j].max) == (r.min, r.max)).collect();
        let names = |group: &[usize]| group.iter().map(|&j| name(j)).collect::<Vec<_>>();
        let mut pg = match probe(&names(&group), b) {
            Ok(pg) if group.len() > 1 => pg,
            _ => {
                return Err(CompileError::Range(format!(
                    "{}={}..{}: the model does not compile at {}={b}: {alone}",
                    r.name, r.min, r.max, r.name
                )))
            }
        };
        // As few as still compile: a dim of the same range that the graph does not tie to this one stays its own.
        let mut k = 1;
        while k < group.len() {
            let mut fewer = group.clone();
            fewer.remove(k);
            match probe(&names(&fewer), b) {
                Ok(p) if fewer.len() > 1 => {
                    group = fewer;
                    pg = p;
                }
                _ => k += 1,
            }
        }
        for &j in &group {
            done[j] = true;
        }
        dims.push(wgslc_passes::DimRange { name: names(&group).join("="), min: r.min, max: r.max });
        probes.push(pg);
    }
    Ok((dims, probes))
}

/// A kernel that says what its workgroup axes walk (a product: columns along x, rows along y): an axis whose
/// walked extent is `k·max` at max and `k·probe` in the probe scales with that dim when everything the kernel
/// writes is the product's `[.., rows, cols]` with that axis ranged (not a transposed store, not rows that fold a
/// batch in front of the dim), unless it writes a masked value along it (its padding must hold the fill) or
/// another axis scales already.
fn declared_scale(
    g: &Graph,
    k: &Validated,
    probes: &[Option<(Graph, Vec<Validated>)>],
    ranges: &[wgslc_passes::DimRange],
    masked: &HashMap<wgslc_ir::ValueId, Vec<usize>>,
    i: usize,
) -> Option<wgslc_artifact::GridScale> {
    use wgslc_emit::Walks;
    let grid = k.kernel.grid;
    let (cols, rows) = (grid[0].map(|a| a.extent), grid[1].map(|a| a.extent));
    // The axis of a written value that a walk covers, for a value shaped [.., rows, cols] (else none is known).
    let value_axis = |shape: &[usize], walks: Walks| {
        let r = shape.len();
        (r >= 2 && Some(shape[r - 2]) == rows && Some(shape[r - 1]) == cols).then(|| {
            if walks == Walks::Rows {
                r - 2
            } else {
                r - 1
            }
        })
    };
    let mut found = None;
    for (d, (pg, pk)) in probes.iter().flatten().enumerate() {
        for (a, (ga, gb)) in grid.iter().zip(pk[i].kernel.grid).enumerate() {
            let (Some(ga), Some(gb)) = (ga, gb) else { continue };
            if ga.extent == gb.extent {
                continue;
            }
            let (max, b) = (ranges[d].max, wgslc_passes::probe_value(&ranges[d]));
            if ga.extent % max != 0 || ga.extent / max * b != gb.extent {
                return None;
            }
            // Every written value is the product as computed ([.., rows, cols], batches along z; not stored
            // transposed, not rows that fold a batch in front of the dim), the walked axis its ranged one, and not
            // one whose padding holds a mask's fill.
            let ok = k.kernel.bindings.iter().filter(|&&(_, w)| w).all(|&(v, _)| {
                match value_axis(&g.ty(v).shape, ga.walks) {
                    Some(j) => {
                        g.ty(v).shape[j] != pg.ty(v).shape[j] && !masked.get(&v).is_some_and(|axes| axes.contains(&j))
                    }
                    None => false,
                }
            });
            if !ok {
                continue;
            }
            if found.is_some() {
                return None;
            }
            found = Some(wgslc_artifact::GridScale { axis: a, dim: d });
        }
    }
    found
}

/// Which kernels may dispatch fewer workgroups for a smaller value of a ranged dim: a kernel whose probe (the same
/// kernel compiled with one dim at its probe value) differs in the workgroup count along exactly one axis, whose
/// every written tensor, and every value its nodes compute, differs along at most one axis with nothing but 1s in
/// front of it (so its valid entries are a prefix in the order it computes them), and whose probe needed no more
/// workgroups than `ceil(W · probe / max)` (the same tiling), runs `ceil(W · n / max)` workgroups along that
/// axis. Anything else (a probe that compiled otherwise, an in-place write, a kernel writing a masked value, whose
/// padding a reduction reads as the fill) keeps its counts: always correct, the padding computed too.
pub(crate) fn grid_scales(
    g: &Graph,
    kernels: &[Validated],
    probes: &[Option<(Graph, Vec<Validated>)>],
    ranges: &[wgslc_passes::DimRange],
    masked: &HashMap<wgslc_ir::ValueId, Vec<usize>>,
) -> Vec<Option<wgslc_artifact::GridScale>> {
    let mut out = vec![None; kernels.len()];
    let same = |pk: &Vec<Validated>| {
        pk.len() == kernels.len()
            && pk
                .iter()
                .zip(kernels)
                .all(|(a, b)| a.kernel.name == b.kernel.name && a.kernel.bindings == b.kernel.bindings)
    };
    if !probes.iter().all(|p| p.as_ref().is_some_and(|(_, pk)| same(pk))) {
        return out;
    }
    'kernel: for (i, k) in kernels.iter().enumerate() {
        if k.kernel.stored_bytes.is_some() {
            continue;
        }
        if k.kernel.grid.iter().any(Option::is_some) {
            out[i] = declared_scale(g, k, probes, ranges, masked, i);
            continue;
        }
        if k.kernel.bindings.iter().any(|&(v, w)| w && masked.contains_key(&v)) {
            continue;
        }
        let mut found = None;
        for (d, (pg, pk)) in probes.iter().flatten().enumerate() {
            let (wa, wb) = (k.kernel.workgroups, pk[i].kernel.workgroups);
            let diff: Vec<usize> = (0..3).filter(|&a| wa[a] != wb[a]).collect();
            if diff.is_empty() {
                continue;
            }
            if diff.len() != 1 || found.is_some() {
                continue 'kernel;
            }
            let a = diff[0];
            // What it writes follows the dim, with only 1s in front of its ranged axis, and so does everything its
            // nodes compute on the way (a kernel iterating another layout, e.g. one that stores transposed, has a
            // value with the dim behind another axis).
            let leading = |v: wgslc_ir::ValueId, must: bool| {
                let (sa, sb) = (&g.ty(v).shape, &pg.ty(v).shape);
                let d: Vec<usize> = (0..sa.len()).filter(|&j| sa[j] != sb[j]).collect();
                match d[..] {
                    [] => !must,
                    [j] => sa[..j].iter().all(|&e| e == 1),
                    _ => false,
                }
            };
            let prefix = k.kernel.bindings.iter().filter(|&&(_, w)| w).all(|&(v, _)| leading(v, true))
                && k.kernel.nodes.iter().flat_map(|&n| g.node(n).outputs.clone()).all(|v| leading(v, false));
            let (max, b) = (ranges[d].max as u64, wgslc_passes::probe_value(&ranges[d]) as u64);
            let covers = wb[a] as u64 <= (wa[a] as u64 * b).div_ceil(max);
            if !prefix || !covers {
                continue 'kernel;
            }
            found = Some(wgslc_artifact::GridScale { axis: a, dim: d });
        }
        out[i] = found;
    }
    out
}

/// Checks the ranged dims (`--dim NAME=MIN..MAX`) and returns the options to import with: each ranged dim bound
/// to its max. `None` when there are none.
pub(crate) fn check_ranges(opts: &CompileOptions) -> Result<Option<CompileOptions>, CompileError> {
    if opts.ranges.is_empty() {
        return Ok(None);
    }
    if opts.kv_cache.is_some() {
        return Err(CompileError::Range(
            "NAME=MIN..MAX cannot be combined with --kv-cache (which binds the sequence dims itself)".into(),
        ));
    }
    let mut o = opts.clone();
    for (i, r) in opts.ranges.iter().enumerate() {
        if r.min == 0 || r.min > r.max {
            return Err(CompileError::Range(format!(
                "{}={}..{}: the range must satisfy 1 <= MIN <= MAX",
                r.name, r.min, r.max
            )));
        }
        if opts.dims.contains_key(&r.name) || opts.ranges[..i].iter().any(|p| p.name == r.name) {
            return Err(CompileError::Range(format!("{} is bound twice", r.name)));
        }
        o.dims.insert(r.name.clone(), r.max);
    }
    // A range of one value is a plain binding.
    o.ranges.retain(|r| r.min < r.max);
    Ok(Some(o))
}

/// The ranges section of plan.json: the dims' values move from the graph inputs to [`wgslc_artifact::Ranges`],
/// and each input and output names its ranged axes.
pub(crate) fn ranges_section(plan: &mut wgslc_artifact::Plan, rc: &RangedCompile) -> Result<(), CompileError> {
    let r = &rc.ranged;
    for (k, s) in plan.kernels.iter_mut().zip(&rc.scales) {
        k.scale = *s;
    }
    let at = plan.inputs.iter().position(|t| t.name == wgslc_passes::DIMS_INPUT);
    let buffer = at.map(|i| plan.inputs.remove(i).buffer).ok_or_else(|| {
        CompileError::Range(format!("the compiled graph lost its '{}' input", wgslc_passes::DIMS_INPUT))
    })?;
    for t in plan.inputs.iter_mut().chain(plan.outputs.iter_mut()) {
        t.ranged =
            r.io.get(&t.name)
                .into_iter()
                .flatten()
                .map(|a| wgslc_artifact::RangedAxis { axis: a.axis, dim: a.dim, factor: a.factor })
                .collect();
    }
    let dims =
        r.dims.iter().map(|d| wgslc_artifact::DimRange { name: d.name.clone(), min: d.min, max: d.max }).collect();
    plan.ranges = Some(wgslc_artifact::Ranges { dims, buffer, buckets: Vec::new() });
    plan.check().map_err(|e| CompileError::Range(format!("the ranges section is invalid: {e}")))
}
