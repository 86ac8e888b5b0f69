//! The op set. Two layers share this one enum, as tinygrad keeps one node type:
//! - *import-level* ops mirror ONNX (parameters such as axes or shapes may still be inputs);
//! - *resolved* ops ([`Op::Alias`], [`Op::StridedCopy`], [`Op::Reduce`] with resolved axes, …) are what shape
//!   inference rewrites them into once every parameter is a compile-time constant. Passes after inference and the
//!   emitter see only resolved ops; [`Op::is_resolved`] says which is which.

use crate::{AttentionAttrs, Cell, DType, PadMode, PoolKind, ResizeAttrs, RnnAttrs, Tensor, Window};

/// The import-level ops (see the module doc) as a pattern: `match op { import_level!() => …, … }`. Matches over
/// [`Op`] name every resolved op and this pattern instead of `_`, so a new op is a compile error wherever it must
/// be handled (docs/contributing.md, "Adding an op").
#[macro_export]
macro_rules! import_level {
    () => {
        $crate::import_only!() | $crate::composite!()
    };
}

/// The import-level ops that are not composite: shape inference resolves each into resolved ops (or folds it
/// away) rather than expanding it.
#[macro_export]
macro_rules! import_only {
    () => {
        $crate::Op::Clip
            | $crate::Op::Reshape { .. }
            | $crate::Op::Flatten { .. }
            | $crate::Op::Transpose { .. }
            | $crate::Op::Split { .. }
            | $crate::Op::Slice
            | $crate::Op::Unsqueeze
            | $crate::Op::Squeeze
            | $crate::Op::Expand
            | $crate::Op::Identity
            | $crate::Op::Dropout
            | $crate::Op::Tile
            | $crate::Op::CastLike { .. }
            | $crate::Op::Size
            | $crate::Op::EyeLike { .. }
            | $crate::Op::Shape { .. }
            | $crate::Op::ConstantOfShape(_)
            | $crate::Op::Range
    };
}

/// The composite ops, which shape inference expands into simpler ones (passes/src/expand/), as a pattern.
#[macro_export]
macro_rules! composite {
    () => {
        $crate::Op::Attention(_)
            | $crate::Op::DepthToSpace { .. }
            | $crate::Op::SpaceToDepth { .. }
            | $crate::Op::CenterCropPad
            | $crate::Op::OneHot { .. }
            | $crate::Op::LpNormalization { .. }
            | $crate::Op::Lrn { .. }
            | $crate::Op::GatherNd { .. }
            | $crate::Op::Resize(_)
            | $crate::Op::Hardmax { .. }
            | $crate::Op::RotaryEmbedding { .. }
            | $crate::Op::InstanceNorm { .. }
            | $crate::Op::GroupNorm { .. }
            | $crate::Op::ConvTranspose { .. }
            | $crate::Op::Rnn(_)
            | $crate::Op::Einsum { .. }
            | $crate::Op::QuantizeLinear { .. }
            | $crate::Op::DequantizeLinear { .. }
            | $crate::Op::DynamicQuantizeLinear
    };
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sqrt,
    Reciprocal,
    Exp,
    Log,
    Erf,
    Tanh,
    Sigmoid,
    Relu,
    /// GELU with the exact (erf) form.
    Gelu,
    /// GELU with the tanh approximation (`approximate="tanh"`).
    GeluTanh,
    LeakyRelu(f32),
    HardSigmoid(f32, f32),
    HardSwish,
    Clip(f32, f32),
    Not,
    IsNaN,
    Identity,
    Floor,
    Ceil,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Softplus,
    Softsign,
    Elu(f32),
    /// Selu(alpha, gamma).
    Selu(f32, f32),
    Celu(f32),
    ThresholdedRelu(f32),
    Mish,
    Sign,
    /// Round half to even.
    Round,
    /// IsInf(detect_positive, detect_negative).
    IsInf(bool, bool),
    /// Shrink(bias, lambd).
    Shrink(f32, f32),
    BitwiseNot,
    /// Swish(alpha): x · sigmoid(alpha · x).
    Swish(f32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    /// ONNX Mod: `fmod` (C's sign rule) or, for integers with fmod=0, Python's (sign of the divisor).
    Mod {
        fmod: bool,
    },
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    BitShiftLeft,
    BitShiftRight,
    /// PRelu(x, slope): x < 0 ? slope * x : x.
    PRelu,
}

impl BinaryOp {
    /// Comparisons and logic ops produce bool.
    pub fn returns_bool(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::LessOrEqual
                | BinaryOp::Greater
                | BinaryOp::GreaterOrEqual
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSum,
    LogSumExp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterReduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    // ---- elementwise ----
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `Where(cond, x, y)`.
    Where,
    /// `saturate` matters only for the 8-bit float types (ONNX's attribute): out-of-range values clamp to the
    /// type's largest finite value instead of becoming infinity or NaN.
    Cast {
        to: DType,
        saturate: bool,
    },
    /// Import-level Clip with optional `min`, `max` inputs; resolved into `Unary(Clip)`.
    Clip,

    // ---- contractions and windows ----
    /// Batched, broadcasting matrix product (numpy semantics).
    MatMul,
    /// `alpha * op(A) @ op(B) + beta * C`.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    Conv {
        window: Window,
        group: usize,
    },
    /// ConvTranspose(X, W [C_in, C_out / group, k…], B?): the gradient of Conv, expanded into a Conv (passes
    /// `expand`). `window.pads` may be absent (auto_pad, output_shape); `output_shape` holds the spatial sizes.
    ConvTranspose {
        window: Window,
        group: usize,
        output_padding: Vec<usize>,
        output_shape: Vec<usize>,
    },
    Pool {
        kind: PoolKind,
        window: Window,
        count_include_pad: bool,
    },
    /// GlobalAveragePool / GlobalMaxPool.
    GlobalPool(PoolKind),
    /// Inference-mode BatchNormalization; lowered into a per-channel scale and shift.
    BatchNorm {
        epsilon: f32,
    },

    // ---- reductions ----
    /// Softmax (or LogSoftmax when `log`) over `axis`. `legacy` is the opset < 13 form that flattens to 2-D at
    /// `axis`.
    Softmax {
        axis: i64,
        legacy: bool,
        log: bool,
    },
    /// LayerNormalization (or RMSNormalization when `rms`: no mean subtracted, no bias) over the trailing
    /// dimensions from `axis`; inputs X, Scale, optional B.
    LayerNorm {
        axis: i64,
        epsilon: f32,
        rms: bool,
    },
    /// ArgMax / ArgMin along `axis` (int64 output).
    ArgReduce {
        max: bool,
        axis: i64,
        keepdims: bool,
        select_last: bool,
    },
    /// The first half of a long ArgMax / ArgMin over the last axis (wgslc's own op, from the `merge` pass): the
    /// axis in chunks of `chunk` elements, each reduced to its best value and that value's index along the axis
    /// (as f32: exact, the axis being shorter than 2^24): output `[rows…, chunks, 2]`, float32. Ties within a
    /// chunk go to its first index (its last with `select_last`).
    ArgChunks {
        max: bool,
        select_last: bool,
        chunk: usize,
    },
    /// The second half: the best of each row's chunk pairs (`[rows…, chunks, 2]`), ties to the first chunk (the
    /// last with `select_last`), as the int64 index the ArgMax / ArgMin it replaces returns (shape `[rows…]`, or
    /// `[rows…, 1]` with `keepdims`).
    ArgMerge {
        max: bool,
        select_last: bool,
        keepdims: bool,
    },
    /// Trilu: keeps the upper (or lower) triangle of the last two dims from diagonal `k` (an input until
    /// inference resolves it).
    Trilu {
        upper: bool,
        k: Option<i64>,
    },
    /// Rotary embedding's rotate-half over the last axis (2h wide): element j is -x[j + h] for j < h, else
    /// x[j - h]; rewritten from exporters' Concat(Neg(Slice(x, h:)), Slice(x, :h)) (passes `fuse_rotate_half`).
    RotateHalf,
    /// GatherElements(data, indices) along `axis`.
    GatherElements {
        axis: i64,
    },
    /// CumSum (or CumProd when `prod`) along `axis`, resolved by inference.
    CumSum {
        axis: Option<i64>,
        exclusive: bool,
        reverse: bool,
        prod: bool,
    },
    /// Pad with a mode; `pads` (begins then ends, negative crops) is resolved by inference.
    Pad {
        mode: PadMode,
        pads: Option<Vec<i64>>,
        value: f32,
    },
    /// A reduction; `axes` is `None` at import when axes come as an input, and resolved (sorted, non-negative)
    /// by shape inference. An empty resolved list reduces nothing (ONNX's `noop_with_empty_axes`).
    Reduce {
        op: ReduceOp,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },

    // ---- layout (import-level) ----
    Reshape {
        allowzero: bool,
    },
    Flatten {
        axis: i64,
    },
    Transpose {
        perm: Option<Vec<usize>>,
    },
    Concat {
        axis: i64,
    },
    /// Split along `axis`; sizes from the `split` input, or `num_outputs` equal parts.
    Split {
        axis: i64,
    },
    /// Slice(data, starts, ends, axes?, steps?).
    Slice,
    Gather {
        axis: i64,
    },
    Unsqueeze,
    Squeeze,
    Expand,
    Identity,
    Dropout,
    Tile,
    CastLike {
        saturate: bool,
    },
    Size,
    EyeLike {
        k: i64,
        dtype: Option<DType>,
    },
    Shape {
        start: i64,
        end: Option<i64>,
    },
    ConstantOfShape(Tensor),
    Range,

    // ---- composites: expanded into the ops above by shape inference ----
    /// ONNX Attention (opsets 23–24).
    Attention(AttentionAttrs),
    /// LSTM / GRU / RNN as ONNX defines them (inputs X, W, R, B, sequence_lens, initial_h, then for LSTM
    /// initial_c and P; outputs Y, Y_h, Y_c), expanded into the input projection (one MatMul over every step) and
    /// a [`Op::Recurrence`].
    Rnn(Box<RnnAttrs>),
    /// QuantizeLinear(x, scale, zero_point?): saturate(round_half_even(x / scale) + zero_point) in the zero
    /// point's type (`output_dtype` when given, else uint8); per tensor, per `axis` or in blocks of `block_size`
    /// along it. Into a float8 or float4 type it is a Cast of x / scale + zero_point, `saturate` as Cast's.
    QuantizeLinear {
        axis: i64,
        block_size: usize,
        output_dtype: Option<DType>,
        saturate: bool,
    },
    /// DequantizeLinear(x, scale, zero_point?): (x − zero_point) · scale, per tensor, axis or block.
    DequantizeLinear {
        axis: i64,
        block_size: usize,
    },
    /// DynamicQuantizeLinear(x) → (y uint8, scale, zero_point): the scale and zero point that map [min(x, 0),
    /// max(x, 0)] onto 0..255.
    DynamicQuantizeLinear,
    /// Einsum over any number of operands, expanded into diagonals (Gather), sums (ReduceSum), Transposes and
    /// batched MatMuls.
    Einsum {
        equation: String,
    },
    /// The time loop of a recurrence, one workgroup per direction and batch element walking the steps.
    /// Inputs: the projected inputs with their biases `[D, T, B, G·H]`, the recurrent weights transposed
    /// `[D, H, G·H]`, the initial state `[S, D, B, H]` (h, then c for LSTM), peepholes `[D, 3H]`, sequence lengths
    /// `[B]`, and for GRU with linear_before_reset the recurrent bias of its h gate `[D, H]` (each but the first
    /// two optional). Outputs: Y `[T, D, B, H]` and the final state `[S, D, B, H]`.
    Recurrence(Box<RnnAttrs>),
    DepthToSpace {
        blocksize: usize,
        crd: bool,
    },
    SpaceToDepth {
        blocksize: usize,
        crd: bool,
    },
    CenterCropPad,
    /// TopK(X, K) → (values, indices); `k` is resolved by inference.
    TopK {
        axis: i64,
        largest: bool,
        k: Option<usize>,
    },
    /// wgslc's own (domain `wgslc`): draws one token id per row of logits (the last axis) for generation.
    /// Inputs: logits (float), temperature (float, one element), params (integers: top-k, seed) and a counter
    /// (integers; its last element, the token's position, keys the random numbers). Keeps the logits at or above
    /// the k-th largest (every logit when k is 0 or at least the row's length), then picks
    /// `argmax(logit / temperature + Gumbel noise)`, an exact draw from the softmax of the kept logits at that
    /// temperature; a temperature of 0 or less picks the largest logit (first on ties). The noise is a hash of
    /// (seed, counter, index), so a seed gives the same tokens on every device. Output: int64, the row's shape.
    Sample,
    /// wgslc's own (domain `wgslc`): a KV cache written in place for generation. Inputs: the cache, the new rows
    /// (the cache's shape but `n` along `axis`) and the first row to write them at (integers, one element,
    /// clamped to `0..=len - n`). The output is the cache with rows `row..row + n` along `axis` replaced, and it
    /// is the cache: it takes the cache's storage ([`CacheWrite`](Op::CacheWrite) is followed by storage roots),
    /// and its kernel writes only the new rows. So nothing may read the cache input after it; `--kv-cache` makes
    /// it the cache's only reader in its step. The rows after the new ones hold no token of the step, and every
    /// attention over the cache masks them out (`--kv-cache` proves it for each model before any pass runs), so a
    /// kernel may leave them out of its softmax: their weights are exact zeros.
    CacheWrite {
        axis: usize,
    },
    /// wgslc's own, made by `split_weights`: an embedding lookup (Gather along axis 0) over a table stored as
    /// blocks of rows, each within one storage binding. Inputs: the indices, then the blocks in order, every block
    /// but the last `rows` rows long. The output is Gather(Concat(blocks), indices): a negative index counts from
    /// the end, and one out of range is clamped into the table, as the Gather kernel does.
    GatherBlocks {
        rows: usize,
    },
    /// ScatterElements(data, indices, updates) along `axis`, or ScatterND when `axis` is None.
    Scatter {
        axis: Option<i64>,
        reduction: ScatterReduction,
    },
    /// OneHot(indices, depth, values) along `axis`.
    OneHot {
        axis: i64,
    },
    LpNormalization {
        axis: i64,
        p: i64,
    },
    /// LRN (local response normalization across channels, AlexNet/Inception v1):
    /// `y = x / (bias + alpha/size · Σ x²)^beta`, the sum over the `size` channels around each one.
    Lrn {
        size: usize,
        alpha: f32,
        beta: f32,
        bias: f32,
    },
    /// Resize(X, roi, scales, sizes): every opset's inputs in this one form (Upsample's too).
    Resize(ResizeAttrs),
    /// GatherND(data, indices): each index tuple (the last axis of `indices`) selects a slice of `data` after the
    /// first `batch_dims` axes, which `data` and `indices` share.
    GatherNd {
        batch_dims: usize,
    },
    /// Hardmax; `legacy` is the opset < 13 form that flattens to 2-D at `axis`.
    Hardmax {
        axis: i64,
        legacy: bool,
    },
    /// RotaryEmbedding(X, cos_cache, sin_cache, position_ids?) (opset 23): X as `[batch, heads, seq, head]`, or
    /// `[batch, seq, hidden]` of `num_heads` heads; the first `rotary_dim` elements of each head (all for 0)
    /// rotated by the cos and sin rows of each token's position (`position_ids` into `[positions, rotary/2]`
    /// caches, or the caches given per token as `[batch, seq, rotary/2]`), as halves or `interleaved` pairs.
    ///
    /// `doubled` is wgslc's own form (GroupQueryAttention's lowering builds it once for every layer): per-token
    /// caches `[batch, seq, rotary]` whose halves are alike, so that the rotation is `x · cos + rotate_half(x) ·
    /// sin`, one elementwise kernel that an attention kernel can fold; halves only, no `position_ids`.
    RotaryEmbedding {
        interleaved: bool,
        rotary_dim: usize,
        num_heads: usize,
        doubled: bool,
    },
    InstanceNorm {
        epsilon: f32,
    },
    GroupNorm {
        epsilon: f32,
        groups: usize,
    },

    // ---- resolved layout ----
    /// The output is the input reinterpreted with another shape (same elements, same order): no kernel, the
    /// memory planner gives both the same storage.
    Alias,
    /// `out[i] = in[offset + Σ coord_d(i) * strides[d]]` over the output's coordinates: Transpose, Slice
    /// (negative steps give negative strides), Expand (stride 0) and Split parts.
    StridedCopy {
        offset: i64,
        strides: Vec<i64>,
    },
    /// Resolved Tile: `out[c] = in[Σ (c_d mod in_d) * stride_d]`.
    TileCopy,
}

impl Op {
    /// A Cast with ONNX's default `saturate`.
    pub fn cast(to: DType) -> Op {
        Op::Cast { to, saturate: true }
    }

    /// The ONNX-style op name, for reports and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => match u {
                UnaryOp::Neg => "Neg",
                UnaryOp::Abs => "Abs",
                UnaryOp::Sqrt => "Sqrt",
                UnaryOp::Reciprocal => "Reciprocal",
                UnaryOp::Exp => "Exp",
                UnaryOp::Log => "Log",
                UnaryOp::Erf => "Erf",
                UnaryOp::Tanh => "Tanh",
                UnaryOp::Sigmoid => "Sigmoid",
                UnaryOp::Relu => "Relu",
                UnaryOp::Gelu | UnaryOp::GeluTanh => "Gelu",
                UnaryOp::LeakyRelu(_) => "LeakyRelu",
                UnaryOp::HardSigmoid(..) => "HardSigmoid",
                UnaryOp::HardSwish => "HardSwish",
                UnaryOp::Clip(..) => "Clip",
                UnaryOp::Not => "Not",
                UnaryOp::IsNaN => "IsNaN",
                UnaryOp::Identity => "Identity",
                UnaryOp::Floor => "Floor",
                UnaryOp::Ceil => "Ceil",
                UnaryOp::Sin => "Sin",
                UnaryOp::Cos => "Cos",
                UnaryOp::Tan => "Tan",
                UnaryOp::Asin => "Asin",
                UnaryOp::Acos => "Acos",
                UnaryOp::Atan => "Atan",
                UnaryOp::Sinh => "Sinh",
                UnaryOp::Cosh => "Cosh",
                UnaryOp::Asinh => "Asinh",
                UnaryOp::Acosh => "Acosh",
                UnaryOp::Atanh => "Atanh",
                UnaryOp::Softplus => "Softplus",
                UnaryOp::Softsign => "Softsign",
                UnaryOp::Elu(_) => "Elu",
                UnaryOp::Selu(..) => "Selu",
                UnaryOp::Celu(_) => "Celu",
                UnaryOp::ThresholdedRelu(_) => "ThresholdedRelu",
                UnaryOp::Mish => "Mish",
                UnaryOp::Sign => "Sign",
                UnaryOp::Round => "Round",
                UnaryOp::IsInf(..) => "IsInf",
                UnaryOp::Shrink(..) => "Shrink",
                UnaryOp::BitwiseNot => "BitwiseNot",
                UnaryOp::Swish(_) => "Swish",
            },
            Op::Binary(b) => match b {
                BinaryOp::Add => "Add",
                BinaryOp::Sub => "Sub",
                BinaryOp::Mul => "Mul",
                BinaryOp::Div => "Div",
                BinaryOp::Pow => "Pow",
                BinaryOp::Max => "Max",
                BinaryOp::Min => "Min",
                BinaryOp::Equal => "Equal",
                BinaryOp::Less => "Less",
                BinaryOp::LessOrEqual => "LessOrEqual",
                BinaryOp::Greater => "Greater",
                BinaryOp::GreaterOrEqual => "GreaterOrEqual",
                BinaryOp::And => "And",
                BinaryOp::Or => "Or",
                BinaryOp::Xor => "Xor",
                BinaryOp::Mod { .. } => "Mod",
                BinaryOp::BitwiseAnd => "BitwiseAnd",
                BinaryOp::BitwiseOr => "BitwiseOr",
                BinaryOp::BitwiseXor => "BitwiseXor",
                BinaryOp::BitShiftLeft | BinaryOp::BitShiftRight => "BitShift",
                BinaryOp::PRelu => "PRelu",
            },
            Op::Where => "Where",
            Op::Cast { .. } => "Cast",
            Op::Clip => "Clip",
            Op::MatMul => "MatMul",
            Op::Gemm { .. } => "Gemm",
            Op::Conv { .. } => "Conv",
            Op::ConvTranspose { .. } => "ConvTranspose",
            Op::Pool { kind: PoolKind::Max, .. } => "MaxPool",
            Op::Pool { kind: PoolKind::Avg, .. } => "AveragePool",
            Op::Pool { kind: PoolKind::Lp(_), .. } => "LpPool",
            Op::GlobalPool(PoolKind::Lp(_)) => "GlobalLpPool",
            Op::GlobalPool(PoolKind::Max) => "GlobalMaxPool",
            Op::GlobalPool(PoolKind::Avg) => "GlobalAveragePool",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::Softmax { log: false, .. } => "Softmax",
            Op::Softmax { log: true, .. } => "LogSoftmax",
            Op::LayerNorm { rms: false, .. } => "LayerNormalization",
            Op::LayerNorm { rms: true, .. } => "RMSNormalization",
            Op::ArgReduce { max: true, .. } => "ArgMax",
            Op::ArgReduce { max: false, .. } => "ArgMin",
            Op::ArgChunks { .. } => "ArgChunks",
            Op::ArgMerge { .. } => "ArgMerge",
            Op::Trilu { .. } => "Trilu",
            Op::RotateHalf => "RotateHalf",
            Op::GatherElements { .. } => "GatherElements",
            Op::CumSum { prod: false, .. } => "CumSum",
            Op::CumSum { prod: true, .. } => "CumProd",
            Op::Pad { .. } => "Pad",
            Op::Attention(_) => "Attention",
            Op::Rnn(a) => match a.cell {
                Cell::Lstm { .. } => "LSTM",
                Cell::Gru { .. } => "GRU",
                Cell::Rnn => "RNN",
            },
            Op::Recurrence(_) => "Recurrence",
            Op::Einsum { .. } => "Einsum",
            Op::QuantizeLinear { .. } => "QuantizeLinear",
            Op::DequantizeLinear { .. } => "DequantizeLinear",
            Op::DynamicQuantizeLinear => "DynamicQuantizeLinear",
            Op::DepthToSpace { .. } => "DepthToSpace",
            Op::SpaceToDepth { .. } => "SpaceToDepth",
            Op::CenterCropPad => "CenterCropPad",
            Op::TopK { .. } => "TopK",
            Op::Sample => "Sample",
            Op::CacheWrite { .. } => "CacheWrite",
            Op::GatherBlocks { .. } => "GatherBlocks",
            Op::Scatter { axis: Some(_), .. } => "ScatterElements",
            Op::Scatter { axis: None, .. } => "ScatterND",
            Op::OneHot { .. } => "OneHot",
            Op::LpNormalization { .. } => "LpNormalization",
            Op::Lrn { .. } => "LRN",
            Op::Hardmax { .. } => "Hardmax",
            Op::RotaryEmbedding { .. } => "RotaryEmbedding",
            Op::GatherNd { .. } => "GatherND",
            Op::Resize(_) => "Resize",
            Op::InstanceNorm { .. } => "InstanceNormalization",
            Op::GroupNorm { .. } => "GroupNormalization",
            Op::Tile => "Tile",
            Op::CastLike { .. } => "CastLike",
            Op::Size => "Size",
            Op::EyeLike { .. } => "EyeLike",
            Op::TileCopy => "TileCopy",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "ReduceSum",
                ReduceOp::Mean => "ReduceMean",
                ReduceOp::Max => "ReduceMax",
                ReduceOp::Min => "ReduceMin",
                ReduceOp::Prod => "ReduceProd",
                ReduceOp::SumSquare => "ReduceSumSquare",
                ReduceOp::L1 => "ReduceL1",
                ReduceOp::L2 => "ReduceL2",
                ReduceOp::LogSum => "ReduceLogSum",
                ReduceOp::LogSumExp => "ReduceLogSumExp",
            },
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice => "Slice",
            Op::Gather { .. } => "Gather",
            Op::Unsqueeze => "Unsqueeze",
            Op::Squeeze => "Squeeze",
            Op::Expand => "Expand",
            Op::Identity => "Identity",
            Op::Dropout => "Dropout",
            Op::Shape { .. } => "Shape",
            Op::ConstantOfShape(_) => "ConstantOfShape",
            Op::Range => "Range",
            Op::Alias => "Alias",
            Op::StridedCopy { .. } => "StridedCopy",
        }
    }
}
