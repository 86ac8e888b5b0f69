//! The attributes of ops that carry more than a scalar or two (attention, recurrences, Resize, windows of Conv
//! and pooling), kept apart from the op enum itself ([`crate::Op`]).

/// Attributes of ONNX Attention.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionAttrs {
    pub is_causal: bool,
    pub q_num_heads: Option<usize>,
    pub kv_num_heads: Option<usize>,
    pub scale: Option<f32>,
    pub softcap: f32,
    pub qk_matmul_output_mode: i64,
    /// onnxruntime's GroupQueryAttention: every query sees at least its own key (so no row is masked out whole
    /// and none needs zeroing), and the scale multiplies the scores, as onnxruntime's kernels apply it, rather
    /// than its square root each of Q and K.
    pub own_key_seen: bool,
}

/// The cell of an ONNX recurrence (LSTM, GRU, RNN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell {
    /// Gates i, o, f, c; `input_forget` couples f = 1 − i.
    Lstm { input_forget: bool },
    /// Gates z, r, h; `linear_before_reset` applies r after the recurrent product (PyTorch's form).
    Gru { linear_before_reset: bool },
    /// One gate.
    Rnn,
}

impl Cell {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            Cell::Lstm { .. } => 4,
            Cell::Gru { .. } => 3,
            Cell::Rnn => 1,
        }
    }
    /// Activation functions per direction (f, g, h).
    pub fn activations(self) -> usize {
        match self {
            Cell::Lstm { .. } => 3,
            Cell::Gru { .. } => 2,
            Cell::Rnn => 1,
        }
    }
    /// State tensors carried across steps: h, and c for LSTM.
    pub fn states(self) -> usize {
        if matches!(self, Cell::Lstm { .. }) {
            2
        } else {
            1
        }
    }
}

/// One of the activation functions ONNX recurrences name, with its alpha and beta.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Sigmoid,
    Tanh,
    Relu,
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
    Affine(f32, f32),
}

/// Attributes of LSTM / GRU / RNN ([`Op::Rnn`], and the [`Op::Recurrence`] it becomes).
#[derive(Clone, Debug, PartialEq)]
pub struct RnnAttrs {
    pub cell: Cell,
    /// 1, or 2 for bidirectional (forward first).
    pub directions: usize,
    /// One direction, walked from the last step to the first.
    pub reverse: bool,
    pub hidden: usize,
    /// `cell.activations()` per direction, in ONNX order (f, g, h).
    pub activations: Vec<Activation>,
    /// Gate pre-activations clipped to ±clip.
    pub clip: Option<f32>,
    /// ONNX's layout 1: batch-major X, Y, Y_h and Y_c.
    pub batch_major: bool,
}

/// Resize's attributes (opsets 10–19; Upsample imports as one): how output coordinates map to input ones and
/// how the input is sampled there.
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeAttrs {
    pub mode: ResizeMode,
    /// ONNX's coordinate_transformation_mode: half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners,
    /// asymmetric or tf_crop_and_resize.
    pub coordinates: String,
    /// ONNX's nearest_mode: round_prefer_floor, round_prefer_ceil, floor or ceil.
    pub nearest: String,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub antialias: bool,
    /// The axes `scales`/`sizes` cover (all when `None`).
    pub axes: Option<Vec<i64>>,
    /// ONNX's keep_aspect_ratio_policy for `sizes`: stretch, not_larger or not_smaller.
    pub keep_aspect_ratio: String,
    /// tf_crop_and_resize: the value of outputs whose sampling point lies outside the input.
    pub extrapolation_value: f32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg,
    /// LpPool with exponent p.
    Lp(u32),
}

/// ONNX's auto_pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Attributes shared by Conv and the pooling ops, over the spatial dimensions. Empty vectors mean "the default"
/// until shape inference fills them in.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    /// Begin pads of every spatial axis, then end pads (ONNX order).
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}
