//! What the passes ask of an op, answered by one table ([`Op::props`]): an arm per op (the import-level and
//! composite ops by their patterns), so that a new op states everything about itself in one place and no two
//! predicates can disagree about the same op (as `is_pointwise` and a second elementwise predicate once did about
//! Trilu).

use crate::Op;

/// Where an op stands in the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Mirrors ONNX, parameters possibly still inputs: shape inference rewrites it into resolved ops.
    ImportLevel,
    /// Expanded by `wgslc_passes::expand` into simpler ops during shape inference.
    Composite,
    /// May reach the scheduler and the emitter.
    Resolved,
}

/// An op's row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpProps {
    pub stage: Stage,
    /// Computed one output element at a time from its inputs at the same (broadcast) coordinates: it joins
    /// elementwise groups and epilogues, and reads its inputs through views.
    pub pointwise: bool,
    /// A layout copy (a strided or tiled read, a rotation within the last axis): grouped like a pointwise op,
    /// never an anchor.
    pub layout: bool,
    /// An anchor whose kernel applies an elementwise epilogue (the group's pointwise ops) before storing.
    pub epilogue: bool,
}

const IMPORT: OpProps = OpProps { stage: Stage::ImportLevel, pointwise: false, layout: false, epilogue: false };
const COMPOSITE: OpProps = OpProps { stage: Stage::Composite, ..IMPORT };
const KERNEL: OpProps = OpProps { stage: Stage::Resolved, ..IMPORT };
const POINTWISE: OpProps = OpProps { pointwise: true, ..KERNEL };
const LAYOUT: OpProps = OpProps { layout: true, ..KERNEL };
const ANCHOR: OpProps = OpProps { epilogue: true, ..KERNEL };

impl Op {
    /// The table.
    pub fn props(&self) -> OpProps {
        // Ops resolved once a parameter that may arrive as an input is known.
        let resolved_when = |known: bool| if known { KERNEL } else { IMPORT };
        match self {
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } => POINTWISE,
            // Resolved once `k` is known; pointwise (a mask by coordinates) either way.
            Op::Trilu { k, .. } => OpProps { pointwise: true, ..resolved_when(k.is_some()) },
            Op::StridedCopy { .. } | Op::TileCopy | Op::RotateHalf => LAYOUT,
            Op::MatMul | Op::Gemm { .. } | Op::Conv { .. } | Op::Softmax { .. } | Op::Gather { .. } => ANCHOR,
            // A 3-D window is pooled by an expansion into 2-D ones.
            Op::Pool { window, .. } if window.kernel.len() == 3 => COMPOSITE,
            Op::Pool { .. }
            | Op::GlobalPool(_)
            | Op::BatchNorm { .. }
            | Op::LayerNorm { .. }
            | Op::Concat { .. }
            | Op::Alias
            | Op::ArgReduce { .. }
            | Op::ArgChunks { .. }
            | Op::ArgMerge { .. }
            | Op::Sample
            | Op::CacheWrite { .. }
            | Op::GatherBlocks { .. }
            | Op::Recurrence(_)
            | Op::GatherElements { .. }
            | Op::Scatter { .. } => KERNEL,
            Op::Reduce { axes, .. } => resolved_when(axes.is_some()),
            Op::CumSum { axis, .. } => resolved_when(axis.is_some()),
            Op::Pad { pads, .. } => resolved_when(pads.is_some()),
            Op::TopK { k, .. } => resolved_when(k.is_some()),
            crate::composite!() => COMPOSITE,
            crate::import_only!() => IMPORT,
        }
    }

    /// Whether this op may reach the emitter (see the module doc of `ops`).
    pub fn is_resolved(&self) -> bool {
        self.props().stage == Stage::Resolved
    }

    /// Whether shape inference expands this op (passes/src/expand/).
    pub fn is_composite(&self) -> bool {
        self.props().stage == Stage::Composite
    }

    /// Ops computed one output element at a time from inputs at the same coordinates.
    pub fn is_pointwise(&self) -> bool {
        self.props().pointwise
    }

    /// Anchors whose kernels apply an elementwise epilogue before storing.
    pub fn takes_epilogue(&self) -> bool {
        self.props().epilogue
    }

    /// Ops the scheduler puts in elementwise groups (pointwise ops and layout copies), never anchors.
    pub fn in_elementwise_group(&self) -> bool {
        let p = self.props();
        p.pointwise || p.layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AutoPad, BinaryOp, PoolKind, Window};

    fn pool(dims: usize) -> Op {
        let window = Window {
            kernel: vec![2; dims],
            strides: vec![1; dims],
            pads: vec![0; 2 * dims],
            dilations: vec![1; dims],
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        Op::Pool { kind: PoolKind::Max, window, count_include_pad: false }
    }

    #[test]
    fn rows_of_the_table() {
        let add = Op::Binary(BinaryOp::Add);
        assert!(add.is_pointwise() && add.is_resolved() && add.in_elementwise_group() && !add.takes_epilogue());
        // Trilu is pointwise whether or not its `k` is known yet, and resolved only once it is.
        for k in [None, Some(0)] {
            let t = Op::Trilu { upper: true, k };
            assert!(t.is_pointwise());
            assert_eq!(t.is_resolved(), k.is_some());
        }
        assert!(Op::MatMul.takes_epilogue() && !Op::MatMul.in_elementwise_group());
        assert!(Op::RotateHalf.in_elementwise_group() && !Op::RotateHalf.is_pointwise());
        assert!(pool(2).is_resolved() && pool(3).is_composite() && !pool(3).is_resolved());
        assert!(Op::Lrn { size: 3, alpha: 1.0, beta: 1.0, bias: 1.0 }.is_composite());
        assert_eq!(Op::Reshape { allowzero: false }.props().stage, Stage::ImportLevel);
    }

    #[test]
    fn no_op_is_two_kinds_of_kernel() {
        let ops = [
            Op::Binary(BinaryOp::Mul),
            Op::Where,
            Op::Trilu { upper: false, k: Some(1) },
            Op::TileCopy,
            Op::RotateHalf,
            Op::MatMul,
            Op::Softmax { axis: 1, legacy: false, log: false },
            Op::Alias,
            pool(2),
        ];
        for op in ops {
            let p = op.props();
            let kinds = [p.pointwise, p.layout, p.epilogue].iter().filter(|&&b| b).count();
            assert!(kinds <= 1, "{} is {p:?}", op.name());
            assert!(kinds == 0 || p.stage != Stage::Composite, "{} is {p:?}", op.name());
        }
    }
}
