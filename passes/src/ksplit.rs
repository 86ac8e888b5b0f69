//! Products (and convolutions) with a long K and few output tiles, computed as several products over parts of K,
//! summed.

use crate::narrow::views_narrow_constant;
use crate::{product_tiling, PassError};
use wgslc_ir::{contiguous_strides, BinaryOp, Builder, DType, Data, Graph, NodeId, Op, Tensor, TensorType, ValueId};

/// The least K each part of a split product keeps ([`k_splits`]).
pub const KSPLIT_MIN_K: usize = 512;

/// Fewer workgroups than this under the scheduler's layout leave a large GPU idle (two per SM of an H100 or H200,
/// less the tail): a product with a long K is then split across workgroups ([`k_splits`]).
pub const KSPLIT_BELOW_WORKGROUPS: usize = 256;

/// Into how many parts a product of `m` rows by `nn` columns over K = `k` is split across workgroups (1: not
/// split). A product whose output gives fewer than [`KSPLIT_BELOW_WORKGROUPS`] tiles even in the scheduler's
/// K-split layouts (four slices a workgroup, tiles of 32 or 16: short of the 64x64 layout, [`product_tiling`])
/// runs as `S` batched products over K / S each, S the largest of 8, 4 and 2 that divides K and leaves each part
/// [`KSPLIT_MIN_K`]; the parts are summed by one elementwise kernel, which also takes the product's epilogue.
/// H200, fp32, µs of kernels (`scripts/gemm_micro.py --forms kn,split2,split4,split8`): 128×3072×768 (a
/// 128-token down projection, 96 tiles of 32) 93.7 → 60.2 (S 4); 32×4864×896 (a 32-token prefill's, 112 tiles of
/// 16) 94.7 → 40.5 (S 8); over K = 768 or 896 every split was slower or even (128×768×768 31.0 → 32.4 with S 2,
/// 43.4 with S 4; 32×896×4864 43.6 → 42.3, 66.4). 512×4864×896 (448 tiles of 32) was faster alone (350.1 →
/// 276.7, S 8) but the 512-token prefill with its 24 down projections so split was slower (43.2 → 44.0 ms): at
/// that many workgroups the GPU is full, and the split is left out.
pub fn k_splits(m: usize, nn: usize, k: usize) -> usize {
    k_splits_by(m, nn, k, 1, 1)
}

/// [`k_splits`] for `batches` products at once, each part of K a multiple of `unit` (a convolution's window).
fn k_splits_by(m: usize, nn: usize, k: usize, batches: usize, unit: usize) -> usize {
    let t = product_tiling(m, nn, k, batches);
    let workgroups = m.div_ceil(t.tile) * nn.div_ceil(t.tile) * batches;
    if m < 2 || t.tile >= 64 || workgroups >= KSPLIT_BELOW_WORKGROUPS {
        return 1;
    }
    [8, 4, 2].into_iter().find(|&s| k.is_multiple_of(s * unit) && k / s >= KSPLIT_MIN_K).unwrap_or(1)
}

/// Splits K of the products [`k_splits`] picks: `MatMul(A, B)` with a 2-D B (and A of any rank, its rows all
/// but the last axis), and `Gemm` with `alpha` 1, A not transposed and `beta` 1 where it has C. Each becomes
/// `MatMul(A', B')` over `[S, rows, K/S]` and `[S, K/S, N]` views of A and B (strided copies the scheduler
/// folds into the product's reads), its `S` parts read back through views of the result and summed by a chain
/// of Adds (plus Gemm's C) that writes the product's output value, so its readers and epilogue are unchanged.
///
/// Requires: a legalized graph, after narrow weights (a weight stored narrow is read by its product only: such
/// products are left whole, as are products whose A is an RMSNormalization they alone read). Establishes: every product it rewrites computes the same sums of the same terms,
/// grouped by part of K; f32 operands only; nothing else changes. Run only on graphs compiled at fixed shapes
/// (a ranged dim's probes must tile like the graph at its max).
///
/// Convolutions likewise ([`k_splits`] over output channels × positions, K = input channels × window): an
/// ungrouped `Conv` with a constant f32 weight (and bias) becomes a Conv of `S` groups, group `i` the convolution
/// over input channels `i·C/S..` (its weight the original's slice, stored group-major), whose `S` blocks of
/// output channels are summed (plus the bias) by the same chain of Adds. ResNet-18's late 3x3 convolutions
/// (K = 4608 over 512 channels of 7x7) are such products.
pub fn split_k(g: &mut Graph) -> Result<(), PassError> {
    for n in g.topo_order()? {
        if let Some(plan) = plan(g, n, None) {
            rewrite(g, n, plan)?;
        } else if let Some(plan) = plan_conv(g, n) {
            rewrite_conv(g, n, plan)?;
        }
    }
    Ok(())
}

/// One product [`split_k_ranged`] split: its node, its parts, and the K and N it was split at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KSplit {
    pub node: NodeId,
    pub parts: usize,
    pub k: usize,
    pub nn: usize,
}

/// [`split_k`] for a graph compiled with a ranged dim at its max: only the products `allow` passes (the driver's:
/// neither K nor B follows a dim), no convolutions. Returns what it split, in order, so that [`split_k_as`] can
/// split a probe of the same graph the same way: the probe then tiles as this graph, its kernels have the same
/// names and bindings, and the driver can read which workgroup counts follow the dim.
pub fn split_k_ranged(g: &mut Graph, allow: &dyn Fn(&Graph, NodeId) -> bool) -> Result<Vec<KSplit>, PassError> {
    let mut done = Vec::new();
    for n in g.topo_order()? {
        if !allow(g, n) {
            continue;
        }
        if let Some(plan) = plan(g, n, None) {
            done.push(KSplit { node: n, parts: plan.parts, k: plan.k, nn: plan.nn });
            rewrite(g, n, plan)?;
        }
    }
    Ok(done)
}

/// Splits the products `splits` names (from [`split_k_ranged`] on the graph at the dims' max) in `g`, a probe of
/// the same graph: the same nodes, in the same order, into the same parts, whatever its own rows would pick.
/// Refused (nothing is left half done that a caller keeps) when a node is not a product of the same K and N.
pub fn split_k_as(g: &mut Graph, splits: &[KSplit]) -> Result<(), PassError> {
    for s in splits {
        let split =
            g.has_node(s.node).then(|| plan(g, s.node, Some(s.parts))).flatten().filter(|p| (p.k, p.nn) == (s.k, s.nn));
        let Some(split) = split else {
            let name = if g.has_node(s.node) { g.node(s.node).name.clone() } else { format!("{:?}", s.node) };
            return Err(PassError::Node {
                node: name,
                op: "MatMul".into(),
                reason: "a ranged dim's probe does not split this product as the graph at the max does".into(),
            });
        };
        rewrite(g, s.node, split)?;
    }
    Ok(())
}

/// What one convolution's split looks like: its weight regrouped, its bias as a term of the sum.
struct ConvSplit {
    parts: usize,
    weight: Tensor,
    bias: Option<Tensor>,
}

fn plan_conv(g: &Graph, n: NodeId) -> Option<ConvSplit> {
    let node = g.node(n);
    let Op::Conv { group: 1, window } = &node.op else { return None };
    let (x, w) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let bias = node.inputs.get(2).copied().flatten();
    let (xt, wt, ot) = (g.ty(x), g.ty(w), g.ty(node.outputs[0]));
    if [xt, wt, ot].iter().any(|t| t.dtype != DType::F32) || !matches!(ot.rank(), 3 | 4) {
        return None;
    }
    let Data::F32(wd) = &g.const_data(w)?.data else { return None };
    let bias = match bias {
        Some(b) => match &g.const_data(b)?.data {
            Data::F32(v) => Some(v.clone()),
            _ => return None,
        },
        None => None,
    };
    let (cout, cin, taps) = (wt.shape[0], wt.shape[1], window.kernel.iter().product::<usize>());
    let positions: usize = ot.shape[2..].iter().product();
    let parts = k_splits_by(cout, positions, cin * taps, ot.shape[0], taps);
    if parts < 2 {
        return None;
    }
    // Group i's weights: output channel o over input channels i·cs.. of the original, in that order.
    let (cs, k) = (cin / parts, cin * taps);
    let mut regrouped = Vec::with_capacity(wd.len());
    for i in 0..parts {
        for o in 0..cout {
            let row = o * k + i * cs * taps;
            regrouped.extend_from_slice(&wd[row..row + cs * taps]);
        }
    }
    let mut wshape = wt.shape.clone();
    (wshape[0], wshape[1]) = (parts * cout, cs);
    let mut bshape = vec![cout];
    bshape.resize(ot.rank() - 1, 1);
    Some(ConvSplit { parts, weight: Tensor::f32(wshape, regrouped), bias: bias.map(|b| Tensor::f32(bshape, b)) })
}

fn rewrite_conv(g: &mut Graph, n: NodeId, s: ConvSplit) -> Result<(), PassError> {
    let node = g.node(n).clone();
    let Op::Conv { window, .. } = node.op else { unreachable!("planned on a Conv") };
    let (name, out, x) = (node.name.clone(), node.outputs[0], node.inputs[0]);
    let out_ty = g.ty(out).clone();
    let p = s.parts;
    g.remove_node(n);
    let mut bld = Builder::new(g, format!("{name}/ksplit"));
    let w = bld.const_named("weight", s.weight);
    let mut parts_shape = out_ty.shape.clone();
    parts_shape[1] *= p;
    let conv = Op::Conv { window, group: p };
    let prod = bld.op_typed("parts", conv, &[x, Some(w)], TensorType::new(DType::F32, parts_shape))?;
    // Part i: the i-th block of output channels of each image.
    let block: usize = out_ty.shape[1..].iter().product();
    let mut strides: Vec<i64> = contiguous_strides(&out_ty.shape).into_iter().map(|x| x as i64).collect();
    strides[0] = (p * block) as i64;
    let bias = s.bias.map(|b| bld.const_named("bias", b));
    sum_parts(&mut bld, p, block, &strides, prod, bias, out, &out_ty)
}

/// Part `i` of `prod` read back in the output's shape (`offset` i · `block`, `strides`), the parts summed in order
/// (plus `bias` last), the last Add writing `out`.
#[allow(clippy::too_many_arguments)]
fn sum_parts(
    bld: &mut Builder,
    p: usize,
    block: usize,
    strides: &[i64],
    prod: ValueId,
    bias: Option<ValueId>,
    out: ValueId,
    out_ty: &TensorType,
) -> Result<(), PassError> {
    let part = |bld: &mut Builder, i: usize| {
        let view = Op::StridedCopy { offset: (i * block) as i64, strides: strides.to_vec() };
        bld.op_typed(&format!("part{i}"), view, &[Some(prod)], out_ty.clone())
    };
    let mut sum = part(bld, 0)?;
    let terms = p - 1 + usize::from(bias.is_some());
    for i in 1..=terms {
        let term = if i < p { part(bld, i)? } else { bias.expect("bias") };
        let add = Op::Binary(BinaryOp::Add);
        if i == terms {
            bld.op_into(&format!("sum{i}"), add, &[Some(sum), Some(term)], vec![out])?;
        } else {
            sum = bld.op_typed(&format!("sum{i}"), add, &[Some(sum), Some(term)], out_ty.clone())?;
        }
    }
    Ok(())
}

/// What one product's split looks like.
struct Split {
    a: ValueId,
    b: ValueId,
    bias: Option<ValueId>,
    rows: usize,
    k: usize,
    nn: usize,
    trans_b: bool,
    parts: usize,
}

/// How `n` splits, if it is a product that can: into [`k_splits`]'s parts, or into `parts` where given.
fn plan(g: &Graph, n: NodeId, parts: Option<usize>) -> Option<Split> {
    let node = g.node(n);
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let (at, bt, ot) = (g.ty(a), g.ty(b), g.ty(node.outputs[0]));
    if [at, bt, ot].iter().any(|t| t.dtype != DType::F32) || bt.rank() != 2 || at.rank() < 2 {
        return None;
    }
    if [a, b].iter().any(|&v| views_narrow_constant(g, v)) {
        return None;
    }
    // An RMSNormalization read by this product alone is computed inside it (the scheduler's `Fold::RmsNorm`);
    // a view between them would give the norm a kernel of its own besides the parts' sum. Such products stay
    // whole (the split's gain there is unmeasured).
    let rms_a = g.value(a).producer.is_some_and(|p| matches!(g.node(p).op, Op::LayerNorm { rms: true, .. }));
    if rms_a && g.consumers(a) == [n] {
        return None;
    }
    let (trans_b, bias) = match node.op {
        Op::MatMul => (false, None),
        Op::Gemm { alpha: 1.0, beta, trans_a: false, trans_b } => {
            let c = node.inputs.get(2).copied().flatten();
            if c.is_some() && beta != 1.0 {
                return None;
            }
            (trans_b, c)
        }
        _ => return None,
    };
    let k = *at.shape.last()?;
    let rows: usize = at.shape[..at.rank() - 1].iter().product();
    let nn = if trans_b { bt.shape[0] } else { bt.shape[1] };
    let parts = parts.unwrap_or_else(|| k_splits(rows, nn, k));
    (parts > 1 && k.is_multiple_of(parts)).then_some(Split { a, b, bias, rows, k, nn, trans_b, parts })
}

fn rewrite(g: &mut Graph, n: NodeId, s: Split) -> Result<(), PassError> {
    let (name, out) = (g.node(n).name.clone(), g.node(n).outputs[0]);
    let out_ty = g.ty(out).clone();
    let (p, kp) = (s.parts, s.k / s.parts);
    let f32_ty = |shape: Vec<usize>| TensorType::new(DType::F32, shape);
    g.remove_node(n);
    let mut bld = Builder::new(g, format!("{name}/ksplit"));
    // Part i of K: A[r, i·kp + j] and B[i·kp + j, c] (B stored [N, K] under transB).
    let a_view = Op::StridedCopy { offset: 0, strides: vec![kp as i64, s.k as i64, 1] };
    let av = bld.op_typed("a_parts", a_view, &[Some(s.a)], f32_ty(vec![p, s.rows, kp]))?;
    let b_strides = if s.trans_b { vec![kp as i64, 1, s.k as i64] } else { vec![(kp * s.nn) as i64, s.nn as i64, 1] };
    let b_view = Op::StridedCopy { offset: 0, strides: b_strides };
    let bv = bld.op_typed("b_parts", b_view, &[Some(s.b)], f32_ty(vec![p, kp, s.nn]))?;
    let prod = bld.op_typed("parts", Op::MatMul, &[Some(av), Some(bv)], f32_ty(vec![p, s.rows, s.nn]))?;
    // Each part read back in the output's shape, summed in order; the last Add writes the product's value.
    let strides: Vec<i64> = contiguous_strides(&out_ty.shape).into_iter().map(|x| x as i64).collect();
    sum_parts(&mut bld, p, s.rows * s.nn, &strides, prod, s.bias, out, &out_ty)
}
