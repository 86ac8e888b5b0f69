//! Attention: the score product, an online softmax and the product with V in one kernel.

use super::*;

#[derive(Template)]
#[template(path = "attention.wgsl", escape = "none")]
pub(super) struct AttentionTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) groups_x: u32,
    /// Workgroups: batches × `m_blocks`.
    pub(super) blocks: usize,
    /// Blocks of `rows` query rows per batch.
    pub(super) m_blocks: usize,
    /// Query rows per workgroup: 16 per row lane.
    pub(super) rows: usize,
    /// Each row lane's first row in the block (`off`, 16 apart) and its first element of `q_tile` (`t`, 256 apart).
    pub(super) row_lanes: Vec<RowLane>,
    /// Lengths of the workgroup tiles: `q_tile` 16 floats a row, `p_tile` 64, the V tile `v_chunk · dv_pad`.
    pub(super) q_tile_len: usize,
    pub(super) p_tile_len: usize,
    pub(super) v_tile_len: usize,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) mn: usize,
    pub(super) dk: usize,
    pub(super) dv: usize,
    /// `dv` rounded up to 16 (one column per thread of a row per lane).
    pub(super) dv_pad: usize,
    /// Keys of V staged at a time: as many as fit the K tile, at most 16.
    pub(super) v_chunk: usize,
    /// The K and V tile's vec4s: 16 columns of K, [`K_ROW`] floats each ([`K_ROW`] / 4 vec4s).
    pub(super) kv_vec4s: usize,
    pub(super) k_row: usize,
    pub(super) k_row4: usize,
    /// A staged key's vec4s of V (`dv_pad / 4`), and each thread's columns read as vec4s (`None`: as scalars, when
    /// a thread's columns are not a whole number of vec4s).
    pub(super) dv_pad4: usize,
    pub(super) v_vec4s: Option<Vec<Lane>>,
    pub(super) a_off: i64,
    pub(super) b_off: i64,
    pub(super) v_off: i64,
    pub(super) a_sm: i64,
    pub(super) a_sk: i64,
    pub(super) b_sk: i64,
    pub(super) b_sn: i64,
    pub(super) v_sk: i64,
    pub(super) v_sn: i64,
    pub(super) a_pro: String,
    pub(super) b_pro: String,
    /// How K and V are read: their bindings, or the loader functions of Concats read in place (`loaders`): by
    /// key (`b_cat`/`v_cat`: the extra arguments, each part's base, computed in `cat_bases`) or by flat index.
    pub(super) b_ld: Ld,
    pub(super) v_ld: Ld,
    pub(super) b_cat: Option<String>,
    pub(super) v_cat: Option<String>,
    pub(super) loaders: String,
    pub(super) cat_bases: String,
    pub(super) alpha: String,
    pub(super) nan_to_zero: bool,
    /// The four neighbouring keys each thread scores per tile, unrolled (`off` from its first, `4·c`).
    pub(super) quads: Vec<Lane>,
    /// A thread's four elements of a step's K tile (`off`: keys after its first, `r`) and its elements of a V
    /// chunk (`off`: after its first, `tid`), fetched into registers a step ahead.
    pub(super) k_loads: Vec<Lane>,
    pub(super) v_loads: Vec<Lane>,
    pub(super) batch: Vec<AttnBatchDim>,
    /// A thread's neighbouring value columns, from `lanes.len() · c`.
    pub(super) lanes: Vec<ValueLane>,
    /// Key tiles whose every score the epilogue masks are skipped ([`masked_tiles`]): the words of one bit a
    /// tile, `32 · words` ≥ the tiles.
    pub(super) skip: Option<SkipTiles>,
}

/// The tiled attention kernel's skipping of masked key tiles (see [`masked_tiles`]).
pub(super) struct SkipTiles {
    /// Words of one bit a 64-key tile, each with its first tile and its tiles.
    pub(super) words: Vec<SkipWord>,
    /// The last word's index.
    pub(super) last: usize,
}

pub(super) struct SkipWord {
    pub(super) i: usize,
    /// The word before (`i - 1`; 0 for the first).
    pub(super) prev: usize,
    pub(super) first: usize,
    /// The first tile's first key (`64 · first`).
    pub(super) first_key: usize,
    pub(super) tiles: usize,
    /// The word with every one of its tiles' bits set.
    pub(super) all: u32,
}

/// The most key tiles (64 keys each) whose masks the tiled attention kernel checks ahead: 4 words of bits.
const SKIP_MAX_TILES: usize = 128;

/// Whether the tiled attention kernel can skip the key tiles that its score epilogue masks, and how
/// (`None`: it scores every key). A key is masked for a query row when the epilogue gives at most -10³⁰ at both
/// v = ±10²⁰ (the score product's value): every epilogue node is monotone in the score for each element (scales,
/// additive masks, `Where` masks selecting the score or a constant, soft-capping tanh, …), so every score in that
/// range gives at most -10³⁰ too. Before its keys, each workgroup checks every tile for its rows; it scores only
/// tiles with a key some row may see, and after them, if some real row's running maximum is below -10²⁹ (all its
/// keys masked, or its unmasked scores too close to the masked ones for their exponentials to vanish), it scores
/// every tile again from the start. So a skipped tile's terms are exactly zero: exp(s − max) with s ≤ -10³⁰ and
/// max ≥ -10²⁹ underflows in f32. Causal masks skip the tiles above the diagonal; a prefill chunk's masked window
/// of the cache, all of it but the rows before the chunk.
fn masked_tiles(g: &wgslc_ir::Graph, group: &KernelGroup, score: ValueId, n: usize) -> Option<SkipTiles> {
    use wgslc_ir::{BinaryOp, Op, UnaryOp};
    let tiles = n.div_ceil(64);
    if group.elementwise.is_empty() || !(2..=SKIP_MAX_TILES).contains(&tiles) {
        return None;
    }
    let mut chain = vec![score];
    for &e in &group.elementwise {
        let node = g.node(e);
        let on: Vec<usize> =
            (0..node.inputs.len()).filter(|&i| node.inputs[i].is_some_and(|v| chain.contains(&v))).collect();
        let monotone = match (&node.op, on.as_slice()) {
            (_, []) => continue,
            (Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min), [_]) => true,
            (Op::Binary(BinaryOp::Div), [0]) => true,
            (Op::Where, [1] | [2]) => true,
            (Op::Cast { to: wgslc_ir::DType::F32, .. }, [0]) => g.ty(node.inputs[0]?).dtype == wgslc_ir::DType::F32,
            (Op::Unary(u), [0]) => {
                matches!(
                    u,
                    UnaryOp::Neg
                        | UnaryOp::Exp
                        | UnaryOp::Tanh
                        | UnaryOp::Sigmoid
                        | UnaryOp::Relu
                        | UnaryOp::Identity
                        | UnaryOp::Clip(..)
                        | UnaryOp::Softplus
                        | UnaryOp::Softsign
                        | UnaryOp::Atan
                        | UnaryOp::Erf
                        | UnaryOp::Floor
                        | UnaryOp::Ceil
                ) || matches!(u, UnaryOp::LeakyRelu(a) if *a >= 0.0)
            }
            _ => false,
        };
        if !monotone || node.outputs.len() != 1 {
            return None;
        }
        chain.push(node.outputs[0]);
    }
    let words: Vec<SkipWord> = (0..tiles.div_ceil(32))
        .map(|i| SkipWord {
            i,
            prev: i.saturating_sub(1),
            first: 32 * i,
            first_key: 64 * 32 * i,
            tiles: (tiles - 32 * i).min(32),
            all: (u64::MAX >> (64 - (tiles - 32 * i).min(32))) as u32,
        })
        .collect();
    Some(SkipTiles { last: words.len() - 1, words })
}

impl Emitter<'_> {
    /// A Concat read in place ([`wgslc_passes::Fold::ReadConcat`]) as a WGSL function `concat_{var}(i)`: element
    /// `i` of its contiguous output, read from the input that holds it through that input's view (bound into
    /// `reads` as `{var}0`, `{var}1`, …). The scheduler checked the views: non-negative offsets and strides.
    fn concat_loader(&self, c: NodeId, var: &str, reads: &mut Vec<(ValueId, String)>) -> String {
        let g = self.g;
        let node = g.node(c);
        let Op::Concat { axis } = node.op else { unreachable!("a Concat read in place") };
        let shape = &g.ty(node.outputs[0]).shape;
        let axis = axis.rem_euclid(shape.len() as i64) as usize;
        let cs = contiguous_strides(shape);
        let mut f = format!("fn concat_{var}(i: u32) -> f32 {{\n");
        for d in (0..shape.len()).filter(|&d| shape[d] > 1) {
            f.push_str(&format!("    let c{d} = (i / {}u) % {}u;\n", cs[d], shape[d]));
        }
        let parts: Vec<(usize, ValueId)> =
            node.inputs.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s, v))).collect();
        let (mut start, mut arms) = (0, vec![]);
        for (j, &(slot, v)) in parts.iter().enumerate() {
            let part = &g.ty(v).shape;
            let view = input_view(g, &self.sched.folded, c, slot);
            let bound = bind_once(reads, view.root, &format!("{var}{j}"));
            let ld = Ld::of(g, view.root, &bound);
            let mut at = format!("{}u", view.offset);
            for d in (0..part.len()).filter(|&d| part[d] > 1 && view.strides[d] != 0) {
                let coord = if d == axis { format!("(c{d} - {start}u)") } else { format!("c{d}") };
                at.push_str(&format!(" + {coord} * {}u", view.strides[d]));
            }
            let end = start + part[axis];
            let holds = if shape[axis] > 1 { format!("c{axis} < {end}u") } else { "true".into() };
            arms.push((holds, format!("{}{at}{}", ld.open, ld.close)));
            start = end;
        }
        f + &part_returns(&arms)
    }
}

/// The body's end of a Concat loader: `return load` of the first part whose condition holds (the last part's
/// is not checked), then the closing brace.
fn part_returns(arms: &[(String, String)]) -> String {
    let mut f = String::new();
    for (i, (holds, load)) in arms.iter().enumerate() {
        if i + 1 < arms.len() {
            f.push_str(&format!("    if ({holds}) {{\n        return {load};\n    }}\n"));
        } else {
            f.push_str(&format!("    return {load};\n"));
        }
    }
    f + "}\n"
}

/// How the tiled attention kernel walks K or V: the view's offset, its batch coordinates (divisor, extent,
/// stride), and its key and column axes (extent, stride), in elements of the value read.
struct CatWalk {
    offset: i64,
    batch: Vec<(usize, usize, i64)>,
    key: (usize, i64),
    col: (usize, i64),
}

impl Emitter<'_> {
    /// A Concat read in place along the keys: when every coordinate of the kernel's walk moves along one axis of
    /// the Concat's output alone, within it (its offset's coordinates included), and the keys alone along the
    /// Concat's axis one key a step from its start, each part is read at `base + key · stride + col · stride`
    /// with a base per batch. Returns the WGSL function `concat_{var}(key, col, base0, base1, …)`, the
    /// statements computing the bases (`cat_{var}{j}`) and the call's extra arguments; `None` otherwise.
    fn concat_by_key(
        &self,
        c: NodeId,
        var: &str,
        reads: &mut Vec<(ValueId, String)>,
        walk: &CatWalk,
    ) -> Option<(String, String, String)> {
        let g = self.g;
        let node = g.node(c);
        let Op::Concat { axis } = node.op else { return None };
        let shape = &g.ty(node.outputs[0]).shape;
        let axis = axis.rem_euclid(shape.len() as i64) as usize;
        let cs: Vec<i64> = contiguous_strides(shape).into_iter().map(|x| x as i64).collect();
        let at: Vec<i64> = (0..shape.len()).map(|d| (walk.offset / cs[d]) % shape[d] as i64).collect();
        if walk.offset < 0 || at.iter().zip(&cs).map(|(a, s)| a * s).sum::<i64>() != walk.offset || at[axis] != 0 {
            return None;
        }
        // The Concat axis and step a stride walks (a stride of 0 walks none), each axis walked once at most.
        let mut used = vec![false; shape.len()];
        let mut place = |stride: i64, extent: usize| -> Option<Option<(usize, i64)>> {
            if stride == 0 || extent <= 1 {
                return Some(None);
            }
            let d = (0..shape.len()).find(|&d| shape[d] > 1 && cs[d] <= stride)?;
            let step = stride / cs[d];
            if stride % cs[d] != 0 || used[d] || at[d] + step * (extent as i64 - 1) >= shape[d] as i64 {
                return None;
            }
            used[d] = true;
            Some(Some((d, step)))
        };
        let key = place(walk.key.1, walk.key.0)?;
        if key != Some((axis, 1)) {
            return None;
        }
        let col = place(walk.col.1, walk.col.0)?;
        let batch: Vec<Option<(usize, i64)>> =
            walk.batch.iter().map(|&(_, extent, stride)| place(stride, extent)).collect::<Option<_>>()?;
        if col.is_some_and(|(d, _)| d == axis) || batch.iter().flatten().any(|&(d, _)| d == axis) {
            return None;
        }
        let parts: Vec<(usize, ValueId)> =
            node.inputs.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s, v))).collect();
        let (mut f, mut bases, mut args) = (String::new(), String::new(), String::new());
        let params: Vec<String> = (0..parts.len()).map(|j| format!(", base{j}: u32")).collect();
        f.push_str(&format!("fn concat_{var}(key: u32, col: u32{}) -> f32 {{\n", params.concat()));
        let (mut start, mut arms) = (0, vec![]);
        for (j, &(slot, v)) in parts.iter().enumerate() {
            let view = input_view(g, &self.sched.folded, c, slot);
            let bound = bind_once(reads, view.root, &format!("{var}{j}"));
            let st = &view.strides;
            let base: i64 = view.offset + (0..shape.len()).filter(|&d| d != axis).map(|d| at[d] * st[d]).sum::<i64>();
            let mut b = format!("    let cat_{var}{j} = {base}u");
            for (&(div, extent, _), p) in walk.batch.iter().zip(&batch) {
                if let Some((d, step)) = p {
                    b.push_str(&format!(" + ((batch / {div}u) % {extent}u) * {}u", step * st[*d]));
                }
            }
            bases.push_str(&b);
            bases.push_str(";\n");
            args.push_str(&format!(", cat_{var}{j}"));
            let col_term = col.map(|(d, step)| format!(" + col * {}u", step * st[d])).unwrap_or_default();
            let load = format!("{bound}[base{j}{col_term} + (key - {start}u) * {}u]", st[axis]);
            let end = start + g.ty(v).shape[axis];
            arms.push((format!("key < {end}u"), load));
            start = end;
        }
        Some((f + &part_returns(&arms), bases, args))
    }
}

/// Floats of one staged column of K in the tiled attention kernel: its 64 keys and 4 of padding, so that the stores
/// of neighbouring columns (neighbouring threads, one key) fall in different banks, and every thread's four keys
/// stay one aligned vec4.
const K_ROW: usize = 68;

/// One of a thread's value columns in the tiled attention kernel: the `i`-th from its first, and how it is read
/// from the staged V (`read`: a component of one of the thread's vec4s, or a scalar at `vi{i}`).
pub(super) struct ValueLane {
    pub(super) i: usize,
    pub(super) read: String,
}

/// A row lane of the tiled attention kernel: 16 query rows.
pub(super) struct RowLane {
    pub(super) i: usize,
    pub(super) off: usize,
    pub(super) t: usize,
}

/// Attention for one query row per workgroup (a decode step): templates/attention_row.wgsl.
#[derive(Template)]
#[template(path = "attention_row.wgsl", escape = "none")]
pub(super) struct AttentionRowTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    /// The query row computed as it is loaded ([`wgslc_passes::Fold::RowOperand`]).
    pub(super) operand: Option<Fused>,
    pub(super) groups_x: u32,
    /// Workgroups: one per query row.
    pub(super) blocks: usize,
    pub(super) n: usize,
    pub(super) dk4: usize,
    pub(super) dv: usize,
    pub(super) dv4: usize,
    /// Four-wide loads of a key in flight at once (divides `dk4`).
    pub(super) k_unroll: usize,
    /// Threads per slice of the p·V sum (`dv4` rounded up to a power of two) and slices (256 / lanes).
    pub(super) lanes: usize,
    pub(super) slices: usize,
    /// Keys of V in flight per thread, each `slices` keys after the one before (`at`), and their span: the stride
    /// of the unrolled loop and the offset of its last key.
    pub(super) unroll: usize,
    pub(super) pv_keys: Vec<Lane>,
    pub(super) pv_stride: usize,
    pub(super) pv_last: usize,
    /// Loads of keys in flight (`2 · k_unroll`: two keys at a time), half of `slices`, and the last key `n - 1`.
    pub(super) k_loads: usize,
    pub(super) slices_half: usize,
    /// The slices' sums left after their pairwise sums, added up by slice 0 ([`tree_tail`]).
    pub(super) slices_tail: usize,
    pub(super) last_key: usize,
    /// K and V bound as `vec4<f32>` (rows contiguous and aligned), else read four scalars at a time.
    pub(super) k_vec4: bool,
    pub(super) v_vec4: bool,
    pub(super) a_off: i64,
    pub(super) b_off: i64,
    pub(super) v_off: i64,
    pub(super) a_sk: i64,
    pub(super) b_sk: i64,
    pub(super) b_sn: i64,
    pub(super) v_sk: i64,
    pub(super) v_sn: i64,
    pub(super) a_pro: String,
    pub(super) b_pro: String,
    pub(super) b_var: String,
    pub(super) v_var: String,
    pub(super) alpha: String,
    pub(super) nan_to_zero: bool,
    pub(super) batch: Vec<AttnBatchDim>,
    /// The step's cache writes, done here ([`wgslc_passes::Fold::CacheRows`]).
    pub(super) cache: Option<CacheRows>,
    /// The keys scored: all `n`, or with the cache writes here, those up to the new row (`key_end`).
    pub(super) keys: String,
    /// The subgroup form ([`EmittedKernel::subgroups`]).
    pub(super) sg: bool,
}

/// A decode step's cache writes in its one-row attention kernel: workgroup 0 writes the new rows of both
/// caches (bound as `b` and `v`, read and written), every workgroup computes its head's new key and value rows
/// into workgroup memory, and key `new_row` is scored and summed from there, its cache row never read.
pub(super) struct CacheRows {
    /// The new keys computed as they are loaded (their elementwise kernel folded in).
    pub(super) operand: Option<Fused>,
    pub(super) row_var: String,
    /// The largest first row (the cache's length less the one new row).
    pub(super) last_row: usize,
    /// The key's, then the value's.
    pub(super) parts: Vec<RowPart>,
}

/// One cache's new row: the cache write's part (`coords` and `src` give new element `i`, `dst` its place at first
/// row `r`), `of` the new element a cache offset `o` of the new row holds, `store` the left side that stores at
/// cache offset `d`.
pub(super) struct RowPart {
    /// `key` or `value`: the functions' names.
    pub(super) name: &'static str,
    pub(super) part: super::index::CachePart,
    pub(super) of: String,
    pub(super) store: String,
}

pub(super) struct AttnBatchDim {
    pub(super) div: usize,
    pub(super) extent: usize,
    pub(super) a_stride: i64,
    pub(super) b_stride: i64,
    pub(super) v_stride: i64,
}

/// The batch coordinates both products walk: Q's and K's strides from the score product, V's from the value
/// product (the scheduler checked that they walk the same coordinates).
fn attn_batch(qk: &super::matmul::MmGeom, pv: &super::matmul::MmGeom) -> Vec<AttnBatchDim> {
    qk.batch
        .iter()
        .zip(&pv.batch)
        .map(|(a, b)| AttnBatchDim {
            div: a.div,
            extent: a.extent,
            a_stride: a.a_stride,
            b_stride: a.b_stride,
            v_stride: b.b_stride,
        })
        .collect()
}

impl Emitter<'_> {
    /// MatMul or Gemm with its epilogue. Operands are read through their composed views (folded transposes and
    /// slices become strides); batch dimensions broadcast.
    /// Q·Kᵀ with its prologue and epilogue, softmax over the keys and the product with V, as one kernel: one
    /// query row per workgroup, keys in tiles of 64 with an online softmax (templates/attention.wgsl).
    pub(super) fn attention(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let tail = group.attention().expect("attention group");
        let mut helpers = Helpers::default();
        // The score product's group: the anchor, its operand folds and its epilogue.
        let mut qk_group = group.clone();
        qk_group.folds.retain(|f| !matches!(f, Fold::Attention(_) | Fold::StoreCopy(_)));
        let fine = group.recipe.batch.as_deref();
        let qk = self.mm_geometry(&qk_group, fine, &mut helpers)?;
        let pv = self.mm_geometry(&KernelGroup::single(tail.pv, false), fine, &mut helpers)?;
        if qk.batch.len() != pv.batch.len() || qk.batch.iter().zip(&pv.batch).any(|(a, b)| a.div != b.div) {
            return Err(self.err(tail.pv, "attention batch dimensions differ between the two products"));
        }
        let out = g.node(group.last()).outputs[0];
        if qk.m == 1 {
            return self.attention_row(group, &qk_group, qk, pv, helpers);
        }
        if group.row_operand().is_some() {
            return Err(self.err(tail.pv, "a query computed in a multi-row attention kernel (a scheduler bug)"));
        }
        // One binding per stored tensor (Q, K and V are often views of one QKV product).
        let mut reads: Vec<(ValueId, String)> = vec![(qk.va.root, "a".into())];
        // K and V, each bound, or a Concat read in place ([`wgslc_passes::Fold::ReadConcat`]): by key, each
        // part's base computed once (`cat_bases`), or through a loader of flat indices where the view does not
        // walk the Concat's axis with the keys alone.
        let (mut loaders, mut cat_bases) = (String::new(), String::new());
        let batch = attn_batch(&qk, &pv);
        let mut operand = |root: ValueId, var: &str, reads: &mut Vec<(ValueId, String)>, walk: CatWalk| {
            let Some(c) = g.value(root).producer.filter(|c| group.read_concats().any(|r| r == *c)) else {
                let b = bind_once(reads, root, var);
                return (Ld::plain(&b), None);
            };
            if let Some((f, bases, args)) = self.concat_by_key(c, var, reads, &walk) {
                loaders.push_str(&f);
                cat_bases.push_str(&bases);
                return (Ld::plain(""), Some(args));
            }
            loaders.push_str(&self.concat_loader(c, var, reads));
            (Ld { open: format!("concat_{var}("), close: ")" }, None)
        };
        let walk_k = CatWalk {
            offset: qk.vb.offset,
            batch: batch.iter().map(|d| (d.div, d.extent, d.b_stride)).collect(),
            key: (qk.nn, qk.b_sn),
            col: (qk.k, qk.b_sk),
        };
        let walk_v = CatWalk {
            offset: pv.vb.offset,
            batch: batch.iter().map(|d| (d.div, d.extent, d.v_stride)).collect(),
            key: (pv.k, pv.b_sk),
            col: (pv.nn, pv.b_sn),
        };
        let (b_ld, b_cat) = operand(qk.vb.root, "b", &mut reads, walk_k);
        let (v_ld, v_cat) = operand(pv.vb.root, "v", &mut reads, walk_v);
        // The score epilogue's body; the output store goes through the group's store copy, if any.
        let mut fu = self.fused_body(&qk_group, Some(qk.mm_out), &mut reads, &mut helpers)?;
        self.place_stores(group, &mut fu);
        let bindings = bindings(&reads, &[(out, "out")]);
        let dv_pad = pv.nn.div_ceil(16) * 16;
        // Each thread's value columns: dv_pad / 16 neighbours.
        let cols = dv_pad / 16;
        let wgslc_passes::AttentionTiling { row_lanes, v_chunk } = group
            .recipe
            .attention
            .ok_or_else(|| self.err(tail.pv, "attention without its tiling (a scheduler bug)"))?;
        let rows = 16 * row_lanes;
        let m_blocks = qk.m.div_ceil(rows);
        let blocks = qk.batches * m_blocks;
        let (h, wg, groups_x) = self.launch(tail.pv, Some(group), "attention.wgsl", &bindings, blocks)?;
        let tpl = AttentionTpl {
            h,
            helpers,
            fu,
            groups_x,
            blocks,
            m_blocks,
            rows,
            row_lanes: (0..row_lanes).map(|i| RowLane { i, off: i * 16, t: i * 256 }).collect(),
            q_tile_len: rows * 16,
            p_tile_len: rows * 64,
            v_tile_len: v_chunk * dv_pad,
            m: qk.m,
            n: qk.nn,
            mn: qk.m * qk.nn,
            dk: qk.k,
            dv: pv.nn,
            dv_pad,
            v_chunk,
            kv_vec4s: 16 * K_ROW / 4,
            k_row: K_ROW,
            k_row4: K_ROW / 4,
            dv_pad4: dv_pad / 4,
            v_vec4s: cols.is_multiple_of(4).then(|| unrolled(cols / 4, 1)),
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
            b_ld,
            v_ld,
            b_cat,
            v_cat,
            loaders,
            cat_bases,
            alpha: f32_lit(qk.alpha),
            nan_to_zero: tail.nan_to_zero.is_some(),
            quads: unrolled(4, 1),
            k_loads: unrolled(4, 16),
            v_loads: unrolled((v_chunk * dv_pad).div_ceil(256), 256),
            batch,
            lanes: (0..cols)
                .map(|i| ValueLane {
                    i,
                    read: if cols.is_multiple_of(4) {
                        format!("v4_{}[{}]", i / 4, i % 4)
                    } else {
                        format!("kv_tile[vi{i} / 4u][vi{i} % 4u]")
                    },
                })
                .collect(),
            skip: masked_tiles(g, &qk_group, qk.mm_out, qk.nn),
        };
        let name = self.group_name(group);
        self.kernel(tail.pv, name, "attention", tpl.render(), &bindings, wg)
    }

    /// One query row per workgroup (a decode step: [`ATTENTION_ROW_MAX_KEYS`](wgslc_passes::ATTENTION_ROW_MAX_KEYS)
    /// keys at most, every score in workgroup memory): the query computed or loaded once, each thread scoring whole
    /// keys with all of two keys' loads in flight, then p·V with several keys' loads in flight per thread
    /// (templates/attention_row.wgsl). A one-row kernel of the tiled shape waits on one load at a time.
    fn attention_row(
        &self,
        group: &KernelGroup,
        qk_group: &KernelGroup,
        qk: super::matmul::MmGeom,
        pv: super::matmul::MmGeom,
        mut helpers: Helpers,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let tail = group.attention().expect("attention group");
        let out = g.node(group.last()).outputs[0];
        let (n, dk, dv) = (qk.nn, qk.k, pv.nn);
        let keys_ok = (1..=wgslc_passes::ATTENTION_ROW_MAX_KEYS).contains(&n);
        let dk_ok = (4..=wgslc_passes::ATTENTION_ROW_MAX_DK).contains(&dk) && dk % 4 == 0;
        if !keys_ok || !dk_ok || dv == 0 || dv % 4 != 0 || dv > wgslc_passes::ATTENTION_MAX_DV {
            return Err(self.err(tail.pv, "a one-row attention the kernel cannot hold (a scheduler bug)"));
        }
        let mut reads: Vec<(ValueId, String)> = vec![];
        let operand = match group.row_operand() {
            Some(nodes) => {
                if qk.a_sk != 1 || qk.va.offset != 0 {
                    return Err(self.err(tail.pv, "a computed query that is not one row (a scheduler bug)"));
                }
                Some(self.row_operand(nodes, &mut reads, &mut helpers)?)
            }
            None => {
                reads.push((qk.va.root, "a".into()));
                None
            }
        };
        // With the step's cache writes here, both caches are bound once, read and written.
        let writes = match group.cache_rows() {
            Some((k_operand, writes)) => Some(self.cache_rows_io(group, &qk, &pv, k_operand, writes, &mut reads)?),
            None => None,
        };
        let mut outs: Vec<(ValueId, &str)> = vec![(out, "out")];
        let (b_var, v_var) = match &writes {
            Some((caches, _)) => {
                outs.extend([(caches[0], "b"), (caches[1], "v")]);
                ("b".to_string(), "v".to_string())
            }
            None => (bind_once(&mut reads, qk.vb.root, "b"), bind_once(&mut reads, pv.vb.root, "v")),
        };
        let k_operand = match group.cache_rows() {
            Some((nodes, _)) if !nodes.is_empty() => {
                Some(Fused { name: "operand_k", ..self.row_operand(nodes, &mut reads, &mut helpers)? })
            }
            _ => None,
        };
        let mut fu = self.fused_body(qk_group, Some(qk.mm_out), &mut reads, &mut helpers)?;
        self.place_stores(group, &mut fu);
        let bindings = bindings(&reads, &outs);
        // K and V as vec4s: rows contiguous and every row start a multiple of 4, the binding used for nothing else.
        let others_read = |var: &str| {
            (operand.is_none() && var == "a")
                || b_var == v_var
                || fu.loads.iter().chain(operand.iter().chain(&k_operand).flat_map(|o| &o.loads)).any(|l| l.var == var)
        };
        let k_vec4 = qk.b_sk == 1
            && qk.pro[1].is_empty()
            && qk.vb.offset % 4 == 0
            && qk.b_sn % 4 == 0
            && qk.batch.iter().all(|d| d.b_stride % 4 == 0)
            && !others_read(&b_var);
        let v_vec4 = pv.b_sn == 1
            && pv.vb.offset % 4 == 0
            && pv.b_sk % 4 == 0
            && pv.batch.iter().all(|d| d.b_stride % 4 == 0)
            && !others_read(&v_var);
        let blocks = qk.batches;
        let (mut h, wg, groups_x) = self.launch(tail.pv, Some(group), "attention_row.wgsl", &bindings, blocks)?;
        for d in h.bindings.iter_mut() {
            if (d.var == b_var && k_vec4) || (d.var == v_var && v_vec4) {
                d.ty = "vec4<f32>";
            }
        }
        let (dk4, dv4) = (dk / 4, dv / 4);
        let lanes = dv4.next_power_of_two();
        let cache = writes.map(|(_, mut c)| {
            // Cache offset `d` as a left side, through the vec4 binding where K or V is read so.
            for (p, (var, vec4)) in c.parts.iter_mut().zip([("b", k_vec4), ("v", v_vec4)]) {
                p.store = if vec4 { format!("{var}[d / 4u][d % 4u]") } else { format!("{var}[d]") };
            }
            CacheRows { operand: k_operand, ..c }
        });
        let (k_unroll, slices, unroll) =
            ([16, 8, 4, 2, 1].into_iter().find(|u| dk4 % u == 0).unwrap_or(1), 256 / lanes, 16);
        let mut tpl = AttentionRowTpl {
            h,
            helpers,
            fu,
            operand,
            groups_x,
            blocks,
            n,
            dk4,
            dv,
            dv4,
            k_unroll,
            lanes,
            slices,
            unroll,
            pv_keys: unrolled(unroll, slices),
            pv_stride: unroll * slices,
            pv_last: (unroll - 1) * slices,
            k_loads: 2 * k_unroll,
            slices_half: slices / 2,
            slices_tail: tree_tail(slices),
            last_key: n.saturating_sub(1),
            k_vec4,
            v_vec4,
            a_off: qk.va.offset,
            b_off: qk.vb.offset,
            v_off: pv.vb.offset,
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
            batch: attn_batch(&qk, &pv),
            keys: if cache.is_some() { "key_end".into() } else { format!("{n}u") },
            cache,
            sg: false,
        };
        let name = self.group_name(group);
        let k = self.kernel(tail.pv, name, "attention", tpl.render(), &bindings, wg)?;
        tpl.sg = true;
        self.with_subgroups(tail.pv, k, tpl.render())
    }

    /// The cache writes of a one-row attention group ([`wgslc_passes::Fold::CacheRows`]): which write fills the
    /// cache K is read from and which V's, the row they share (bound into `reads`), and each new row's elements
    /// (reads of the new rows bound into `reads`; the first write's computed by `operand_k` when it has an
    /// operand); and the two caches' values (K's, V's). Checks what the scheduler proved: keys read at their rows,
    /// one new row.
    fn cache_rows_io(
        &self,
        group: &KernelGroup,
        qk: &super::matmul::MmGeom,
        pv: &super::matmul::MmGeom,
        k_operand: &[NodeId],
        writes: &[NodeId],
        reads: &mut Vec<(ValueId, String)>,
    ) -> Result<([ValueId; 2], CacheRows), EmitError> {
        let g = self.g;
        let tail = group.attention().expect("attention group");
        let bug = |what: &str| self.err(tail.pv, format!("{what} (a scheduler bug)"));
        let find = |root: ValueId| writes.iter().copied().find(|&w| g.node(w).outputs[0] == root);
        let (Some(kw), Some(vw)) = (find(qk.vb.root), find(pv.vb.root)) else {
            return Err(bug("cache writes that are not the caches the attention reads"));
        };
        let row = g.node(kw).inputs[2].ok_or_else(|| bug("a cache write without its row"))?;
        if g.node(vw).inputs[2] != Some(row) || kw == vw {
            return Err(bug("the key and value writes at different rows"));
        }
        let row_var = bind_once(reads, row, "row");
        let mut part = |w: NodeId, name: &'static str, key_stride: i64| -> Result<RowPart, EmitError> {
            let Op::CacheWrite { axis } = g.node(w).op else { return Err(bug("not a cache write")) };
            let operand = (w == writes[0] && !k_operand.is_empty()).then_some("operand_k");
            let p = self.cache_part(w, axis, 0, operand, reads)?;
            let cs = &g.ty(g.node(w).outputs[0]).shape;
            let inner = wgslc_ir::contiguous_strides(cs)[axis];
            if p.last_row + 1 != cs[axis] || cs[axis] != qk.nn || key_stride != inner as i64 {
                return Err(bug("a cache the attention does not read a key a row"));
            }
            let of = format!("(o / {}u) * {inner}u + o % {inner}u", inner * cs[axis]);
            Ok(RowPart { name, part: p, of, store: String::new() })
        };
        let (k, v) = (part(kw, "key", qk.b_sn)?, part(vw, "value", pv.b_sk)?);
        // One new row at a clamped first row below the length both products walk.
        let last_row = qk.nn - 1;
        // The stores and the computed keys' function are filled in once the bindings are typed.
        let caches = [g.node(kw).outputs[0], g.node(vw).outputs[0]];
        Ok((caches, CacheRows { operand: None, row_var, last_row, parts: vec![k, v] }))
    }
}
