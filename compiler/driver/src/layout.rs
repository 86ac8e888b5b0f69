//! The proof that a decoder's compiled cache layout is exact for this model (`--kv-cache`), run before anything is
//! written.
//!
//! The compiled steps see the cache as a window (module doc of `wgslc_passes::DecoderPlan`'s module): a prefill step's own keys
//! come after the window's rows, at indices that are not their positions, and a decode step that writes in place
//! attends over the whole cache with the rows past its token masked out. Attention is the same as over the model's
//! own concatenation (a cache of exactly the tokens so far) only if the model's masks move with the keys: a mask
//! built from the shapes, or from `cache_position`, which the loop gives the window's indices, does; one that
//! compares a key's index with `position_ids` does not.
//!
//! So for probe steps (a first prefill chunk, a chunk after one, a partly filled chunk, decode steps early and
//! near the capacity) the driver evaluates on the host, from the loop's inputs, what each attention adds to (or
//! selects over) its scores (`wgslc_passes::probe`: each Softmax's input with the score products at zero) and
//! every other value computed from those inputs that the network reads (positions, rotary tables), both in the
//! compiled graph with the inputs the runtimes write and in the model imported at the probe's true shapes (a
//! cache of `past` rows, the step's real tokens, every position real). Each query must see the same keys with the
//! same biases, every window row that holds no token of the probe must be masked out, and every other value must
//! be equal. The first difference is refused, naming the Softmax and the node that applies the mask.

use crate::{CompileError, CompileOptions};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use wgslc_ir::{Graph, Tensor, ValueId};
use wgslc_passes::{CacheLayout, DecoderLayout, StepLayout, PREFILL};

/// Weights of this many elements or more that only products and lookups read are not imported by the probes.
const OPAQUE_ELEMENTS: u64 = 1 << 12;
/// A bias at or below this masks its key out: float32's or float16's lowest, -inf, BERT's -10,000 — any value
/// whose exp is 0 in float32 against a key the query sees (scores are far smaller).
const MASKED: f64 = -1e4;

/// One probe of a step: `past` tokens in the cache, `real` tokens in the step (the rest of a prefill chunk padding).
#[derive(Clone, Copy, Debug)]
struct Probe {
    past: usize,
    real: usize,
}

fn probes(step: &StepLayout, rows: usize) -> Vec<Probe> {
    let n = step.tokens;
    let decode = step.name == "decode";
    let mut ps = if decode {
        // A decode step reads the token at `pos` with `pos` tokens before it: 1 ..= rows - 1.
        vec![Probe { past: 1, real: 1 }, Probe { past: rows / 2, real: 1 }, Probe { past: rows - 1, real: 1 }]
    } else {
        // Prefill chunks start at multiples of the chunk; the prompt leaves one row for a generated token.
        let last = (rows - 1) / n * n;
        vec![
            Probe { past: 0, real: n.min(rows) },
            Probe { past: 0, real: 1 },
            Probe { past: n, real: n.min(rows.saturating_sub(n)) },
            Probe { past: last, real: (rows - last).min(n) },
        ]
    };
    ps.retain(|p| p.real >= 1 && p.past + p.real <= rows && (!decode || p.past >= 1));
    let mut seen = HashSet::new();
    ps.retain(|p| seen.insert((p.past, p.real)));
    ps
}

/// Proves the layout of `g` (the imported two-step graph) for the model at `model`, or refuses.
pub(crate) fn prove(
    model: &Path,
    opts: &CompileOptions,
    g: &Graph,
    layout: &DecoderLayout,
) -> Result<(), CompileError> {
    let err = |m: String| CompileError::Decoder(m);
    let source = crate::source::Source::open(model)?;
    let opaque = source.opaque_names(OPAQUE_ELEMENTS);
    // The compiled graph with the same weights as unknown inputs (shape inference folds nothing with them and
    // nothing is copied).
    let mut lg = g.clone();
    let large: Vec<ValueId> = lg.value_ids().filter(|&v| opaque.contains(&lg.value(v).name)).collect();
    for v in large {
        if lg.value_mut(v).data.take().is_some() {
            lg.inputs.push(v);
        }
    }
    wgslc_passes::run_passes(&mut lg, None, Some("infer"), &opts.fuse_options())?;
    let input = |g: &Graph, name: &str| g.inputs.iter().copied().find(|&v| g.value(v).name == name);
    let in_place = layout.steps.iter().any(|s| s.cache_row.is_some());
    let cache_rows = if in_place { layout.rows + 1 } else { layout.rows };

    for step in &layout.steps {
        let prefix = if step.name == "prefill" { PREFILL } else { "" };
        for p in probes(step, layout.rows) {
            // The reference: the model itself with a cache of exactly `past` rows and the step's real tokens.
            let mut io = wgslc_ir::ImportOptions {
                dims: opts.dims.clone(),
                shapes: HashMap::new(),
                constants: opts.constants.clone(),
            };
            let total = p.past + p.real;
            for (name, axis) in &layout.state {
                let v = input(&lg, name).ok_or_else(|| err(format!("the compiled graph has no input '{name}'")))?;
                let mut shape = lg.ty(v).shape.clone();
                shape[*axis] = p.past;
                io.shapes.insert(name.clone(), shape);
            }
            let roles = [
                ("input_ids", p.real),
                ("attention_mask", total),
                ("position_ids", p.real),
                ("cache_position", p.real),
            ];
            for (role, len) in roles {
                if let Some(v) = input(&lg, &format!("{prefix}{role}")) {
                    let rank = lg.ty(v).shape.len();
                    io.shapes.insert(role.into(), if rank == 1 { vec![len] } else { vec![1, len] });
                }
            }
            let mut rg = source.import_opaque(&io, OPAQUE_ELEMENTS)?;
            wgslc_passes::run_passes(&mut rg, None, Some("infer"), &opts.fuse_options())?;
            let positions: Vec<f64> = (p.past..total).map(|x| x as f64).collect();
            let mut given = Vec::new();
            let give = |g: &Graph, given: &mut Vec<(ValueId, Tensor)>, name: &str, vals: Vec<f64>| {
                if let Some(v) = input(g, name) {
                    let ty = g.ty(v);
                    given.push((v, Tensor::from_f64(ty.dtype, ty.shape.clone(), vals)));
                }
            };
            give(&rg, &mut given, "attention_mask", vec![1.0; total]);
            give(&rg, &mut given, "position_ids", positions.clone());
            give(&rg, &mut given, "cache_position", positions);
            let reference = wgslc_passes::probe(&rg, &given, |_| true)
                .map_err(|e| err(format!("the cache layout can't be proved for this model: {e}")))?;
            drop(rg);

            // The compiled step, with what the runtimes write into its inputs (runtime/src/generate.rs).
            let n = step.tokens;
            let (mask, map, window): (Vec<bool>, Vec<usize>, usize) = if step.cache_row.is_some() {
                // In place: every key at its position, the rows after the step's tokens masked (a prefill chunk's
                // padding unmasked, after its real tokens).
                ((0..cache_rows).map(|j| j < p.past + n).collect(), (0..total).collect(), cache_rows)
            } else {
                let rows = layout.rows;
                let mask = (0..rows + n).map(|j| j < p.past || (j >= rows && j < rows + p.real)).collect();
                let map = (0..total).map(|k| if k < p.past { k } else { rows + k - p.past }).collect();
                (mask, map, rows + n)
            };
            let mut given = Vec::new();
            give(&lg, &mut given, &step.attention_mask, mask.iter().map(|&m| f64::from(u8::from(m))).collect());
            let pos: Vec<f64> = (0..n).map(|i| (p.past + i.min(p.real - 1)) as f64).collect();
            if let Some(name) = &step.position_ids {
                give(&lg, &mut given, name, pos);
            }
            // A step that writes in place writes at the row of its first token: the tokens before it.
            if let Some(name) = &step.cache_row {
                give(&lg, &mut given, name, vec![p.past as f64]);
            }
            if let Some(name) = &step.cache_position {
                let cp: Vec<f64> = match (step.name, step.cache_row.is_some()) {
                    // The decode step in place: the last row (every key up to it, the mask hiding the rest).
                    ("decode", true) => vec![(cache_rows - 1) as f64; n],
                    // A prefill step in place: its tokens' positions.
                    (_, true) => (0..n).map(|i| (p.past + i) as f64).collect(),
                    _ => (0..n).map(|i| (layout.rows + i) as f64).collect(),
                };
                give(&lg, &mut given, name, cp);
            }
            let within = |node: &str| node.starts_with(PREFILL) != prefix.is_empty();
            let compiled = wgslc_passes::probe(&lg, &given, within)
                .map_err(|e| err(format!("the cache layout can't be proved for this model: {e}")))?;
            let at = format!("{} step, {} cached and {} new token(s)", step.name, p.past, p.real);
            compare(&reference, &compiled, &map, window, p, prefix, layout.cache)
                .map_err(|m| err(format!("{m} ({at})")))?;
        }
    }
    Ok(())
}

fn compare(
    reference: &wgslc_passes::Probed,
    compiled: &wgslc_passes::Probed,
    map: &[usize],
    window: usize,
    p: Probe,
    prefix: &str,
    cache: CacheLayout,
) -> Result<(), String> {
    let model_name = |n: &str| n.strip_prefix(prefix).unwrap_or(n).to_string();
    let refuse = |softmax: &wgslc_passes::SoftmaxBias, what: String| {
        let node = model_name(softmax.mask_node.as_deref().unwrap_or(&softmax.softmax));
        format!(
            "the attention mask applied at node '{node}' (Softmax '{}') {what}: {}",
            model_name(&softmax.softmax),
            match cache {
                CacheLayout::Window =>
                    "the compiled window puts a step's own keys at rows that are not their \
                                        positions, and this mask does not move with them",
                CacheLayout::Positions => "this mask does not match the cache with every key at its position",
            }
        )
    };
    if reference.softmaxes.len() != compiled.softmaxes.len() {
        return Err(format!(
            "the model has {} Softmax nodes at the probe's shapes and {} compiled",
            reference.softmaxes.len(),
            compiled.softmaxes.len()
        ));
    }
    let total = map.len();
    for (r, c) in reference.softmaxes.iter().zip(&compiled.softmaxes) {
        let (rs, cs) = (&r.bias.shape, &c.bias.shape);
        if rs.len() != cs.len() || r.axis != c.axis || r.axis >= rs.len() {
            return Err(refuse(c, format!("has shape {rs:?} over axis {} here and {cs:?} compiled", r.axis)));
        }
        let ax = r.axis;
        let keyed = rs[ax] == total && cs[ax] == window;
        if !keyed && rs[ax] != cs[ax] {
            return Err(refuse(c, format!("runs over {} elements here and {} compiled", rs[ax], cs[ax])));
        }
        // The query axis (the one before the keys) compares the real tokens; every other axis must agree.
        let q_ax = ax.checked_sub(1);
        for (d, (&a, &b)) in rs.iter().zip(cs).enumerate() {
            if d != ax && Some(d) != q_ax && a != b {
                return Err(refuse(c, format!("has shape {rs:?} here and {cs:?} compiled")));
            }
        }
        if let Some(q) = q_ax.filter(|&q| rs[q] > cs[q] || (rs[q] != cs[q] && rs[q] != p.real)) {
            return Err(refuse(c, format!("has {} query rows here and {} compiled", rs[q], cs[q])));
        }
        let (rv, cv) = (r.bias.to_f64(), c.bias.to_f64());
        let strides = |s: &[usize]| wgslc_ir::contiguous_strides(s);
        let (rst, cst) = (strides(rs), strides(cs));
        let outer: Vec<usize> = rs.iter().enumerate().map(|(d, &e)| if d == ax { 1 } else { e }).collect();
        let masked = |x: f64| x <= MASKED || x.is_nan();
        for flat in 0..outer.iter().product::<usize>() {
            let mut rem = flat;
            let mut idx = vec![0; rs.len()];
            for d in (0..rs.len()).rev() {
                idx[d] = rem % outer[d];
                rem /= outer[d];
            }
            let base = |st: &[usize]| idx.iter().zip(st).map(|(i, s)| i * s).sum::<usize>();
            let (rb, cb) = (base(&rst), base(&cst));
            let query = q_ax.map_or(0, |q| idx[q]);
            let mut seen = vec![false; cs[ax]];
            for k in 0..rs[ax] {
                let ck = if keyed { map[k] } else { k };
                seen[ck] = true;
                let (a, b) = (rv[rb + k * rst[ax]], cv[cb + ck * cst[ax]]);
                if masked(a) != masked(b) || (!masked(a) && a != b) {
                    let what = |x: f64| if masked(x) { "masked out".to_string() } else { format!("biased by {x}") };
                    return Err(refuse(
                        c,
                        format!(
                            "gives the token at position {} the key at position {k} {} in the model and {} compiled",
                            p.past + query,
                            what(a),
                            what(b)
                        ),
                    ));
                }
            }
            if let Some(ck) = (0..cs[ax]).find(|&ck| !seen[ck] && keyed && !masked(cv[cb + ck * cst[ax]])) {
                return Err(refuse(
                    c,
                    format!(
                        "lets the token at position {} see window row {ck}, which holds no token of this step",
                        p.past + query
                    ),
                ));
            }
        }
    }
    // Every other value computed from the loop's inputs: the same, over the real tokens.
    let compiled_frontier: HashMap<&str, &Tensor> = compiled.frontier.iter().map(|(n, t)| (n.as_str(), &**t)).collect();
    for (name, r) in &reference.frontier {
        let Some(c) = compiled_frontier.get(format!("{prefix}{name}").as_str()) else { continue };
        if !same_over_real(r, c, p.real) {
            return Err(format!(
                "'{name}', computed from the loop's inputs or the cache's shape (positions, masks, rotary tables), \
                 differs between the model's own cache and the compiled cache layout: wgslc has no cache layout for \
                 this model (positions counted from the past's length are taken from the cache row only where the \
                 model writes them as arange(past, past + n); position_ids as an input always work)"
            ));
        }
    }
    Ok(())
}

/// Whether `c` (a compiled step's value) equals `r` (the reference's) where `r` is defined: equal shapes, or one
/// axis longer in `c` (the padded chunk's tokens), compared over `r`'s extent.
fn same_over_real(r: &Tensor, c: &Tensor, real: usize) -> bool {
    if r.shape.len() != c.shape.len() {
        return false;
    }
    let diff: Vec<usize> = (0..r.shape.len()).filter(|&d| r.shape[d] != c.shape[d]).collect();
    let (rv, cv) = (r.to_f64(), c.to_f64());
    match diff[..] {
        [] => rv.iter().zip(&cv).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())),
        [d] if r.shape[d] == real && c.shape[d] > real => {
            let (rst, cst) = (wgslc_ir::contiguous_strides(&r.shape), wgslc_ir::contiguous_strides(&c.shape));
            (0..rv.len()).all(|i| {
                let mut rem = i;
                let mut ci = 0;
                for ax in 0..r.shape.len() {
                    let x = rem / rst[ax];
                    rem %= rst[ax];
                    ci += x * cst[ax];
                }
                rv[i] == cv[ci] || (rv[i].is_nan() && cv[ci].is_nan())
            })
        }
        _ => false,
    }
}
