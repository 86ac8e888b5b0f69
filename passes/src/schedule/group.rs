//! What a kernel is, as data: an optional anchor, the folds that bring other nodes into the anchor's loops, the
//! elementwise epilogue, and the recipe (the decisions the emitter only reads).

use super::recipe::Recipe;
use std::collections::HashSet;
use wgslc_ir::NodeId;

/// Nodes emitted as one WGSL module and dispatched together.
///
/// A kernel is its anchor's kernel (or, without an anchor, an elementwise loop) with `folds` computed inside it
/// and `elementwise` applied to each result before it is stored. Which folds may stand together, and over which
/// anchors, is checked in one place: [`super::verify_schedule`] (through [`Fold::allowed_over`] and
/// [`Fold::combines_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelGroup {
    /// The node with its own kernel shape, or `None` for a purely elementwise group.
    pub anchor: Option<NodeId>,
    /// Other nodes the kernel computes in the anchor's loops, in [`Fold::rank`] order (each kind at most once,
    /// except operand prologues, one per slot).
    pub folds: Vec<Fold>,
    /// Elementwise nodes applied after the anchor (its epilogue) or forming the whole kernel, in data order.
    pub elementwise: Vec<NodeId>,
    /// How the emitter lays out the work: filled in by [`super::schedule`] once the groups are final.
    pub recipe: Recipe,
}

/// A node (or chain of nodes) computed inside another node's kernel instead of a kernel of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fold {
    /// The cache writes of a decode step (a `CacheWrite` group: the elementwise nodes that compute its first
    /// write's new rows, `operand`, and a second write at the same row, all of `writes`) done by the one-row
    /// attention kernel that reads both caches: one workgroup writes the new rows, every workgroup computes its own
    /// head's new key and value rows into workgroup memory and reads them there instead of from the cache (so no
    /// workgroup reads a row another writes), and the write's kernel is gone.
    CacheRows { operand: Vec<NodeId>, writes: Vec<NodeId> },
    /// A pointwise node with only scalar-constant operands applied to MatMul operand `slot` as it is loaded.
    Operand { slot: usize, node: NodeId },
    /// The elementwise nodes (a whole elementwise kernel, in data order) that compute the A operand of a
    /// one-row MatMul and nothing else: the matrix-vector kernel computes each element of A as it loads it, every
    /// workgroup the whole row (a row of K values, read from cache), so the row never reaches memory and its
    /// kernel is gone (SwiGLU's `SiLU(gate) · up` before the down projection of an LLM decode step). Over a
    /// `CacheWrite`: the nodes that compute its new rows (rotary on a decode step's K), computed as the cache
    /// write loads them, so the rotated rows go straight into the cache. Next to a [`Fold::RmsNorm`]: the nodes
    /// that compute the norm's input, which the product normalizes as it stages it.
    RowOperand(Vec<NodeId>),
    /// A Concat that only this attention kernel reads, as its K or its V (through views: a GQA expansion, a
    /// transpose): the kernel reads each element from the input that holds it, through that input's view, so
    /// the Concat has no kernel and its output is never written (a prefill chunk's keys: the cache's window, then
    /// the chunk's own rows).
    ReadConcat(NodeId),
    /// A pointwise (1x1) ungrouped Conv (with its scalar epilogue, e.g. ReLU6) whose output only this group's
    /// depthwise Conv reads (the anchor, or the [`Fold::Depthwise`] folded into a projection): each workgroup
    /// computes the expanded channels over its output tile's input window into workgroup memory, so the
    /// expansion's output never reaches memory (MobileNet's expansion → depthwise, and with a depthwise fold the
    /// whole inverted-residual block). Tiled by [`super::expand_tile`].
    Expand(FoldedConv),
    /// A depthwise convolution (with its scalar epilogue) whose output only this pointwise (1x1) Conv reads: the
    /// product computes each element of its B operand from the depthwise input's window as it loads it, so the
    /// depthwise output never reaches memory (MobileNet's depthwise → projection).
    Depthwise(FoldedConv),
    /// An RMSNormalization over the last axis whose output only this MatMul reads as its A operand: the product
    /// normalizes instead (B's rows scaled by the norm's weights as loaded, each row's sum of squares gathered from
    /// the A tiles, the result divided by the row's RMS before the epilogue).
    RmsNorm(NodeId),
    /// A second convolution summed into the anchor's (a ResNet shortcut projection): `add` is the first epilogue
    /// node and adds `conv`'s output to the anchor's. Both are ungrouped with the same output shape, so the kernel
    /// computes them as one product over their concatenated K and `add` costs nothing.
    ConvSum { conv: NodeId, add: NodeId },
    /// Attention: the anchor is the score product Q·Kᵀ (with its prologue and epilogue: scale, mask), and the
    /// softmax over its last axis and the product with V run in the same kernel with an online softmax.
    Attention(AttentionTail),
    /// A permuting StridedCopy (a Transpose) that is the result's only reader: the kernel stores each element
    /// straight at its place in the copy's output (`Recipe::store`), and the result is never written as is.
    StoreCopy(NodeId),
    /// The result is input `slot` of a Concat that reads it alone: the kernel stores it straight into its place
    /// in the Concat's output (`Recipe::store`). Every input of that Concat is written so (the Concat is in
    /// `Schedule::concats` and has no kernel); the Concat node belongs to no group.
    WriteInto { concat: NodeId, slot: usize },
    /// A second `CacheWrite` at the same row as the anchor's, in a kernel of its own before, independent of the
    /// anchor (neither reads the other's cache): the kernel writes its new rows after the anchor's, in the same
    /// dispatch (a decode step's V next to its K). Its output is its cache, like the anchor's.
    CacheWrite(NodeId),
    /// The other blocks of a weight `split_weights` cut by output columns (an LLM head over its vocabulary):
    /// one-row products of the same A, each written into its slot of `concat` (the anchor into slot 0,
    /// `products[i]` into slot i + 1). The kernel binds every block and computes the whole Concat, its output,
    /// each workgroup reading the block that holds its columns: one dispatch instead of one per block.
    Blocks { concat: NodeId, products: Vec<NodeId> },
}

/// A convolution folded into its reader's kernel ([`Fold::Depthwise`], [`Fold::Expand`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedConv {
    pub conv: NodeId,
    /// Pointwise nodes after it whose other operands are scalar constants (`scalar_op_data_slot`), in data order.
    pub then: Vec<NodeId>,
}

/// The rest of an attention kernel after its score product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionTail {
    pub softmax: NodeId,
    /// `Where(IsNaN(p), 0, p)` after the softmax (PyTorch's SDPA export: a fully masked row gives zeros, not NaN),
    /// as (IsNaN, Where); the kernel writes zeros for rows whose scores are all -inf.
    pub nan_to_zero: Option<(NodeId, NodeId)>,
    /// The MatMul of the probabilities with V; the kernel writes its output.
    pub pv: NodeId,
}

/// The kinds of [`Fold`], for the combination rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FoldKind {
    CacheRows,
    Operand,
    RowOperand,
    ReadConcat,
    Expand,
    Depthwise,
    RmsNorm,
    ConvSum,
    Attention,
    StoreCopy,
    WriteInto,
    CacheWrite,
    Blocks,
}

/// The anchors a fold can sit in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnchorKind {
    /// No anchor: an elementwise loop.
    Elementwise,
    MatMul,
    Gemm,
    /// An ungrouped Conv with a 1x1 window, unit strides, no padding.
    PointwiseConv,
    /// Any other ungrouped Conv.
    Conv,
    /// A depthwise Conv (one input channel per group).
    DepthwiseConv,
    /// A KV cache written in place (`Op::CacheWrite`).
    CacheWrite,
    Other,
}

impl Fold {
    pub fn kind(&self) -> FoldKind {
        match self {
            Fold::CacheRows { .. } => FoldKind::CacheRows,
            Fold::Operand { .. } => FoldKind::Operand,
            Fold::RowOperand(_) => FoldKind::RowOperand,
            Fold::ReadConcat(_) => FoldKind::ReadConcat,
            Fold::Expand(_) => FoldKind::Expand,
            Fold::Depthwise(_) => FoldKind::Depthwise,
            Fold::RmsNorm(_) => FoldKind::RmsNorm,
            Fold::ConvSum { .. } => FoldKind::ConvSum,
            Fold::Attention(_) => FoldKind::Attention,
            Fold::StoreCopy(_) => FoldKind::StoreCopy,
            Fold::WriteInto { .. } => FoldKind::WriteInto,
            Fold::CacheWrite(_) => FoldKind::CacheWrite,
            Fold::Blocks { .. } => FoldKind::Blocks,
        }
    }

    /// Where the fold's nodes stand among the group's: before the anchor (ranks below [`FoldKind::ConvSum`]),
    /// between the anchor and the epilogue (`ConvSum`), or after the epilogue.
    pub fn rank(&self) -> FoldKind {
        self.kind()
    }

    /// The fold's nodes, in data order.
    pub fn nodes(&self) -> Vec<NodeId> {
        let folded = |f: &FoldedConv| std::iter::once(f.conv).chain(f.then.iter().copied()).collect();
        match self {
            Fold::Operand { node, .. }
            | Fold::RmsNorm(node)
            | Fold::StoreCopy(node)
            | Fold::CacheWrite(node)
            | Fold::ReadConcat(node) => vec![*node],
            Fold::RowOperand(nodes) => nodes.clone(),
            Fold::CacheRows { operand, writes } => operand.iter().chain(writes).copied().collect(),
            Fold::Blocks { concat, products } => products.iter().copied().chain([*concat]).collect(),
            Fold::Expand(f) | Fold::Depthwise(f) => folded(f),
            Fold::ConvSum { conv, .. } => vec![*conv],
            // The Concat is written by several kernels and belongs to none.
            Fold::WriteInto { .. } => vec![],
            Fold::Attention(t) => {
                let nz = t.nan_to_zero.map(|(i, w)| vec![i, w]).unwrap_or_default();
                std::iter::once(t.softmax).chain(nz).chain([t.pv]).collect()
            }
        }
    }

    /// Nodes applied to a value as it is loaded or computed inside another member's loop, whose scalar-constant
    /// operands are literals in the kernel rather than bindings.
    pub fn inlined(&self) -> Vec<NodeId> {
        match self {
            Fold::Operand { node, .. } => vec![*node],
            Fold::Expand(f) | Fold::Depthwise(f) => f.then.clone(),
            // The guard's zero is a literal of the attention templates.
            Fold::Attention(t) => t.nan_to_zero.map(|(i, w)| vec![i, w]).unwrap_or_default(),
            _ => vec![],
        }
    }

    /// The anchors this fold can sit in.
    pub fn allowed_over(&self, anchor: AnchorKind) -> bool {
        use AnchorKind as A;
        match self.kind() {
            FoldKind::RowOperand => matches!(anchor, A::MatMul | A::CacheWrite),
            FoldKind::CacheWrite => anchor == A::CacheWrite,
            FoldKind::Blocks | FoldKind::CacheRows => anchor == A::MatMul,
            FoldKind::Operand | FoldKind::RmsNorm | FoldKind::Attention | FoldKind::ReadConcat => anchor == A::MatMul,
            FoldKind::Expand => matches!(anchor, A::DepthwiseConv | A::PointwiseConv),
            FoldKind::Depthwise => anchor == A::PointwiseConv,
            FoldKind::ConvSum => matches!(anchor, A::PointwiseConv | A::Conv),
            // The kernels whose emitters place stores through the recipe.
            FoldKind::StoreCopy | FoldKind::WriteInto => {
                matches!(anchor, A::Elementwise | A::MatMul | A::Gemm | A::PointwiseConv | A::Conv)
            }
        }
    }

    /// Whether a kernel can hold folds of both kinds (symmetric; a kind with itself means a second fold of it).
    pub fn combines_with(a: FoldKind, b: FoldKind) -> bool {
        use FoldKind as K;
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        match (a, b) {
            // A decode step's cache writes in its one-row attention kernel, with its query computed there too.
            (K::CacheRows, K::RowOperand | K::Attention | K::StoreCopy) => true,
            (K::CacheRows, _) => false,
            // K's and V's Concats in a tiled attention kernel (each read by its own product: `rules/concat_read.rs`).
            (K::Operand | K::ReadConcat, K::ReadConcat) => true,
            (K::ReadConcat, K::Attention | K::StoreCopy) => true,
            (K::ReadConcat, _) => false,
            // One per slot is checked separately.
            (K::Operand, K::Operand) => true,
            // B's prologue next to A computed in the kernel (one per slot is checked separately).
            (K::Operand, K::RowOperand) => true,
            (K::RowOperand, K::StoreCopy | K::WriteInto | K::CacheWrite) => true,
            // A decode step's query computed in its one-row attention kernel.
            (K::RowOperand, K::Attention) => true,
            // A one-row product's A normalized in the kernel, the norm's input computed there too (a residual sum
            // before the norm: the o-projection's partial sums plus the residual).
            (K::RowOperand, K::RmsNorm) => true,
            (K::RowOperand, _) => false,
            (K::Operand, K::Attention | K::StoreCopy) => true,
            (K::Operand, _) => false,
            // A whole inverted-residual block: expansion → depthwise → projection.
            (K::Expand, K::Depthwise | K::StoreCopy) => true,
            (K::Depthwise, K::StoreCopy) => true,
            (K::RmsNorm, K::StoreCopy) => true,
            (K::ConvSum, K::StoreCopy) => true,
            (K::Attention, K::StoreCopy) => true,
            // A result stored into a Concat, from any kernel that places its stores, but not also permuted.
            (K::StoreCopy | K::WriteInto, K::WriteInto) => false,
            (_, K::WriteInto) => true,
            // One second cache write, next to the anchor's new rows computed in the kernel.
            (_, K::CacheWrite) => false,
            _ => false,
        }
    }
}

impl KernelGroup {
    /// A group of one node's kernel.
    pub fn single(n: NodeId, pointwise: bool) -> KernelGroup {
        let (anchor, elementwise) = if pointwise { (None, vec![n]) } else { (Some(n), vec![]) };
        KernelGroup { anchor, folds: vec![], elementwise, recipe: Recipe::default() }
    }

    /// Adds a fold in its [`Fold::rank`] order (after folds of the same rank).
    pub fn fold(&mut self, f: Fold) {
        let at = self.folds.iter().position(|g| g.rank() > f.rank()).unwrap_or(self.folds.len());
        self.folds.insert(at, f);
    }

    /// This group with one more fold.
    pub fn with(&self, f: Fold) -> KernelGroup {
        let mut k = self.clone();
        k.fold(f);
        k
    }

    /// Whether a fold of `kind` is in the group.
    pub fn has(&self, kind: FoldKind) -> bool {
        self.folds.iter().any(|f| f.kind() == kind)
    }

    /// Every node of the group in data order: folds before the anchor, the anchor, a summed convolution, the
    /// epilogue, then the folds after it.
    pub fn nodes(&self) -> Vec<NodeId> {
        let (before, after): (Vec<&Fold>, Vec<&Fold>) = self.folds.iter().partition(|f| f.rank() < FoldKind::ConvSum);
        let (sum, tail): (Vec<&Fold>, Vec<&Fold>) = after.into_iter().partition(|f| f.rank() == FoldKind::ConvSum);
        before
            .iter()
            .flat_map(|f| f.nodes())
            .chain(self.anchor)
            .chain(sum.iter().flat_map(|f| f.nodes()))
            .chain(self.elementwise.iter().copied())
            .chain(tail.iter().flat_map(|f| f.nodes()))
            .collect()
    }

    /// Members applied to a value as it is loaded or computed inside another member's loop, whose scalar-constant
    /// operands are literals in the kernel rather than bindings.
    pub fn inlined(&self) -> HashSet<NodeId> {
        self.folds.iter().flat_map(Fold::inlined).collect()
    }

    /// The operand prologues: `(slot, node)`.
    pub fn prologue(&self) -> impl Iterator<Item = (usize, NodeId)> + '_ {
        self.folds.iter().filter_map(|f| match f {
            Fold::Operand { slot, node } => Some((*slot, *node)),
            _ => None,
        })
    }

    /// The elementwise nodes computing A as it is loaded ([`Fold::RowOperand`]).
    pub fn row_operand(&self) -> Option<&[NodeId]> {
        self.folds.iter().find_map(|f| match f {
            Fold::RowOperand(nodes) => Some(nodes.as_slice()),
            _ => None,
        })
    }

    /// The Concats read in place ([`Fold::ReadConcat`]).
    pub fn read_concats(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.folds.iter().filter_map(|f| match f {
            Fold::ReadConcat(c) => Some(*c),
            _ => None,
        })
    }

    pub fn rms_norm(&self) -> Option<NodeId> {
        self.folds.iter().find_map(|f| match f {
            Fold::RmsNorm(n) => Some(*n),
            _ => None,
        })
    }

    pub fn depthwise(&self) -> Option<&FoldedConv> {
        self.folds.iter().find_map(|f| match f {
            Fold::Depthwise(d) => Some(d),
            _ => None,
        })
    }

    pub fn expand(&self) -> Option<&FoldedConv> {
        self.folds.iter().find_map(|f| match f {
            Fold::Expand(d) => Some(d),
            _ => None,
        })
    }

    /// The summed convolution: `(conv, add)`.
    pub fn conv_sum(&self) -> Option<(NodeId, NodeId)> {
        self.folds.iter().find_map(|f| match f {
            Fold::ConvSum { conv, add } => Some((*conv, *add)),
            _ => None,
        })
    }

    pub fn attention(&self) -> Option<AttentionTail> {
        self.folds.iter().find_map(|f| match f {
            Fold::Attention(t) => Some(*t),
            _ => None,
        })
    }

    pub fn store_copy(&self) -> Option<NodeId> {
        self.folds.iter().find_map(|f| match f {
            Fold::StoreCopy(t) => Some(*t),
            _ => None,
        })
    }

    /// The Concat the result is stored into: `(concat, slot)`.
    pub fn write_into(&self) -> Option<(NodeId, usize)> {
        self.folds.iter().find_map(|f| match f {
            Fold::WriteInto { concat, slot } => Some((*concat, *slot)),
            _ => None,
        })
    }

    /// The second cache write ([`Fold::CacheWrite`]).
    pub fn second_cache_write(&self) -> Option<NodeId> {
        self.folds.iter().find_map(|f| match f {
            Fold::CacheWrite(n) => Some(*n),
            _ => None,
        })
    }

    /// The cache writes done in the kernel: `(operand, writes)` ([`Fold::CacheRows`]).
    pub fn cache_rows(&self) -> Option<(&[NodeId], &[NodeId])> {
        self.folds.iter().find_map(|f| match f {
            Fold::CacheRows { operand, writes } => Some((operand.as_slice(), writes.as_slice())),
            _ => None,
        })
    }

    /// The blocks computed with the anchor: `(concat, products)` ([`Fold::Blocks`]).
    pub fn blocks(&self) -> Option<(NodeId, &[NodeId])> {
        self.folds.iter().find_map(|f| match f {
            Fold::Blocks { concat, products } => Some((*concat, products.as_slice())),
            _ => None,
        })
    }

    /// The node whose output the kernel writes (all of it, or for a Concat written in place, its slot).
    pub fn last(&self) -> NodeId {
        self.store_copy().or(self.write_into().map(|(c, _)| c)).unwrap_or_else(|| self.result())
    }

    /// The node whose value the kernel computes last: what it writes, or what it writes through a store copy.
    pub fn result(&self) -> NodeId {
        if let Some(t) = self.attention() {
            return t.pv;
        }
        if let Some((concat, _)) = self.blocks() {
            return concat;
        }
        *self.elementwise.last().or(self.anchor.as_ref()).expect("non-empty group")
    }
}
