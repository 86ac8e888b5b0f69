//! From scheduled kernel groups to WGSL source: each kernel kind builds a resolved view struct (every extent,
//! stride and literal decided here) and renders its askama template from `templates/`.

use crate::{EmitError, Limits};
use askama::Template;
use wgslc_ir::{
    broadcast_strides, contiguous_strides, BinaryOp, Graph, NodeId, Op, PoolKind, ReduceOp, TensorType, UnaryOp,
    ValueId,
};
use wgslc_passes::{
    binding_access, input_view, storage_of, storage_root, Fold, FoldedConv, KernelGroup, MemoryPlan, Schedule, Storage,
};

mod advance;
mod attention;
mod conv;
mod elementwise;
mod expr;
mod index;
mod matmul;
mod packed;
mod recurrence;
mod reduce;
mod tiling;

pub use advance::{advance, Advance};
use conv::*;
use matmul::*;
use tiling::*;

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
    /// The same kernel with WebGPU's subgroup operations, where its template has such a form
    /// ([`wgslc_artifact::Kernel::subgroups`]): a workgroup of whole subgroups (or, for the 64-invocation row
    /// reductions, possibly one partial subgroup), its invocations numbered by subgroup where the layout needs
    /// it, sums across lanes through shuffles instead of workgroup memory and barriers.
    pub subgroups: Option<String>,
    /// Bytes the kernel stores when that is less than its output binding (its block of a Concat written in
    /// place), for the report.
    pub stored_bytes: Option<u64>,
    /// Bindings in binding-number order: the value bound and whether the kernel writes it.
    pub bindings: Vec<(ValueId, bool)>,
    pub workgroups: [u32; 3],
    /// What each workgroup axis walks, where the kernel says: the workgroup at index `i` along it writes only the
    /// entries `i·tile .. (i+1)·tile` of an `extent`-long axis of what it computes (a product's rows or columns),
    /// so that fewer workgroups compute a prefix of that axis (ranged dims).
    pub grid: [Option<GridAxis>; 3],
}

/// See [`EmittedKernel::grid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridAxis {
    /// What the axis walks: a product's rows (M) or columns (N).
    pub walks: Walks,
    pub extent: usize,
    pub tile: usize,
}

/// The axis of a product a workgroup axis walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walks {
    Rows,
    Cols,
}

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
    /// A loader function per binding of a narrow constant (templates/narrow_load.wgsl): `ld_VAR(i)` decodes
    /// element `i` (and `ld4_VAR(i)` elements `i .. i + 4` where `vec4` is set).
    loaders: Vec<Loader>,
}

impl Header {
    /// A kernel's header over `bindings` (value, written, variable), in binding order: each declared with its
    /// access (read-write where the kernel writes its buffer) and storage type, narrow constants as `u32` words
    /// with their loader.
    fn new(
        g: &Graph,
        plan: &MemoryPlan,
        name: String,
        comment: String,
        template: &'static str,
        bindings: &[(ValueId, bool, &str)],
    ) -> Header {
        let pairs: Vec<(ValueId, bool)> = bindings.iter().map(|&(v, w, _)| (v, w)).collect();
        let access = binding_access(plan, &pairs);
        let narrow = |v: ValueId| wgslc_passes::narrow_of(g, v);
        Header {
            name,
            comment,
            template,
            bindings: bindings
                .iter()
                .enumerate()
                .map(|(i, &(v, _, var))| BindingDecl {
                    binding: i,
                    access: if access[i] { "read_write" } else { "read" },
                    var: var.to_string(),
                    ty: if narrow(v).is_some() { "u32" } else { storage(g, v).wgsl() },
                })
                .collect(),
            loaders: bindings.iter().filter_map(|&(v, _, var)| Some(Loader::new(var, narrow(v)?))).collect(),
        }
    }
}

/// See [`Header::loaders`].
struct Loader {
    var: String,
    kind: LoaderKind,
    vec4: bool,
}

enum LoaderKind {
    F16,
    Bf16,
    Blocks(BlockLoad),
}

/// A block-quantized binding's layout ([`wgslc_ir::BlockLayout`]) as its loader reads it.
struct BlockLoad {
    bits: u32,
    per_word: u32,
    /// log2(per_word), and per_word - 1: code `e` is in word `e >> word_shift`, lane `e & lane_mask`.
    word_shift: u32,
    lane_mask: u32,
    code_mask: u32,
    row: usize,
    /// Codes per row in storage (rows start at word boundaries).
    row_codes: usize,
    block: usize,
    blocks_per_row: usize,
    /// Rows fill whole words and whole blocks, so element `i` is code `i` in block `i / block`.
    aligned: bool,
    scales_at: usize,
    scale_f16: bool,
    zeros_at: Option<usize>,
    /// The zero point of every block when there is one for all (a float literal).
    zero: String,
}

impl Loader {
    fn new(var: &str, narrow: wgslc_passes::Narrow) -> Loader {
        let kind = match narrow {
            wgslc_passes::Narrow::Half(wgslc_ir::DType::BF16) => LoaderKind::Bf16,
            wgslc_passes::Narrow::Half(_) => LoaderKind::F16,
            wgslc_passes::Narrow::Blocks(l) => {
                let per_word = 32 / l.bits;
                let row_codes = l.row_words * per_word as usize;
                let (zeros_at, zero) = match l.zeros {
                    wgslc_ir::ZeroLayout::All(z) => (None, f32_lit(z as f32)),
                    wgslc_ir::ZeroLayout::At(at) => (Some(at), String::new()),
                };
                LoaderKind::Blocks(BlockLoad {
                    bits: l.bits,
                    per_word,
                    word_shift: per_word.trailing_zeros(),
                    lane_mask: per_word - 1,
                    code_mask: (1 << l.bits) - 1,
                    row: l.row,
                    row_codes,
                    block: l.block,
                    blocks_per_row: l.blocks_per_row,
                    aligned: row_codes == l.row && l.row % l.block == 0,
                    scales_at: l.scales_at,
                    scale_f16: l.scale_f16,
                    zeros_at,
                    zero,
                })
            }
        };
        Loader { var: var.to_string(), kind, vec4: false }
    }
}

/// How a template reads element `idx` of a binding: `open idx close`, which is `var[idx]`, or `ld_var(idx)` for a
/// narrow constant (its loader decodes the element).
struct Ld {
    open: String,
    close: &'static str,
}

impl Ld {
    /// The scalar read of binding `var` holding value `v`.
    fn of(g: &Graph, v: ValueId, var: &str) -> Ld {
        match wgslc_passes::narrow_of(g, v) {
            // The index may be an i32 expression (a fused body's coordinates are), which a u32 parameter refuses.
            Some(_) => Ld { open: format!("ld_{var}(u32("), close: "))" },
            None => Ld { open: format!("{var}["), close: "]" },
        }
    }

    /// A plain array read (what every runtime value is).
    fn plain(var: &str) -> Ld {
        Ld { open: format!("{var}["), close: "]" }
    }

    /// The four-wide read of elements `idx .. idx + 4` (`idx` a multiple of 4) of a binding declared as vec4s,
    /// or through the narrow loader's `ld4_`.
    fn of4(g: &Graph, v: ValueId, var: &str) -> Ld {
        match wgslc_passes::narrow_of(g, v) {
            Some(_) => Ld { open: format!("ld4_{var}("), close: ")" },
            None => Ld { open: format!("{var}[("), close: ") / 4u]" },
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Helpers {
    round_float: bool,
    round_bf16: bool,
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
    /// How the binding is read ([`Ld`]).
    ld: Ld,
    offset: String,
    terms: Vec<NamedTerm>,
}

/// The generated `fused(acc, i)` function: loads, statements and the result of a group's elementwise nodes.
#[derive(Default)]
struct Fused {
    defined: bool,
    /// The function's name: `fused` unless set (a second function in one module, as a product's computed A row).
    name: &'static str,
    ty: &'static str,
    coords: Vec<NamedCoord>,
    loads: Vec<FusedLoad>,
    stmts: Vec<Stmt>,
    result: String,
    /// Where result element `o` is stored when the group writes through a permuting copy or into a Concat's
    /// output (`Recipe::store`): `store_offset + Σ ((o / stride) % extent) · out_stride`; with no terms and no
    /// offset, a plain store at `o`.
    store: Vec<StoreTerm>,
    store_offset: usize,
    /// What the placement is, for the comment over `store_at`.
    store_note: &'static str,
}

/// One step of a loop a template unrolls: its index (for names) and its offset (the index times the loop's stride),
/// so that templates hold no arithmetic (every number a template writes is computed here, where it is typed and
/// tested).
#[derive(Clone, Copy, Debug)]
pub(super) struct Lane {
    pub(super) i: usize,
    pub(super) off: usize,
}

/// Steps `0..n` at offsets `0, stride, 2·stride, …`.
pub(super) fn unrolled(n: usize, stride: usize) -> Vec<Lane> {
    (0..n).map(|i| Lane { i, off: i * stride }).collect()
}

struct StoreTerm {
    stride: usize,
    extent: usize,
    out_stride: usize,
}

impl Fused {
    /// The generated function's name.
    fn name(&self) -> &'static str {
        if self.name.is_empty() {
            "fused"
        } else {
            self.name
        }
    }

    /// The output index of result element `o` (a WGSL u32 expression).
    fn at(&self, o: &str) -> String {
        if !self.placed() {
            o.to_string()
        } else {
            format!("store_at({o})")
        }
    }

    /// Whether stores go through `store_at`.
    fn placed(&self) -> bool {
        !self.store.is_empty() || self.store_offset != 0
    }

    /// The statement that stores value `v` as result element `o`: through the fused body when there is one.
    fn store(&self, o: &str, v: &str) -> String {
        let value = if self.defined { format!("{}({v}, {o})", self.name()) } else { v.to_string() };
        format!("out[{}] = {value};", self.at(o))
    }
}

/// The module-scope variable whose bits give the non-finite f32 values at run time: `.x` +∞, `.y` −∞, `.z` NaN.
/// WGSL has no literal for them, and `bitcast<f32>(0xff800000u)` is a const-expression, which Tint (Chrome, Edge)
/// evaluates at shader creation and refuses ("value -inf cannot be represented as 'f32'") while naga accepts it.
/// A load from a private variable is not a const-expression, so the bitcast happens at run time everywhere.
/// [`with_non_finite`] declares the variable in every module that names it.
pub(crate) const NON_FINITE: &str = "non_finite_bits";

/// How many of `parts` partial sums a kernel's pairwise sums (a workgroup barrier a step) leave for one invocation
/// to add up from independent reads: at most 8. The matrix-vector kernels' lane sums and the one-row attention's
/// slice sums stop there; fewer barriers in a decode step (docs/performance.md, twenty-eighth session).
fn tree_tail(parts: usize) -> usize {
    parts.min(8)
}

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
/// The float type an expression computes in, with its literals and conversions: the op → WGSL table
/// (`expr.rs`) writes float arithmetic through it, so a second float type (f16 behind `shader-f16`) is a variant
/// here rather than a rewrite of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    F32,
}

impl Elem {
    /// A literal of this type denoting `x` exactly (non-finite values through `non_finite_bits`).
    fn lit(self, x: f32) -> String {
        match self {
            Elem::F32 => f32_lit(x),
        }
    }

    /// `e` (an integer or bool expression) converted to this type.
    fn convert(self, e: &str) -> String {
        match self {
            Elem::F32 => format!("f32({e})"),
        }
    }
}

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

/// Every name the emitter makes up for WGSL, in one place, so that no two kinds of name can collide: bindings
/// that a fused body reads are `in{n}`, its loads `x{n}`, its statements `t{n}`, the coordinates of its `s`-th
/// distinct shape `c{s}_{d}`. Templates own the other names (`acc`, `i`, `o`, `out`, `a`, `b`, `bias`, …: each
/// kernel family's operands, given by its file), none of which has a digit.
struct Namer;

impl Namer {
    fn binding(n: usize) -> String {
        format!("in{n}")
    }

    fn load(n: usize) -> String {
        format!("x{n}")
    }

    fn stmt(n: usize) -> String {
        format!("t{n}")
    }

    fn coord(shape: usize, d: usize) -> String {
        format!("c{shape}_{d}")
    }
}

/// A kernel's bindings in binding order: what it reads (`reads`: the op's own operands first, then what its fused
/// body reads through [`bind_once`], so each stored tensor once), then what it writes (`outs`).
fn bindings<'a>(reads: &'a [(ValueId, String)], outs: &[(ValueId, &'a str)]) -> Vec<(ValueId, bool, &'a str)> {
    let ins = reads.iter().map(|(v, s)| (*v, false, s.as_str()));
    ins.chain(outs.iter().map(|&(v, s)| (v, true, s))).collect()
}

/// The WGSL variable bound to stored tensor `v`: the one already in `reads`, or `name`, added. One binding per
/// tensor, since writable bindings may not alias (and the output's arena makes every binding in it writable).
/// A name that already binds another tensor (two parts of one kernel asking for their template's operand name,
/// as two cache writes merged into one kernel each ask for `x`) gets the first free suffix `_1`, `_2`, …, which
/// no [`Namer`] name and no template's own name ends in.
fn bind_once(reads: &mut Vec<(ValueId, String)>, v: ValueId, name: &str) -> String {
    if let Some((_, var)) = reads.iter().find(|(r, _)| *r == v) {
        return var.clone();
    }
    let (mut var, mut k) = (name.to_string(), 0);
    while reads.iter().any(|(_, taken)| *taken == var) {
        k += 1;
        var = format!("{name}_{k}");
    }
    reads.push((v, var.clone()));
    var
}

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

    /// The shared start of a kernel launched over a 1-D grid: its header over `bindings` (named and described by
    /// its group when it has one, else by node `n`) and `groups` workgroups (see [`Self::grid`]).
    fn launch(
        &self,
        n: NodeId,
        group: Option<&KernelGroup>,
        template: &'static str,
        bindings: &[(ValueId, bool, &str)],
        groups: usize,
    ) -> Result<(Header, [u32; 3], u32), EmitError> {
        let (wg, groups_x) = self.grid(n, groups)?;
        let h = match group {
            Some(g) => self.group_header(g, template, bindings),
            None => self.header(n, template, bindings),
        };
        Ok((h, wg, groups_x))
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
        let comment = format!("{}({}) -> {}", node.op.name(), ins.join(", "), self.g.ty(node.outputs[0]));
        Header::new(self.g, self.plan, node.name.clone(), comment, template, bindings)
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
            wgsl: self.module(n, wgsl)?,
            subgroups: None,
            bindings: bindings.iter().map(|&(v, w, _)| (v, w)).collect(),
            workgroups,
            stored_bytes: None,
            grid: [None; 3],
        })
    }

    /// A rendered module (a kernel's second one, [`EmittedKernel::subgroups`]), or the template's error.
    fn module(&self, n: NodeId, wgsl: Result<String, askama::Error>) -> Result<String, EmitError> {
        Ok(with_non_finite(wgsl.map_err(|e| self.err(n, format!("template error: {e}")))?))
    }

    /// `k` with its subgroup module ([`EmittedKernel::subgroups`]): its template rendered with `sg` set.
    fn with_subgroups(
        &self,
        n: NodeId,
        mut k: EmittedKernel,
        sg: Result<String, askama::Error>,
    ) -> Result<EmittedKernel, EmitError> {
        k.subgroups = Some(self.module(n, sg)?);
        Ok(k)
    }

    /// Emits the kernels of one group: a fused elementwise kernel, an anchor with its epilogue, or an anchor alone.
    pub fn emit_group(&self, group: &KernelGroup) -> Result<Vec<EmittedKernel>, EmitError> {
        let last = group.last();
        if self.g.node(last).outputs.iter().all(|&o| self.g.ty(o).numel() == 0) {
            return Ok(vec![]);
        }
        let mut ks = match group.anchor {
            _ if group.attention().is_some() => vec![self.attention(group)?],
            None => vec![self.elementwise_group(group)?],
            Some(a) => self.anchored(group, a)?,
        };
        let result = self.g.node(group.result()).outputs[0];
        for k in &mut ks {
            k.nodes = group.nodes();
            if group.write_into().is_some() {
                k.stored_bytes = Some(wgslc_passes::stored_bytes(self.g, result));
            }
        }
        Ok(ks)
    }

    /// The kernels of a group with anchor `n`: the anchors that take an epilogue get the whole group, the others
    /// (Concat gives one kernel per input) none.
    fn anchored(&self, group: &KernelGroup, n: NodeId) -> Result<Vec<EmittedKernel>, EmitError> {
        let node = self.g.node(n);
        match &node.op {
            Op::MatMul | Op::Gemm { .. } => return Ok(vec![self.matmul(group)?]),
            Op::Conv { .. } => return Ok(vec![self.conv(group)?]),
            Op::Softmax { axis, legacy, log } => {
                return Ok(vec![self.softmax(group, *axis as usize, *legacy, *log)?])
            }
            Op::Gather { axis } => return Ok(vec![self.gather(group, *axis as usize)?]),
            Op::CacheWrite { axis } if group.elementwise.is_empty() => {
                return Ok(vec![self.cache_write(group, *axis)?])
            }
            op if !group.elementwise.is_empty() => {
                return Err(self.err(n, format!("{} takes no epilogue", op.name())));
            }
            _ => {}
        }
        match &node.op {
            // Elementwise ops and layout copies are never anchors: the scheduler gives them elementwise groups.
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::Cast { .. }
            | Op::StridedCopy { .. }
            | Op::TileCopy
            | Op::Trilu { .. }
            | Op::RotateHalf
            | Op::MatMul
            | Op::Gemm { .. }
            | Op::Conv { .. }
            | Op::Softmax { .. }
            | Op::CacheWrite { .. }
            | Op::Gather { .. } => Err(self.err(n, "an anchor of the wrong kind (a scheduler bug)")),
            Op::Concat { axis } => self.concat(n, *axis as usize),
            Op::Reduce { op, axes, .. } => {
                let axes: Vec<usize> = axes.as_ref().expect("resolved").iter().map(|&a| a as usize).collect();
                Ok(vec![self.reduce(n, *op, &axes)?])
            }
            Op::GlobalPool(kind) => {
                let r = self.g.ty(node.inputs[0].unwrap()).rank();
                let op = if *kind == PoolKind::Max { ReduceOp::Max } else { ReduceOp::Mean };
                Ok(vec![self.reduce(n, op, &(2..r).collect::<Vec<_>>())?])
            }
            Op::LayerNorm { axis, epsilon, rms } => Ok(vec![self.layernorm(n, *axis as usize, *epsilon, *rms)?]),
            Op::ArgReduce { max, axis, select_last, .. } => {
                Ok(vec![self.argreduce(n, *max, *axis as usize, *select_last)?])
            }
            Op::ArgChunks { max, select_last, .. } => Ok(vec![self.arg_split(n, *max, *select_last, false)?]),
            Op::ArgMerge { max, select_last, .. } => Ok(vec![self.arg_split(n, *max, *select_last, true)?]),
            Op::GatherElements { axis } => Ok(vec![self.gather_elements(n, *axis as usize)?]),
            Op::GatherBlocks { rows } => Ok(vec![self.gather_blocks(n, *rows)?]),
            Op::CumSum { axis, exclusive, reverse, prod } => {
                Ok(vec![self.cumsum(n, axis.expect("resolved") as usize, *exclusive, *reverse, *prod)?])
            }
            Op::TopK { axis, largest, k } => Ok(vec![self.topk(n, *axis as usize, *largest, k.expect("resolved"))?]),
            Op::Sample => Ok(vec![self.sample(n)?]),
            Op::Recurrence(at) => Ok(vec![self.recurrence(n, at)?]),
            Op::Scatter { axis, reduction } => Ok(vec![self.scatter(n, axis.map(|a| a as usize), *reduction)?]),
            Op::Pad { mode, pads, value } => Ok(vec![self.pad(n, *mode, pads.as_ref().expect("resolved"), *value)?]),
            Op::Pool { .. } => Ok(vec![self.pool(n)?]),
            // Rewritten before emission: BatchNormalization by lowering, Alias nodes are views, import-level ops
            // by shape inference. Groups never hold them; `verify` checks it.
            op @ (Op::Alias | Op::BatchNorm { .. } | wgslc_ir::import_level!()) => {
                Err(self.err(n, format!("no kernel for {} (a pass should have rewritten it)", op.name())))
            }
        }
    }

    /// Where the group stores its result's elements: through its `store_copy`'s permutation, or in place.
    /// Sets where `fu` stores the group's result elements (`Recipe::store`).
    fn place_stores(&self, group: &KernelGroup, fu: &mut Fused) {
        let Some(p) = &group.recipe.store else { return };
        fu.store =
            p.terms.iter().map(|&(stride, extent, out_stride)| StoreTerm { stride, extent, out_stride }).collect();
        fu.store_offset = p.offset;
        fu.store_note = if group.write_into().is_some() {
            "Result element o goes to its block of the Concat output the kernel writes directly."
        } else {
            "Result element o goes to its place in the transposed output the kernel writes directly."
        };
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
}

/// Wraps an i32 expression to the width of a narrower integer dtype, so arithmetic on uint8, int8, uint16 and
/// int16 values wraps as it would in that type (i32 arithmetic wraps at 32 bits by itself).
fn narrow(e: String, d: wgslc_ir::DType) -> String {
    match d.int_bits() {
        Some((w, false)) if w < 32 => format!("({e} & {}i)", (1u32 << w) - 1),
        Some((w, true)) if w < 32 => format!("(({e} << {s}u) >> {s}u)", s = 32 - w),
        _ => e,
    }
}

fn bit_width(d: wgslc_ir::DType) -> u32 {
    d.int_bits().map_or(32, |(w, _)| w)
}

fn is_signed(d: wgslc_ir::DType) -> bool {
    d.int_bits().is_some_and(|(_, signed)| signed)
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

    /// Each stored tensor is bound once, under the name first asked for; another tensor asking for a taken name
    /// (two cache writes in one kernel each binding their new rows as `x`) gets a free one.
    #[test]
    fn bindings_are_named_once_and_never_twice() {
        let mut g = Graph::new();
        let (a, b, c) = (g.add_value("a", None), g.add_value("b", None), g.add_value("c", None));
        let mut reads = Vec::new();
        assert_eq!(bind_once(&mut reads, a, "x"), "x");
        assert_eq!(bind_once(&mut reads, b, "x"), "x_1");
        assert_eq!(bind_once(&mut reads, a, "y"), "x", "a tensor keeps its first name");
        assert_eq!(bind_once(&mut reads, c, "x"), "x_2");
        assert_eq!(reads.len(), 3);
    }
}
