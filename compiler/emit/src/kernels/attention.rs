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
    pub(super) row_lanes: Vec<usize>,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) mn: usize,
    pub(super) dk: usize,
    pub(super) dv: usize,
    /// `dv` rounded up to 16 (one column per thread of a row per lane).
    pub(super) dv_pad: usize,
    /// Keys of V staged at a time: as many as fit 2048 floats, at most 16.
    pub(super) v_chunk: usize,
    pub(super) kv_len: usize,
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
    pub(super) b_var: String,
    pub(super) v_var: String,
    pub(super) alpha: String,
    pub(super) nan_to_zero: bool,
    /// 0..4: the four keys each thread scores per tile, unrolled.
    pub(super) quads: Vec<usize>,
    pub(super) batch: Vec<AttnBatchDim>,
    pub(super) lanes: Vec<Lane>,
}

pub(super) struct AttnBatchDim {
    pub(super) div: usize,
    pub(super) extent: usize,
    pub(super) a_stride: i64,
    pub(super) b_stride: i64,
    pub(super) v_stride: i64,
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
        // One binding per stored tensor (Q, K and V are often views of one QKV product).
        let mut reads: Vec<(ValueId, String)> = vec![(qk.va.root, "a".into())];
        let b_var = bind_once(&mut reads, qk.vb.root, "b");
        let v_var = bind_once(&mut reads, pv.vb.root, "v");
        // The score epilogue's body; the output store goes through the group's store copy, if any.
        let mut fu = self.fused_body(&qk_group, Some(qk.mm_out), &mut reads, &mut helpers)?;
        self.place_stores(group, &mut fu);
        let bindings = bindings(&reads, &[(out, "out")]);
        let dv_pad = pv.nn.div_ceil(16) * 16;
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
}
