//! Graph passes. Each pass is a function over the IR whose doc comment states what it requires and what it
//! establishes; [`GRAPH_PASSES`] lists them in order, and [`verify`] checks the invariants of a [`Stage`] after
//! every one (in every build). **Architecture Invariant:** passes do no I/O.
//!
//! The analyses at the end of the pipeline return side tables ([`Schedule`], [`MemoryPlan`]) that the emitter
//! takes by type, so nothing can be emitted from an unscheduled or unplanned graph.

mod argsplit;
mod decoder;
mod dedupe;
mod eval;
mod expand;
mod infer;
mod ksplit;
mod lower;
mod memory;
mod narrow;
mod probe;
mod ranged;
pub mod view;
pub use memory::ALIGN;
mod schedule;
mod split;
mod tabulate;

pub use decoder::{
    convention_constants, prefill_head_on_last_row, CacheLayout, DecoderLayout, DecoderPlan, KvCache, StepKind,
    StepLayout, PREFILL,
};
pub use dedupe::{dedupe_constants, dedupe_nodes};
pub use infer::infer_shapes;
pub use ksplit::{k_splits, split_k, split_k_as, split_k_ranged, KSplit, KSPLIT_BELOW_WORKGROUPS, KSPLIT_MIN_K};
pub use lower::{
    alias_root, eliminate_dead_code, fuse_rms_norm, fuse_rotate_half, hoist_matmul_scalars, kmajor_name,
    kmajor_weights, kmajor_weights_among, legalize, lower_batchnorm, materialize_outputs, merge_sibling_matmuls,
    storage_of, storage_root, stored_bytes, Storage,
};
pub use memory::{
    binding_access, plan_memory, plan_memory_with, verify_plan, BufferKind, Lifetime, MemoryOptions, MemoryPlan,
    MemoryStats, PlannedBuffer, Slot,
};
pub use narrow::{legalize_narrow_weights, narrow_of, narrow_weights, Narrow, WeightChange, WeightFormat};
pub use probe::{probe, ProbeError, Probed, SoftmaxBias};
pub use ranged::{
    apply_ranges, find_ranged_axes, mask_ranges, probe_value, DimRange, Ranged, RangedAxes, RangedAxis, DIMS_INPUT,
};
pub use schedule::{
    anchor_kind, attention_tiling, concat_placement, expand_tile, gemv_tiling, group_io, grouped_conv_as_product,
    in_place_candidates, input_view, mm_batch_refinement, packed_gemv_tiling, product_tiling, read_spec,
    refined_strides, scalar_literal, scalar_op_data_slot, schedule, store_permutation, verify_schedule, AnchorKind,
    AttentionMode, AttentionTail, AttentionTiling, Boundary, ExpandTile, Fold, FoldKind, FoldedConv, FuseOptions,
    GemvTiling, InvertedResidualMode, KernelGroup, PackedGemvTiling, ProductTiling, Readers, Recipe, Schedule,
    StorePlacement, Target, ATTENTION_MAX_DK, ATTENTION_MAX_DV, ATTENTION_ROW_MAX_DK, ATTENTION_ROW_MAX_KEYS,
    ATTENTION_SELF_MAX_TOKENS, CPU_GEMV_MACS_PER_WORKGROUP, CPU_GEMV_WORKGROUPS, DEPTHWISE_MAX_CHANNELS,
    EXPAND_MAX_RECOMPUTE, EXPAND_STEP_CHANNELS, GEMV_WORKGROUPS, GROUPED_CONV_PRODUCT_MIN_ROWS, KSPLIT16_BELOW,
    MAX_LOADS_PER_STEP, PROJECT_MAX_CHANNELS, PROJECT_MAX_PER_THREAD, WORKGROUP_FLOATS,
};
pub use split::split_weights;
pub use tabulate::tabulate_bounded_input;

use wgslc_ir::{Graph, GraphError};

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("node '{node}' ({op}): {reason}")]
    Node { node: String, op: String, reason: String },
    #[error("value '{value}': {reason}")]
    Value { value: String, reason: String },
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Where in the pipeline a graph is, for [`verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Straight from a frontend: acyclic, inputs and weights typed.
    Imported,
    /// After [`infer_shapes`]: every live value typed, every node resolved.
    Inferred,
    /// After [`legalize`]: every runtime value has a storage type, outputs own their storage.
    Legalized,
}

/// Checks the invariants a graph must hold at `stage`.
pub fn verify(g: &Graph, stage: Stage) -> Result<(), PassError> {
    let order = g.topo_order()?;
    for &v in &g.inputs {
        if g.value(v).ty.is_none() || g.value(v).data.is_some() {
            return Err(PassError::Value {
                value: g.value(v).name.clone(),
                reason: "graph input without a type".into(),
            });
        }
    }
    for n in order {
        let node = g.node(n);
        let bad = |reason: &str| PassError::Node {
            node: node.name.clone(),
            op: node.op.name().into(),
            reason: reason.into(),
        };
        for &o in &node.outputs {
            if g.value(o).producer != Some(n) {
                return Err(bad("an output does not name this node as its producer"));
            }
        }
        if stage >= Stage::Inferred {
            if !node.op.is_resolved() {
                return Err(bad("op is not resolved after inference"));
            }
            if node.inputs.iter().flatten().chain(&node.outputs).any(|&v| g.value(v).ty.is_none()) {
                return Err(bad("a value has no type after inference"));
            }
        }
        if stage >= Stage::Legalized {
            if matches!(node.op, wgslc_ir::Op::BatchNorm { .. }) {
                return Err(bad("BatchNormalization survived lowering"));
            }
            for &v in node.inputs.iter().flatten().chain(&node.outputs) {
                storage_of(g.ty(v).dtype).map_err(|r| bad(&r))?;
            }
        }
    }
    Ok(())
}

/// One named step of the graph pipeline: a function over the IR and the [`Stage`] verified after it.
pub struct GraphPass {
    pub name: &'static str,
    /// What it does, for `--help` and the docs.
    pub about: &'static str,
    /// Whether it runs under `--no-fuse` (rewrites that only serve fusion do not, so one kernel stays per source op).
    pub without_fusion: bool,
    /// Whether it runs for [`Target::Cpu`] (rewrites that only shape work for a GPU do not).
    pub on_cpu: bool,
    pub run: fn(&mut Graph) -> Result<(), PassError>,
    pub establishes: Stage,
}

/// The passes from an imported graph to a legalized one, in order. Each has a name for `--dump-after`.
pub const GRAPH_PASSES: &[GraphPass] = &[
    GraphPass {
        name: "infer",
        about: "types, resolved ops, folded constants (shape subgraphs disappear here)",
        without_fusion: true,
        on_cpu: true,
        run: infer_shapes,
        establishes: Stage::Inferred,
    },
    GraphPass {
        name: "last_row",
        about: "a prefill step's LM head over its last real token only (the row generation reads), where its \
                logits are a 2-D product over the chunk's rows",
        without_fusion: true,
        on_cpu: true,
        run: prefill_head_on_last_row,
        establishes: Stage::Inferred,
    },
    GraphPass {
        name: "lower",
        about: "compile-time rewrites into fewer kernel kinds: BatchNormalization → scale and shift",
        without_fusion: true,
        on_cpu: true,
        run: lower_batchnorm,
        establishes: Stage::Inferred,
    },
    GraphPass {
        name: "dce",
        about: "nodes no output depends on removed",
        without_fusion: true,
        on_cpu: true,
        run: |g| {
            eliminate_dead_code(g);
            Ok(())
        },
        establishes: Stage::Inferred,
    },
    GraphPass {
        name: "merge",
        about: "one op on the same inputs computed once; sibling MatMuls on one input (Q, K, V) → one MatMul \
                over concatenated weights; the exporters' \
                RMSNorm chain → one RMSNormalization; scalar factors on MatMul operands → the product's epilogue; \
                rotary's Concat(Neg(slice), slice) → RotateHalf; a long ArgMax row (a vocabulary) → ArgChunks → \
                ArgMerge",
        without_fusion: false,
        on_cpu: true,
        run: |g| {
            dedupe_nodes(g)?;
            merge_sibling_matmuls(g)?;
            fuse_rms_norm(g)?;
            hoist_matmul_scalars(g)?;
            fuse_rotate_half(g)?;
            argsplit::split_arg_reduces(g)?;
            eliminate_dead_code(g);
            Ok(())
        },
        establishes: Stage::Inferred,
    },
    GraphPass {
        name: "legalize",
        about: "storage types (int64 → i32, bool → u32), outputs that own their buffers, identical constants \
                stored once",
        without_fusion: true,
        on_cpu: true,
        run: |g| {
            legalize(g)?;
            materialize_outputs(g)?;
            dedupe_constants(g);
            Ok(())
        },
        establishes: Stage::Legalized,
    },
    GraphPass {
        name: "kmajor",
        about: "the weights of one-row products too narrow to fill the GPU stored K-major (a decode step's \
                down and output projections), read through a transposing view; identical constants stored once \
                (a small tied LM head transposed back is its embedding table)",
        without_fusion: false,
        on_cpu: false,
        run: |g| {
            kmajor_weights(g)?;
            dedupe_constants(g);
            Ok(())
        },
        establishes: Stage::Legalized,
    },
    GraphPass {
        name: "narrow",
        about: "float16/bfloat16 and block-quantized weights kept narrow where every reader decodes them, \
                float32 elsewhere",
        without_fusion: true,
        on_cpu: true,
        run: legalize_narrow_weights,
        establishes: Stage::Legalized,
    },
];

/// The names of [`GRAPH_PASSES`], in order.
pub fn pass_names() -> Vec<&'static str> {
    GRAPH_PASSES.iter().map(|p| p.name).collect()
}

/// Runs the graph passes after `start_after` (all of them when `None`), up to and including `stop_after`, verifying
/// after each; passes that only serve fusion are skipped when `opts.fuse` is false, and those that only shape work
/// for a GPU when `opts.target` is [`Target::Cpu`].
pub fn run_passes(
    g: &mut Graph,
    start_after: Option<&str>,
    stop_after: Option<&str>,
    opts: &FuseOptions,
) -> Result<(), PassError> {
    let first = start_after.map_or(0, |s| GRAPH_PASSES.iter().position(|p| p.name == s).map_or(0, |i| i + 1));
    if first == 0 {
        verify(g, Stage::Imported)?;
    }
    for pass in &GRAPH_PASSES[first..] {
        if (opts.fuse || pass.without_fusion) && (opts.target == Target::Gpu || pass.on_cpu) {
            (pass.run)(g)?;
            verify(g, pass.establishes)?;
        }
        if stop_after == Some(pass.name) {
            break;
        }
    }
    Ok(())
}

/// Runs the graph passes (up to and including `stop_after`, if given) and verifies after each.
pub fn run_pipeline(g: &mut Graph, stop_after: Option<&str>) -> Result<(), PassError> {
    run_pipeline_with(g, stop_after, true)
}

/// [`run_pipeline`], with the passes that only serve fusion (`merge`) skipped when `fuse` is false, so
/// `--no-fuse` keeps one kernel per source op.
pub fn run_pipeline_with(g: &mut Graph, stop_after: Option<&str>, fuse: bool) -> Result<(), PassError> {
    run_passes(g, None, stop_after, &FuseOptions { fuse, ..FuseOptions::default() })
}

#[cfg(test)]
mod tests;
