//! onnxruntime's attention ops as its model builder and transformers optimizer write them, written out with the
//! ops an exporter writes so that fusion and `--kv-cache` treat them as they treat an export:
//! `GroupQueryAttention`, `MultiHeadAttention` and the standalone `RotaryEmbedding`.

use crate::importer::{Attrs, Importer};
use crate::proto::NodeProto;
use crate::ImportError;
use wgslc_ir::{AttentionAttrs, BinaryOp, Builder, DType, Op, Tensor, ValueId};

impl Importer<'_> {
    /// `GroupQueryAttention` (onnxruntime-genai's builder writes one per layer): query, key and value `[batch, seq,
    /// heads · head]` (or the three packed in `query`), past key and value `[batch, kv_heads, past, head]`,
    /// `seqlens_k` (each sequence's total length less one), `total_sequence_length`, and for `do_rotary` the
    /// `cos_cache`/`sin_cache` tables `[positions, rotary / 2]`. Written out with the ops the exporters write, so
    /// that `--kv-cache` finds each cache as the `Concat(past, new)` it rewrites:
    /// - the new tokens' positions `seqlens_k + 1 - seq + i` (or the `position_ids` input), rotary applied to the
    ///   query and the new keys there (`RotaryEmbedding`);
    /// - `present = Concat(past, new)` along the sequence axis, outputs 1 and 2;
    /// - `Attention` over the present keys with a boolean mask that lets the query at position `p` see the keys
    ///   at indices `p - local_window_size + 1 ..= p` (`..= p` without a window), scale and softcap as given, the KV
    ///   heads shared by groups of query heads.
    ///
    /// So a key's index in `present` must be its position: the past holds exactly the tokens before the new ones
    /// (`past = seqlens_k + 1 - seq`, the attention mask all ones), which is how onnxruntime-genai runs the model
    /// without a shared buffer and how `--kv-cache` lays the cache out (each model's layout is proved). A right-padded
    /// past (a preallocated buffer of `max_length` rows, `past_present_share_buffer`) is not this op's semantics
    /// here.
    pub(super) fn group_query_attention(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let name = a.name;
        let at = |i: usize| inputs.get(i).copied().flatten();
        let heads = usize::try_from(a.int("num_heads", 0)).unwrap_or(0);
        let kv_heads = usize::try_from(a.int("kv_num_heads", 0)).unwrap_or(0);
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
            return Err(a.err(format!("num_heads {heads} must be a positive multiple of kv_num_heads {kv_heads}")));
        }
        for (attr, what) in [("smooth_softmax", "smooth softmax"), ("qk_output", "the QK output")] {
            if a.int(attr, 0) != 0 {
                return Err(a.err(format!("{what} ({attr}) is not supported")));
            }
        }
        for (i, what) in [(10, "attention_bias"), (11, "head_sink")] {
            if at(i).is_some() {
                return Err(a.err(format!("the {what} input is not supported")));
            }
        }
        if node.output.len() > 3 && node.output[3..].iter().any(|o| !o.is_empty()) {
            return Err(a.err("only the output and the present key and value are supported"));
        }
        let (Some(query), Some(seqlens), Some(total)) = (at(0), at(5), at(6)) else {
            return Err(a.err("needs query, seqlens_k and total_sequence_length"));
        };
        let window = a.int("local_window_size", -1);
        let ints = |s: &mut Self, what: &str, v: &[i64]| s.ints_const(name, what, v.to_vec());
        let slice = |s: &mut Self, part: &str, x: ValueId, axis: i64, start: i64, end: i64| {
            let (st, en, ax) = (ints(s, "start", &[start]), ints(s, "end", &[end]), ints(s, "axis", &[axis]));
            s.emit(name, part, Op::Slice, &[Some(x), Some(st), Some(en), Some(ax)])
        };
        let reshape = |s: &mut Self, part: &str, x: ValueId, shape: &[i64]| {
            let sh = ints(s, "shape", shape);
            s.emit(name, part, Op::Reshape { allowzero: false }, &[Some(x), Some(sh)])
        };
        // 0, 1, …, len - 1 for a scalar len.
        let range = |s: &mut Self, part: &str, len: ValueId| {
            let mut b = Builder::new(&mut s.g, name);
            let (zero, step) = (
                b.const_named("zero", Tensor::i64(vec![], vec![0])),
                b.const_named("step", Tensor::i64(vec![], vec![1])),
            );
            s.emit(name, part, Op::Range, &[Some(zero), Some(len), Some(step)])
        };
        // Query, key and value as [batch, seq, heads · head].
        let (q, k, v) = match (at(1), at(2)) {
            (Some(k), Some(v)) => (query, k, v),
            (None, None) => {
                let (h, kh) = (heads as i64, kv_heads as i64);
                let packed = reshape(self, "packed", query, &[0, 0, h + 2 * kh, -1])?;
                let mut parts = Vec::new();
                for (part, from, to) in [("q", 0, h), ("k", h, h + kh), ("v", h + kh, h + 2 * kh)] {
                    let p = slice(self, part, packed, 2, from, to)?;
                    parts.push(reshape(self, part, p, &[0, 0, -1])?);
                }
                (parts[0], parts[1], parts[2])
            }
            _ => return Err(a.err("key and value are given together, or neither (packed in query)")),
        };
        // The new tokens' positions [batch, seq]: seqlens_k + 1 - seq + i (alike in every layer: computed once).
        let derived = match self.shared.get(&("positions", vec![seqlens])) {
            Some(&p) => p,
            None => {
                let seq = self.emit(name, "seq", Op::Shape { start: 1, end: Some(2) }, &[Some(q)])?;
                let (one, axes) = (ints(self, "one", &[1]), ints(self, "axes", &[1]));
                let seqlens64 = self.emit(name, "seqlens", Op::cast(DType::I64), &[Some(seqlens)])?;
                let seqlens64 = self.emit(name, "seqlens", Op::Unsqueeze, &[Some(seqlens64), Some(axes)])?;
                let total = self.emit(name, "total", Op::Binary(BinaryOp::Add), &[Some(seqlens64), Some(one)])?;
                let first = self.emit(name, "first", Op::Binary(BinaryOp::Sub), &[Some(total), Some(seq)])?;
                let len = self.emit(name, "len", Op::Squeeze, &[Some(seq)])?;
                let iota = range(self, "iota", len)?;
                let p = self.emit(name, "positions", Op::Binary(BinaryOp::Add), &[Some(first), Some(iota)])?;
                self.shared.insert(("positions", vec![seqlens]), p);
                p
            }
        };
        let q4 = self.split_heads(name, "q", q, heads)?;
        let (k4, v4) = (self.split_heads(name, "k", k, kv_heads)?, self.split_heads(name, "v", v, kv_heads)?);
        // Rotary at the new tokens' positions, over [batch, heads, seq, head] as the exporters apply it.
        let (q4, k4) = if a.int("do_rotary", 0) != 0 {
            let (Some(cos), Some(sin)) = (at(7), at(8)) else {
                return Err(a.err("do_rotary needs cos_cache and sin_cache"));
            };
            let half = match self.g.value(cos).ty.as_ref().or(self.g.const_data(cos).map(|t| t.ty()).as_ref()) {
                Some(t) if t.shape.len() == 2 => t.shape[1],
                _ => return Err(a.err("cos_cache must be a 2-D initializer [positions, rotary / 2]")),
            };
            let positions = at(9).unwrap_or(derived);
            // Each token's cos and sin rows [batch, seq, rotary / 2] (doubled: rotary), looked up once for every
            // layer.
            let rows = |s: &mut Self, what: &'static str, table: ValueId| -> Result<ValueId, ImportError> {
                let key = (what, vec![table, positions]);
                if let Some(&r) = s.shared.get(&key) {
                    return Ok(r);
                }
                // Doubled: the table's halves alike (a constant, folded), then one lookup.
                let table = if what.ends_with("doubled") {
                    s.emit(name, what, Op::Concat { axis: -1 }, &[Some(table), Some(table)])?
                } else {
                    table
                };
                let r = s.emit(name, what, Op::Gather { axis: 0 }, &[Some(table), Some(positions)])?;
                s.shared.insert(key, r);
                Ok(r)
            };
            let interleaved = a.int("rotary_interleaved", 0) != 0;
            // Halves rotate as x · [cos, cos] + rotate_half(x) · [sin, sin]: the rows doubled once, too.
            let doubled = !interleaved;
            let (cos, sin) = if doubled {
                (rows(self, "cos_rows_doubled", cos)?, rows(self, "sin_rows_doubled", sin)?)
            } else {
                (rows(self, "cos_rows", cos)?, rows(self, "sin_rows", sin)?)
            };
            let mut rotate = |x: ValueId, part: &str, num_heads: usize| {
                let op = Op::RotaryEmbedding { interleaved, rotary_dim: 2 * half, num_heads, doubled };
                self.emit(name, part, op, &[Some(x), Some(cos), Some(sin)])
            };
            (rotate(q4, "rotary_q", heads)?, rotate(k4, "rotary_k", kv_heads)?)
        } else {
            (q4, k4)
        };
        let present = self.presents(a, node, [(k4, at(3)), (v4, at(4))])?;
        // The bias [batch, 1, seq, total]: key j seen by the query at position p iff p - window < j <= p, over
        // total_sequence_length keys (the present's length, past and new); without a window alike in every layer,
        // built once (a window may differ between layers: Gemma 2 alternates).
        let key = ("mask", vec![derived, total]);
        let mask = match self.shared.get(&key).filter(|_| window <= 0) {
            Some(&m) => m,
            None => {
                let axes = ints(self, "axes", &[1, 3]);
                let positions = self.emit(name, "mask_positions", Op::Unsqueeze, &[Some(derived), Some(axes)])?;
                let total64 = self.emit(name, "keys", Op::cast(DType::I64), &[Some(total)])?;
                let scalar = ints(self, "scalar", &[]);
                let total64 =
                    self.emit(name, "keys", Op::Reshape { allowzero: false }, &[Some(total64), Some(scalar)])?;
                let keys = range(self, "keys", total64)?;
                let mut mask =
                    self.emit(name, "causal", Op::Binary(BinaryOp::LessOrEqual), &[Some(keys), Some(positions)])?;
                if window > 0 {
                    // The query's own key and the window - 1 before it (onnxruntime 1.31's CPU kernel).
                    let w = ints(self, "window", &[window - 1]);
                    let from = self.emit(name, "window", Op::Binary(BinaryOp::Sub), &[Some(positions), Some(w)])?;
                    let inside =
                        self.emit(name, "window", Op::Binary(BinaryOp::GreaterOrEqual), &[Some(keys), Some(from)])?;
                    mask = self.emit(name, "window", Op::Binary(BinaryOp::And), &[Some(mask), Some(inside)])?;
                }
                // Additive (0 where seen, -inf elsewhere, in the query's type), so that the layers share the
                // conversion too.
                let (zero, ninf) = {
                    let mut b = Builder::new(&mut self.g, name);
                    (
                        b.const_named("zero", Tensor::f32(vec![], vec![0.0])),
                        b.const_named("ninf", Tensor::f32(vec![], vec![f32::NEG_INFINITY])),
                    )
                };
                let like = Op::CastLike { saturate: false };
                let zero = self.emit(name, "mask_zero", like.clone(), &[Some(zero), Some(q)])?;
                let ninf = self.emit(name, "mask_ninf", like, &[Some(ninf), Some(q)])?;
                let mask = self.emit(name, "mask", Op::Where, &[Some(mask), Some(zero), Some(ninf)])?;
                if window <= 0 {
                    self.shared.insert(key, mask);
                }
                mask
            }
        };
        let scale = a.float("scale", 0.0);
        let softcap = a.float("softcap", 0.0);
        let attrs = AttentionAttrs {
            is_causal: false,
            q_num_heads: None,
            kv_num_heads: None,
            scale: (scale != 0.0).then_some(scale),
            softcap: softcap.max(0.0),
            qk_matmul_output_mode: 0,
            own_key_seen: true,
        };
        let y4 = self.emit(
            name,
            "attention",
            Op::Attention(attrs),
            &[Some(q4), Some(present[0]), Some(present[1]), Some(mask)],
        )?;
        self.heads_joined_output(a, node, y4)
    }

    /// `RotaryEmbedding` (`com.microsoft`, as onnxruntime's transformers optimizer and older builders write it):
    /// input `[batch, seq, hidden]` or `[batch, heads, seq, head]`, `position_ids` `[batch, seq]` or one element
    /// (the first token's position, the others following it), `cos_cache`/`sin_cache` `[positions, rotary / 2]`:
    /// the ONNX op with its inputs in that op's order. `scale` is ignored, as onnxruntime's kernels ignore it;
    /// without `num_heads` a 3-D input's heads are as wide as the caches' rows say (`2 · rotary / 2`).
    pub(super) fn contrib_rotary_embedding(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        if a.int("is_packed_batching", 0) != 0 {
            return Err(a.err("packed batching (is_packed_batching) is not supported"));
        }
        let at = |i: usize| inputs.get(i).copied().flatten();
        let (Some(x), Some(positions), Some(cos), Some(sin)) = (at(0), at(1), at(2), at(3)) else {
            return Err(a.err("needs its input, position_ids, cos_cache and sin_cache"));
        };
        let (rotary, heads) = (a.int("rotary_embedding_dim", 0), a.int("num_heads", 0));
        let (Ok(rotary_dim), Ok(num_heads)) = (usize::try_from(rotary), usize::try_from(heads)) else {
            return Err(a.err(format!("rotary_embedding_dim {rotary} or num_heads {heads} is negative")));
        };
        if rotary_dim > 0 && num_heads == 0 {
            return Err(a.err("rotary_embedding_dim needs num_heads"));
        }
        let op =
            Op::RotaryEmbedding { interleaved: a.int("interleaved", 0) != 0, rotary_dim, num_heads, doubled: false };
        let outs = self.define_outputs(a.name, &node.output[..1], &op)?;
        self.emit_into(a, "", op, &[Some(x), Some(cos), Some(sin), Some(positions)], outs)
    }

    /// `MultiHeadAttention` (`com.microsoft`, as onnxruntime's transformers optimizer writes it): query `[batch,
    /// seq, hidden]`; key and value `[batch, kv_seq, hidden]` (or, for cross-attention, already `[batch, heads,
    /// kv_seq, head]`); the projection `bias` `[hidden + hidden + v_hidden]`; `key_padding_mask` `[batch,
    /// total]` (0 masks a key) or `[batch]` (each sequence's key count); `attention_bias` added to the scores;
    /// past key and value `[batch, heads, past, head]`, concatenated before the new ones (outputs 1 and 2). Written
    /// out as the ONNX Attention over heads-first views, with onnxruntime's additive mask: `mask_filter_value`
    /// (−10,000 by default, finite) where a key is masked by the padding mask or, with `unidirectional`, lies
    /// after the query's position `past + i`; the scale defaults to `1/√head`. Refused: packed QKV or KV,
    /// `past_sequence_length` and `cache_indirection` (beam search), other mask forms, the QK output.
    pub(super) fn multi_head_attention(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let name = a.name;
        let at = |i: usize| inputs.get(i).copied().flatten();
        let heads = usize::try_from(a.int("num_heads", 0)).unwrap_or(0);
        if heads == 0 {
            return Err(a.err("num_heads must be positive"));
        }
        let (Some(q), Some(k), Some(v)) = (at(0), at(1), at(2)) else {
            return Err(a.err("packed QKV or KV (query, key or value absent) is not supported"));
        };
        for (i, what) in [(8, "past_sequence_length"), (9, "cache_indirection")] {
            if at(i).is_some() {
                return Err(a.err(format!("the {what} input (beam search) is not supported")));
            }
        }
        if node.output.len() > 3 && node.output[3..].iter().any(|o| !o.is_empty()) {
            return Err(a.err("only the output and the present key and value are supported"));
        }
        let (bias, padding, attn_bias) = (at(3), at(4), at(5));
        let past = match (at(6), at(7)) {
            (Some(pk), Some(pv)) => Some((pk, pv)),
            (None, None) => None,
            _ => return Err(a.err("past_key and past_value are given together, or neither")),
        };
        let probe: Vec<ValueId> = [Some(q), Some(k), padding, past.map(|p| p.0)].into_iter().flatten().collect();
        let shapes = self.shapes_of(&probe).map_err(|e| a.err(format!("the shapes of its inputs: {e}")))?;
        let (qs, ks) = (&shapes[0], &shapes[1]);
        let [batch, seq, hidden] = qs[..] else {
            return Err(a.err(format!("query is {qs:?}, not [batch, seq, hidden]")));
        };
        if hidden % heads != 0 {
            return Err(a.err(format!("hidden size {hidden} does not split into {heads} heads")));
        }
        let heads_first = ks.len() == 4;
        let kv_len = match ks[..] {
            [_, l, _] => l,
            [_, n, l, _] if n == heads && bias.is_none() && past.is_none() => l,
            [..] if ks.len() == 4 => {
                return Err(a.err("a heads-first key (cross-attention) takes no bias and no past, and num_heads heads"))
            }
            _ => return Err(a.err(format!("key is {ks:?}: packed KV is not supported"))),
        };
        let past_len = past.map_or(0, |_| shapes.last().map_or(0, |s| s.get(2).copied().unwrap_or(0)));
        let total = past_len + kv_len;
        let ints = |s: &mut Self, what: &str, v: &[i64]| s.ints_const(name, what, v.to_vec());
        // Q, K and V with their projection bias: the bias's parts [hidden], [hidden] and the rest.
        let biased = |s: &mut Self, part: &str, x: ValueId, from: i64, to: i64| -> Result<ValueId, ImportError> {
            let Some(b) = bias else { return Ok(x) };
            let (st, en, ax) = (ints(s, "start", &[from]), ints(s, "end", &[to]), ints(s, "axis", &[0]));
            let piece = s.emit(name, part, Op::Slice, &[Some(b), Some(st), Some(en), Some(ax)])?;
            s.emit(name, part, Op::Binary(BinaryOp::Add), &[Some(x), Some(piece)])
        };
        let h = hidden as i64;
        let qb = biased(self, "q", q, 0, h)?;
        let q4 = self.split_heads(name, "q", qb, heads)?;
        let (k4, v4) = if heads_first {
            (k, v)
        } else {
            let (kb, vb) = (biased(self, "k", k, h, 2 * h)?, biased(self, "v", v, 2 * h, i64::MAX)?);
            (self.split_heads(name, "k", kb, heads)?, self.split_heads(name, "v", vb, heads)?)
        };
        let present = self.presents(a, node, [(k4, past.map(|p| p.0)), (v4, past.map(|p| p.1))])?;
        // Which keys each query may see, [batch or 1, 1, seq or 1, total]; then onnxruntime's additive mask.
        let mut allowed = match padding {
            None => None,
            Some(m) => {
                let ms = &shapes[2];
                let zero = Builder::new(&mut self.g, name).const_named("zero", Tensor::i64(vec![], vec![0]));
                let m64 = self.emit(name, "padding", Op::cast(DType::I64), &[Some(m)])?;
                let keys = match ms[..] {
                    [b, t] if b == batch && t == total => {
                        self.emit(name, "padding", Op::Binary(BinaryOp::Greater), &[Some(m64), Some(zero)])?
                    }
                    [b] if b == batch => {
                        let iota = ints(self, "keys", &(0..total as i64).collect::<Vec<_>>());
                        let axes = ints(self, "axes", &[1]);
                        let lens = self.emit(name, "lengths", Op::Unsqueeze, &[Some(m64), Some(axes)])?;
                        self.emit(name, "padding", Op::Binary(BinaryOp::Less), &[Some(iota), Some(lens)])?
                    }
                    _ => {
                        return Err(a.err(format!(
                            "key_padding_mask is {ms:?}; [batch, total] ({batch}, {total}) and [batch] are supported"
                        )))
                    }
                };
                let axes = ints(self, "axes", &[1, 2]);
                Some(self.emit(name, "padding", Op::Unsqueeze, &[Some(keys), Some(axes)])?)
            }
        };
        if a.int("unidirectional", 0) != 0 {
            let seen: Vec<bool> = (0..seq).flat_map(|i| (0..total).map(move |j| j <= past_len + i)).collect();
            let causal =
                Builder::new(&mut self.g, name).const_named("causal", Tensor::bool(vec![1, 1, seq, total], seen));
            allowed = Some(match allowed {
                Some(m) => self.emit(name, "mask", Op::Binary(BinaryOp::And), &[Some(m), Some(causal)])?,
                None => causal,
            });
        }
        let mut mask = match allowed {
            None => None,
            Some(m) => {
                let fill = a.float("mask_filter_value", -10000.0);
                let (zero, fill) =
                    (self.scalar_const(name, "mask_zero", 0.0), self.scalar_const(name, "mask_fill", fill));
                let like = Op::CastLike { saturate: false };
                let zero = self.emit(name, "mask_zero", like.clone(), &[Some(zero), Some(q)])?;
                let fill = self.emit(name, "mask_fill", like, &[Some(fill), Some(q)])?;
                Some(self.emit(name, "mask", Op::Where, &[Some(m), Some(zero), Some(fill)])?)
            }
        };
        if let Some(b) = attn_bias {
            mask = Some(match mask {
                Some(m) => self.emit(name, "bias", Op::Binary(BinaryOp::Add), &[Some(m), Some(b)])?,
                None => b,
            });
        }
        let scale = a.float("scale", 0.0);
        let attrs = AttentionAttrs {
            is_causal: false,
            q_num_heads: None,
            kv_num_heads: None,
            scale: (scale != 0.0).then_some(scale),
            softcap: 0.0,
            qk_matmul_output_mode: 0,
            own_key_seen: false,
        };
        let y4 =
            self.emit(name, "attention", Op::Attention(attrs), &[Some(q4), Some(present[0]), Some(present[1]), mask])?;
        self.heads_joined_output(a, node, y4)
    }

    /// Outputs 1 and 2 (present key and value, `[batch, heads, total, head]`): each past with the new rows
    /// concatenated along the sequence (the new rows alone without a past), into the model's names where it gives
    /// them. Returns both.
    fn presents(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        kv: [(ValueId, Option<ValueId>); 2],
    ) -> Result<[ValueId; 2], ImportError> {
        let mut present = [kv[0].0, kv[1].0];
        for (i, (new, past)) in kv.into_iter().enumerate() {
            let (op, ins) = match past {
                Some(p) => (Op::Concat { axis: 2 }, vec![Some(p), Some(new)]),
                None => (Op::Identity, vec![Some(new)]),
            };
            let part = ["present_key", "present_value"][i];
            present[i] = match node.output.get(i + 1).filter(|o| !o.is_empty()) {
                Some(o) => {
                    let out = self.define_outputs(a.name, std::slice::from_ref(o), &op)?;
                    self.emit_into(a, part, op, &ins, out.clone())?;
                    out[0]
                }
                None if past.is_some() => self.emit(a.name, part, op, &ins)?,
                None => new,
            };
        }
        Ok(present)
    }

    /// `[batch, seq, heads · head]` as the heads-first `[batch, heads, seq, head]`.
    fn split_heads(&mut self, name: &str, part: &str, x: ValueId, heads: usize) -> Result<ValueId, ImportError> {
        let sh = self.ints_const(name, "shape", vec![0, 0, heads as i64, -1]);
        let r = self.emit(name, part, Op::Reshape { allowzero: false }, &[Some(x), Some(sh)])?;
        self.emit(name, part, Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[Some(r)])
    }

    /// Output 0: the heads-first attention result `[batch, heads, seq, head]` as `[batch, seq, heads · head]`.
    fn heads_joined_output(&mut self, a: &Attrs, node: &NodeProto, y4: ValueId) -> Result<(), ImportError> {
        let y = self.emit(a.name, "output", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[Some(y4)])?;
        let sh = self.ints_const(a.name, "shape", vec![0, 0, -1]);
        let op = Op::Reshape { allowzero: false };
        let out = self.define_outputs(a.name, &node.output[..1], &op)?;
        self.emit_into(a, "output", op, &[Some(y), Some(sh)], out)
    }
}
