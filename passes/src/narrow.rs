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
