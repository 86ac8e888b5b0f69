//! Products: MatMul and Gemm (and convolutions through them) in tiles through workgroup memory, with operand
//! prologues, a folded RMSNormalization and the epilogue.

use super::packed::{
    GemvPackedTpl, PackedCol, PackedGemv, PackedIter, PackedLoads, PackedSlot, PackedStageWord, PACKED_A_CHUNK,
};
use super::*;
use wgslc_passes::{narrow_of, Narrow};

pub(super) struct BatchDim {
    pub(super) div: usize,
    pub(super) extent: usize,
    pub(super) a_stride: i64,
    pub(super) b_stride: i64,
}

/// A product's geometry, shared by the matmul and attention kernels.
pub(super) struct MmGeom {
    /// The MatMul or Gemm node and its output.
    pub(super) n: NodeId,
    pub(super) mm_out: ValueId,
    pub(super) va: wgslc_passes::view::View,
    pub(super) vb: wgslc_passes::view::View,
    /// Scalar prologue expressions applied to the loaded `av` / `bv` ("" for none).
    pub(super) pro: [String; 2],
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) nn: usize,
    pub(super) a_sm: i64,
    pub(super) a_sk: i64,
    pub(super) b_sk: i64,
    pub(super) b_sn: i64,
    pub(super) alpha: f32,
    pub(super) beta: f32,
    pub(super) batch: Vec<BatchDim>,
    pub(super) batches: usize,
}

#[derive(Template)]
#[template(path = "matmul.wgsl", escape = "none")]
pub(super) struct MatmulTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) a_off: i64,
    pub(super) b_off: i64,
    pub(super) b_var: String,
    /// How A, B and the bias are read (a narrow constant through its loader).
    pub(super) a_ld: Ld,
    pub(super) b_ld: Ld,
    pub(super) bias_ld: Ld,
    pub(super) a_pro: String,
    pub(super) b_pro: String,
    pub(super) t: Tiling,
    /// Set when the product is a convolution whose B operand is the input's im2col matrix.
    pub(super) im2col: Option<Im2col>,
    /// Set when a second convolution is summed in (`KernelGroup::conv_sum`).
    pub(super) seg2: Option<Seg2>,
    /// Set when B is a depthwise convolution's output computed as it is loaded (`KernelGroup::depthwise`).
    pub(super) dw: Option<DwLoad>,
    /// Set when the product normalizes its A rows (`KernelGroup::rms_prologue`).
    pub(super) rms: Option<RmsFold>,
    /// A's rows (B's columns) are contiguous in memory: tiles are loaded with neighbouring threads on neighbouring
    /// rows (k), so the reads coalesce.
    pub(super) a_mmajor: bool,
    pub(super) b_kmajor: bool,
    /// A (B) read a `vec4` at a time along its contiguous axis ([`vec4_loads`]), through `a_ld4` (`b_ld4`), its
    /// four elements staged `a_put_step` (`b_put_step`) floats apart in workgroup memory.
    pub(super) a4: bool,
    pub(super) b4: bool,
    pub(super) a_ld4: Ld,
    pub(super) b_ld4: Ld,
    pub(super) a_put_step: usize,
    pub(super) b_put_step: usize,
    /// The four elements' offsets from `a_put` (`b_put`): `unrolled(4, a_put_step)`.
    pub(super) a_puts: Vec<Lane>,
    pub(super) b_puts: Vec<Lane>,
    pub(super) batch: Vec<BatchDim>,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) mn: usize,
    pub(super) a_sm: usize,
    pub(super) a_sk: usize,
    pub(super) b_sk: usize,
    pub(super) b_sn: usize,
    pub(super) alpha: String,
    pub(super) beta: String,
    pub(super) has_bias: bool,
    pub(super) bias_sm: usize,
    pub(super) bias_sn: usize,
    /// A grouped convolution's (groups, output channels a group): its batch `image · groups + j` reads the bias
    /// of group `j`'s channels.
    pub(super) bias_groups: Option<(usize, usize)>,
}

/// The loop over K for one block of B: `term{suffix}` reads `var` at column `col` (an expression of the output
/// column).
pub(super) struct GemvArm {
    pub(super) suffix: String,
    pub(super) var: String,
    /// The block's first column of the whole product.
    pub(super) offset: usize,
    /// How the block is read, one element or four ([`Ld`]).
    pub(super) ld: Ld,
    pub(super) ld4: Ld,
    pub(super) col: String,
}

/// A one-row product ([`wgslc_passes::gemv_tiling`]): B read once, coalesced, with the matmul kernel's prologues,
/// folded RMSNormalization, bias and epilogue.
#[derive(Template)]
#[template(path = "gemv.wgsl", escape = "none")]
pub(super) struct GemvTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    /// A computed as it is loaded: `operand_a(0.0, i)` is A's element at flat index i, `a_base + k` for element k of
    /// a batch's row ([`wgslc_passes::Fold::RowOperand`]).
    pub(super) operand: Option<Fused>,
    pub(super) a_off: i64,
    pub(super) b_off: i64,
    pub(super) a_ld: Ld,
    pub(super) bias_ld: Ld,
    pub(super) a_pro: String,
    pub(super) b_pro: String,
    pub(super) t: wgslc_passes::GemvTiling,
    /// Independent partial sums (loads of B in flight) per thread, and one less.
    pub(super) unroll: usize,
    pub(super) unroll_last: usize,
    /// Half of the tiling's lanes and groups: the first stride of their pairwise sums.
    pub(super) lanes_half: usize,
    pub(super) groups_half: usize,
    /// Partial sums left to the pairwise sums' last step ([`tree_tail`]), added up by one invocation.
    pub(super) tail: usize,
    /// The last column, `n - 1`.
    pub(super) last_col: usize,
    /// B's blocks' bindings, the first `b_var` ([`wgslc_passes::Fold::Blocks`]; empty without), each `per`
    /// columns wide but the last: column `col` is column `col % per` of block `col / per`.
    pub(super) blocks: Vec<String>,
    pub(super) per: usize,
    /// One `term` function per block (one without blocks).
    pub(super) arms: Vec<GemvArm>,
    /// What a thread accumulates: `f32`, or `vec4<f32>` for four columns read as one vec4.
    pub(super) acc_ty: &'static str,
    pub(super) rms: Option<RmsFold>,
    pub(super) batch: Vec<BatchDim>,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) a_sk: usize,
    pub(super) b_sk: usize,
    pub(super) b_sn: usize,
    pub(super) alpha: String,
    pub(super) beta: String,
    pub(super) has_bias: bool,
    pub(super) bias_sn: usize,
    /// The subgroup form ([`EmittedKernel::subgroups`]), and whether a group's lanes may span subgroups (more
    /// lanes than the smallest subgroup WebGPU allows).
    pub(super) sg: bool,
    pub(super) wide_groups: bool,
}

/// An RMSNormalization folded into a product: rows of A are normalized by 1 / sqrt(Σ a² / k + eps).
pub(super) struct RmsFold {
    pub(super) k: usize,
    pub(super) eps: String,
    /// The binding of the norm's weights, and its last index (`k - 1`).
    pub(super) scale: String,
    pub(super) last_k: usize,
}

impl Emitter<'_> {
    /// One arm of a matrix-vector kernel per block of B ([`wgslc_passes::Fold::Blocks`]; one arm without): its
    /// binding, how it is read, and its column within the block.
    fn gemv_arms(&self, blocks: &[String], b_var: &str, block_values: &[ValueId], per: usize) -> Vec<GemvArm> {
        let g = self.g;
        let arm = |suffix: String, var: &str, v: ValueId, offset: usize, col: String| GemvArm {
            suffix,
            var: var.to_string(),
            offset,
            ld: Ld::of(g, v, var),
            ld4: Ld::of4(g, v, var),
            col,
        };
        match blocks.len() {
            0 => vec![arm(String::new(), b_var, block_values[0], 0, "col".into())],
            _ => blocks
                .iter()
                .zip(block_values)
                .enumerate()
                .map(|(i, (b, &v))| arm(i.to_string(), b, v, i * per, format!("(col - {}u)", i * per)))
                .collect(),
        }
    }

    /// The geometry of a MatMul or Gemm group's product: operand views (through scalar prologues), sizes,
    /// strides and batch dimensions.
    /// The product's geometry, read over the batch coordinates `fine` where the recipe refines them.
    pub(super) fn mm_geometry(
        &self,
        group: &KernelGroup,
        fine: Option<&[usize]>,
        helpers: &mut Helpers,
    ) -> Result<MmGeom, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (a, b, mm_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let (at, bt) = (g.ty(a).clone(), g.ty(b).clone());
        // A GQA-style operand reads over finer batch coordinates (see `mm_batch_refinement`).
        let fine = fine.map(<[usize]>::to_vec);
        // Operand views: through a scalar prologue node when there is one (its data input is what is loaded).
        let mut pro = [String::new(), String::new()];
        let mut views = Vec::new();
        for (slot, pro_expr) in pro.iter_mut().enumerate() {
            let view = match group.prologue().find(|&(s, _)| s == slot) {
                Some((_, p)) => {
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
                None if slot == 0 && group.rms_norm().is_some() => {
                    input_view(g, &self.sched.folded, group.rms_norm().unwrap(), 0)
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

    pub(super) fn matmul(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let mut helpers = Helpers::default();
        let MmGeom { n, mm_out, va, vb, pro, m, k, mut nn, a_sm, a_sk, b_sk, b_sn, alpha, beta, batch, batches } =
            self.mm_geometry(group, group.recipe.batch.as_deref(), &mut helpers)?;
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
        // A computed in the kernel ([`wgslc_passes::Fold::RowOperand`]) has no binding of its own.
        let row_operand = group.row_operand();
        let mut reads: Vec<(ValueId, String)> =
            if row_operand.is_some() { vec![] } else { vec![(va.root, "a".into())] };
        let b_var = bind_once(&mut reads, vb.root, "b");
        // A weight in blocks of columns ([`wgslc_passes::Fold::Blocks`]): every block bound, read at the same
        // strides, the output the whole Concat.
        let (mut blocks, per) = (Vec::new(), nn);
        if let Some((concat, products)) = group.blocks() {
            if !group.recipe.one_row || batches != 1 || !pro[1].is_empty() || node.inputs.get(2).is_some() {
                return Err(self.err(n, "blocks of a weight in a product that is not one row (a scheduler bug)"));
            }
            blocks.push(b_var.clone());
            for (i, &p) in products.iter().enumerate() {
                let v = input_view(g, &self.sched.folded, p, 1);
                if v.offset != vb.offset || v.strides != vb.strides {
                    return Err(self.err(p, "a block read at other strides than the first (a scheduler bug)"));
                }
                blocks.push(bind_once(&mut reads, v.root, &format!("b{}", i + 1)));
            }
            nn = *g.ty(g.node(concat).outputs[0]).shape.last().expect("rank");
        }
        let bias_var = bias.map(|c| bind_once(&mut reads, c, "bias")).unwrap_or_default();
        // An RMSNormalization folded in: its weights scale B's rows as they are loaded in a matrix-vector product
        // (a scalar times B's vector; A is one row), and A's k-columns as they are staged in a tiled one (one load a
        // thread a k-step, where B's rows would take one an element: 551 -> 387 µs at 512x896x9728 on an H200).
        let mut b_pro = pro[1].clone();
        let mut rms_scale_var = None;
        let rms = match group.rms_norm() {
            Some(p) => {
                let pn = g.node(p);
                let Op::LayerNorm { epsilon, .. } = pn.op else { unreachable!() };
                let scale = bind_once(&mut reads, pn.inputs[1].expect("scale"), "rms_scale");
                if group.recipe.one_row {
                    b_pro = format!("bv * {scale}[kb]");
                }
                rms_scale_var = Some(scale.clone());
                Some(RmsFold { k, eps: f32_lit(epsilon), scale, last_k: k - 1 })
            }
            None => None,
        };
        let operand = match row_operand {
            Some(nodes) => {
                // Element kb of the row of batch b is A's element a_base + kb (A read directly, contiguous, its
                // batch strides A's own or 0 where it broadcasts).
                if !group.recipe.one_row || a_sk != 1 || va.offset != 0 {
                    return Err(self.err(n, "A computed in a product that is not one row (a scheduler bug)"));
                }
                Some(self.row_operand(nodes, &mut reads, &mut helpers)?)
            }
            None => None,
        };
        let fu = self.fused_body(group, Some(mm_out), &mut reads, &mut helpers)?;
        let bindings = bindings(&reads, &[(out, "out")]);
        let a_ld = || Ld::of(g, va.root, "a");
        let bias_ld = || bias.map_or(Ld::plain(""), |c| Ld::of(g, c, &bias_var));
        if group.recipe.one_row {
            // Each block's value: the product's B, then the other products' (`Fold::Blocks`).
            let block_values: Vec<ValueId> = std::iter::once(vb.root)
                .chain(
                    group
                        .blocks()
                        .into_iter()
                        .flat_map(|(_, ps)| ps.iter().map(|&p| input_view(g, &self.sched.folded, p, 1).root)),
                )
                .collect();
            // One row: a matrix-vector product, bound by reading B.
            let kmajor = b_sk == 1 && b_sn != 1 && k > 1;
            // B read as vec4s: its own binding, rows and offset in whole vec4s, and no prologue but the norm's
            // weights (a scalar times the vector).
            let vec4 = !kmajor
                && b_sn == 1
                && b_var == "b"
                && nn % 4 == 0
                && b_sk % 4 == 0
                && vb.offset % 4 == 0
                && batch.iter().all(|d| d.b_stride % 4 == 0)
                && pro[1].is_empty()
                && bias_var != "b"
                && rms_scale_var.as_deref() != Some("b")
                && fu.loads.iter().chain(operand.iter().flat_map(|o| &o.loads)).all(|l| l.var != "b")
                && (blocks.is_empty() || per % 4 == 0)
                && block_values.iter().all(|&v| !matches!(narrow_of(g, v), Some(Narrow::Blocks(_))));
            // A narrow K-major B (a quantized or float16 weight as stored) is read a word at a time.
            let narrow: Vec<Option<Narrow>> = block_values.iter().map(|&v| narrow_of(g, v)).collect();
            let packed = (kmajor && batches == 1 && vb.offset == 0 && pro[1].is_empty())
                .then(|| PackedGemv::new(&narrow, k, b_sn))
                .flatten();
            if let Some(p) = packed {
                let block_cols = (!blocks.is_empty()).then_some(per);
                let kc = k.min(PACKED_A_CHUNK);
                let mut t = wgslc_passes::packed_gemv_tiling(nn, block_cols, k, kc);
                // A tuning knob for measuring layouts against each other (scripts/gemv_micro.py): LANES,COLUMNS or
                // LANES,COLUMNS,TILES for every packed product, or entries `N:LANES,COLUMNS[,TILES]` separated by `;`
                // for the products of N outputs.
                if let Ok(knob) = std::env::var("WGSLC_PACKED_TILING") {
                    for entry in knob.split(';') {
                        let (only, layout) = entry.split_once(':').map_or((None, entry), |(n, l)| (Some(n), l));
                        if only.is_some_and(|o| o.trim().parse() != Ok(nn)) {
                            continue;
                        }
                        let v: Vec<usize> = layout.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                        let (lanes, per_group, tiles) = match v[..] {
                            [l, c] => (l, c, 1),
                            [l, c, t] => (l, c, t),
                            _ => continue,
                        };
                        if lanes.is_power_of_two()
                            && (4..=256).contains(&lanes)
                            && (1..=8).contains(&per_group)
                            && (1..=64).contains(&tiles)
                        {
                            t = wgslc_passes::PackedGemvTiling::new(lanes, per_group);
                            t.tiles = tiles;
                        }
                    }
                }
                // Tiles a workgroup only where A is staged once and no group straddles two blocks.
                if k > kc || !blocks.is_empty() {
                    t.tiles = 1;
                }
                let gx = nn.div_ceil(t.workgroup_cols());
                let max = self.limits.max_workgroups_per_dimension as usize;
                if gx > max {
                    return Err(self.err(n, format!("a product of {nn} columns needs more than {max} workgroups")));
                }
                let mut h = self.group_header(group, "gemv_packed.wgsl", &bindings);
                let arms = self.gemv_arms(&blocks, &b_var, &block_values, per);
                // B's blocks are read a unit at a time (and their scales a word at a time), not through loaders.
                let b_vars: Vec<&str> = arms.iter().map(|a| a.var.as_str()).collect();
                h.loaders.retain(|l| !b_vars.contains(&l.var.as_str()));
                for d in h.bindings.iter_mut().filter(|d| b_vars.contains(&d.var.as_str())) {
                    d.ty = p.unit_ty;
                }
                // A thread's words of a chunk: tid, tid + 256, …, each of `per_word` elements.
                let stage_words: Vec<PackedStageWord> = (0..(kc / p.per_word).div_ceil(256))
                    .map(|s| PackedStageWord {
                        word_off: s * 256,
                        slots: (0..p.per_word).map(|j| PackedSlot { i: s * p.per_word + j, j }).collect(),
                    })
                    .collect();
                let mut loads =
                    vec![PackedLoads { k0: "0u".into(), open: String::new(), close: String::new(), stage_a: true }];
                if k > kc {
                    loads.push(PackedLoads {
                        k0: format!("k0 + {kc}u"),
                        open: format!("if (k0 + {kc}u < {k}u) {{"),
                        close: "}".into(),
                        stage_a: true,
                    });
                }
                if t.tiles > 1 {
                    // The next tile's B (its columns `cols` further on), while this one is summed.
                    let next: String = (0..t.per_group)
                        .map(|c| format!(" cl{c} = min(tcol0 + {}u, {}u);", t.cols + c, nn - 1))
                        .collect();
                    loads.push(PackedLoads {
                        k0: "0u".into(),
                        open: format!("if (tile + 1u < {}u) {{{next}", t.tiles),
                        close: "}".into(),
                        stage_a: false,
                    });
                }
                let mut tpl = GemvPackedTpl {
                    h,
                    helpers,
                    fu,
                    operand,
                    a_off: va.offset,
                    a_sk: a_sk as usize,
                    a_ld: a_ld(),
                    a_pro: pro[0].clone(),
                    rms,
                    half_lanes: t.lanes / 2,
                    tail: tree_tail(t.lanes),
                    kc,
                    kc_vecs: kc.div_ceil(4),
                    kc_words: kc / p.per_word,
                    a_units: kc / p.unit_elems,
                    sums_len: 256 * t.per_group,
                    cs: (0..t.per_group).map(|c| PackedCol { c, base: c * 256 }).collect(),
                    iters: (0..(kc / p.unit_elems).div_ceil(t.lanes))
                        .map(|i| PackedIter { i, off: i * t.lanes })
                        .collect(),
                    stage_words,
                    loads,
                    p,
                    t,
                    arms,
                    blocks,
                    per,
                    n: nn,
                    n_last: nn - 1,
                    k,
                    alpha: f32_lit(alpha),
                    beta: f32_lit(beta),
                    has_bias: bias.is_some(),
                    bias_ld: bias_ld(),
                    bias_sn,
                    sg: false,
                    wide_groups: t.lanes > wgslc_artifact::SUBGROUP_SIZES.0 as usize,
                };
                let name = self.group_name(group);
                let mut kern = self.kernel(n, name, "gemv", tpl.render(), &bindings, [gx as u32, 1, 1])?;
                tpl.sg = true;
                kern = self.with_subgroups(n, kern, tpl.render())?;
                kern.grid[0] = Some(GridAxis { walks: Walks::Cols, extent: nn, tile: t.workgroup_cols() });
                return Ok(kern);
            }
            let t = wgslc_passes::gemv_tiling(nn, k, batches, kmajor, vec4, self.sched.target);
            let gx = nn.div_ceil(t.cols);
            let max = self.limits.max_workgroups_per_dimension as usize;
            if gx > max {
                return Err(self.err(n, format!("a product of {nn} columns needs more than {max} workgroups")));
            }
            let mut h = self.group_header(group, "gemv.wgsl", &bindings);
            if t.vec == 4 {
                // Read as vec4s: declared so, or (narrow) through the loader's four-wide form.
                let wide = |var: &str| var == "b" || blocks.iter().any(|b| b == var);
                for d in h.bindings.iter_mut().filter(|d| wide(&d.var) && d.ty != "u32") {
                    d.ty = "vec4<f32>";
                }
                for l in h.loaders.iter_mut().filter(|l| wide(&l.var)) {
                    l.vec4 = true;
                }
            }
            let arms = self.gemv_arms(&blocks, &b_var, &block_values, per);
            let unroll = gemv_unroll();
            let mut tpl = GemvTpl {
                h,
                helpers,
                fu,
                operand,
                a_off: va.offset,
                b_off: vb.offset,
                a_ld: a_ld(),
                bias_ld: bias_ld(),
                a_pro: pro[0].clone(),
                b_pro,
                t,
                unroll,
                unroll_last: unroll - 1,
                lanes_half: t.lanes / 2,
                groups_half: t.groups / 2,
                tail: tree_tail(if t.kmajor { t.lanes } else { t.groups }),
                last_col: nn.saturating_sub(1),
                acc_ty: if t.vec == 4 { "vec4<f32>" } else { "f32" },
                rms,
                batch,
                n: nn,
                k,
                a_sk: a_sk as usize,
                b_sk: b_sk as usize,
                b_sn: b_sn as usize,
                alpha: f32_lit(alpha),
                beta: f32_lit(beta),
                has_bias: bias.is_some(),
                bias_sn,
                arms,
                blocks,
                per,
                sg: false,
                wide_groups: t.lanes > wgslc_artifact::SUBGROUP_SIZES.0 as usize,
            };
            let name = self.group_name(group);
            let mut k = self.kernel(n, name, "gemv", tpl.render(), &bindings, [gx as u32, 1, batches as u32])?;
            tpl.sg = true;
            k = self.with_subgroups(n, k, tpl.render())?;
            k.grid[0] = Some(GridAxis { walks: Walks::Cols, extent: nn, tile: t.cols });
            return Ok(k);
        }
        let t = self.product_tiling(group, n, k)?;
        let tile = t.tile;
        let gx = nn.div_ceil(t.tile);
        let gy = m.div_ceil(t.tile);
        let max = self.limits.max_workgroups_per_dimension as usize;
        if gx > max || gy > max {
            return Err(self.err(n, format!("a {m}x{nn} product needs more than {max} workgroups per dimension")));
        }
        let mut h = self.group_header(group, "matmul.wgsl", &bindings);
        let a_mmajor = a_sm == 1 && a_sk != 1 && m > 1 && rms.is_none();
        let b_kmajor = b_sk == 1 && b_sn != 1 && k > 1;
        // Which operands are read four elements a load: each its own binding, read by nothing else in the kernel,
        // without a prologue (a folded RMSNorm scales A's vec4 by four of its weights and sums its squares as a vec4).
        let sole = |var: &str| {
            b_var == "b"
                && bias_var != var
                && rms_scale_var.as_deref() != Some(var)
                && fu.loads.iter().all(|l| l.var != var)
                && h.bindings.iter().any(|d| d.var == var && matches!(d.ty, "f32" | "u32"))
        };
        let a_strides: Vec<i64> = batch.iter().map(|d| d.a_stride).collect();
        let b_strides: Vec<i64> = batch.iter().map(|d| d.b_stride).collect();
        let a4 = row_operand.is_none()
            && pro[0].is_empty()
            && sole("a")
            && vec4_loads(
                &t,
                if a_mmajor { (m, a_sk, true) } else { (k, a_sm, a_sk == 1) },
                !a_mmajor,
                va.offset,
                &a_strides,
                narrow_of(g, va.root),
            );
        let b4 = pro[1].is_empty()
            && !b_kmajor
            && sole("b")
            && vec4_loads(
                &t,
                if b_kmajor { (k, b_sn, true) } else { (nn, b_sk, b_sn == 1) },
                b_kmajor,
                vb.offset,
                &b_strides,
                narrow_of(g, vb.root),
            );
        // Both or neither: one operand alone in vec4s was slower as often as faster ([`vec4_loads`]).
        let (a4, b4) = (a4 && b4, a4 && b4);
        for (on, var) in [(a4, "a"), (b4, "b")] {
            if on {
                for d in h.bindings.iter_mut().filter(|d| d.var == var && d.ty == "f32") {
                    d.ty = "vec4<f32>";
                }
                for l in h.loaders.iter_mut().filter(|l| l.var == var) {
                    l.vec4 = true;
                }
            }
        }
        let row_len = t.row_len;
        let tpl = MatmulTpl {
            h,
            helpers,
            fu,
            a_off: va.offset,
            b_off: vb.offset,
            a_ld: a_ld(),
            b_ld: Ld::of(g, vb.root, &b_var),
            bias_ld: bias_ld(),
            b_var,
            a_pro: pro[0].clone(),
            b_pro,
            t,
            im2col: None,
            seg2: None,
            dw: None,
            a_mmajor,
            b_kmajor,
            a4,
            b4,
            a_ld4: Ld::of4(g, va.root, "a"),
            b_ld4: Ld::of4(g, vb.root, "b"),
            a_put_step: if a_mmajor { 1 } else { row_len },
            b_put_step: if b_kmajor { row_len } else { 1 },
            a_puts: unrolled(4, if a_mmajor { 1 } else { row_len }),
            b_puts: unrolled(4, if b_kmajor { row_len } else { 1 }),
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
            bias_groups: None,
        };
        let name = self.group_name(group);
        let mut k = self.kernel(n, name, "matmul", tpl.render(), &bindings, [gx as u32, gy as u32, batches as u32])?;
        k.grid[0] = Some(GridAxis { walks: Walks::Cols, extent: nn, tile });
        k.grid[1] = Some(GridAxis { walks: Walks::Rows, extent: m, tile });
        Ok(k)
    }
}

/// Independent sums per thread of a matrix-vector product (templates/gemv.wgsl), each a load of B in flight: 7.
/// Measured on the H100 with Qwen2.5-0.5B's decode step: float16 B read four elements (8 bytes) a load, gate/up
/// (896 × 9,728, 28 k-steps a thread) 14.3 µs at 4, 13.2 at 7, 13.0 at 14, the `--weights f16` decoder 928.8 →
/// 964.1 tok/s; f32 B (16-byte loads), the fp32 decoder 694.5 → 733.4 tok/s, gate/up 23.9 → 21.7 µs in the step
/// (docs/performance.md). `WGSLC_GEMV_UNROLL` (1–16) overrides it, for measuring.
fn gemv_unroll() -> usize {
    let knob = std::env::var("WGSLC_GEMV_UNROLL").ok().and_then(|v| v.parse().ok());
    knob.filter(|u| (1..=16).contains(u)).unwrap_or(7)
}
