//! From scheduled kernel groups to WGSL source: each kernel kind builds a resolved view struct (every extent,
//! stride and literal decided here) and renders its askama template from `templates/`.

use crate::{EmitError, Limits};
use askama::Template;
use wgslc_ir::{
    broadcast_strides, contiguous_strides, BinaryOp, Graph, NodeId, Op, PoolKind, ReduceOp, TensorType, UnaryOp,
    ValueId,
};
use wgslc_passes::{binding_access, input_view, storage_of, FoldedConv, KernelGroup, MemoryPlan, Schedule, Storage};

/// One kernel ready to be validated and written: its source and what it binds.
#[derive(Clone, Debug)]
pub struct EmittedKernel {
    /// The source node's name (with a part suffix for multi-dispatch ops such as Concat).
    pub name: String,
    /// A short file-name stem: the op kind.
    pub kind: &'static str,
    /// The source nodes.
    pub nodes: Vec<NodeId>,
    pub wgsl: String,
    /// Bindings in binding-number order: the value bound and whether the kernel writes it.
    pub bindings: Vec<(ValueId, bool)>,
    pub workgroups: [u32; 3],
}

// ---- template view structs -------------------------------------------------------------------------------

struct BindingDecl {
    binding: usize,
    access: &'static str,
    var: String,
    ty: &'static str,
}

struct Header {
    name: String,
    comment: String,
    template: &'static str,
    bindings: Vec<BindingDecl>,
}

#[derive(Default, Clone, Copy)]
struct Helpers {
    log1p: bool,
    erf: bool,
    pow: bool,
    tanh: bool,
}

struct Coord {
    stride: usize,
    extent: usize,
}

struct Term {
    coord: usize,
    stride: i64,
}

/// An index expression: `offset + Σ c{coord} * stride`.
struct Index {
    offset: String,
    terms: Vec<Term>,
}

/// What makes two loads the same: buffer, offset and (coordinate, stride, modulo) terms.
type LoadKey = (ValueId, String, Vec<(usize, i64, usize)>);

struct Stmt {
    name: String,
    expr: String,
}

/// A coordinate of the fused function: `name = (i / stride) % extent`.
struct NamedCoord {
    name: String,
    stride: usize,
    extent: usize,
}

/// `coord * stride` (or `(coord % modulo) * stride`) in a fused load.
struct NamedTerm {
    coord: String,
    stride: i64,
    modulo: usize,
}

struct FusedLoad {
    name: String,
    var: String,
    offset: String,
    terms: Vec<NamedTerm>,
}

/// The generated `fused(acc, i)` function: loads, statements and the result of a group's elementwise nodes.
#[derive(Default)]
struct Fused {
    defined: bool,
    ty: &'static str,
    coords: Vec<NamedCoord>,
    loads: Vec<FusedLoad>,
    stmts: Vec<Stmt>,
    result: String,
    /// Where result element `o` is stored when the group writes through a permuting copy (`store_copy`):
    /// `Σ ((o / stride) % extent) · out_stride`; empty for a plain store at `o`.
    store: Vec<StoreTerm>,
}

struct StoreTerm {
    stride: usize,
    extent: usize,
    out_stride: usize,
}

impl Fused {
    /// The output index of result element `o` (a WGSL u32 expression).
    fn at(&self, o: &str) -> String {
        if self.store.is_empty() {
            o.to_string()
        } else {
            format!("store_at({o})")
        }
    }

    /// The statement that stores value `v` as result element `o`: through the fused body when there is one.
    fn store(&self, o: &str, v: &str) -> String {
        let value = if self.defined { format!("fused({v}, {o})") } else { v.to_string() };
        format!("out[{}] = {value};", self.at(o))
    }
}

#[derive(Template)]
#[template(path = "elementwise.wgsl", escape = "none")]
struct ElementwiseTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    groups_x: u32,
    numel: usize,
    store_coords: Vec<Coord>,
    store: Index,
}

#[derive(Template)]
#[template(path = "gather.wgsl", escape = "none")]
struct GatherTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    groups_x: u32,
    numel: usize,
    positions: usize,
    inner: usize,
    positions_inner: usize,
    axis_len: usize,
}

/// One of the four rows (or columns) a matmul thread owns: its index and its offset in the 64-wide tile.
struct Lane {
    i: usize,
    off: usize,
}

struct BatchDim {
    div: usize,
    extent: usize,
    a_stride: i64,
    b_stride: i64,
}

#[derive(Template)]
#[template(path = "attention.wgsl", escape = "none")]
struct AttentionTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    groups_x: u32,
    /// Workgroups: batches × `m_blocks`.
    blocks: usize,
    /// Blocks of `rows` query rows per batch.
    m_blocks: usize,
    /// Query rows per workgroup: 16 per row lane.
    rows: usize,
    row_lanes: Vec<usize>,
    m: usize,
    n: usize,
    mn: usize,
    dk: usize,
    dv: usize,
    /// `dv` rounded up to 16 (one column per thread of a row per lane).
    dv_pad: usize,
    /// Keys of V staged at a time: as many as fit 2048 floats, at most 16.
    v_chunk: usize,
    kv_len: usize,
    a_off: i64,
    b_off: i64,
    v_off: i64,
    a_sm: i64,
    a_sk: i64,
    b_sk: i64,
    b_sn: i64,
    v_sk: i64,
    v_sn: i64,
    a_pro: String,
    b_pro: String,
    b_var: String,
    v_var: String,
    alpha: String,
    nan_to_zero: bool,
    /// 0..4: the four keys each thread scores per tile, unrolled.
    quads: Vec<usize>,
    batch: Vec<AttnBatchDim>,
    lanes: Vec<Lane>,
}

struct AttnBatchDim {
    div: usize,
    extent: usize,
    a_stride: i64,
    b_stride: i64,
    v_stride: i64,
}

/// A product's geometry, shared by the matmul and attention kernels.
struct MmGeom {
    /// The MatMul or Gemm node and its output.
    n: NodeId,
    mm_out: ValueId,
    va: wgslc_passes::view::View,
    vb: wgslc_passes::view::View,
    /// Scalar prologue expressions applied to the loaded `av` / `bv` ("" for none).
    pro: [String; 2],
    m: usize,
    k: usize,
    nn: usize,
    a_sm: i64,
    a_sk: i64,
    b_sk: i64,
    b_sn: i64,
    alpha: f32,
    beta: f32,
    batch: Vec<BatchDim>,
    batches: usize,
}

#[derive(Template)]
#[template(path = "matmul.wgsl", escape = "none")]
struct MatmulTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    a_off: i64,
    b_off: i64,
    b_var: String,
    bias_var: String,
    a_pro: String,
    b_pro: String,
    t: Tiling,
    /// Set when the product is a convolution whose B operand is the input's im2col matrix.
    im2col: Option<Im2col>,
    /// Set when a second convolution is summed in (`KernelGroup::conv_sum`).
    seg2: Option<Seg2>,
    /// Set when B is a depthwise convolution's output computed as it is loaded (`KernelGroup::depthwise`).
    dw: Option<DwLoad>,
    /// Set when the product normalizes its A rows (`KernelGroup::rms_prologue`).
    rms: Option<RmsFold>,
    /// A's rows (B's columns) are contiguous in memory: tiles are loaded with neighbouring threads on neighbouring
    /// rows (k), so the reads coalesce.
    a_mmajor: bool,
    b_kmajor: bool,
    batch: Vec<BatchDim>,
    m: usize,
    n: usize,
    k: usize,
    mn: usize,
    a_sm: usize,
    a_sk: usize,
    b_sk: usize,
    b_sn: usize,
    alpha: String,
    beta: String,
    has_bias: bool,
    bias_sm: usize,
    bias_sn: usize,
}

/// How a product's output is cut into workgroups and threads (`tiling`).
struct Tiling {
    tile: usize,
    /// Threads per side of a slice's grid.
    tg: usize,
    /// Slices of 256 / tg² threads, each taking `kc` of K.
    slices: usize,
    kc: usize,
    /// K per step through workgroup memory.
    ks: usize,
    smem_len: usize,
    /// Tile elements each thread loads per k-step (A and B each), as indices for unrolled loops.
    load_lanes: Vec<usize>,
    lanes: Vec<Lane>,
}

/// Below this many 32x32 tiles, a product with K to spare runs 16x16 tiles in four K-slices instead (2x2 outputs per
/// thread): more workgroups for products with few output tiles (ResNet-18's late convolutions, 512 x 49 over K =
/// 4608). Measured on an H100 (ms per inference, thresholds 0 / 64 / 128 / 256): ResNet-18 1.98 / 1.33 / 1.31 /
/// 1.31, GPT-2 5.28 / 5.30 / 5.03 / 5.05, BERT 5.22 / 5.23 / 5.05 / 5.01.
const KSPLIT16_BELOW: usize = 128;

/// The most elements of A (and of B) one thread loads per k-step: beyond it SwiftShader's compiler blows up
/// (`tiling`).
const MAX_LOADS_PER_STEP: usize = 4;

/// The shape of work for an M×N product over K, `batches` times: 64x64 tiles (4x4 outputs per thread) when they
/// give at least 256 workgroups; else, with K to spare, 32x32 (4x4 per thread) or, below `KSPLIT16_BELOW` such
/// tiles, 16x16 tiles (2x2 per thread), computed by four slices of 64 threads that each take a quarter of K (short
/// sequences and small images would otherwise leave most of a large GPU idle or run one output per thread); else
/// the largest smaller tile that gives 256 workgroups. Tiles are no wider than the product's narrower side rounded
/// up to 16 or 32: a matrix-vector product (one row, an LM head of 32000×768) took 0.300 ms in 64x64 tiles and
/// 0.213 ms in 16x16 ones on an H100 (medians of five).
///
/// K goes through workgroup memory 16 at a time, except in 32x32 tiles of four slices, which step by 8 so that each
/// thread loads at most 4 elements of A and 4 of B per step (as in every other tiling): with 8 each, SwiftShader's
/// shader compiler (Chrome's WebGPU without a GPU) ran for minutes and grew to gigabytes until Chrome's GPU process
/// died, while the same kernel with 4 compiled in under 3 s (`MAX_LOADS_PER_STEP`).
fn tiling(m: usize, nn: usize, k: usize, batches: usize) -> Tiling {
    let wgs = |t: usize| nn.div_ceil(t) * m.div_ceil(t) * batches;
    // No wider tile than the product's narrow side needs: a 64-wide tile over one row multiplies 63 rows of zeros.
    let cap = match m.min(nn) {
        0..=16 => 16,
        17..=32 => 32,
        _ => 64,
    };
    let (tile, slices) = if cap >= 64 && wgs(64) >= 256 {
        (64, 1)
    } else if cap >= 32 && k >= 256 && wgs(32) >= KSPLIT16_BELOW {
        (32, 4)
    } else if k >= 256 {
        (16, 4)
    } else {
        ([32usize, 16].into_iter().filter(|&t| t <= cap).find(|&t| wgs(t) >= 256).unwrap_or(16), 1)
    };
    let tg = if slices == 4 { 8 } else { 16 };
    let ks = if tile * 16 / (tg * tg) > MAX_LOADS_PER_STEP { 8 } else { 16 };
    Tiling {
        tile,
        tg,
        slices,
        kc: k.div_ceil(slices).div_ceil(ks) * ks,
        ks,
        smem_len: (slices * 2 * ks * tile).max((slices - 1) * tile * tile).max(slices * ks * tile + tile),
        load_lanes: (0..tile * ks / (tg * tg)).collect(),
        lanes: (0..tile / tg).map(|i| Lane { i, off: i * tg }).collect(),
    }
}

/// A convolution's window over its input, for the implicit-GEMM load: its geometry and the two products the
/// load divides by.
struct Im2col {
    g: Geometry,
    hw: usize,
    khw: usize,
}

/// A depthwise convolution computed in a pointwise product's B loads: row k of B is channel k of its output, read
/// from its input (`b_var`) through its window and weights, biased, then passed through `post` (an expression of
/// the sum `s`: the folded scalar epilogue, e.g. ReLU6).
struct DwLoad {
    win: Im2col,
    w_var: String,
    bias_var: String,
    post: String,
}

/// An expansion → depthwise convolution (→ projection) kernel (`KernelGroup::expand`): `post_e` and `post_d` are the
/// expansion's and the depthwise convolution's scalar epilogues as expressions of `v` and `s`.
#[derive(Template)]
#[template(path = "mbconv.wgsl", escape = "none")]
struct MbconvTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    t: wgslc_passes::ExpandTile,
    g: Geometry,
    cin: usize,
    e: usize,
    hw: usize,
    ohw: usize,
    khw: usize,
    tiles_x: usize,
    we_var: String,
    be_var: String,
    wd_var: String,
    bd_var: String,
    post_e: String,
    post_d: String,
    project: Option<Projection>,
    /// The expansion values each thread computes at once.
    us: Vec<usize>,
    /// Input channels per expansion weight load: 4 where the weights are read as vec4 (`cin` and the staged
    /// slice are multiples of 4), else 1.
    we_step: usize,
}

/// The projection of a whole inverted-residual block: `qs` numbers each thread's accumulators.
struct Projection {
    cout: usize,
    wp_var: String,
    bp_var: String,
    qs: Vec<usize>,
    /// The projection weights are read as vec4, four expanded channels at a time.
    vec4: bool,
}

/// An RMSNormalization folded into a product: rows of A are normalized by 1 / sqrt(Σ a² / k + eps).
struct RmsFold {
    k: usize,
    eps: String,
}

/// The second convolution of a conv-sum kernel: rows `k_first..` of the product's K read its weight (A, rows of
/// `a_sm`) and its input (B: im2col, or [C, h·w] itself with row stride `b_sk`; `b_batch` apart per batch).
struct Seg2 {
    k_first: usize,
    a_var: String,
    b_var: String,
    a_sm: usize,
    b_sk: usize,
    b_batch: usize,
    im2col: Option<Im2col>,
    bias_var: String,
}

struct RDim {
    div: usize,
    extent: usize,
    stride: usize,
}

#[derive(Template)]
#[template(path = "reduce.wgsl", escape = "none")]
struct ReduceTpl {
    h: Header,
    ty: &'static str,
    groups_x: u32,
    numel: usize,
    kept: Vec<RDim>,
    reduced: Vec<RDim>,
    count: usize,
    init: String,
    prologue: String,
    combine_acc_v: String,
    combine_a_v: String,
    finish: String,
}

#[derive(Template)]
#[template(path = "softmax.wgsl", escape = "none")]
struct SoftmaxTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    log: bool,
    groups_x: u32,
    rows: usize,
    n: usize,
    inner: usize,
    row_span: usize,
}

#[derive(Template)]
#[template(path = "layernorm.wgsl", escape = "none")]
struct LayerNormTpl {
    h: Header,
    rms: bool,
    has_mean: bool,
    has_inv: bool,
    groups_x: u32,
    rows: usize,
    n: usize,
    n_f: String,
    epsilon: String,
    scale_len: usize,
    has_bias: bool,
    bias_len: usize,
}

/// The 2-D geometry shared by convolution and pooling (1-D ops use height 1).
#[derive(Clone, Copy)]
struct Geometry {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dy: usize,
    dx: usize,
    pt: usize,
    pl: usize,
    pb: usize,
    pr: usize,
}

#[derive(Template)]
#[template(path = "conv2d.wgsl", escape = "none")]
struct ConvTpl {
    h: Header,
    helpers: Helpers,
    fu: Fused,
    groups_x: u32,
    numel: usize,
    n: usize,
    c: usize,
    m: usize,
    cg: usize,
    m_per_group: usize,
    hw: usize,
    khw: usize,
    ohw: usize,
    mohw: usize,
    has_bias: bool,
    g: Geometry,
}

#[derive(Template)]
#[template(path = "pool2d.wgsl", escape = "none")]
struct PoolTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    kind: &'static str,
    is_max: bool,
    lp: u32,
    count_include_pad: bool,
    hw: usize,
    ohw: usize,
    g: Geometry,
}

#[derive(Template)]
#[template(path = "argreduce.wgsl", escape = "none")]
struct ArgReduceTpl {
    h: Header,
    kind: &'static str,
    cmp: &'static str,
    groups_x: u32,
    numel: usize,
    n: usize,
    inner: usize,
    span: usize,
}

#[derive(Template)]
#[template(path = "gather_elements.wgsl", escape = "none")]
struct GatherElementsTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    axis: usize,
    coords: Vec<Coord>,
    terms: Vec<Term>,
    axis_len: usize,
    axis_stride: usize,
}

#[derive(Template)]
#[template(path = "cumsum.wgsl", escape = "none")]
struct CumSumTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    n: usize,
    inner: usize,
    span: usize,
    exclusive: bool,
    reverse: bool,
    prod: bool,
    zero: &'static str,
}

#[derive(Template)]
#[template(path = "topk.wgsl", escape = "none")]
struct TopKTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    largest: bool,
    cmp: &'static str,
    k: usize,
    n: usize,
    inner: usize,
    span: usize,
    out_span: usize,
}

struct ScatterDim {
    extent: usize,
    stride: usize,
}

struct UpdCoord {
    coord: usize,
    stride: usize,
    extent: usize,
}

#[derive(Template)]
#[template(path = "scatter.wgsl", escape = "none")]
struct ScatterTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    kind: &'static str,
    reduction: &'static str,
    nd: bool,
    combine: String,
    combine_w: String,
    // ScatterND
    tuples: usize,
    depth: usize,
    slice: usize,
    dims: Vec<ScatterDim>,
    // ScatterElements
    axis: usize,
    axis_len: usize,
    updates_len: usize,
    out_coords: Vec<Coord>,
    upd_coords: Vec<UpdCoord>,
}

struct PadDim {
    out_stride: usize,
    out_extent: usize,
    begin: i64,
    extent: usize,
    stride: usize,
}

#[derive(Template)]
#[template(path = "pad.wgsl", escape = "none")]
struct PadTpl {
    h: Header,
    groups_x: u32,
    numel: usize,
    mode: &'static str,
    dims: Vec<PadDim>,
    value: String,
}

// ---- literals -------------------------------------------------------------------------------------------

/// The module-scope variable whose bits give the non-finite f32 values at run time: `.x` +∞, `.y` −∞, `.z` NaN.
/// WGSL has no literal for them, and `bitcast<f32>(0xff800000u)` is a const-expression, which Tint (Chrome, Edge)
/// evaluates at shader creation and refuses ("value -inf cannot be represented as 'f32'") while naga accepts it.
/// A load from a private variable is not a const-expression, so the bitcast happens at run time everywhere.
/// [`with_non_finite`] declares the variable in every module that names it.
pub(crate) const NON_FINITE: &str = "non_finite_bits";
const NON_FINITE_DECL: &str = "\n// The bits of +inf, -inf and NaN, read at run time: WGSL has no literal for them, and a bitcast of a constant\n// is a const-expression, which Tint refuses to evaluate to a non-finite value.\nvar<private> non_finite_bits: vec3<u32> = vec3<u32>(0x7f800000u, 0xff800000u, 0x7fc00000u);\n";

/// `src` with the declaration of [`NON_FINITE`] appended when the module names it.
fn with_non_finite(mut src: String) -> String {
    if src.contains(NON_FINITE) {
        src.push_str(NON_FINITE_DECL);
    }
    src
}

/// A WGSL f32 expression for any value. Finite values are literals that denote exactly the value: Rust's shortest
/// round-trip form of an f32 (`3.4028235e38` for `f32::MAX`) can lie outside f32's range as a decimal, which the
/// WGSL spec makes a shader-creation error (Tint enforces it), so such values are written in full (as f64).
/// Non-finite values are read through [`NON_FINITE`].
pub(crate) fn f32_lit(x: f32) -> String {
    if x.is_nan() {
        format!("bitcast<f32>({NON_FINITE}.z)")
    } else if x == f32::INFINITY {
        format!("bitcast<f32>({NON_FINITE}.x)")
    } else if x == f32::NEG_INFINITY {
        format!("bitcast<f32>({NON_FINITE}.y)")
    } else {
        let short = format!("{x:?}");
        let s = if short.parse::<f64>().is_ok_and(|d| d.abs() <= f32::MAX as f64) {
            short
        } else {
            format!("{:?}", x as f64)
        };
        if s.contains(['.', 'e', 'E']) {
            format!("{s}f")
        } else {
            format!("{s}.0f")
        }
    }
}

fn i32_lit(x: i64) -> String {
    let x = x.clamp(i32::MIN as i64, i32::MAX as i64);
    if x == i32::MIN as i64 {
        "(-2147483647i - 1i)".into()
    } else {
        format!("{x}i")
    }
}

/// The WGSL variable bound to stored tensor `v`: the one already in `reads`, or `name`, added. One binding per
/// tensor, since writable bindings may not alias (and the output's arena makes every binding in it writable).
fn bind_once(reads: &mut Vec<(ValueId, String)>, v: ValueId, name: &str) -> String {
    if let Some((_, var)) = reads.iter().find(|(r, _)| *r == v) {
        return var.clone();
    }
    reads.push((v, name.to_string()));
    name.to_string()
}

// ---- the emitter ----------------------------------------------------------------------------------------

pub(crate) struct Emitter<'g> {
    pub g: &'g Graph,
    pub limits: &'g Limits,
    pub sched: &'g Schedule,
    pub plan: &'g MemoryPlan,
}

fn storage(g: &Graph, v: ValueId) -> Storage {
    storage_of(g.ty(v).dtype).expect("legalized graph")
}

impl Emitter<'_> {
    fn err(&self, n: NodeId, reason: impl Into<String>) -> EmitError {
        let node = self.g.node(n);
        EmitError::Node { node: node.name.clone(), op: node.op.name().into(), reason: reason.into() }
    }

    /// Workgroup counts for `groups` workgroups, folded into y past the per-dimension limit; also returns the x
    /// count the shader uses to linearize.
    fn grid(&self, n: NodeId, groups: usize) -> Result<([u32; 3], u32), EmitError> {
        let max = self.limits.max_workgroups_per_dimension as usize;
        if groups <= max {
            return Ok(([groups as u32, 1, 1], groups.max(1) as u32));
        }
        let y = groups.div_ceil(max);
        if y > max {
            return Err(self.err(n, format!("needs {groups} workgroups, more than {max}x{max}")));
        }
        Ok(([max as u32, y as u32, 1], max as u32))
    }

    fn header(&self, n: NodeId, template: &'static str, bindings: &[(ValueId, bool, &str)]) -> Header {
        let node = self.g.node(n);
        let ins: Vec<String> = node.inputs.iter().flatten().map(|&v| self.g.ty(v).to_string()).collect();
        let pairs: Vec<(ValueId, bool)> = bindings.iter().map(|&(v, w, _)| (v, w)).collect();
        let access = binding_access(self.plan, &pairs);
        Header {
            name: node.name.clone(),
            comment: format!("{}({}) -> {}", node.op.name(), ins.join(", "), self.g.ty(node.outputs[0])),
            template,
            bindings: bindings
                .iter()
                .enumerate()
                .map(|(i, &(v, _, var))| BindingDecl {
                    binding: i,
                    access: if access[i] { "read_write" } else { "read" },
                    var: var.to_string(),
                    ty: storage(self.g, v).wgsl(),
                })
                .collect(),
        }
    }

    fn kernel(
        &self,
        n: NodeId,
        name: String,
        kind: &'static str,
        wgsl: Result<String, askama::Error>,
        bindings: &[(ValueId, bool, &str)],
        workgroups: [u32; 3],
    ) -> Result<EmittedKernel, EmitError> {
        Ok(EmittedKernel {
            name,
            kind,
            nodes: vec![n],
            wgsl: with_non_finite(wgsl.map_err(|e| self.err(n, format!("template error: {e}")))?),
            bindings: bindings.iter().map(|&(v, w, _)| (v, w)).collect(),
            workgroups,
        })
    }

    /// Emits the kernels of one group: a fused elementwise kernel, an anchor with its epilogue, or an anchor alone.
    pub fn emit_group(&self, group: &KernelGroup) -> Result<Vec<EmittedKernel>, EmitError> {
        let last = group.last();
        if self.g.node(last).outputs.iter().all(|&o| self.g.ty(o).numel() == 0) {
            return Ok(vec![]);
        }
        let mut ks = match group.anchor {
            _ if group.attention.is_some() => vec![self.attention(group)?],
            None => vec![self.elementwise_group(group)?],
            Some(a) => match &self.g.node(a).op {
                Op::MatMul | Op::Gemm { .. } => vec![self.matmul(group)?],
                Op::Conv { .. } => vec![self.conv(group)?],
                Op::Softmax { axis, legacy, log } => vec![self.softmax(group, *axis as usize, *legacy, *log)?],
                Op::Gather { axis } => vec![self.gather(group, *axis as usize)?],
                _ if group.elementwise.is_empty() => self.emit_node(a)?,
                op => return Err(self.err(a, format!("{} takes no epilogue", op.name()))),
            },
        };
        for k in &mut ks {
            k.nodes = group.nodes();
        }
        Ok(ks)
    }

    /// Emits the kernels of one node (Concat gives one per input; everything else one).
    pub fn emit_node(&self, n: NodeId) -> Result<Vec<EmittedKernel>, EmitError> {
        let node = self.g.node(n);
        let out = node.outputs[0];
        if self.g.ty(out).numel() == 0 {
            return Ok(vec![]);
        }
        match &node.op {
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::Cast(_)
            | Op::StridedCopy { .. }
            | Op::TileCopy
            | Op::Trilu { .. }
            | Op::RotateHalf => Ok(vec![self.elementwise_group(&KernelGroup::single(n, true))?]),
            Op::Concat { axis } => self.concat(n, *axis as usize),
            Op::Gather { axis } => Ok(vec![self.gather(&KernelGroup::single(n, false), *axis as usize)?]),
            Op::MatMul | Op::Gemm { .. } => Ok(vec![self.matmul(&KernelGroup::single(n, false))?]),
            Op::Reduce { op, axes, .. } => {
                let axes: Vec<usize> = axes.as_ref().expect("resolved").iter().map(|&a| a as usize).collect();
                Ok(vec![self.reduce(n, *op, &axes)?])
            }
            Op::GlobalPool(kind) => {
                let r = self.g.ty(node.inputs[0].unwrap()).rank();
                let op = if *kind == PoolKind::Max { ReduceOp::Max } else { ReduceOp::Mean };
                Ok(vec![self.reduce(n, op, &(2..r).collect::<Vec<_>>())?])
            }
            Op::Softmax { axis, legacy, log } => {
                Ok(vec![self.softmax(&KernelGroup::single(n, false), *axis as usize, *legacy, *log)?])
            }
            Op::LayerNorm { axis, epsilon, rms } => Ok(vec![self.layernorm(n, *axis as usize, *epsilon, *rms)?]),
            Op::ArgReduce { max, axis, select_last, .. } => {
                Ok(vec![self.argreduce(n, *max, *axis as usize, *select_last)?])
            }
            Op::GatherElements { axis } => Ok(vec![self.gather_elements(n, *axis as usize)?]),
            Op::CumSum { axis, exclusive, reverse, prod } => {
                Ok(vec![self.cumsum(n, axis.expect("resolved") as usize, *exclusive, *reverse, *prod)?])
            }
            Op::TopK { axis, largest, k } => Ok(vec![self.topk(n, *axis as usize, *largest, k.expect("resolved"))?]),
            Op::Scatter { axis, reduction } => Ok(vec![self.scatter(n, axis.map(|a| a as usize), *reduction)?]),
            Op::Pad { mode, pads, value } => Ok(vec![self.pad(n, *mode, pads.as_ref().expect("resolved"), *value)?]),
            Op::Conv { .. } => Ok(vec![self.conv(&KernelGroup::single(n, false))?]),
            Op::Pool { .. } => Ok(vec![self.pool(n)?]),
            other => Err(self.err(n, format!("no kernel for resolved op {}", other.name()))),
        }
    }

    /// A kernel of elementwise nodes only: `out[i] = fused(0, i)` over the last node's output.
    fn elementwise_group(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let last = group.last();
        let out = g.node(last).outputs[0];
        let numel = g.ty(out).numel();
        let mut reads = Vec::new();
        // Written in place: that input is read through the output's binding (the same memory).
        let in_place = self.plan.in_place.get(&wgslc_passes::storage_root(g, out)).copied();
        if let Some(src) = in_place {
            reads.push((src, "out".to_string()));
        }
        let mut helpers = Helpers::default();
        let fu = self.fused_body(group, None, &mut reads, &mut helpers)?;
        let mut b: Vec<(ValueId, bool, &str)> =
            reads.iter().filter(|(v, _)| Some(*v) != in_place).map(|(v, s)| (*v, false, s.as_str())).collect();
        b.push((out, true, "out"));
        let (wg, groups_x) = self.grid(last, numel.div_ceil(256))?;
        let h = self.group_header(group, "elementwise.wgsl", &b);
        let tpl = ElementwiseTpl {
            h,
            helpers,
            groups_x,
            numel,
            store_coords: vec![],
            store: Index { offset: fu.at("i"), terms: vec![] },
            fu,
        };
        let name = self.group_name(group);
        self.kernel(last, name, "elementwise", tpl.render(), &b, wg)
    }

    /// Where the group stores its result's elements: through its `store_copy`'s permutation, or in place.
    fn store_terms(&self, group: &KernelGroup) -> Result<Vec<StoreTerm>, EmitError> {
        Ok(match group.store_copy {
            Some(t) => wgslc_passes::store_permutation(self.g, t)
                .ok_or_else(|| self.err(t, "stored through a copy that is not a permutation (a scheduler bug)"))?
                .into_iter()
                .map(|(stride, extent, out_stride)| StoreTerm { stride, extent, out_stride })
                .collect(),
            None => vec![],
        })
    }

    /// A header whose comment describes the whole group.
    fn group_header(&self, group: &KernelGroup, template: &'static str, bindings: &[(ValueId, bool, &str)]) -> Header {
        let mut h = self.header(group.last(), template, bindings);
        h.name = self.group_name(group);
        h.comment = self.group_comment(group);
        h
    }

    /// The kernel's name: its nodes' names joined by "+".
    fn group_name(&self, group: &KernelGroup) -> String {
        group.nodes().iter().map(|&n| self.g.node(n).name.as_str()).collect::<Vec<_>>().join("+")
    }

    /// "Op(types) -> type" for one node, or the fused ops joined by " + ".
    fn group_comment(&self, group: &KernelGroup) -> String {
        let nodes = group.nodes();
        if nodes.len() == 1 {
            return self.header(nodes[0], "", &[]).comment;
        }
        let ops: Vec<&str> = nodes.iter().map(|&n| self.g.node(n).op.name()).collect();
        format!("fused {} -> {}", ops.join(" + "), self.g.ty(self.g.node(group.last()).outputs[0]))
    }

    /// Builds `fused(acc, i)` for a group's elementwise nodes. `i` is the flat index of the group's output; every
    /// member has that many elements in the same contiguous order (reshapes between members keep it), so each
    /// member's coordinates are derived from `i` over its own shape. `acc` stands for `anchor_out`; every other
    /// input is loaded through its composed view, binding each distinct buffer once (`reads` collects them as
    /// `in0`, `in1`, …).
    fn fused_body(
        &self,
        group: &KernelGroup,
        anchor_out: Option<ValueId>,
        reads: &mut Vec<(ValueId, String)>,
        helpers: &mut Helpers,
    ) -> Result<Fused, EmitError> {
        let g = self.g;
        let store = self.store_terms(group)?;
        if group.elementwise.is_empty() {
            return Ok(Fused { store, ..Fused::default() });
        }
        let last = group.result();
        let mut exprs: std::collections::HashMap<ValueId, String> = std::collections::HashMap::new();
        if let Some(a) = anchor_out {
            exprs.insert(a, "acc".into());
        }
        // A summed convolution's Add is already in the accumulator.
        let summed = group.conv_sum.map(|(_, add)| add);
        if let Some(add) = summed {
            exprs.insert(g.node(add).outputs[0], "acc".into());
        }
        // Values inside the group are found through the reshapes (aliases) between members.
        let lookup = |exprs: &std::collections::HashMap<ValueId, String>, mut v: ValueId| -> Option<String> {
            loop {
                if let Some(e) = exprs.get(&v) {
                    return Some(e.clone());
                }
                match g.value(v).producer {
                    Some(p) if g.node(p).op == Op::Alias => v = g.node(p).inputs[0].expect("alias input"),
                    _ => return None,
                }
            }
        };
        let mut shapes: Vec<Vec<usize>> = Vec::new();
        let mut used_shapes: Vec<bool> = Vec::new();
        let mut loads: Vec<FusedLoad> = Vec::new();
        let mut load_keys: Vec<LoadKey> = Vec::new();
        let mut stmts = Vec::new();
        for (j, &n) in group.elementwise.iter().enumerate() {
            if Some(n) == summed {
                continue;
            }
            let node = g.node(n);
            let shape = g.ty(node.outputs[0]).shape.clone();
            let sid = match shapes.iter().position(|s| *s == shape) {
                Some(p) => p,
                None => {
                    shapes.push(shape.clone());
                    used_shapes.push(false);
                    shapes.len() - 1
                }
            };
            let cname = |d: usize| format!("c{sid}_{d}");
            let contiguous: Vec<i64> = contiguous_strides(&shape).iter().map(|&s| s as i64).collect();
            if node.op == Op::RotateHalf {
                // One load at the rotated coordinate (j + h) mod 2h of the last axis, negated in the first half.
                let v = node.inputs[0].expect("input");
                if lookup(&exprs, v).is_some() {
                    return Err(self.err(n, "RotateHalf reads a value computed in its own kernel (a scheduler bug)"));
                }
                let view = input_view(g, &self.sched.folded, n, 0);
                let fresh = format!("in{}", reads.len());
                let var = bind_once(reads, view.root, &fresh);
                let r = shape.len();
                let w = shape[r - 1];
                let terms: Vec<NamedTerm> = (0..r)
                    .filter(|&d| view.strides[d] != 0 && shape[d] > 1)
                    .map(|d| {
                        let (coord, modulo) =
                            if d == r - 1 { (format!("({} + {})", cname(d), w / 2), w) } else { (cname(d), 0) };
                        NamedTerm { coord, stride: view.strides[d], modulo }
                    })
                    .collect();
                used_shapes[sid] = true;
                let name = format!("x{}", loads.len());
                loads.push(FusedLoad { name: name.clone(), var, offset: view.offset.to_string(), terms });
                // A key no other load shares.
                load_keys.push((view.root, format!("{sid}:rotate_half:{n:?}"), vec![]));
                let expr = format!("select(-{name}, {name}, {} >= {})", cname(r - 1), w / 2);
                let t = format!("t{j}");
                stmts.push(Stmt { name: t.clone(), expr });
                exprs.insert(node.outputs[0], t);
                continue;
            }
            let mut args = Vec::new();
            for (slot, v) in node.inputs.iter().enumerate() {
                let Some(v) = *v else { continue };
                if let Some(e) = lookup(&exprs, v) {
                    args.push(e);
                    continue;
                }
                let view = input_view(g, &self.sched.folded, n, slot);
                let fresh = format!("in{}", reads.len());
                let var = bind_once(reads, view.root, &fresh);
                let (offset, terms): (String, Vec<(usize, i64, usize)>) = if node.op == Op::TileCopy {
                    // Each output coordinate wraps around the input's extent.
                    let xs = &g.ty(v).shape;
                    let xcs = contiguous_strides(xs);
                    ("0".into(), (0..xs.len()).filter(|&d| xs[d] > 1).map(|d| (d, xcs[d] as i64, xs[d])).collect())
                } else if view.offset == 0
                    && view.strides.iter().zip(&contiguous).zip(&shape).all(|((s, c), &e)| e == 1 || s == c)
                {
                    ("i".into(), vec![])
                } else {
                    let t = (0..shape.len())
                        .filter(|&d| view.strides[d] != 0 && shape[d] > 1)
                        .map(|d| (d, view.strides[d], 0))
                        .collect();
                    (view.offset.to_string(), t)
                };
                let key = (view.root, format!("{sid}:{offset}"), terms.clone());
                let name = match load_keys.iter().position(|k| *k == key) {
                    Some(p) => loads[p].name.clone(),
                    None => {
                        used_shapes[sid] |= !terms.is_empty();
                        let name = format!("x{}", loads.len());
                        loads.push(FusedLoad {
                            name: name.clone(),
                            var,
                            offset,
                            terms: terms
                                .iter()
                                .map(|&(d, stride, modulo)| NamedTerm { coord: cname(d), stride, modulo })
                                .collect(),
                        });
                        load_keys.push(key);
                        name
                    }
                };
                args.push(name);
            }
            let inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let out_ty = g.ty(node.outputs[0]).clone();
            used_shapes[sid] |= matches!(node.op, Op::Trilu { .. });
            let expr = self.op_expr(n, &args, &inputs, &out_ty, helpers, &cname)?;
            let name = format!("t{j}");
            stmts.push(Stmt { name: name.clone(), expr });
            exprs.insert(node.outputs[0], name);
        }
        let result = exprs[&g.node(last).outputs[0]].clone();
        let mut coords = Vec::new();
        for (sid, shape) in shapes.iter().enumerate() {
            if !used_shapes[sid] {
                continue;
            }
            let cs = contiguous_strides(shape);
            for d in 0..shape.len() {
                coords.push(NamedCoord { name: format!("c{sid}_{d}"), stride: cs[d], extent: shape[d].max(1) });
            }
        }
        Ok(Fused { defined: true, ty: storage(g, g.node(last).outputs[0]).wgsl(), coords, loads, stmts, result, store })
    }

    /// The WGSL expression of an elementwise op over already-loaded arguments.
    fn op_expr(
        &self,
        n: NodeId,
        args: &[String],
        inputs: &[ValueId],
        out: &TensorType,
        helpers: &mut Helpers,
        coord: &dyn Fn(usize) -> String,
    ) -> Result<String, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let st = |v: ValueId| storage(g, v);
        let os = storage_of(out.dtype).expect("legalized");
        let a = args.first().cloned().unwrap_or_default();
        Ok(match &node.op {
            Op::StridedCopy { .. } | Op::TileCopy => a,
            Op::Trilu { upper, k } => {
                let r = out.rank();
                let zero = if os == Storage::F32 {
                    "0.0"
                } else if os == Storage::I32 {
                    "0i"
                } else {
                    "0u"
                };
                let cmp = if *upper { ">=" } else { "<=" };
                format!(
                    "select({zero}, {a}, {} - {} {cmp} {})",
                    coord(r - 1),
                    coord(r - 2),
                    i32_lit(k.expect("resolved"))
                )
            }
            Op::Unary(u) => {
                let float = st(inputs[0]) == Storage::F32;
                match (u, float) {
                    (UnaryOp::Neg, false) => narrow(format!("-{a}"), out.dtype),
                    (UnaryOp::Neg, _) => format!("-{a}"),
                    (UnaryOp::Abs, _) => format!("abs({a})"),
                    (UnaryOp::Relu, true) => format!("max({a}, 0.0)"),
                    (UnaryOp::Relu, false) => format!("max({a}, 0i)"),
                    (UnaryOp::Identity, _) => a,
                    (UnaryOp::Not, _) => format!("1u - {a}"),
                    (UnaryOp::Sign, _) => format!("sign({a})"),
                    (UnaryOp::Swish(al), true) => format!("{a} / (1.0 + exp(-{} * {a}))", f32_lit(*al)),
                    (UnaryOp::BitwiseNot, false) => narrow(format!("~{a}"), out.dtype),
                    (UnaryOp::BitwiseNot, true) => return Err(self.err(n, "BitwiseNot needs an integer input")),
                    (UnaryOp::IsNaN, true) => {
                        format!("select(0u, 1u, (bitcast<u32>({a}) & 0x7fffffffu) > 0x7f800000u)")
                    }
                    (UnaryOp::IsNaN, false) => "0u".into(),
                    (UnaryOp::Clip(lo, hi), true) => {
                        let mut e = a;
                        if lo.is_finite() {
                            e = format!("max({e}, {})", f32_lit(*lo));
                        }
                        if hi.is_finite() {
                            e = format!("min({e}, {})", f32_lit(*hi));
                        }
                        e
                    }
                    (UnaryOp::Clip(lo, hi), false) => {
                        let lo = if lo.is_finite() { lo.ceil() as i64 } else { i32::MIN as i64 };
                        let hi = if hi.is_finite() { hi.floor() as i64 } else { i32::MAX as i64 };
                        format!("clamp({a}, {}, {})", i32_lit(lo), i32_lit(hi))
                    }
                    (_, false) => return Err(self.err(n, "this op needs a float input")),
                    (UnaryOp::Sqrt, _) => format!("sqrt({a})"),
                    (UnaryOp::Reciprocal, _) => format!("1.0 / {a}"),
                    (UnaryOp::Exp, _) => format!("exp({a})"),
                    (UnaryOp::Log, _) => format!("log({a})"),
                    (UnaryOp::Floor, _) => format!("floor({a})"),
                    (UnaryOp::Ceil, _) => format!("ceil({a})"),
                    (UnaryOp::Sin, _) => format!("sin({a})"),
                    (UnaryOp::Cos, _) => format!("cos({a})"),
                    (UnaryOp::Tan, _) => format!("tan({a})"),
                    (UnaryOp::Asin, _) => format!("asin({a})"),
                    (UnaryOp::Acos, _) => format!("acos({a})"),
                    (UnaryOp::Atan, _) => format!("atan({a})"),
                    (UnaryOp::Sinh, _) => format!("sinh({a})"),
                    (UnaryOp::Cosh, _) => format!("cosh({a})"),
                    (UnaryOp::Asinh, _) => format!("asinh({a})"),
                    (UnaryOp::Acosh, _) => format!("acosh({a})"),
                    (UnaryOp::Atanh, _) => format!("atanh({a})"),
                    // Stable: max(x, 0) + log1p(exp(-|x|)).
                    (UnaryOp::Softplus, _) => {
                        helpers.log1p = true;
                        format!("(max({a}, 0.0) + log1p_(exp(-abs({a}))))")
                    }
                    (UnaryOp::Softsign, _) => format!("{a} / (1.0 + abs({a}))"),
                    (UnaryOp::Elu(al), _) => format!("select({a}, {} * (exp({a}) - 1.0), {a} < 0.0)", f32_lit(*al)),
                    (UnaryOp::Selu(al, ga), _) => {
                        format!("{} * select({a}, {} * (exp({a}) - 1.0), {a} <= 0.0)", f32_lit(*ga), f32_lit(*al))
                    }
                    (UnaryOp::Celu(al), _) => {
                        format!("(max({a}, 0.0) + min(0.0, {al} * (exp({a} / {al}) - 1.0)))", al = f32_lit(*al))
                    }
                    (UnaryOp::ThresholdedRelu(al), _) => format!("select(0.0, {a}, {a} > {})", f32_lit(*al)),
                    (UnaryOp::Mish, _) => {
                        helpers.tanh = true;
                        helpers.log1p = true;
                        format!("{a} * tanh_(max({a}, 0.0) + log1p_(exp(-abs({a}))))")
                    }
                    (UnaryOp::Round, _) => format!("round({a})"),
                    (UnaryOp::IsInf(p, ng), _) => format!(
                        "select(0u, 1u, ({} && bitcast<u32>({a}) == 0x7f800000u) || ({} && bitcast<u32>({a}) == 0xff800000u))",
                        p, ng
                    ),
                    (UnaryOp::Shrink(bias, l), _) => format!(
                        "select(select(0.0, {a} - {b}, {a} > {l}), {a} + {b}, {a} < -{l})",
                        b = f32_lit(*bias),
                        l = f32_lit(*l)
                    ),
                    (UnaryOp::Erf, _) => {
                        helpers.erf = true;
                        format!("erf_({a})")
                    }
                    (UnaryOp::Tanh, _) => {
                        helpers.tanh = true;
                        format!("tanh_({a})")
                    }
                    (UnaryOp::Sigmoid, _) => format!("1.0 / (1.0 + exp(-{a}))"),
                    (UnaryOp::Gelu, _) => {
                        helpers.erf = true;
                        format!("0.5 * {a} * (1.0 + erf_({a} * 0.70710678118654752))")
                    }
                    (UnaryOp::GeluTanh, _) => {
                        helpers.tanh = true;
                        format!("0.5 * {a} * (1.0 + tanh_(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))")
                    }
                    (UnaryOp::LeakyRelu(alpha), _) => {
                        format!("select({a}, {} * {a}, {a} < 0.0)", f32_lit(*alpha))
                    }
                    (UnaryOp::HardSigmoid(al, be), _) => {
                        format!("clamp({} * {a} + {}, 0.0, 1.0)", f32_lit(*al), f32_lit(*be))
                    }
                    (UnaryOp::HardSwish, _) => format!("{a} * clamp({a} / 6.0 + 0.5, 0.0, 1.0)"),
                }
            }
            Op::Binary(b) => {
                let (x, y) = (&args[0], &args[1]);
                let float = st(inputs[0]) == Storage::F32;
                match b {
                    BinaryOp::Add if !float => narrow(format!("({x} + {y})"), out.dtype),
                    BinaryOp::Sub if !float => narrow(format!("({x} - {y})"), out.dtype),
                    BinaryOp::Mul if !float => narrow(format!("({x} * {y})"), out.dtype),
                    BinaryOp::Add => format!("{x} + {y}"),
                    BinaryOp::Sub => format!("{x} - {y}"),
                    BinaryOp::Mul => format!("{x} * {y}"),
                    BinaryOp::Div => format!("{x} / {y}"),
                    BinaryOp::Max => format!("max({x}, {y})"),
                    BinaryOp::Min => format!("min({x}, {y})"),
                    BinaryOp::Pow => {
                        let yf = if st(inputs[1]) == Storage::F32 { y.clone() } else { format!("f32({y})") };
                        let xf = if float { x.clone() } else { format!("f32({x})") };
                        // A constant scalar exponent (x², √x: what exporters write) needs no general pow.
                        let c = g.const_data(inputs[1]).filter(|t| t.numel() == 1).map(|t| t.to_f64()[0]);
                        let e = match c {
                            Some(1.0) => xf,
                            Some(2.0) => format!("{xf} * {xf}"),
                            Some(3.0) => format!("{xf} * {xf} * {xf}"),
                            Some(0.5) => format!("sqrt({xf})"),
                            _ => {
                                helpers.pow = true;
                                format!("pow_({xf}, {yf})")
                            }
                        };
                        if float {
                            e
                        } else {
                            format!("i32({e})")
                        }
                    }
                    BinaryOp::Equal => format!("select(0u, 1u, {x} == {y})"),
                    BinaryOp::Less => format!("select(0u, 1u, {x} < {y})"),
                    BinaryOp::LessOrEqual => format!("select(0u, 1u, {x} <= {y})"),
                    BinaryOp::Greater => format!("select(0u, 1u, {x} > {y})"),
                    BinaryOp::GreaterOrEqual => format!("select(0u, 1u, {x} >= {y})"),
                    BinaryOp::And => format!("{x} & {y}"),
                    BinaryOp::Or => format!("{x} | {y}"),
                    BinaryOp::Xor => format!("{x} ^ {y}"),
                    BinaryOp::BitwiseAnd => format!("{x} & {y}"),
                    BinaryOp::BitwiseOr => format!("{x} | {y}"),
                    BinaryOp::BitwiseXor => format!("{x} ^ {y}"),
                    // Shifts by a negative amount or by the type's width or more give 0 (or -1 for negative
                    // signed values shifted right); signed right shifts are arithmetic.
                    BinaryOp::BitShiftLeft => {
                        let w = bit_width(out.dtype);
                        narrow(format!("select(({x} << u32({y})), 0i, {y} < 0i || {y} >= {w}i)"), out.dtype)
                    }
                    BinaryOp::BitShiftRight if is_signed(out.dtype) => {
                        let w = bit_width(out.dtype);
                        format!(
                            "select(({x} >> u32(min({y}, 31i))), select(0i, -1i, {x} < 0i), {y} < 0i || {y} >= {w}i)"
                        )
                    }
                    BinaryOp::BitShiftRight => {
                        let w = bit_width(out.dtype);
                        format!("select(i32(u32({x}) >> u32(min({y}, 31i))), 0i, {y} < 0i || {y} >= {w}i)")
                    }
                    BinaryOp::Mod { fmod: true } if float => format!("{x} % {y}"),
                    BinaryOp::Mod { fmod: true } => format!("select({x} % {y}, 0i, {y} == 0i)"),
                    BinaryOp::Mod { fmod: false } if float => format!("{x} - {y} * floor({x} / {y})"),
                    // Python's rule: the result takes the divisor's sign.
                    BinaryOp::Mod { fmod: false } => {
                        format!("select((({x} % {y}) + {y}) % {y}, 0i, {y} == 0i)")
                    }
                    BinaryOp::PRelu if float => format!("select({x}, {y} * {x}, {x} < 0.0)"),
                    BinaryOp::PRelu => format!("select({x}, {y} * {x}, {x} < 0i)"),
                }
            }
            Op::Where => format!("select({}, {}, {} != 0u)", args[2], args[1], args[0]),
            Op::Cast(to) => {
                let from = st(inputs[0]);
                match (from, os) {
                    (f, t) if f == t => a,
                    (Storage::F32, Storage::I32) => format!("i32({a})"),
                    (Storage::I32, Storage::F32) | (Storage::U32, Storage::F32) => {
                        format!("f32({a})")
                    }
                    (Storage::U32, Storage::I32) => format!("i32({a})"),
                    (Storage::F32, Storage::U32) => format!("select(0u, 1u, {a} != 0.0)"),
                    (Storage::I32, Storage::U32) => format!("select(0u, 1u, {a} != 0i)"),
                    _ => return Err(self.err(n, format!("no cast to {to}"))),
                }
            }
            other => return Err(self.err(n, format!("{} is not elementwise", other.name()))),
        })
    }

    /// Concat: one copy kernel per input, each writing its slab of the output.
    fn concat(&self, n: NodeId, axis: usize) -> Result<Vec<EmittedKernel>, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let out = node.outputs[0];
        let ocs: Vec<i64> = contiguous_strides(&g.ty(out).shape).iter().map(|&s| s as i64).collect();
        let mut start = 0usize;
        let mut kernels = Vec::new();
        for (k, &v) in node.inputs.iter().flatten().enumerate() {
            let shape = g.ty(v).shape.clone();
            let offset = start as i64 * ocs[axis];
            start += shape[axis];
            let numel: usize = shape.iter().product();
            if numel == 0 {
                continue;
            }
            let cs = contiguous_strides(&shape);
            let store_coords = shape.iter().zip(&cs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect();
            let fu = Fused {
                defined: true,
                ty: storage(g, v).wgsl(),
                coords: vec![],
                loads: vec![FusedLoad { name: "x0".into(), var: "in0".into(), offset: "i".into(), terms: vec![] }],
                stmts: vec![],
                result: "x0".into(),
                store: vec![],
            };
            let terms = (0..shape.len()).filter(|&d| shape[d] > 1).map(|d| Term { coord: d, stride: ocs[d] }).collect();
            let b = [(v, false, "in0"), (out, true, "out")];
            let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
            let tpl = ElementwiseTpl {
                h: self.header(n, "elementwise.wgsl", &b),
                helpers: Helpers::default(),
                fu,
                groups_x,
                numel,
                store_coords,
                store: Index { offset: offset.to_string(), terms },
            };
            kernels.push(self.kernel(n, format!("{}#{k}", node.name), "concat", tpl.render(), &b, wg)?);
        }
        Ok(kernels)
    }

    fn gather(&self, group: &KernelGroup, axis: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (data, ind, gout) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads = Vec::new();
        let fu = self.fused_body(group, Some(gout), &mut reads, &mut helpers)?;
        let dt = g.ty(data);
        let positions = g.ty(ind).numel();
        let inner: usize = dt.shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let mut b = vec![(data, false, "data"), (ind, false, "indices")];
        b.extend(reads.iter().map(|(v, s)| (*v, false, s.as_str())));
        b.push((out, true, "out"));
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let h = self.group_header(group, "gather.wgsl", &b);
        let tpl = GatherTpl {
            h,
            helpers,
            fu,
            groups_x,
            numel,
            positions,
            inner,
            positions_inner: positions * inner,
            axis_len: dt.shape[axis],
        };
        let name = self.group_name(group);
        self.kernel(n, name, "gather", tpl.render(), &b, wg)
    }

    /// MatMul or Gemm with its epilogue. Operands are read through their composed views (folded transposes and
    /// slices become strides); batch dimensions broadcast.
    /// Q·Kᵀ with its prologue and epilogue, softmax over the keys and the product with V, as one kernel: one
    /// query row per workgroup, keys in tiles of 64 with an online softmax (templates/attention.wgsl).
    fn attention(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let tail = group.attention.expect("attention group");
        let mut helpers = Helpers::default();
        let qk_group = KernelGroup { attention: None, store_copy: None, ..group.clone() };
        let qk = self.mm_geometry(&qk_group, &mut helpers)?;
        let pv = self.mm_geometry(&KernelGroup::single(tail.pv, false), &mut helpers)?;
        if qk.batch.len() != pv.batch.len() || qk.batch.iter().zip(&pv.batch).any(|(a, b)| a.div != b.div) {
            return Err(self.err(tail.pv, "attention batch dimensions differ between the two products"));
        }
        let out = g.node(group.last()).outputs[0];
        // One binding per stored tensor (Q, K and V are often views of one QKV product).
        let mut reads: Vec<(ValueId, String)> = vec![(qk.va.root, "a".into())];
        let b_var = bind_once(&mut reads, qk.vb.root, "b");
        let v_var = bind_once(&mut reads, pv.vb.root, "v");
        // The score epilogue's body; the output store goes through the group's store copy, if any.
        let mut fu = self.fused_body(&qk_group, Some(qk.mm_out), &mut reads, &mut helpers)?;
        fu.store = self.store_terms(group)?;
        let mut bindings: Vec<(ValueId, bool, &str)> = reads.iter().map(|(v, s)| (*v, false, s.as_str())).collect();
        bindings.push((out, true, "out"));
        let dv_pad = pv.nn.div_ceil(16) * 16;
        // 32 rows per workgroup (each K and V load serves twice the rows) when that still gives a workgroup per SM
        // of a large GPU (132 on an H100) and the accumulators stay few; else 16. On the H100 this took GPT-2 at
        // 1024 tokens from 32.0 to 28.5 ms.
        let row_lanes = if qk.batches * qk.m.div_ceil(32) >= 132 && dv_pad <= 128 { 2 } else { 1 };
        let rows = 16 * row_lanes;
        let m_blocks = qk.m.div_ceil(rows);
        // A power of two dividing the 64-key tile, within the K tile's 1088 floats.
        let v_chunk = [16, 8, 4, 2, 1].into_iter().find(|&c| c * dv_pad <= 1088).unwrap_or(1);
        let blocks = qk.batches * m_blocks;
        let (wg, groups_x) = self.grid(tail.pv, blocks)?;
        let h = self.group_header(group, "attention.wgsl", &bindings);
        let tpl = AttentionTpl {
            h,
            helpers,
            fu,
            groups_x,
            blocks,
            m_blocks,
            rows,
            row_lanes: (0..row_lanes).collect(),
            m: qk.m,
            n: qk.nn,
            mn: qk.m * qk.nn,
            dk: qk.k,
            dv: pv.nn,
            dv_pad,
            v_chunk,
            kv_len: 64 * 17,
            a_off: qk.va.offset,
            b_off: qk.vb.offset,
            v_off: pv.vb.offset,
            a_sm: qk.a_sm,
            a_sk: qk.a_sk,
            b_sk: qk.b_sk,
            b_sn: qk.b_sn,
            v_sk: pv.b_sk,
            v_sn: pv.b_sn,
            a_pro: qk.pro[0].clone(),
            b_pro: qk.pro[1].clone(),
            b_var,
            v_var,
            alpha: f32_lit(qk.alpha),
            nan_to_zero: tail.nan_to_zero.is_some(),
            quads: (0..4).collect(),
            batch: qk
                .batch
                .iter()
                .zip(&pv.batch)
                .map(|(a, b)| AttnBatchDim {
                    div: a.div,
                    extent: a.extent,
                    a_stride: a.a_stride,
                    b_stride: a.b_stride,
                    v_stride: b.b_stride,
                })
                .collect(),
            lanes: (0..pv.nn.div_ceil(16)).map(|i| Lane { i, off: i * 16 }).collect(),
        };
        let name = self.group_name(group);
        self.kernel(tail.pv, name, "attention", tpl.render(), &bindings, wg)
    }

    /// The geometry of a MatMul or Gemm group's product: operand views (through scalar prologues), sizes,
    /// strides and batch dimensions.
    fn mm_geometry(&self, group: &KernelGroup, helpers: &mut Helpers) -> Result<MmGeom, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (a, b, mm_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let (at, bt) = (g.ty(a).clone(), g.ty(b).clone());
        // A GQA-style operand reads over finer batch coordinates (see `mm_batch_refinement`).
        let fine = wgslc_passes::mm_batch_refinement(g, n);
        // Operand views: through a scalar prologue node when there is one (its data input is what is loaded).
        let mut pro = [String::new(), String::new()];
        let mut views = Vec::new();
        for (slot, pro_expr) in pro.iter_mut().enumerate() {
            let view = match group.prologue.iter().find(|&&(s, _)| s == slot) {
                Some(&(_, p)) => {
                    let ds = wgslc_passes::scalar_op_data_slot(g, p).expect("scalar prologue");
                    let pn = g.node(p);
                    let ot = g.ty(pn.outputs[0]).clone();
                    *pro_expr = self.scalar_expr(p, if slot == 0 { "av" } else { "bv" }, helpers)?;
                    match &fine {
                        // Read over the product's finer batch coordinates, as the operand itself is.
                        Some(fine) => {
                            let shape = &ot.shape;
                            let extents: Vec<usize> = fine.iter().chain(&shape[shape.len() - 2..]).copied().collect();
                            let strides = wgslc_passes::refined_strides(shape, fine);
                            let data = pn.inputs[ds].expect("data input");
                            wgslc_passes::view::compose(g, data, 0, &strides, &extents, &self.sched.folded)
                        }
                        None => input_view(g, &self.sched.folded, p, ds),
                    }
                }
                // Normalized in the product: A is the RMSNormalization's input.
                None if slot == 0 && group.rms_prologue.is_some() => {
                    input_view(g, &self.sched.folded, group.rms_prologue.unwrap(), 0)
                }
                None => input_view(g, &self.sched.folded, n, slot),
            };
            views.push(view);
        }
        let (va, vb) = (views[0].clone(), views[1].clone());
        let (sa, sb) = (&va.strides, &vb.strides);
        let (m, k, nn, a_sm, a_sk, b_sk, b_sn, alpha, beta, batch_shape, a_batch, b_batch);
        match node.op {
            Op::Gemm { alpha: al, beta: be, trans_a, trans_b } => {
                (m, k) = if trans_a { (at.shape[1], at.shape[0]) } else { (at.shape[0], at.shape[1]) };
                nn = if trans_b { bt.shape[0] } else { bt.shape[1] };
                (a_sm, a_sk) = if trans_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
                (b_sk, b_sn) = if trans_b { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
                (alpha, beta) = (al, be);
                (batch_shape, a_batch, b_batch) = (vec![], vec![], vec![]);
            }
            _ => {
                let (ra, rb) = (at.rank(), bt.rank());
                (m, k) = if ra == 1 { (1, at.shape[0]) } else { (at.shape[ra - 2], at.shape[ra - 1]) };
                nn = if rb == 1 { 1 } else { bt.shape[rb - 1] };
                // Matrix strides are the views' last two (finer batch coordinates may come before them).
                let (la, lb) = (sa.len(), sb.len());
                (a_sm, a_sk) = if ra == 1 { (0, sa[0]) } else { (sa[la - 2], sa[la - 1]) };
                (b_sk, b_sn) = if rb == 1 { (sb[0], 0) } else { (sb[lb - 2], sb[lb - 1]) };
                (alpha, beta) = (1.0, 0.0);
                match fine {
                    Some(fine) => (a_batch, b_batch, batch_shape) = (fine.clone(), fine.clone(), fine),
                    None => {
                        a_batch = at.shape[..ra.saturating_sub(2)].to_vec();
                        b_batch = bt.shape[..rb.saturating_sub(2)].to_vec();
                        batch_shape = wgslc_ir::broadcast_shapes(&a_batch, &b_batch).expect("inferred");
                    }
                }
            }
        }
        // Batch strides come from the views, right-aligned; broadcast dimensions read stride 0.
        let batch_stride = |shape: &[usize], strides: &[i64], d: usize| -> i64 {
            let off = batch_shape.len() - shape.len();
            if d < off || shape[d - off] == 1 {
                0
            } else {
                strides[d - off]
            }
        };
        let cs = contiguous_strides(&batch_shape);
        let batch: Vec<BatchDim> = (0..batch_shape.len())
            .filter(|&d| batch_shape[d] > 1)
            .map(|d| BatchDim {
                div: cs[d],
                extent: batch_shape[d],
                a_stride: batch_stride(&a_batch, sa, d),
                b_stride: batch_stride(&b_batch, sb, d),
            })
            .collect();
        if [a_sm, a_sk, b_sk, b_sn, va.offset, vb.offset]
            .iter()
            .chain(batch.iter().flat_map(|d| [&d.a_stride, &d.b_stride]))
            .any(|&s| s < 0)
        {
            return Err(self.err(n, "operand views with negative strides are not supported"));
        }
        let batches: usize = batch_shape.iter().product();
        Ok(MmGeom { n, mm_out, va, vb, pro, m, k, nn, a_sm, a_sk, b_sk, b_sn, alpha, beta, batch, batches })
    }

    /// A node whose operands other than its data slot are scalar constants (`scalar_op_data_slot`), applied to
    /// the expression `x` with the constants inlined.
    fn scalar_expr(&self, p: NodeId, x: &str, helpers: &mut Helpers) -> Result<String, EmitError> {
        let g = self.g;
        let pn = g.node(p);
        let ds = wgslc_passes::scalar_op_data_slot(g, p).expect("scalar op");
        let args: Vec<String> = pn
            .inputs
            .iter()
            .flatten()
            .enumerate()
            .map(
                |(i, &v)| {
                    if i == ds {
                        x.to_string()
                    } else {
                        f32_lit(g.const_data(v).expect("scalar").to_f64()[0] as f32)
                    }
                },
            )
            .collect();
        let inputs: Vec<ValueId> = pn.inputs.iter().flatten().copied().collect();
        let ot = g.ty(pn.outputs[0]).clone();
        self.op_expr(p, &args, &inputs, &ot, helpers, &|d| format!("c{d}"))
    }

    fn matmul(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let mut helpers = Helpers::default();
        let MmGeom { n, mm_out, va, vb, pro, m, k, nn, a_sm, a_sk, b_sk, b_sn, alpha, beta, batch, batches } =
            self.mm_geometry(group, &mut helpers)?;
        let node = g.node(n);
        if batches > self.limits.max_workgroups_per_dimension as usize {
            return Err(self.err(n, format!("{batches} batched products exceed the workgroup limit")));
        }
        let bias = node.inputs.get(2).copied().flatten().filter(|_| beta != 0.0);
        let (bias_sm, bias_sn) = match bias {
            Some(c) => {
                let s = broadcast_strides(&g.ty(c).shape, &[m, nn]);
                (s[0] as usize, s[1] as usize)
            }
            None => (0, 0),
        };
        let out = g.node(group.last()).outputs[0];
        // One binding per stored tensor: operands, bias and epilogue inputs that are one tensor (Q and Kᵀ read out
        // of one QKV product) share a binding, since writable bindings may not alias and the output's arena makes
        // every binding in it writable.
        let mut reads: Vec<(ValueId, String)> = vec![(va.root, "a".into())];
        let b_var = bind_once(&mut reads, vb.root, "b");
        let bias_var = bias.map(|c| bind_once(&mut reads, c, "bias")).unwrap_or_default();
        // An RMSNormalization folded in: its weights scale B's rows as they are loaded.
        let mut b_pro = pro[1].clone();
        let rms = match group.rms_prologue {
            Some(p) => {
                let pn = g.node(p);
                let Op::LayerNorm { epsilon, .. } = pn.op else { unreachable!() };
                let scale = bind_once(&mut reads, pn.inputs[1].expect("scale"), "rms_scale");
                b_pro = format!("bv * {scale}[kb]");
                Some(RmsFold { k, eps: f32_lit(epsilon) })
            }
            None => None,
        };
        let fu = self.fused_body(group, Some(mm_out), &mut reads, &mut helpers)?;
        let mut bindings: Vec<(ValueId, bool, &str)> = reads.iter().map(|(v, s)| (*v, false, s.as_str())).collect();
        bindings.push((out, true, "out"));
        let t = tiling(m, nn, k, batches);
        let gx = nn.div_ceil(t.tile);
        let gy = m.div_ceil(t.tile);
        let max = self.limits.max_workgroups_per_dimension as usize;
        if gx > max || gy > max {
            return Err(self.err(n, format!("a {m}x{nn} product needs more than {max} workgroups per dimension")));
        }
        let h = self.group_header(group, "matmul.wgsl", &bindings);
        let tpl = MatmulTpl {
            h,
            helpers,
            fu,
            a_off: va.offset,
            b_off: vb.offset,
            b_var,
            bias_var,
            a_pro: pro[0].clone(),
            b_pro,
            t,
            im2col: None,
            seg2: None,
            dw: None,
            a_mmajor: a_sm == 1 && a_sk != 1 && m > 1 && rms.is_none(),
            b_kmajor: b_sk == 1 && b_sn != 1 && k > 1,
            rms,
            batch,
            m,
            n: nn,
            k,
            mn: m * nn,
            a_sm: a_sm as usize,
            a_sk: a_sk as usize,
            b_sk: b_sk as usize,
            b_sn: b_sn as usize,
            alpha: f32_lit(alpha),
            beta: f32_lit(beta),
            has_bias: bias.is_some(),
            bias_sm,
            bias_sn,
        };
        let name = self.group_name(group);
        self.kernel(n, name, "matmul", tpl.render(), &bindings, [gx as u32, gy as u32, batches as u32])
    }

    fn reduce(&self, n: NodeId, op: ReduceOp, axes: &[usize]) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let xt = g.ty(x);
        let cs = contiguous_strides(&xt.shape);
        let dims = |sel: &dyn Fn(usize) -> bool| -> Vec<RDim> {
            let ds: Vec<usize> = (0..xt.rank()).filter(|&d| sel(d)).collect();
            let mut out = Vec::new();
            let mut div = 1;
            for &d in ds.iter().rev() {
                if xt.shape[d] > 1 {
                    out.push(RDim { div, extent: xt.shape[d], stride: cs[d] });
                }
                div *= xt.shape[d];
            }
            out.reverse();
            out
        };
        let kept = dims(&|d| !axes.contains(&d));
        let reduced = dims(&|d| axes.contains(&d));
        let count: usize = axes.iter().map(|&a| xt.shape[a]).product();
        let float = storage(g, x) == Storage::F32;
        if storage(g, x) == Storage::U32 {
            // bool: max is "any", min is "all".
            let (init, comb) = match op {
                ReduceOp::Max => ("0u", "max"),
                ReduceOp::Min => ("1u", "min"),
                _ => return Err(self.err(n, "only ReduceMax and ReduceMin take bool inputs")),
            };
            let numel = g.ty(out).numel();
            let b = [(x, false, "x"), (out, true, "out")];
            let (wg, groups_x) = self.grid(n, numel)?;
            let tpl = ReduceTpl {
                h: self.header(n, "reduce.wgsl", &b),
                ty: "u32",
                groups_x,
                numel,
                kept,
                reduced,
                count,
                init: init.into(),
                prologue: "raw".into(),
                combine_acc_v: format!("{comb}(acc, v)"),
                combine_a_v: format!("{comb}(a, v)"),
                finish: "part[0]".into(),
            };
            return self.kernel(n, node.name.clone(), "reduce", tpl.render(), &b, wg);
        }
        let (init, comb) = match (op, float) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => ("0.0".to_string(), "+"),
            (ReduceOp::Sum | ReduceOp::Mean, false) => ("0i".to_string(), "+"),
            (ReduceOp::Prod, true) => ("1.0".to_string(), "*"),
            (ReduceOp::Prod, false) => ("1i".to_string(), "*"),
            (ReduceOp::Max, true) => (f32_lit(f32::NEG_INFINITY), "max"),
            (ReduceOp::Max, false) => (i32_lit(i32::MIN as i64), "max"),
            (ReduceOp::Min, true) => (f32_lit(f32::INFINITY), "min"),
            (ReduceOp::Min, false) => (i32_lit(i32::MAX as i64), "min"),
            (_, true) => ("0.0".to_string(), "+"),
            (_, false) => ("0i".to_string(), "+"),
        };
        let prologue = match op {
            ReduceOp::SumSquare | ReduceOp::L2 => "raw * raw",
            ReduceOp::L1 => "abs(raw)",
            ReduceOp::LogSumExp if float => "exp(raw)",
            _ => "raw",
        };
        if !float && matches!(op, ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp) {
            return Err(self.err(n, "this reduction needs a float input"));
        }
        let combine = |l: &str, r: &str| {
            if comb.len() == 1 {
                format!("{l} {comb} {r}")
            } else {
                format!("{comb}({l}, {r})")
            }
        };
        let finish = match (op, float) {
            (ReduceOp::Mean, true) => format!("part[0] / {}", f32_lit(count as f32)),
            (ReduceOp::Mean, false) => format!("part[0] / {}", i32_lit(count.max(1) as i64)),
            (ReduceOp::L2, _) => "sqrt(part[0])".to_string(),
            (ReduceOp::LogSum | ReduceOp::LogSumExp, _) => "log(part[0])".to_string(),
            _ => "part[0]".to_string(),
        };
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel)?;
        let tpl = ReduceTpl {
            h: self.header(n, "reduce.wgsl", &b),
            ty: storage(g, x).wgsl(),
            groups_x,
            numel,
            kept,
            reduced,
            count,
            init,
            prologue: prologue.to_string(),
            combine_acc_v: combine("acc", "v"),
            combine_a_v: combine("a", "v"),
            finish,
        };
        self.kernel(n, node.name.clone(), "reduce", tpl.render(), &b, wg)
    }

    fn softmax(&self, group: &KernelGroup, axis: usize, legacy: bool, log: bool) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (x, sout) = (node.inputs[0].unwrap(), node.outputs[0]);
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads = Vec::new();
        let fu = self.fused_body(group, Some(sout), &mut reads, &mut helpers)?;
        let shape = &g.ty(x).shape;
        if storage(g, x) != Storage::F32 {
            return Err(self.err(n, "Softmax needs a float input"));
        }
        let outer: usize = shape[..axis.min(shape.len())].iter().product();
        let (len, inner) = if legacy || shape.is_empty() {
            (shape[axis.min(shape.len())..].iter().product::<usize>(), 1)
        } else {
            (shape[axis], shape[axis + 1..].iter().product::<usize>())
        };
        let rows = outer * inner;
        let mut b = vec![(x, false, "x")];
        b.extend(reads.iter().map(|(v, s)| (*v, false, s.as_str())));
        b.push((out, true, "out"));
        let (wg, groups_x) = self.grid(n, rows)?;
        let h = self.group_header(group, "softmax.wgsl", &b);
        let tpl =
            SoftmaxTpl { h, helpers, fu, log, groups_x, rows, n: len, inner: inner.max(1), row_span: len * inner };
        let name = self.group_name(group);
        self.kernel(n, name, "softmax", tpl.render(), &b, wg)
    }

    fn layernorm(&self, n: NodeId, axis: usize, epsilon: f32, rms: bool) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, scale, out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let shape = &g.ty(x).shape;
        let len: usize = shape[axis..].iter().product();
        let rows: usize = shape[..axis].iter().product();
        // Scale and bias broadcast over the normalized shape; supported when they cover it whole or are scalars.
        let check = |v: ValueId| -> Result<usize, EmitError> {
            let k = g.ty(v).numel();
            if k == len || k == 1 {
                Ok(k)
            } else {
                Err(self.err(
                    n,
                    format!("scale/bias of shape {:?} broadcast only partly over {:?}", g.ty(v).shape, &shape[axis..]),
                ))
            }
        };
        let scale_len = check(scale)?;
        let bias_len = bias.map(check).transpose()?.unwrap_or(1);
        let mut bindings = vec![(x, false, "x"), (scale, false, "scale")];
        if let Some(bv) = bias {
            bindings.push((bv, false, "bias"));
        }
        bindings.push((out, true, "out"));
        // Optional Mean and InvStdDev outputs (private values when the model does not name them).
        let stats: Vec<Option<ValueId>> = (1..3).map(|i| node.outputs.get(i).copied()).collect();
        if let Some(m) = stats[0] {
            bindings.push((m, true, "mean_out"));
        }
        if let Some(v) = stats[1] {
            bindings.push((v, true, "inv_out"));
        }
        let (wg, groups_x) = self.grid(n, rows)?;
        let tpl = LayerNormTpl {
            h: self.header(n, "layernorm.wgsl", &bindings),
            rms,
            has_mean: stats[0].is_some(),
            has_inv: stats[1].is_some(),
            groups_x,
            rows,
            n: len,
            n_f: f32_lit(len as f32),
            epsilon: f32_lit(epsilon),
            scale_len,
            has_bias: bias.is_some(),
            bias_len,
        };
        self.kernel(n, node.name.clone(), "layernorm", tpl.render(), &bindings, wg)
    }

    fn argreduce(&self, n: NodeId, max: bool, axis: usize, last: bool) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let cmp = match (max, last) {
            (true, false) => ">",
            (true, true) => ">=",
            (false, false) => "<",
            (false, true) => "<=",
        };
        let tpl = ArgReduceTpl {
            h: self.header(n, "argreduce.wgsl", &b),
            kind: if max { "Max" } else { "Min" },
            cmp,
            groups_x,
            numel,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
        };
        self.kernel(n, node.name.clone(), "argreduce", tpl.render(), &b, wg)
    }

    fn gather_elements(&self, n: NodeId, axis: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (data, ind, out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let (ds, os) = (g.ty(data).shape.clone(), g.ty(out).shape.clone());
        let dcs = contiguous_strides(&ds);
        let ocs = contiguous_strides(&os);
        let coords = os.iter().zip(&ocs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect();
        let terms = (0..os.len())
            .filter(|&d| d != axis && os[d] > 1)
            .map(|d| Term { coord: d, stride: dcs[d] as i64 })
            .collect();
        let numel = g.ty(out).numel();
        let b = [(data, false, "data"), (ind, false, "indices"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let tpl = GatherElementsTpl {
            h: self.header(n, "gather_elements.wgsl", &b),
            groups_x,
            numel,
            axis,
            coords,
            terms,
            axis_len: ds[axis],
            axis_stride: dcs[axis],
        };
        self.kernel(n, node.name.clone(), "gather_elements", tpl.render(), &b, wg)
    }

    fn topk(&self, n: NodeId, axis: usize, largest: bool, k: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, vals) = (node.inputs[0].unwrap(), node.outputs[0]);
        // The indices output may be unnamed by the model; it still needs a place to go.
        let idx = node.outputs.get(1).copied().ok_or_else(|| self.err(n, "TopK needs its indices output"))?;
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(x).numel();
        let b = [(x, false, "x"), (vals, true, "values"), (idx, true, "indices")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let tpl = TopKTpl {
            h: self.header(n, "topk.wgsl", &b),
            groups_x,
            numel,
            largest,
            cmp: if largest { ">" } else { "<" },
            k,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
            out_span: k * inner,
        };
        self.kernel(n, node.name.clone(), "topk", tpl.render(), &b, wg)
    }

    fn scatter(
        &self,
        n: NodeId,
        axis: Option<usize>,
        reduction: wgslc_ir::ScatterReduction,
    ) -> Result<EmittedKernel, EmitError> {
        use wgslc_ir::ScatterReduction as R;
        let g = self.g;
        let node = g.node(n);
        let (data, ind, upd, out) =
            (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.inputs[2].unwrap(), node.outputs[0]);
        let (ds, is, us) = (g.ty(data).shape.clone(), g.ty(ind).shape.clone(), g.ty(upd).shape.clone());
        let dcs = contiguous_strides(&ds);
        let combine = |w: &str| match reduction {
            R::None => w.to_string(),
            R::Add => format!("v + {w}"),
            R::Mul => format!("v * {w}"),
            R::Max => format!("max(v, {w})"),
            R::Min => format!("min(v, {w})"),
        };
        let numel = g.ty(out).numel();
        let b = [(data, false, "data"), (ind, false, "indices"), (upd, false, "updates"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let reduction_name = match reduction {
            R::None => "none",
            R::Add => "add",
            R::Mul => "mul",
            R::Max => "max",
            R::Min => "min",
        };
        let tpl = match axis {
            None => {
                let depth = *is.last().unwrap();
                let slice: usize = ds[depth..].iter().product();
                ScatterTpl {
                    h: self.header(n, "scatter.wgsl", &b),
                    groups_x,
                    numel,
                    kind: "ScatterND",
                    reduction: reduction_name,
                    nd: true,
                    combine: combine("u"),
                    combine_w: String::new(),
                    tuples: is[..is.len() - 1].iter().product(),
                    depth,
                    slice,
                    dims: (0..depth).map(|d| ScatterDim { extent: ds[d], stride: dcs[d] }).collect(),
                    axis: 0,
                    axis_len: 0,
                    updates_len: 0,
                    out_coords: vec![],
                    upd_coords: vec![],
                }
            }
            Some(axis) => {
                let ucs = contiguous_strides(&us);
                ScatterTpl {
                    h: self.header(n, "scatter.wgsl", &b),
                    groups_x,
                    numel,
                    kind: "ScatterElements",
                    reduction: reduction_name,
                    nd: false,
                    combine: String::new(),
                    combine_w: combine("w"),
                    tuples: 0,
                    depth: 0,
                    slice: 0,
                    dims: vec![],
                    axis,
                    axis_len: ds[axis],
                    updates_len: us.iter().product(),
                    out_coords: ds.iter().zip(&dcs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect(),
                    upd_coords: (0..us.len())
                        .filter(|&d| d != axis)
                        .map(|d| UpdCoord { coord: d, stride: ucs[d], extent: us[d].max(1) })
                        .collect(),
                }
            }
        };
        self.kernel(n, node.name.clone(), "scatter", tpl.render(), &b, wg)
    }

    fn pad(&self, n: NodeId, mode: wgslc_ir::PadMode, pads: &[i64], value: f32) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        let (xcs, ocs) = (contiguous_strides(&xs), contiguous_strides(&os));
        let r = xs.len();
        let dims = (0..r)
            .map(|d| PadDim {
                out_stride: ocs[d],
                out_extent: os[d].max(1),
                begin: pads[d],
                extent: xs[d],
                stride: xcs[d],
            })
            .collect();
        let value = match storage(g, x) {
            Storage::F32 => f32_lit(value),
            Storage::I32 => i32_lit(value as i64),
            Storage::U32 => format!("{}u", (value != 0.0) as u32),
        };
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let mode = match mode {
            wgslc_ir::PadMode::Constant => "constant",
            wgslc_ir::PadMode::Reflect => "reflect",
            wgslc_ir::PadMode::Edge => "edge",
            wgslc_ir::PadMode::Wrap => "wrap",
        };
        let tpl = PadTpl { h: self.header(n, "pad.wgsl", &b), groups_x, numel, mode, dims, value };
        self.kernel(n, node.name.clone(), "pad", tpl.render(), &b, wg)
    }

    fn cumsum(
        &self,
        n: NodeId,
        axis: usize,
        exclusive: bool,
        reverse: bool,
        prod: bool,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let tpl = CumSumTpl {
            h: self.header(n, "cumsum.wgsl", &b),
            groups_x,
            numel,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
            exclusive,
            reverse,
            prod,
            zero: match (storage(g, x) == Storage::F32, prod) {
                (true, false) => "0.0",
                (true, true) => "1.0",
                (false, false) => "0i",
                (false, true) => "1i",
            },
        };
        self.kernel(n, node.name.clone(), "cumsum", tpl.render(), &b, wg)
    }

    fn geometry(&self, n: NodeId, x: &[usize], out: &[usize], w: &wgslc_ir::Window) -> Result<Geometry, EmitError> {
        match x.len() {
            3 => Ok(Geometry {
                h: 1,
                w: x[2],
                oh: 1,
                ow: out[2],
                kh: 1,
                kw: w.kernel[0],
                sy: 1,
                sx: w.strides[0],
                dy: 1,
                dx: w.dilations[0],
                pt: 0,
                pl: w.pads[0],
                pb: 0,
                pr: w.pads[1],
            }),
            4 => Ok(Geometry {
                h: x[2],
                w: x[3],
                oh: out[2],
                ow: out[3],
                kh: w.kernel[0],
                kw: w.kernel[1],
                sy: w.strides[0],
                sx: w.strides[1],
                dy: w.dilations[0],
                dx: w.dilations[1],
                pt: w.pads[0],
                pl: w.pads[1],
                pb: w.pads[2],
                pr: w.pads[3],
            }),
            r => Err(self.err(n, format!("only 1-D and 2-D windows are supported, not {}-D", r - 2))),
        }
    }

    fn conv(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        if group.expand.is_some() {
            return self.mbconv(group);
        }
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let Op::Conv { window, group: conv_groups } = &node.op else { unreachable!() };
        let (x, w, conv_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let (xs, ws, os) = (g.ty(x).shape.clone(), g.ty(w).shape.clone(), g.ty(conv_out).shape.clone());
        let geo = self.geometry(n, &xs, &os, window)?;
        let numel = g.ty(conv_out).numel();
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads = Vec::new();
        let fu = self.fused_body(group, Some(conv_out), &mut reads, &mut helpers)?;
        if *conv_groups == 1 {
            return self.conv_gemm(group, geo, xs, ws);
        }
        let mut bindings = vec![(x, false, "x"), (w, false, "weight")];
        if let Some(bv) = bias {
            bindings.push((bv, false, "bias"));
        }
        bindings.extend(reads.iter().map(|(v, s)| (*v, false, s.as_str())));
        bindings.push((out, true, "out"));
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let m = ws[0];
        let h = self.group_header(group, "conv2d.wgsl", &bindings);
        let tpl = ConvTpl {
            h,
            helpers,
            fu,
            groups_x,
            numel,
            n: xs[0],
            c: xs[1],
            m,
            cg: ws[1],
            m_per_group: m / conv_groups,
            hw: geo.h * geo.w,
            khw: geo.kh * geo.kw,
            ohw: geo.oh * geo.ow,
            mohw: m * geo.oh * geo.ow,
            has_bias: bias.is_some(),
            g: geo,
        };
        let name = self.group_name(group);
        self.kernel(n, name, "conv", tpl.render(), &bindings, wg)
    }

    /// A convolution's window as the implicit-GEMM load reads it, or `None` for a 1x1 window with unit strides
    /// and no padding, which reads the input as it lies ([C, h·w] is its own im2col matrix).
    fn im2col(geo: &Geometry) -> Option<Im2col> {
        let pointwise = geo.kh * geo.kw == 1 && geo.sy == 1 && geo.sx == 1 && geo.pt + geo.pl + geo.pb + geo.pr == 0;
        (!pointwise).then(|| Self::window(geo))
    }

    /// A convolution's window as the template's loads read it.
    fn window(geo: &Geometry) -> Im2col {
        Im2col { g: *geo, hw: geo.h * geo.w, khw: geo.kh * geo.kw }
    }

    /// An ungrouped convolution as a product (implicit GEMM) through the matmul template: the weight is A
    /// [M, C·kh·kw], the input's im2col matrix B [C·kh·kw, oh·ow] is gathered as tiles are loaded, the batch is the
    /// product's batch, and the output [N, M, oh, ow] is the product's row-major output. A summed second
    /// convolution (`conv_sum`) continues A and B along K.
    fn conv_gemm(
        &self,
        group: &KernelGroup,
        geo: Geometry,
        xs: Vec<usize>,
        ws: Vec<usize>,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (x, w, conv_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![(w, "a".into())];
        // A folded depthwise convolution: B is computed from its input, which the kernel binds instead.
        let dw_node = group.depthwise.as_ref().map(|d| g.node(d.conv));
        let b_var = bind_once(&mut reads, dw_node.map_or(x, |d| d.inputs[0].expect("input")), "b");
        let bias_var = bias.map(|c| bind_once(&mut reads, c, "bias")).unwrap_or_default();
        let (batches, m, p) = (xs[0], ws[0], geo.oh * geo.ow);
        let hw = geo.h * geo.w;
        let mut b_batch = xs[1] * hw;
        let dw = match &group.depthwise {
            Some(d) => {
                let dn = g.node(d.conv);
                let Op::Conv { window, .. } = &dn.op else { unreachable!() };
                let dxs = g.ty(dn.inputs[0].expect("input")).shape.clone();
                let dgeo = self.geometry(d.conv, &dxs, &g.ty(dn.outputs[0]).shape, window)?;
                let mut post = "s".to_string();
                for &e in &d.then {
                    post = self.scalar_expr(e, &post, &mut helpers)?;
                }
                b_batch = dxs[1] * dgeo.h * dgeo.w;
                Some(DwLoad {
                    w_var: bind_once(&mut reads, dn.inputs[1].expect("weight"), "dw_w"),
                    bias_var: dn
                        .inputs
                        .get(2)
                        .copied()
                        .flatten()
                        .map(|c| bind_once(&mut reads, c, "dw_b"))
                        .unwrap_or_default(),
                    win: Self::window(&dgeo),
                    post,
                })
            }
            None => None,
        };
        let mut k = ws[1] * geo.kh * geo.kw;
        let seg2 = match group.conv_sum {
            Some((c1, _)) => {
                let n1 = g.node(c1);
                let (x1, w1) = (n1.inputs[0].unwrap(), n1.inputs[1].unwrap());
                let Op::Conv { window, .. } = &n1.op else { unreachable!() };
                let (xs1, ws1) = (g.ty(x1).shape.clone(), g.ty(w1).shape.clone());
                let geo1 = self.geometry(c1, &xs1, &g.ty(n1.outputs[0]).shape, window)?;
                let k1 = ws1[1] * geo1.kh * geo1.kw;
                let seg = Seg2 {
                    k_first: k,
                    a_var: bind_once(&mut reads, w1, "a2"),
                    b_var: bind_once(&mut reads, x1, "b2"),
                    a_sm: k1,
                    b_sk: geo1.h * geo1.w,
                    b_batch: xs1[1] * geo1.h * geo1.w,
                    im2col: Self::im2col(&geo1),
                    bias_var: n1
                        .inputs
                        .get(2)
                        .copied()
                        .flatten()
                        .map(|c| bind_once(&mut reads, c, "bias2"))
                        .unwrap_or_default(),
                };
                k += k1;
                Some(seg)
            }
            None => None,
        };
        let fu = self.fused_body(group, Some(conv_out), &mut reads, &mut helpers)?;
        let mut bindings: Vec<(ValueId, bool, &str)> = reads.iter().map(|(v, s)| (*v, false, s.as_str())).collect();
        bindings.push((out, true, "out"));
        let t = tiling(m, p, k, batches);
        let (gx, gy) = (p.div_ceil(t.tile), m.div_ceil(t.tile));
        let max = self.limits.max_workgroups_per_dimension as usize;
        if gx > max || gy > max || batches > max {
            return Err(
                self.err(n, format!("a {m}x{p} convolution product needs more than {max} workgroups per dimension"))
            );
        }
        let h = self.group_header(group, "matmul.wgsl", &bindings);
        let tpl = MatmulTpl {
            h,
            helpers,
            fu,
            a_off: 0,
            b_off: 0,
            b_var,
            bias_var,
            a_pro: String::new(),
            b_pro: String::new(),
            t,
            im2col: Self::im2col(&geo),
            seg2,
            dw,
            rms: None,
            a_mmajor: false,
            b_kmajor: false,
            batch: if batches > 1 {
                vec![BatchDim { div: 1, extent: batches, a_stride: 0, b_stride: b_batch as i64 }]
            } else {
                vec![]
            },
            m,
            n: p,
            k,
            mn: m * p,
            a_sm: ws[1] * geo.kh * geo.kw,
            a_sk: 1,
            b_sk: hw,
            b_sn: 1,
            alpha: f32_lit(1.0),
            beta: f32_lit(1.0),
            has_bias: bias.is_some(),
            bias_sm: 1,
            bias_sn: 0,
        };
        let name = self.group_name(group);
        self.kernel(n, name, "conv", tpl.render(), &bindings, [gx as u32, gy as u32, batches as u32])
    }

    /// An expansion → depthwise convolution, or a whole expansion → depthwise → projection block, in one kernel
    /// (`KernelGroup::expand`, tiled by `expand_tile`): the expansion's input is the only activation it reads.
    fn mbconv(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let anchor = group.anchor.expect("anchor");
        let ex = group.expand.as_ref().expect("expansion");
        let (dw, project) = match &group.depthwise {
            Some(d) => (d, Some(anchor)),
            None => (&FoldedConv { conv: anchor, then: vec![] }, None),
        };
        let (en, dn) = (g.node(ex.conv), g.node(dw.conv));
        let x = en.inputs[0].expect("input");
        let (xs, e) = (g.ty(x).shape.clone(), g.ty(en.outputs[0]).shape[1]);
        if storage(g, x) != Storage::F32 {
            return Err(self.err(ex.conv, "a folded expansion needs a float input"));
        }
        let Op::Conv { window, .. } = &dn.op else { unreachable!() };
        let dout = dn.outputs[0];
        let geo = self.geometry(dw.conv, &g.ty(dn.inputs[0].expect("input")).shape, &g.ty(dout).shape, window)?;
        let cout = project.map(|p| g.ty(g.node(p).outputs[0]).shape[1]);
        let t = wgslc_passes::expand_tile(
            xs[0],
            (geo.oh, geo.ow),
            (geo.kh, geo.kw),
            (geo.sy, geo.sx),
            (geo.dy, geo.dx),
            xs[1],
            e,
            cout,
        )
        .ok_or_else(|| self.err(anchor, "no tile of the folded expansion fits (a scheduler bug)"))?;
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![(x, "x".into())];
        let weights = |n: &wgslc_ir::Node, w: &str, b: &str, reads: &mut Vec<(ValueId, String)>| {
            let wv = bind_once(reads, n.inputs[1].expect("weight"), w);
            let bv = n.inputs.get(2).copied().flatten().map(|c| bind_once(reads, c, b)).unwrap_or_default();
            (wv, bv)
        };
        let (we_var, be_var) = weights(en, "we", "be", &mut reads);
        let (wd_var, bd_var) = weights(dn, "wd", "bd", &mut reads);
        let projection = match project {
            Some(p) => {
                let (wp_var, bp_var) = weights(g.node(p), "wp", "bp", &mut reads);
                let cout = cout.expect("projection");
                let vec4 = e % 4 == 0 && t.ec % 4 == 0;
                Some(Projection { cout, wp_var, bp_var, qs: (0..t.per_lane).collect(), vec4 })
            }
            None => None,
        };
        let chain = |f: &FoldedConv, x: &str, helpers: &mut Helpers| -> Result<String, EmitError> {
            f.then.iter().try_fold(x.to_string(), |acc, &n| self.scalar_expr(n, &acc, helpers))
        };
        let post_e = chain(ex, "v", &mut helpers)?;
        let post_d = chain(dw, "s", &mut helpers)?;
        let anchor_out = g.node(anchor).outputs[0];
        let fu = self.fused_body(group, Some(anchor_out), &mut reads, &mut helpers)?;
        let mut bindings: Vec<(ValueId, bool, &str)> = reads.iter().map(|(v, s)| (*v, false, s.as_str())).collect();
        let out = g.node(group.last()).outputs[0];
        bindings.push((out, true, "out"));
        let tiles_x = geo.ow.div_ceil(t.tx);
        let tiles = geo.oh.div_ceil(t.ty) * tiles_x;
        let chunks = if project.is_some() { 1 } else { e.div_ceil(t.ec) };
        let max = self.limits.max_workgroups_per_dimension as usize;
        if tiles > max || chunks > max || xs[0] > max {
            return Err(self.err(anchor, format!("{tiles} tiles need more than {max} workgroups per dimension")));
        }
        let mut h = self.group_header(group, "mbconv.wgsl", &bindings);
        let we_step = if xs[1] % 4 == 0 && t.x_chunk % 4 == 0 { 4 } else { 1 };
        // Weights read four floats at a time are bound as vec4 arrays (their offsets are 256-byte aligned and
        // their lengths multiples of 16 bytes).
        for b in &mut h.bindings {
            let vec4 =
                (we_step == 4 && b.var == we_var) || projection.as_ref().is_some_and(|p| p.vec4 && b.var == p.wp_var);
            if vec4 {
                b.ty = "vec4<f32>";
            }
        }
        let tpl = MbconvTpl {
            h,
            helpers,
            fu,
            t,
            g: geo,
            cin: xs[1],
            e,
            hw: xs[2] * xs[3],
            ohw: geo.oh * geo.ow,
            khw: geo.kh * geo.kw,
            tiles_x,
            we_var,
            be_var,
            wd_var,
            bd_var,
            post_e,
            post_d,
            project: projection,
            us: (0..4).collect(),
            we_step,
        };
        let name = self.group_name(group);
        self.kernel(anchor, name, "conv", tpl.render(), &bindings, [tiles as u32, chunks as u32, xs[0] as u32])
    }

    fn pool(&self, n: NodeId) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let Op::Pool { kind, window, count_include_pad } = &node.op else { unreachable!() };
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        if storage(g, x) != Storage::F32 {
            return Err(self.err(n, "pooling needs a float input"));
        }
        let geo = self.geometry(n, &xs, &os, window)?;
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (wg, groups_x) = self.grid(n, numel.div_ceil(256))?;
        let tpl = PoolTpl {
            h: self.header(n, "pool2d.wgsl", &b),
            groups_x,
            numel,
            kind: match kind {
                PoolKind::Max => "max",
                PoolKind::Avg => "average",
                PoolKind::Lp(_) => "Lp",
            },
            is_max: *kind == PoolKind::Max,
            lp: if let PoolKind::Lp(p) = kind { *p } else { 0 },
            count_include_pad: *count_include_pad,
            hw: geo.h * geo.w,
            ohw: geo.oh * geo.ow,
            g: geo,
        };
        self.kernel(n, node.name.clone(), "pool", tpl.render(), &b, wg)
    }
}

/// Wraps an i32 expression to the width of a narrower integer dtype, so arithmetic on uint8, int8, uint16 and
/// int16 values wraps as it would in that type (i32 arithmetic wraps at 32 bits by itself).
fn narrow(e: String, d: wgslc_ir::DType) -> String {
    use wgslc_ir::DType;
    match d {
        DType::U8 => format!("({e} & 255i)"),
        DType::U16 => format!("({e} & 65535i)"),
        DType::I8 => format!("(({e} << 24u) >> 24u)"),
        DType::I16 => format!("(({e} << 16u) >> 16u)"),
        _ => e,
    }
}

fn bit_width(d: wgslc_ir::DType) -> u32 {
    use wgslc_ir::DType;
    match d {
        DType::U8 | DType::I8 => 8,
        DType::U16 | DType::I16 => 16,
        DType::U64 | DType::I64 => 64,
        _ => 32,
    }
}

fn is_signed(d: wgslc_ir::DType) -> bool {
    use wgslc_ir::DType;
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite literal denotes a decimal inside f32's range (a WGSL rule naga does not enforce and Tint does)
    /// that converts back to the value; non-finite values are loads, declared once, that naga accepts.
    #[test]
    fn f32_literals_are_exact_and_in_range() {
        let values = [0.0, -0.0, 1.0, 0.1, -2.5e-3, 16777216.0, 1.0e38, f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1e-45];
        for x in values {
            let s = f32_lit(x);
            let d: f64 = s.trim_end_matches('f').parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(d.abs() <= f32::MAX as f64, "{s} lies outside f32's range");
            assert_eq!((d as f32).to_bits(), x.to_bits(), "{s} does not denote {x:?}");
        }
        assert_eq!(f32_lit(f32::MIN), "-3.4028234663852886e38f");
        let body: Vec<String> = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN].iter().map(|&x| f32_lit(x)).collect();
        assert!(body.iter().all(|e| e.contains(NON_FINITE)), "{body:?}");
        let src = with_non_finite(format!(
            "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1)\nfn main() {{\n    o[0] = {};\n    o[1] = {};\n    o[2] = {};\n}}\n",
            body[0], body[1], body[2]
        ));
        assert_eq!(src.matches("var<private> non_finite_bits").count(), 1);
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
            .validate(&module)
            .expect("valid");
        assert_eq!(with_non_finite("fn f() {}".into()), "fn f() {}", "declared only where named");
    }
}
