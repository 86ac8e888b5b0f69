//! Narrow weights: which constants stay narrow on the GPU (float16/bfloat16 pairs, block-quantized codes with
//! their scales; `wgslc_ir::narrow`), and how many bytes they take there.
//!
//! A narrow constant is decoded by the kernel that reads it, never copied out wide: the product kernels (tiled
//! and matrix-vector, every operand), Gather and GatherBlocks (the table), and every load of a fused elementwise
//! body (which covers elementwise kernels, epilogues, operand prologues, Concat's copies and layout copies that
//! stay kernels) read it through a loader the emitter generates per binding. Any other reader gets a float32
//! copy made at compile time ([`legalize_narrow_weights`]), so nothing reads a narrow buffer as if it were wide;
//! a kernel that did would not pass validation (the binding is `array<u32>`).

use crate::PassError;
use std::collections::HashSet;
use std::sync::Arc;
use wgslc_ir::{BlockLayout, DType, Data, Graph, NodeId, Op, Tensor, ValueId};

/// How a constant is laid out on the GPU when narrower than four bytes an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Narrow {
    /// float16 or bfloat16 encodings, two a word, element `i` in half `i % 2` (low first) of word `i / 2`.
    Half(DType),
    /// Block-quantized codes, scales and zero points.
    Blocks(BlockLayout),
}

impl Narrow {
    /// Bytes of a constant of `numel` elements.
    pub fn bytes(self, numel: usize) -> u64 {
        match self {
            Narrow::Half(_) => numel.div_ceil(2) as u64 * 4,
            Narrow::Blocks(l) => l.words as u64 * 4,
        }
    }
}

/// The narrow layout of value `v`, if it is a narrow constant: block-quantized data, or a float16/bfloat16
/// constant (whose host values lie on the type's grid).
pub fn narrow_of(g: &Graph, v: ValueId) -> Option<Narrow> {
    let t = g.const_data(v)?;
    match (&t.data, t.dtype) {
        (Data::Blocks(b), _) => Some(Narrow::Blocks(b.layout())),
        (Data::F32(_), d @ (DType::F16 | DType::BF16)) => Some(Narrow::Half(d)),
        _ => None,
    }
}

/// Whether `v` is a narrow constant or a view of one (through reshapes and layout copies).
pub(crate) fn views_narrow_constant(g: &Graph, mut v: ValueId) -> bool {
    loop {
        if narrow_of(g, v).is_some() {
            return true;
        }
        match g.value(v).producer.map(|p| g.node(p)) {
            Some(node) if matches!(node.op, Op::Alias | Op::StridedCopy { .. }) => match node.inputs[0] {
                Some(src) => v = src,
                None => return false,
            },
            _ => return false,
        }
    }
}

/// Whether node `n` reads input `slot` through a loader that decodes narrow storage (see the module doc), or
/// passes it on as a view whose readers are then what counts (`None`).
fn reads_narrow(g: &Graph, n: NodeId, slot: usize) -> Option<bool> {
    Some(match &g.node(n).op {
        Op::Alias | Op::StridedCopy { .. } => return None,
        Op::MatMul | Op::Gemm { .. } => slot <= 2,
        Op::Gather { .. } => slot == 0,
        Op::GatherBlocks { .. } => slot + 1 < g.node(n).inputs.len(),
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::Cast { .. }
        | Op::Trilu { .. }
        | Op::RotateHalf
        | Op::TileCopy
        | Op::Concat { .. } => true,
        _ => false,
    })
}

/// Whether every reader of `v`, through views, decodes narrow storage.
fn all_readers_decode(g: &Graph, v: ValueId, seen: &mut HashSet<ValueId>) -> bool {
    if !seen.insert(v) {
        return true;
    }
    g.consumers(v).into_iter().all(|n| {
        let node = g.node(n);
        node.inputs.iter().enumerate().filter(|(_, i)| **i == Some(v)).all(|(slot, _)| match reads_narrow(g, n, slot) {
            Some(ok) => ok,
            None => node.outputs.iter().all(|&o| !g.outputs.contains(&o) && all_readers_decode(g, o, seen)),
        })
    })
}

/// Gives every narrow constant that some reader cannot decode a float32 form instead: its values as the kernels
/// would decode them, dtype float32 (which every kernel reads as the narrow type's values; no run-time cast
/// depends on it, since a float16 value converted to float32 is unchanged).
///
/// Requires: a legalized graph. Establishes: every narrow constant ([`narrow_of`]) is read only by nodes whose
/// kernels decode it, directly or through views.
pub fn legalize_narrow_weights(g: &mut Graph) -> Result<(), PassError> {
    let narrow: Vec<ValueId> = g.value_ids().filter(|&v| narrow_of(g, v).is_some()).collect();
    for v in narrow {
        if !g.outputs.contains(&v) && all_readers_decode(g, v, &mut HashSet::new()) {
            continue;
        }
        let t = g.const_data(v).expect("a constant");
        let wide = match &t.data {
            Data::Blocks(b) => b.decode(),
            Data::F32(x) => x.clone(),
            _ => unreachable!("narrow constants are floats"),
        };
        let tensor = Tensor { dtype: DType::F32, shape: t.shape.clone(), data: Data::F32(wide) };
        g.value_mut(v).data = Some(Arc::new(tensor));
        if let Some(ty) = g.value_mut(v).ty.as_mut() {
            ty.dtype = DType::F32;
        }
    }
    Ok(())
}

/// What `wgslc compile --weights` stores the products' weights and lookup tables as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightFormat {
    /// As the model has them.
    #[default]
    Keep,
    /// float16.
    F16,
    /// 8-bit codes in blocks along K, one float16 scale per block, symmetric.
    Q8,
    /// 4-bit codes likewise.
    Q4,
}

impl WeightFormat {
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Keep => "keep",
            WeightFormat::F16 => "f16",
            WeightFormat::Q8 => "q8",
            WeightFormat::Q4 => "q4",
        }
    }

    fn bits(self) -> Option<u32> {
        match self {
            WeightFormat::Q8 => Some(8),
            WeightFormat::Q4 => Some(4),
            WeightFormat::Keep | WeightFormat::F16 => None,
        }
    }
}

/// How one weight was stored by [`narrow_weights`], and what that cost in accuracy.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightChange {
    pub name: String,
    pub shape: Vec<usize>,
    /// `f16`, `q8` or `q4`.
    pub format: &'static str,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The largest |stored − original| over the weight's elements.
    pub max_abs_error: f64,
    /// The root mean square of stored − original, over the original's root mean square.
    pub rel_rms_error: f64,
}

/// The axis a weight must be quantized along for every one of its readers (their K: a product's reduction axis,
/// a table's rows), or `None` when a reader is none of these or two disagree. A table read only by lookups
/// qualifies when its rows are wider than 256 (an embedding's hidden size): narrower tables (rotary cos/sin, a
/// position's few features) are not weights.
fn weight_axis(g: &Graph, c: ValueId) -> Option<usize> {
    let mut lookups_only = true;
    let shape = &g.ty(c).shape;
    let mut axis = None;
    let mut agree = |a: usize| match axis {
        None => {
            axis = Some(a);
            true
        }
        Some(b) => a == b,
    };
    let readers = g.consumers(c);
    if readers.is_empty() || g.outputs.contains(&c) {
        return None;
    }
    for r in readers {
        let node = g.node(r);
        let slots: Vec<usize> = (0..node.inputs.len()).filter(|&i| node.inputs[i] == Some(c)).collect();
        lookups_only &= matches!(node.op, Op::Gather { .. });
        let ok = match (&node.op, slots.as_slice()) {
            (Op::MatMul, [1]) if shape.len() == 2 => agree(0),
            (Op::Gemm { trans_b, .. }, [1]) if shape.len() == 2 => agree(if *trans_b { 1 } else { 0 }),
            (Op::Gather { axis: 0 }, [0]) if shape.len() >= 2 => agree(shape.len() - 1),
            (Op::StridedCopy { offset: 0, strides }, [0]) if shape.len() == 2 && *strides == [1, shape[1] as i64] => {
                // A transpose read only as the B of products (a tied LM head, a weight stored K-major).
                let t = node.outputs[0];
                let rs = g.consumers(t);
                let as_b =
                    |&m: &NodeId| g.node(m).op == Op::MatMul && g.node(m).inputs == [g.node(m).inputs[0], Some(t)];
                !rs.is_empty() && rs.iter().all(as_b) && !g.outputs.contains(&t) && agree(1)
            }
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    if lookups_only && shape.last().is_none_or(|&w| w <= 256) {
        return None;
    }
    axis
}

/// Stores the weights of products and lookup tables as `format` (`wgslc compile --weights`), `block` elements a
/// block for the quantized formats. A weight qualifies when it is a float32 (or float16) constant whose readers
/// agree on the axis they reduce or look up along ([`weight_axis`]): every reader a MatMul or Gemm reading it as
/// B (directly or through a transpose) or a Gather along axis 0 reading it as an embedding table (a quantized
/// format also needs 16 elements along that axis). Run before the driver tabulates what a decode step computes
/// from its position: such tables are computed, not weights.
/// Quantized weights take blocks along that axis, stored last (a `[K, N]` weight becomes `[N, K]` read through
/// a transposing view, which the products fold into their strides); every other constant keeps its storage.
///
/// Requires: a legalized graph. Establishes: every qualifying weight is a narrow constant ([`narrow_of`]) that
/// its readers decode; returns what changed, weight by weight.
pub fn narrow_weights(g: &mut Graph, format: WeightFormat, block: usize) -> Result<Vec<WeightChange>, PassError> {
    let mut changes = Vec::new();
    if format == WeightFormat::Keep {
        return Ok(changes);
    }
    let candidates: Vec<ValueId> = g
        .value_ids()
        .filter(|&v| {
            g.const_data(v)
                .is_some_and(|t| matches!(t.data, Data::F32(_)) && matches!(t.dtype, DType::F32 | DType::F16))
        })
        .collect();
    for c in candidates {
        let Some(axis) = weight_axis(g, c) else { continue };
        let t = g.const_data(c).expect("a constant").clone();
        let Data::F32(x) = &t.data else { continue };
        let (k, quantized) = (t.shape[axis], format.bits().is_some());
        if (quantized && k < 16) || (!quantized && t.dtype == DType::F16) {
            continue;
        }
        let before = crate::stored_bytes(g, c);
        let name = g.value(c).name.clone();
        let (stored, decoded): (Tensor, Vec<f32>) = match format.bits() {
            None => {
                let h: Vec<f32> = x.iter().map(|&v| DType::F16.round(v, false)).collect();
                (Tensor { dtype: DType::F16, shape: t.shape.clone(), data: Data::F32(h.clone()) }, h)
            }
            Some(bits) => {
                // Rows along `axis`: a [K, N] product weight is transposed to [N, K] first.
                let (rows, shape) = if axis + 1 == t.shape.len() {
                    (x.clone(), t.shape.clone())
                } else {
                    let (kk, n) = (t.shape[0], t.shape[1]);
                    ((0..n * kk).map(|i| x[(i % kk) * n + i / kk]).collect(), vec![n, kk])
                };
                let q = wgslc_ir::Blocks::quantize(&rows, k, block, bits, DType::F16);
                let decoded_rows = q.decode();
                let decoded = if axis + 1 == t.shape.len() {
                    decoded_rows
                } else {
                    let (kk, n) = (t.shape[0], t.shape[1]);
                    (0..kk * n).map(|i| decoded_rows[(i % n) * kk + i / n]).collect()
                };
                (Tensor { dtype: t.dtype, shape, data: Data::Blocks(Arc::new(q)) }, decoded)
            }
        };
        let (mut max_abs, mut se, mut ss) = (0f64, 0f64, 0f64);
        for (&a, &b) in x.iter().zip(&decoded) {
            let d = (b as f64 - a as f64).abs();
            max_abs = max_abs.max(d);
            se += d * d;
            ss += a as f64 * a as f64;
        }
        let rel = if ss > 0.0 { (se / ss).sqrt() } else { 0.0 };
        let transposed = format.bits().is_some() && axis + 1 != t.shape.len();
        let v = if transposed {
            // Stored [N, K], read as the [K, N] the products expect through a transposing view.
            let kk = t.shape[0];
            let s = g.add_const(format!("{name}.{}", format.name()), stored);
            let view = g.add_value(g.fresh_name(&format!("{name}.{}_view", format.name())), Some(g.ty(c).clone()));
            let op = Op::StridedCopy { offset: 0, strides: vec![1, kk as i64] };
            g.add_node(format!("{name}/{}", format.name()), op, vec![Some(s)], vec![view])?;
            g.replace_uses(c, view);
            s
        } else {
            let dtype = stored.dtype;
            g.value_mut(c).data = Some(Arc::new(stored));
            if let Some(ty) = g.value_mut(c).ty.as_mut() {
                ty.dtype = dtype;
            }
            c
        };
        changes.push(WeightChange {
            name,
            shape: t.shape.clone(),
            format: format.name(),
            bytes_before: before,
            bytes_after: crate::stored_bytes(g, v),
            max_abs_error: max_abs,
            rel_rms_error: rel,
        });
    }
    Ok(changes)
}
