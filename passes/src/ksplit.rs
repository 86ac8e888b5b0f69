//! Products with a long K and few output tiles, computed as several products over parts of K, summed.

use crate::narrow::views_narrow_constant;
use crate::{product_tiling, PassError};
use wgslc_ir::{contiguous_strides, BinaryOp, Builder, DType, Graph, NodeId, Op, TensorType, ValueId};

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
    let t = product_tiling(m, nn, k, 1);
    let workgroups = m.div_ceil(t.tile) * nn.div_ceil(t.tile);
    if m < 2 || t.tile >= 64 || workgroups >= KSPLIT_BELOW_WORKGROUPS {
        return 1;
    }
    [8, 4, 2].into_iter().find(|&s| k.is_multiple_of(s) && k / s >= KSPLIT_MIN_K).unwrap_or(1)
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
pub fn split_k(g: &mut Graph) -> Result<(), PassError> {
    for n in g.topo_order()? {
        if let Some(plan) = plan(g, n) {
            rewrite(g, n, plan)?;
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

fn plan(g: &Graph, n: NodeId) -> Option<Split> {
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
    let parts = k_splits(rows, nn, k);
    (parts > 1).then_some(Split { a, b, bias, rows, k, nn, trans_b, parts })
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
    let part = |bld: &mut Builder, i: usize| {
        let view = Op::StridedCopy { offset: (i * s.rows * s.nn) as i64, strides: strides.clone() };
        bld.op_typed(&format!("part{i}"), view, &[Some(prod)], out_ty.clone())
    };
    let mut sum = part(&mut bld, 0)?;
    let terms = p - 1 + usize::from(s.bias.is_some());
    for i in 1..=terms {
        let term = if i < p { part(&mut bld, i)? } else { s.bias.expect("C") };
        let add = Op::Binary(BinaryOp::Add);
        sum = if i == terms {
            bld.op_into(&format!("sum{i}"), add, &[Some(sum), Some(term)], vec![out])?;
            out
        } else {
            bld.op_typed(&format!("sum{i}"), add, &[Some(sum), Some(term)], out_ty.clone())?
        };
    }
    Ok(())
}
