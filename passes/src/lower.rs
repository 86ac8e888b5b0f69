//! Rewrites after inference: BatchNormalization lowering, dead-code removal, storage legalization and
//! output materialization.

use crate::PassError;
use std::collections::HashSet;
use wgslc_ir::{BinaryOp, Builder, DType, Graph, NodeId, Op, Tensor, TensorType, ValueId};

/// How a logical dtype is stored on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    F32,
    I32,
    /// bool: WGSL has no bool storage.
    U32,
}

impl Storage {
    /// Whether values are floating point (computed with float arithmetic and literals).
    pub fn is_float(self) -> bool {
        match self {
            Storage::F32 => true,
            Storage::I32 | Storage::U32 => false,
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Storage::F32 | Storage::I32 | Storage::U32 => 4,
        }
    }

    /// The WGSL scalar type.
    pub fn wgsl(self) -> &'static str {
        match self {
            Storage::F32 => "f32",
            Storage::I32 => "i32",
            Storage::U32 => "u32",
        }
    }
}

/// The storage of a logical dtype ([`Storage::bytes`] per element: 4 today).
///
/// Integers are narrowed to i32: constant values are range-checked at compile time ([`legalize`]) and run-time
/// inputs by the runtime at upload; arithmetic on them wraps at 32 bits (the documented overflow rule), and a
/// Cast into a narrower integer type wraps to its width. Every float type is computed in f32: float16, bfloat16
/// and the 8-bit and 4-bit floats hold values on their own grid (a Cast into them rounds onto it), float64 is
/// narrowed to f32 (the driver notes it; WGSL has no f64).
pub fn storage_of(d: DType) -> Result<Storage, String> {
    if d == DType::Bool {
        Ok(Storage::U32)
    } else if d.is_float() {
        Ok(Storage::F32)
    } else if d.is_int() {
        Ok(Storage::I32)
    } else {
        Err(format!("{d} has no storage on WebGPU"))
    }
}

/// Lowers inference-mode BatchNormalization. With constant statistics it is `x * a + b` per channel, where
/// `a = scale / sqrt(var + eps)` and `b = bias - mean * a` are computed here; when `x` comes from a Conv with
/// constant weights that nothing else reads, `a` and `b` are folded into that Conv's weights and bias instead, so
/// the normalization costs nothing at run time. Statistics computed at run time give the elementwise formula.
///
/// Requires: [`crate::infer_shapes`] has run. Establishes: no BatchNorm node remains.
pub fn lower_batchnorm(g: &mut Graph) -> Result<(), PassError> {
    let bns: Vec<NodeId> = g.node_ids().filter(|&n| matches!(g.node(n).op, Op::BatchNorm { .. })).collect();
    for n in bns {
        let node = g.node(n).clone();
        let Op::BatchNorm { epsilon } = node.op else { unreachable!() };
        let x = node.inputs[0].expect("input");
        let xt = g.ty(x).clone();
        let out = node.outputs[0];
        let params: Vec<ValueId> = (1..5).map(|i| node.inputs[i].expect("typed BatchNorm has 5 inputs")).collect();
        let mut cshape = vec![xt.shape[1]];
        cshape.extend(std::iter::repeat_n(1, xt.rank() - 2));
        if params.iter().any(|&v| g.const_data(v).is_none()) {
            // (x - mean) / sqrt(var + eps) * scale + bias, with the [C] parameters viewed as [C, 1, …].
            let view = |g: &mut Graph, v: ValueId, what: &str| -> Result<ValueId, PassError> {
                let ty = TensorType::new(xt.dtype, cshape.clone());
                Ok(Builder::new(g, &node.name).op_typed(what, Op::Alias, &[Some(v)], ty)?)
            };
            let (s, bi, m, va) = (
                view(g, params[0], "s")?,
                view(g, params[1], "b")?,
                view(g, params[2], "m")?,
                view(g, params[3], "v")?,
            );
            let eps = Builder::new(g, &node.name).const_named("eps", Tensor::f32(vec![], vec![epsilon]));
            g.remove_node(n);
            let step = |g: &mut Graph,
                        op: Op,
                        a: ValueId,
                        b: Option<ValueId>,
                        shape: &[usize],
                        what: &str,
                        dst: Option<ValueId>| {
                let mut bld = Builder::new(g, &node.name);
                let o = dst.unwrap_or_else(|| bld.value(what, Some(TensorType::new(xt.dtype, shape.to_vec()))));
                bld.op_into(what, op, &[Some(a), b], vec![o]).map(|_| o)
            };
            let ve = step(g, Op::Binary(BinaryOp::Add), va, Some(eps), &cshape, "var_eps", None)?;
            let sd = step(g, Op::Unary(wgslc_ir::UnaryOp::Sqrt), ve, None, &cshape, "std", None)?;
            let c = step(g, Op::Binary(BinaryOp::Sub), x, Some(m), &xt.shape, "centered", None)?;
            let d = step(g, Op::Binary(BinaryOp::Div), c, Some(sd), &xt.shape, "normed", None)?;
            let e = step(g, Op::Binary(BinaryOp::Mul), d, Some(s), &xt.shape, "scaled", None)?;
            step(g, Op::Binary(BinaryOp::Add), e, Some(bi), &xt.shape, "shifted", Some(out))?;
            continue;
        }
        let p: Vec<Vec<f64>> = params.iter().map(|&v| g.const_data(v).unwrap().to_f64()).collect();
        let (scale, bias, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
        let a: Vec<f64> = (0..scale.len()).map(|c| scale[c] / (var[c] + epsilon as f64).sqrt()).collect();
        let b: Vec<f64> = (0..scale.len()).map(|c| bias[c] - mean[c] * a[c]).collect();

        // Fold into the producing Conv when its weights are constants and only this node reads its output.
        let conv = g.value(x).producer.filter(|&c| {
            let cn = g.node(c);
            matches!(cn.op, Op::Conv { .. })
                && g.const_data(cn.inputs[1].expect("W")).is_some()
                && cn.inputs.get(2).copied().flatten().is_none_or(|bv| g.const_data(bv).is_some())
                && g.consumers(x).len() == 1
                && !g.outputs.contains(&x)
        });
        if let Some(c) = conv {
            let cn = g.node(c).clone();
            let w = g.const_data(cn.inputs[1].unwrap()).unwrap().clone();
            let per = w.numel() / w.shape[0].max(1);
            let wv = w.to_f64();
            let folded_w: Vec<f32> = wv.iter().enumerate().map(|(i, &v)| (v * a[i / per]) as f32).collect();
            let old_b = cn.inputs.get(2).copied().flatten().map(|bv| g.const_data(bv).unwrap().to_f64());
            let folded_b: Vec<f32> =
                (0..a.len()).map(|m| (old_b.as_ref().map_or(0.0, |ob| ob[m]) * a[m] + b[m]) as f32).collect();
            let mut bld = Builder::new(g, &cn.name);
            let nw = bld.const_named("folded_weight", Tensor::f32(w.shape.clone(), folded_w));
            let nb = bld.const_named("folded_bias", Tensor::f32(vec![a.len()], folded_b));
            bld.g.remove_node(n);
            bld.g.remove_node(c);
            bld.op_into("", cn.op.clone(), &[cn.inputs[0], Some(nw), Some(nb)], vec![out])?;
            continue;
        }
        let mut bld = Builder::new(g, &node.name);
        let av = bld.const_named("scale", Tensor::f32(cshape.clone(), a.iter().map(|&v| v as f32).collect()));
        let bv = bld.const_named("shift", Tensor::f32(cshape, b.iter().map(|&v| v as f32).collect()));
        let mid = bld.value("scaled", Some(xt.clone()));
        bld.g.remove_node(n);
        bld.op_into("mul", Op::Binary(BinaryOp::Mul), &[Some(x), Some(av)], vec![mid])?;
        bld.op_into("add", Op::Binary(BinaryOp::Add), &[Some(mid), Some(bv)], vec![out])?;
    }
    Ok(())
}

/// Removes every node that no graph output depends on.
///
/// Establishes: every remaining node has an output that reaches a graph output.
pub fn eliminate_dead_code(g: &mut Graph) {
    let mut live: HashSet<ValueId> = g.outputs.iter().copied().collect();
    let order = g.topo_order().expect("acyclic graph");
    let mut dead = Vec::new();
    for &n in order.iter().rev() {
        let node = g.node(n);
        if node.outputs.iter().any(|o| live.contains(o)) {
            live.extend(node.inputs.iter().flatten());
        } else {
            dead.push(n);
        }
    }
    for n in dead {
        g.remove_node(n);
    }
}

/// Checks that every value a kernel touches has a storage type, and that every integer constant fits i32.
///
/// Establishes: [`storage_of`] succeeds for every live value; integer constants are exactly representable in
/// their storage.
pub fn legalize(g: &mut Graph) -> Result<(), PassError> {
    let mut used: Vec<ValueId> = g.inputs.clone();
    used.extend(&g.outputs);
    for n in g.node_ids() {
        used.extend(g.node(n).inputs.iter().flatten());
        used.extend(&g.node(n).outputs);
    }
    for v in used {
        let val = g.value(v);
        let ty = val.ty.as_ref().expect("typed");
        storage_of(ty.dtype).map_err(|reason| PassError::Value { value: val.name.clone(), reason })?;
        if let Some(t) = &val.data {
            if ty.dtype.is_int() {
                if let Some(x) = t.to_i64().into_iter().find(|&x| i32::try_from(x).is_err()) {
                    return Err(PassError::Value {
                        value: val.name.clone(),
                        reason: format!("integer constant {x} does not fit in i32, WebGPU's widest integer"),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Makes every graph output own its storage: an output that would share storage with a graph input, a weight
/// or another output (through aliases, or by being the same value) gets a copy node.
///
/// Establishes: for each graph output, the chain of `Alias` producers ends at a kernel output that no other
/// graph output reaches.
pub fn materialize_outputs(g: &mut Graph) -> Result<(), PassError> {
    let mut claimed = HashSet::new();
    for i in 0..g.outputs.len() {
        let v = g.outputs[i];
        let root = storage_root(g, v);
        let owned = g.value(root).producer.is_some() && claimed.insert(root);
        if owned {
            continue;
        }
        let ty = g.ty(v).clone();
        let copy = g.add_value(g.fresh_name(&g.value(v).name), Some(ty.clone()));
        let strides = wgslc_ir::contiguous_strides(&ty.shape).into_iter().map(|s| s as i64).collect();
        g.add_node(format!("output_copy_{i}"), Op::StridedCopy { offset: 0, strides }, vec![Some(v)], vec![copy])?;
        // The output keeps its name: swap names so plan.json reports the model's output name.
        let name = g.value(v).name.clone();
        g.value_mut(v).name = g.value(copy).name.clone();
        g.value_mut(copy).name = name;
        g.outputs[i] = copy;
        claimed.insert(copy);
    }
    Ok(())
}

/// Follows `Alias` producers (views) and `CacheWrite` producers (written in place over their cache) to the value
/// that owns the storage.
pub fn storage_root(g: &Graph, mut v: ValueId) -> ValueId {
    while let Some(p) = g.value(v).producer {
        let node = g.node(p);
        if !matches!(node.op, Op::Alias | Op::CacheWrite { .. }) {
            break;
        }
        v = node.inputs[0].expect("alias input");
    }
    v
}

/// Follows `Alias` producers only: the value `v` is a view of. Unlike [`storage_root`] it tells a cache written
/// in place (a `CacheWrite` output) from the cache as it was before the write.
pub fn alias_root(g: &Graph, mut v: ValueId) -> ValueId {
    while let Some(p) = g.value(v).producer {
        let node = g.node(p);
        if node.op != Op::Alias {
            break;
        }
        v = node.inputs[0].expect("alias input");
    }
    v
}

/// Merges MatMuls that read the same input with constant 2-D weights of the same K (Q, K and V projections) into
/// one MatMul over the weights concatenated along N, followed when every one has it by one Add of the
/// concatenated constant biases; each original result becomes a slice (a StridedCopy the scheduler folds into
/// its readers).
///
/// Requires: an inferred graph. Establishes: no two such siblings remain; values keep their types and names.
pub fn merge_sibling_matmuls(g: &mut Graph) -> Result<(), PassError> {
    use std::collections::BTreeMap;
    // Siblings share A, the weight's dtype and its kind: dense `[K, N]` constants, or block-quantized `[N, K]`
    // constants read through a transpose (MatMulNBits), whose rows are concatenated instead.
    let mut by_input: BTreeMap<(ValueId, DType, bool), Vec<NodeId>> = BTreeMap::new();
    for n in g.topo_order()? {
        let node = g.node(n);
        if node.op != Op::MatMul {
            continue;
        }
        let (Some(a), Some(w)) = (node.inputs[0], node.inputs[1]) else { continue };
        let wt = g.ty(w);
        if wt.rank() != 2 || !wt.dtype.is_float() || g.ty(a).rank() < 2 {
            continue;
        }
        if g.const_data(w).is_some_and(|t| matches!(t.data, wgslc_ir::Data::F32(_))) {
            by_input.entry((a, wt.dtype, false)).or_default().push(n);
        } else if quantized_transposed(g, w).is_some() {
            by_input.entry((a, wt.dtype, true)).or_default().push(n);
        }
    }
    for ((a, dtype, packed), group) in by_input {
        if group.len() < 2 {
            continue;
        }
        let k = g.ty(g.node(group[0]).inputs[1].unwrap()).shape[0];
        if group.iter().any(|&n| g.ty(g.node(n).inputs[1].unwrap()).shape[0] != k) {
            continue;
        }
        // The bias Add of each sibling, when every sibling's only reader is an Add of a constant [N] vector.
        let bias_of = |g: &Graph, n: NodeId| -> Option<(NodeId, ValueId)> {
            let out = g.node(n).outputs[0];
            let rs = g.consumers(out);
            let &[add] = rs.as_slice() else { return None };
            let an = g.node(add);
            if an.op != Op::Binary(BinaryOp::Add) || g.outputs.contains(&out) {
                return None;
            }
            let other = if an.inputs[0] == Some(out) { an.inputs[1]? } else { an.inputs[0]? };
            let n_cols = g.ty(out).shape.last().copied()?;
            (g.const_data(other).is_some() && g.ty(other).shape == [n_cols]).then_some((add, other))
        };
        let biases: Option<Vec<(NodeId, ValueId)>> = group.iter().map(|&n| bias_of(g, n)).collect();
        let widths: Vec<usize> = group.iter().map(|&n| g.ty(g.node(n).inputs[1].unwrap()).shape[1]).collect();
        let total: usize = widths.iter().sum();
        let base = g.node(group[0]).name.clone();
        let wv = if packed {
            // Quantized [N, K] constants: their rows one after the other, read through one transpose.
            let parts: Vec<&wgslc_ir::Blocks> = group
                .iter()
                .map(|&n| quantized_transposed(g, g.node(n).inputs[1].unwrap()).expect("checked above"))
                .collect();
            let Some(cat) = wgslc_ir::Blocks::concat_rows(&parts) else { continue };
            let data = wgslc_ir::Data::Blocks(std::sync::Arc::new(cat));
            let stored =
                Builder::new(g, &base).const_named("merged_weight", Tensor { dtype, shape: vec![total, k], data });
            let ty = TensorType::new(dtype, vec![k, total]);
            let op = Op::StridedCopy { offset: 0, strides: vec![1, k as i64] };
            Builder::new(g, &base).op_typed("merged_weight_t", op, &[Some(stored)], ty)?
        } else {
            // Concatenate the weights along N (row-major [K, total]).
            let mut wcat = vec![0f32; k * total];
            let mut col = 0;
            for (&n, &w) in group.iter().zip(&widths) {
                let t = g.const_data(g.node(n).inputs[1].unwrap()).unwrap().to_f64();
                for r in 0..k {
                    for c in 0..w {
                        wcat[r * total + col + c] = t[r * w + c] as f32;
                    }
                }
                col += w;
            }
            let data = wgslc_ir::Data::F32(wcat);
            Builder::new(g, &base).const_named("merged_weight", Tensor { dtype, shape: vec![k, total], data })
        };
        let out_dtype = g.ty(g.node(group[0]).outputs[0]).dtype;
        let mut shape = g.ty(a).shape.clone();
        *shape.last_mut().unwrap() = total;
        let ty = TensorType::new(out_dtype, shape.clone());
        let mut merged = Builder::new(g, &base).op_typed("merged", Op::MatMul, &[Some(a), Some(wv)], ty.clone())?;
        // The values the slices produce: the bias Adds' outputs, or the MatMuls' outputs.
        let mut results: Vec<ValueId> = group.iter().map(|&n| g.node(n).outputs[0]).collect();
        if let Some(bs) = &biases {
            let mut bcat = Vec::with_capacity(total);
            for &(_, b) in bs {
                bcat.extend(g.const_data(b).unwrap().to_f64().into_iter().map(|x| x as f32));
            }
            let mut b = Builder::new(g, &base);
            let bv = b.const_named("merged_bias", Tensor::f32(vec![total], bcat));
            let biased = b.value("merged_biased", Some(ty));
            b.op_into("merged_bias", Op::Binary(BinaryOp::Add), &[Some(merged), Some(bv)], vec![biased])?;
            merged = biased;
            results = bs.iter().map(|&(add, _)| g.node(add).outputs[0]).collect();
            for &(add, _) in bs {
                g.remove_node(add);
            }
        }
        for &n in &group {
            g.remove_node(n);
        }
        let strides: Vec<i64> = wgslc_ir::contiguous_strides(&shape).into_iter().map(|s| s as i64).collect();
        let mut start = 0i64;
        for (i, (&r, &w)) in results.iter().zip(&widths).enumerate() {
            let op = Op::StridedCopy { offset: start, strides: strides.clone() };
            Builder::new(g, &base).op_into(&format!("part{i}"), op, &[Some(merged)], vec![r])?;
            start += w as i64;
        }
    }
    Ok(())
}

/// The block-quantized `[N, K]` constant that `w` transposes, when `w` is exactly that (a MatMulNBits weight).
fn quantized_transposed(g: &Graph, w: ValueId) -> Option<&wgslc_ir::Blocks> {
    let p = g.value(w).producer?;
    let node = g.node(p);
    let src = node.inputs.first().copied().flatten()?;
    let blocks = g.const_data(src)?.data.blocks()?;
    let (s, ws) = (&g.ty(src).shape, &g.ty(w).shape);
    let transposes =
        matches!(&node.op, Op::StridedCopy { offset: 0, strides } if s.len() == 2 && *strides == [1, s[1] as i64]);
    (transposes && ws == &[s[1], s[0]] && blocks.row == s[1]).then_some(blocks)
}

/// Rewrites the RMSNorm pattern as exporters emit it — `Pow(x, 2) → ReduceMean(last axis, keepdims) → Add(ε) →
/// Sqrt → Reciprocal` (or `Div(1, ·)`) `→ Mul(x, ·)`, then optionally `Mul(·, w)` by a constant row of scales —
/// into one `LayerNorm { rms: true }` node (scale `w`, or ones), named after the nodes it replaces.
///
/// Requires: an inferred graph. Establishes: no such chain remains whose intermediates nothing else reads; the
/// chain's final value keeps its id, type and name.
pub fn fuse_rms_norm(g: &mut Graph) -> Result<(), PassError> {
    use wgslc_ir::{ReduceOp, UnaryOp};
    let scalar = |g: &Graph, v: Option<ValueId>| -> Option<f64> {
        let t = g.const_data(v?)?;
        (t.numel() == 1).then(|| t.to_f64()[0])
    };
    // The single reader of `v` (not a graph output), if it has exactly one.
    let only_reader = |g: &Graph, v: ValueId| -> Option<NodeId> {
        let rs = g.consumers(v);
        (rs.len() == 1 && !g.outputs.contains(&v)).then(|| rs[0])
    };
    // `n`'s other input when it is a binary `op` with `v` as one operand.
    let other = |g: &Graph, n: NodeId, op: BinaryOp, v: ValueId| -> Option<Option<ValueId>> {
        let node = g.node(n);
        if node.op != Op::Binary(op) || node.inputs.len() != 2 {
            return None;
        }
        match (node.inputs[0], node.inputs[1]) {
            (Some(a), b) if a == v => Some(b),
            (a, Some(b)) if b == v => Some(a),
            _ => None,
        }
    };
    for pow in g.topo_order()? {
        if !g.has_node(pow) {
            continue;
        }
        let pn = g.node(pow);
        if pn.op != Op::Binary(BinaryOp::Pow) || scalar(g, pn.inputs.get(1).copied().flatten()) != Some(2.0) {
            continue;
        }
        let Some(x) = pn.inputs.first().copied().flatten() else { continue };
        let xt = g.ty(x).clone();
        if !xt.dtype.is_float() || xt.rank() == 0 {
            continue;
        }
        let last = xt.rank() - 1;
        let d = xt.shape[last];
        let matched = (|| {
            let mean = only_reader(g, g.node(pow).outputs[0])?;
            let Op::Reduce { op: ReduceOp::Mean, axes: Some(axes), keepdims: true, .. } = &g.node(mean).op else {
                return None;
            };
            if axes.len() != 1 || axes[0] != last as i64 {
                return None;
            }
            let add = only_reader(g, g.node(mean).outputs[0])?;
            let eps = scalar(g, other(g, add, BinaryOp::Add, g.node(mean).outputs[0])?)?;
            let sqrt = only_reader(g, g.node(add).outputs[0])?;
            if g.node(sqrt).op != Op::Unary(UnaryOp::Sqrt) {
                return None;
            }
            let s = g.node(sqrt).outputs[0];
            let recip = only_reader(g, s)?;
            let r = g.node(recip);
            let is_recip = r.op == Op::Unary(UnaryOp::Reciprocal)
                || (r.op == Op::Binary(BinaryOp::Div)
                    && r.inputs.get(1) == Some(&Some(s))
                    && scalar(g, r.inputs.first().copied().flatten()) == Some(1.0));
            if !is_recip {
                return None;
            }
            let mul = only_reader(g, g.node(recip).outputs[0])?;
            if other(g, mul, BinaryOp::Mul, g.node(recip).outputs[0])? != Some(x) {
                return None;
            }
            let mut chain = vec![pow, mean, add, sqrt, recip, mul];
            let mut scale = None;
            let y = g.node(mul).outputs[0];
            if let Some(smul) = only_reader(g, y) {
                if let Some(Some(w)) = other(g, smul, BinaryOp::Mul, y) {
                    let wt = g.ty(w);
                    let row = wt.shape.iter().rev().skip(1).all(|&e| e == 1) && wt.shape.last() == Some(&d);
                    if g.const_data(w).is_some() && wt.dtype.is_float() && row && wt.rank() <= xt.rank() {
                        scale = Some(w);
                        chain.push(smul);
                    }
                }
            }
            Some((chain, eps, scale))
        })();
        let Some((chain, eps, scale)) = matched else { continue };
        let out = g.node(*chain.last().unwrap()).outputs[0];
        let name = chain.iter().map(|&n| g.node(n).name.clone()).collect::<Vec<_>>().join("+");
        let scale = match scale {
            Some(w) if g.ty(w).rank() == 1 => w,
            Some(w) => {
                let t = g.const_data(w).unwrap().to_f64().into_iter().map(|v| v as f32).collect();
                Builder::new(g, &name).const_named("scale", Tensor::f32(vec![d], t))
            }
            None => Builder::new(g, &name).const_named("scale", Tensor::f32(vec![d], vec![1.0; d])),
        };
        for &n in &chain {
            g.remove_node(n);
        }
        let op = Op::LayerNorm { axis: last as i64, epsilon: eps as f32, rms: true };
        g.add_node(name, op, vec![Some(x), Some(scale)], vec![out])?;
    }
    Ok(())
}

/// Moves a scalar factor off a MatMul operand onto its result: `MatMul(Mul(x, c), y)` → `Mul(MatMul(x, y), c)`
/// (and `Div(x, c)` likewise, either operand), for a constant float scalar `c` whose product only that MatMul
/// reads. The factor then runs in the product's epilogue, and the operand is read straight through its layout
/// ops, which keeps SDPA's scaled K (`K · √scale` before Kᵀ) foldable into the product's batch strides.
///
/// Requires: an inferred graph. Establishes: no MatMul operand is such a scaled value; the MatMul's output keeps
/// its id and name (it now holds the scaled product).
pub fn hoist_matmul_scalars(g: &mut Graph) -> Result<(), PassError> {
    for mut mm in g.topo_order()? {
        if g.node(mm).op != Op::MatMul {
            continue;
        }
        // Both operands may carry a factor; each hoist replaces the MatMul, so `mm` follows it.
        for slot in 0..2 {
            let Some(v) = g.node(mm).inputs.get(slot).copied().flatten() else { continue };
            let Some(p) = g.value(v).producer else { continue };
            let pn = g.node(p);
            let op = match pn.op {
                Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Div)) => op,
                _ => continue,
            };
            let (Some(&Some(x)), Some(&Some(c)), 2) = (pn.inputs.first(), pn.inputs.get(1), pn.inputs.len()) else {
                continue;
            };
            // The scalar is the divisor of a Div, either factor of a Mul.
            let (x, c) = match g.const_data(c) {
                Some(t) if t.numel() == 1 => (x, c),
                _ if op == BinaryOp::Mul && g.const_data(x).is_some_and(|t| t.numel() == 1) => (c, x),
                _ => continue,
            };
            let ok = g.ty(v).dtype.is_float()
                && g.ty(c).dtype.is_float()
                && g.ty(x).shape == g.ty(v).shape
                && g.consumers(v) == [mm]
                && !g.outputs.contains(&v);
            if !ok {
                continue;
            }
            let out = g.node(mm).outputs[0];
            let name = g.node(mm).name.clone();
            let out_ty = g.ty(out).clone();
            let raw = Builder::new(g, &name).value("unscaled", Some(out_ty));
            let mut inputs = g.node(mm).inputs.clone();
            inputs[slot] = Some(x);
            g.remove_node(mm);
            g.remove_node(p);
            let mut b = Builder::new(g, &name);
            mm = b.op_into("", Op::MatMul, &inputs, vec![raw])?;
            b.op_into(&format!("scale{slot}"), Op::Binary(op), &[Some(raw), Some(c)], vec![out])?;
        }
    }
    Ok(())
}

/// Rewrites rotary embedding's rotate-half as exporters emit it — `Concat(Neg(x[..., h:]), x[..., :h])` along the
/// last axis of an `x` that is 2h wide, the slices being StridedCopy views after inference — into one
/// `RotateHalf(x)`, which an elementwise kernel reads as one load at a rotated coordinate.
///
/// Requires: an inferred graph. Establishes: no such Concat remains whose slices and Neg nothing else reads; the
/// Concat's output keeps its id and name.
pub fn fuse_rotate_half(g: &mut Graph) -> Result<(), PassError> {
    use wgslc_ir::UnaryOp;
    let only_reader = |g: &Graph, v: ValueId, r: NodeId| g.consumers(v) == [r] && !g.outputs.contains(&v);
    // The source and start of a StridedCopy that takes a contiguous run of `src`'s last axis, whole elsewhere.
    let last_axis_slice = |g: &Graph, v: ValueId| -> Option<(ValueId, i64)> {
        let p = g.value(v).producer?;
        let Op::StridedCopy { offset, strides } = &g.node(p).op else { return None };
        let src = g.node(p).inputs.first().copied().flatten()?;
        let (ss, vs) = (&g.ty(src).shape, &g.ty(v).shape);
        let cs: Vec<i64> = wgslc_ir::contiguous_strides(ss).into_iter().map(|s| s as i64).collect();
        let r = ss.len();
        if r == 0 || r != vs.len() || strides.len() != r {
            return None;
        }
        let whole = (0..r - 1).all(|d| ss[d] == vs[d] || ss[d] == 1);
        let strided = (0..r).all(|d| vs[d] == 1 || strides[d] == cs[d]);
        (whole && strided && *offset >= 0 && *offset < ss[r - 1] as i64).then_some((src, *offset))
    };
    for cat in g.topo_order()? {
        if !g.has_node(cat) {
            continue;
        }
        let node = g.node(cat);
        let Op::Concat { axis } = node.op else { continue };
        let out = node.outputs[0];
        let rank = g.ty(out).rank();
        let (Some(a), Some(b)) = (node.inputs.first().copied().flatten(), node.inputs.get(1).copied().flatten()) else {
            continue;
        };
        if node.inputs.len() != 2 || rank == 0 || axis as usize != rank - 1 || !g.ty(out).dtype.is_float() {
            continue;
        }
        let matched = (|| {
            let neg = g.value(a).producer?;
            if g.node(neg).op != Op::Unary(UnaryOp::Neg) {
                return None;
            }
            let hi = g.node(neg).inputs.first().copied().flatten()?;
            let (x, hi_start) = last_axis_slice(g, hi)?;
            let (x2, lo_start) = last_axis_slice(g, b)?;
            let w = *g.ty(x).shape.last()?;
            let h = *g.ty(hi).shape.last()?;
            let ok = x == x2
                && w == 2 * h
                && *g.ty(b).shape.last()? == h
                && hi_start == h as i64
                && lo_start == 0
                && g.ty(x).shape == g.ty(out).shape
                && only_reader(g, hi, neg)
                && only_reader(g, a, cat)
                && only_reader(g, b, cat);
            let (s_hi, s_lo) = (g.value(hi).producer?, g.value(b).producer?);
            ok.then_some((x, [s_hi, neg, s_lo]))
        })();
        let Some((x, removed)) = matched else { continue };
        let name = g.node(cat).name.clone();
        g.remove_node(cat);
        for n in removed {
            g.remove_node(n);
        }
        g.add_node(format!("{name}/rotate_half"), Op::RotateHalf, vec![Some(x)], vec![out])?;
    }
    Ok(())
}

/// Bytes of value `v`'s elements in storage (a narrow constant's packed size: [`crate::narrow_of`]).
pub fn stored_bytes(g: &Graph, v: ValueId) -> u64 {
    let numel = g.ty(v).numel();
    match crate::narrow_of(g, v) {
        Some(n) => n.bytes(numel),
        None => numel as u64 * storage_of(g.ty(v).dtype).map_or(4, Storage::bytes),
    }
}

/// Stores K-major the constant weights of one-row products too narrow to fill the GPU as exporters lay them out.
///
/// A one-row product (a decode step's projection) reads B once and is bound by that read. Over row-major B
/// (`[K, N]`, a Linear's weight as exported) its lanes take neighbouring outputs, so a product with few outputs
/// (a down projection's 896 over K = 4864) has few workgroups: [`gemv_tiling`](crate::gemv_tiling) gives it 112
/// on a GPU that wants [`GEMV_WORKGROUPS`](crate::GEMV_WORKGROUPS). Over K-major B the lanes walk K along one
/// output, and the same product has 448. So such a weight is stored transposed (`[N, K]`) and read through a
/// transposing view that the scheduler folds into every reader's strides.
///
/// Requires: a legalized graph. Establishes: every reader of a transposed weight reads the same values as before
/// (through a `StridedCopy` of the transposed constant); only 2-D f32 constants whose readers are all MatMuls
/// reading them as B, one of them a one-row product that gets more workgroups K-major, are transposed.
pub fn kmajor_weights(g: &mut Graph) -> Result<(), PassError> {
    kmajor_weights_among(g, &|_| true)
}

/// The name [`kmajor_weights`] gives the K-major copy of the constant named `name`.
pub fn kmajor_name(name: &str) -> String {
    format!("{name}.kmajor")
}

/// [`kmajor_weights`] for the constants whose name `allow` passes only (the others keep their stored layout):
/// parts of one artifact that share their weights store the same ones K-major.
pub fn kmajor_weights_among(g: &mut Graph, allow: &dyn Fn(&str) -> bool) -> Result<(), PassError> {
    use crate::{gemv_tiling, Target, GEMV_WORKGROUPS};
    let mut chosen = Vec::new();
    for v in g.value_ids() {
        let Some(t) = g.const_data(v) else { continue };
        if !t.dtype.is_float() || t.shape.len() != 2 || g.outputs.contains(&v) || !allow(&g.value(v).name) {
            continue;
        }
        let (k, n) = (t.shape[0], t.shape[1]);
        let readers = g.consumers(v);
        let as_b = |r: &NodeId| {
            let node = g.node(*r);
            node.op == Op::MatMul && node.inputs[1] == Some(v) && node.inputs[0] != Some(v)
        };
        if readers.is_empty() || !readers.iter().all(as_b) || k < 2 {
            continue;
        }
        let one_row = readers.iter().any(|&r| {
            let a = g.ty(g.node(r).inputs[0].expect("A"));
            a.rank() >= 1 && a.shape[..a.rank() - 1].iter().product::<usize>() == 1
        });
        let row_major = gemv_tiling(n, k, 1, false, n % 4 == 0, Target::Gpu);
        let k_major = gemv_tiling(n, k, 1, true, false, Target::Gpu);
        let wgs = |t: crate::GemvTiling| n.div_ceil(t.cols);
        if one_row && wgs(row_major) < GEMV_WORKGROUPS && wgs(k_major) > wgs(row_major) {
            chosen.push(v);
        }
    }
    for v in chosen {
        let t = g.const_data(v).expect("a constant").clone();
        let (k, n) = (t.shape[0], t.shape[1]);
        let wgslc_ir::Data::F32(w) = &t.data else { continue };
        let wt: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
        let name = g.value(v).name.clone();
        // The dtype stays (a float16 weight is stored narrow either way round).
        let tensor = wgslc_ir::Tensor { dtype: t.dtype, shape: vec![n, k], data: wgslc_ir::Data::F32(wt) };
        let stored = g.add_const(kmajor_name(&name), tensor);
        let view = g.add_value(format!("{name}.kmajor_view"), Some(g.ty(v).clone()));
        g.add_node(
            format!("{name}/kmajor"),
            Op::StridedCopy { offset: 0, strides: vec![1, k as i64] },
            vec![Some(stored)],
            vec![view],
        )?;
        // Every reader: all of them MatMuls reading it as B.
        for r in g.consumers(v) {
            let mut inputs = g.node(r).inputs.clone();
            inputs[1] = Some(view);
            g.set_inputs(r, inputs);
        }
    }
    Ok(())
}
