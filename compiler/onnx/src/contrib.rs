//! onnxruntime's own ops, as its quantizers, transformers optimizer and model builder write them: `MatMulNBits` (a
//! product with a block-quantized weight) and `GatherBlockQuantized` (a lookup in a block-quantized table), each
//! weight one block-quantized constant (`wgslc_ir::Blocks`) that the kernels reading it decode, the op itself the
//! plain MatMul or Gather it computes; and the norms `SimplifiedLayerNormalization` (registered in the default
//! domain), `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization` (`com.microsoft`), which become the
//! IR's LayerNorm (an RMSNorm for the simplified ones) of the input, plus the residual for the Skip forms.

use crate::importer::{Attrs, Importer};
use crate::proto::NodeProto;
use crate::ImportError;
use std::sync::Arc;
use wgslc_ir::{AttentionAttrs, BinaryOp, Blocks, Builder, DType, Data, Op, Quantized, Tensor, ValueId, Zeros};

/// The `com.microsoft` ops wgslc imports.
pub(crate) const CONTRIB_OPS: &[&str] = &[
    "MatMulNBits",
    "GatherBlockQuantized",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "GroupQueryAttention",
];

/// onnxruntime's default epsilon of the Skip norms.
const SKIP_NORM_EPSILON: f32 = 1e-12;

impl Importer<'_> {
    pub(crate) fn contrib(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        match node.op_type.as_str() {
            "MatMulNBits" => self.matmul_nbits(a, node, inputs),
            "GatherBlockQuantized" => self.gather_block_quantized(a, node, inputs),
            "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => self.skip_layer_norm(a, node, inputs),
            "GroupQueryAttention" => self.group_query_attention(a, node, inputs),
            other => Err(ImportError::UnsupportedOp { node: a.name.to_string(), op: other.to_string() }),
        }
    }

    /// `SimplifiedLayerNormalization` (default domain, as onnxruntime registers it): RMSNormalization by its older
    /// name, `X / sqrt(mean(X²) + ε) · scale` over the axes from `axis`.
    pub(crate) fn simplified_layer_norm(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        if node.output.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(a.err("its inverse-standard-deviation output is not supported"));
        }
        let (Some(x), Some(scale)) = (inputs.first().copied().flatten(), inputs.get(1).copied().flatten()) else {
            return Err(a.err("needs its input and scale"));
        };
        let op = Op::LayerNorm { axis: a.int("axis", -1), epsilon: a.float("epsilon", 1e-5), rms: true };
        let outs = self.define_outputs(a.name, &node.output[..1], &op)?;
        self.emit_into(a, "", op, &[Some(x), Some(scale)], outs)
    }

    /// `SkipLayerNormalization` (inputs: input, skip, gamma, beta, bias) and `SkipSimplifiedLayerNormalization`
    /// (input, skip, gamma, bias): the LayerNorm (RMSNorm) over the last axis of `input + skip + bias`; output 3,
    /// where the model names it, is that sum (the next residual).
    fn skip_layer_norm(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let rms = node.op_type == "SkipSimplifiedLayerNormalization";
        let at = |i: usize| inputs.get(i).copied().flatten();
        let (Some(x), Some(skip), Some(gamma)) = (at(0), at(1), at(2)) else {
            return Err(a.err("needs its input, skip and gamma"));
        };
        let (beta, bias) = if rms { (None, at(3)) } else { (at(3), at(4)) };
        if node.output.iter().enumerate().any(|(i, o)| (i == 1 || i == 2) && !o.is_empty()) {
            return Err(a.err("its mean and inverse-standard-deviation outputs are not supported"));
        }
        let name = a.name;
        let add = Op::Binary(BinaryOp::Add);
        let sum_name = node.output.get(3).filter(|o| !o.is_empty());
        let sum = match (bias, sum_name) {
            (None, None) => self.emit(name, "sum", add, &[Some(x), Some(skip)])?,
            (Some(b), None) => {
                let s = self.emit(name, "sum", add.clone(), &[Some(x), Some(skip)])?;
                self.emit(name, "bias", add, &[Some(s), Some(b)])?
            }
            (bias, Some(o)) => {
                let out = self.define_outputs(name, std::slice::from_ref(o), &add)?;
                match bias {
                    Some(b) => {
                        let s = self.emit(name, "sum", add.clone(), &[Some(x), Some(skip)])?;
                        self.emit_into(a, "bias", add, &[Some(s), Some(b)], out.clone())?;
                    }
                    None => self.emit_into(a, "sum", add, &[Some(x), Some(skip)], out.clone())?,
                }
                out[0]
            }
        };
        let op = Op::LayerNorm { axis: -1, epsilon: a.float("epsilon", SKIP_NORM_EPSILON), rms };
        let outs = self.define_outputs(name, &node.output[..1], &op)?;
        let ins: Vec<Option<ValueId>> =
            [Some(sum), Some(gamma), beta].into_iter().take(if beta.is_some() { 3 } else { 2 }).collect();
        self.emit_into(a, "", op, &ins, outs)
    }

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
    fn group_query_attention(
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
        // [batch, heads, seq, head].
        let heads_first = |s: &mut Self, part: &str, x: ValueId, h: usize| -> Result<ValueId, ImportError> {
            let r = reshape(s, part, x, &[0, 0, h as i64, -1])?;
            s.emit(name, part, Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[Some(r)])
        };
        let q4 = heads_first(self, "q", q, heads)?;
        let (k4, v4) = (heads_first(self, "k", k, kv_heads)?, heads_first(self, "v", v, kv_heads)?);
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
        let mut present = Vec::new();
        for (i, (new, past)) in [(k4, at(3)), (v4, at(4))].into_iter().enumerate() {
            let (op, ins) = match past {
                Some(p) => (Op::Concat { axis: 2 }, vec![Some(p), Some(new)]),
                None => (Op::Identity, vec![Some(new)]),
            };
            let part = ["present_key", "present_value"][i];
            let out = match node.output.get(i + 1).filter(|o| !o.is_empty()) {
                Some(o) => {
                    let out = self.define_outputs(name, std::slice::from_ref(o), &op)?;
                    self.emit_into(a, part, op, &ins, out.clone())?;
                    out[0]
                }
                None => self.emit(name, part, op, &ins)?,
            };
            present.push(out);
        }
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
        let y = self.emit(name, "output", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[Some(y4)])?;
        let sh = ints(self, "shape", &[0, 0, -1]);
        let op = Op::Reshape { allowzero: false };
        let out = self.define_outputs(name, &node.output[..1], &op)?;
        self.emit_into(a, "output", op, &[Some(y), Some(sh)], out)
    }

    /// A value computed by a Reshape of an initializer by a constant shape: that initializer, reshaped.
    fn reshaped_const(&self, v: ValueId) -> Option<Tensor> {
        let node = self.g.node(self.g.value(v).producer?);
        let Op::Reshape { allowzero } = node.op else { return None };
        let (x, shape) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
        let (x, spec) = (self.g.const_data(x)?, self.g.const_data(shape)?.to_i64());
        let dims = wgslc_ir::reshape_target(&x.shape, &spec, allowzero).ok()?;
        Some(Tensor { shape: dims, ..x.clone() })
    }

    /// A constant input, by slot: its tensor, or an error naming it.
    fn const_input<'t>(
        &'t self,
        a: &Attrs,
        inputs: &[Option<ValueId>],
        i: usize,
        what: &str,
    ) -> Result<Option<&'t Tensor>, ImportError> {
        match inputs.get(i).copied().flatten() {
            None => Ok(None),
            Some(v) => self.g.const_data(v).map(Some).ok_or_else(|| {
                a.err(format!(
                    "its {what} '{}' must be an initializer (it is computed at run time)",
                    self.g.value(v).name
                ))
            }),
        }
    }

    /// `Y = A · dequantize(B)ᵀ + bias`, `B` quantized in blocks along K. The weight becomes a block-quantized
    /// `[N, K]` constant read through a transpose, so the product reads it K-major as it lies.
    fn matmul_nbits(&mut self, a: &Attrs, node: &NodeProto, inputs: Vec<Option<ValueId>>) -> Result<(), ImportError> {
        let name = a.name;
        let req = |key: &str| -> Result<usize, ImportError> {
            let v = a.get(key).ok_or_else(|| a.err(format!("missing attribute '{key}'")))?.i;
            usize::try_from(v).ok().filter(|&v| v > 0).ok_or_else(|| a.err(format!("attribute '{key}' is {v}")))
        };
        let (k, n, block) = (req("K")?, req("N")?, req("block_size")?);
        let bits = a.int("bits", 4);
        if ![2, 4, 8].contains(&bits) {
            return Err(a.err(format!("bits {bits}: 2, 4 and 8 are supported")));
        }
        let bits = bits as u32;
        if block < 16 || !block.is_power_of_two() {
            return Err(a.err(format!("block_size {block} is not a power of two of at least 16")));
        }
        if a.int("weight_prepacked", 0) != 0 {
            return Err(a.err("weights prepacked for an execution provider are not supported"));
        }
        let x = inputs.first().copied().flatten().ok_or_else(|| a.err("missing input A"))?;
        let kb = k.div_ceil(block);
        let blob = block * bits as usize / 8;
        let b = self.const_input(a, &inputs, 1, "B")?.ok_or_else(|| a.err("missing input B"))?;
        // Checked: K and N are attributes, only B's data bounds them.
        let b_bytes = n.checked_mul(kb).and_then(|x| x.checked_mul(blob));
        if b.dtype != DType::U8 || b_bytes != Some(b.numel()) {
            return Err(a.err(format!(
                "B is {}{:?}; N = {n}, K = {k}, block_size = {block} and {bits} bits need uint8 [{n}, {kb}, {blob}]",
                b.dtype, b.shape
            )));
        }
        let packed: Vec<u8> = b.to_i64().into_iter().map(|x| x as u8).collect();
        let s = self.const_input(a, &inputs, 2, "scales")?.ok_or_else(|| a.err("missing input scales"))?;
        if !s.dtype.is_float() || s.numel() != n * kb {
            return Err(a.err(format!("scales are {}{:?}, not {n}x{kb} floats", s.dtype, s.shape)));
        }
        let scales: Vec<f32> = s.to_f64().into_iter().map(|x| x as f32).collect();
        let out_dtype = s.dtype;
        let per_byte = 8 / bits as usize;
        let code =
            |bytes: &[u8], i: usize| (bytes[i / per_byte] >> ((i % per_byte) as u32 * bits)) & ((1 << bits) - 1) as u8;
        let codes: Vec<u8> = (0..n * k).map(|i| code(&packed, (i / k) * kb * block + i % k)).collect();
        // Zero points: packed codes per row, floats (decoded below), or the default 2^(bits-1).
        let mut float_zeros = None;
        let zeros = match self.const_input(a, &inputs, 3, "zero_points")? {
            None => Zeros::All(1 << (bits - 1)),
            Some(z) if z.dtype == DType::U8 => {
                let row = (kb * bits as usize).div_ceil(8);
                if z.numel() != n * row {
                    return Err(a.err(format!("zero_points are uint8{:?}, not {n}x{row} packed codes", z.shape)));
                }
                let zb: Vec<u8> = z.to_i64().into_iter().map(|x| x as u8).collect();
                Zeros::Blocks((0..n * kb).map(|i| code(&zb, (i / kb) * row * per_byte + i % kb)).collect())
            }
            Some(z) if z.dtype.is_float() && z.numel() == n * kb => {
                float_zeros = Some(z.to_f64());
                Zeros::All(0)
            }
            Some(z) => return Err(a.err(format!("zero_points are {}{:?}", z.dtype, z.shape))),
        };
        // g_idx (deprecated; GPTQ's act-order) names each k's block; the usual k / block_size needs nothing.
        let g_idx = match self.const_input(a, &inputs, 4, "g_idx")? {
            Some(t) if t.numel() != k => return Err(a.err(format!("g_idx has {} entries for K = {k}", t.numel()))),
            Some(t) => Some(t.to_i64()).filter(|g| g.iter().enumerate().any(|(i, &b)| b != (i / block) as i64)),
            None => None,
        };
        if let Some(g) = &g_idx {
            if g.iter().any(|&b| b < 0 || b as usize >= kb) {
                return Err(a.err("g_idx names a block outside the weight"));
            }
        }
        let scale_dtype = if out_dtype == DType::F16 { DType::F16 } else { DType::F32 };
        let blocks = Blocks { bits, row: k, block, codes, scales, scale_dtype, zeros };
        blocks.check().map_err(|r| a.err(format!("the quantized weight: {r}")))?;
        // Float zero points and a reordered g_idx are outside the stored format: the weight is decoded (exact, wide).
        let data = if float_zeros.is_some() || g_idx.is_some() {
            let nb = blocks.blocks_per_row();
            let zf = float_zeros.unwrap_or_else(|| vec![(1u32 << (bits - 1)) as f64; n * nb]);
            let wide: Vec<f32> = (0..n * k)
                .map(|i| {
                    let (r, kk) = (i / k, i % k);
                    let b = r * nb + g_idx.as_ref().map_or(kk / block, |g| g[kk] as usize);
                    ((blocks.codes[i] as f64 - zf[b]) * blocks.scales[b] as f64) as f32
                })
                .collect();
            Data::F32(wide)
        } else {
            Data::Blocks(Arc::new(blocks))
        };
        let w =
            Builder::new(&mut self.g, name).const_named("weight", Tensor { dtype: out_dtype, shape: vec![n, k], data });
        let wt = self.emit(name, "weight_t", Op::Transpose { perm: Some(vec![1, 0]) }, &[Some(w)])?;
        let outs = self.define_outputs(name, &node.output, &Op::MatMul)?;
        match inputs.get(5).copied().flatten() {
            None => self.emit_into(a, "", Op::MatMul, &[Some(x), Some(wt)], outs),
            Some(bias) => {
                let y = self.emit(name, "product", Op::MatMul, &[Some(x), Some(wt)])?;
                self.emit_into(a, "bias", Op::Binary(BinaryOp::Add), &[Some(y), Some(bias)], outs)
            }
        }
    }

    /// A Gather from a table quantized in blocks along `quantize_axis`: the table becomes a block-quantized
    /// constant (stored with that axis last) and the op a Gather of it. Integer data (int4, uint4, uint8 with
    /// `bits` 2, 4 or 8 packed along the last axis) stays quantized; float8/float4 data is decoded. Indices
    /// outside the table are clamped, as every wgslc Gather does (onnxruntime gives zeros for them).
    fn gather_block_quantized(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let name = a.name;
        // onnxruntime-genai ties an int4 embedding to the LM head's MatMulNBits weight through a Reshape.
        let reshaped = inputs.first().copied().flatten().and_then(|v| self.reshaped_const(v));
        let data = match &reshaped {
            Some(t) => t,
            None => self.const_input(a, &inputs, 0, "data")?.ok_or_else(|| a.err("missing input data"))?,
        };
        let indices = inputs.get(1).copied().flatten().ok_or_else(|| a.err("missing input indices"))?;
        let s = self.const_input(a, &inputs, 2, "scales")?.ok_or_else(|| a.err("missing input scales"))?;
        let zp = self.const_input(a, &inputs, 3, "zero_points")?;
        let r = data.shape.len() as i64;
        let axis = |key: &str, default: i64| -> Result<usize, ImportError> {
            let x = a.int(key, default);
            let x = if x < 0 { x + r } else { x };
            usize::try_from(x)
                .ok()
                .filter(|&x| (x as i64) < r)
                .ok_or_else(|| a.err(format!("{key} is outside rank {r}")))
        };
        let (gather_axis, quant_axis) = (axis("gather_axis", 0)?, axis("quantize_axis", 1)?);
        let block = a.int("block_size", 128);
        let bits = a.int("bits", 4);
        let float_data = data.dtype.float_format().is_some();
        if !s.dtype.is_float() {
            return Err(a.err(format!("scales are {}", s.dtype)));
        }
        let scales: Vec<f32> = s.to_f64().into_iter().map(|x| x as f32).collect();
        let block_of = |len: usize| -> Result<usize, ImportError> {
            match usize::try_from(block) {
                Ok(0) if float_data => Ok(len.max(1)),
                Ok(b) if b >= 16 && b.is_power_of_two() => Ok(b),
                _ => Err(a.err(format!("block_size {block} is not a power of two of at least 16"))),
            }
        };
        let scale_shape = |shape: &[usize], block: usize| {
            let mut ss = shape.to_vec();
            ss[quant_axis] = shape[quant_axis].div_ceil(block);
            ss
        };
        let table = if float_data {
            // float8/float4 data: value = float(data) · its block's scale, decoded here (wide).
            if zp.is_some() {
                return Err(a.err("float8/float4 data takes no zero points"));
            }
            let shape = data.shape.clone();
            let block = block_of(shape[quant_axis])?;
            let ss = scale_shape(&shape, block);
            if s.shape != ss {
                return Err(
                    a.err(format!("scales are {:?}; the table {shape:?} in blocks of {block} needs {ss:?}", s.shape))
                );
            }
            let vals = data.to_f64();
            let (cs, sc) = (wgslc_ir::contiguous_strides(&shape), wgslc_ir::contiguous_strides(&ss));
            let wide: Vec<f32> = (0..vals.len())
                .map(|i| {
                    let b: usize = (0..shape.len())
                        .map(|d| {
                            let c = (i / cs[d]) % shape[d];
                            (if d == quant_axis { c / block } else { c }) * sc[d]
                        })
                        .sum();
                    (vals[i] * scales[b] as f64) as f32
                })
                .collect();
            let t = Tensor { dtype: s.dtype, shape, data: Data::F32(wide) };
            Builder::new(&mut self.g, name).const_named("table", t)
        } else {
            // Unsigned codes over the table's logical shape: int4 offset by 8, uint8 unpacked from `bits`-wide fields
            // along the last axis. `offset` maps the type's zero points onto codes, `zero` is the default one.
            let unpack = |bytes: &[i64], bits: u32| -> Vec<u8> {
                let per = 8 / bits as usize;
                let mask = ((1u32 << bits) - 1) as u8;
                (0..bytes.len() * per).map(|i| ((bytes[i / per] as u8) >> ((i % per) as u32 * bits)) & mask).collect()
            };
            let (shape, codes, bits, offset, zero) = match data.dtype {
                DType::I4 => (data.shape.clone(), data.to_i64().iter().map(|&x| (x + 8) as u8).collect(), 4, 8, 8),
                DType::U4 => (data.shape.clone(), data.to_i64().iter().map(|&x| x as u8).collect(), 4, 0, 0),
                DType::U8 if [2, 4, 8].contains(&bits) => {
                    let bits = bits as u32;
                    let per = 8 / bits as usize;
                    if per > 1 && (gather_axis == quant_axis) {
                        return Err(a.err("packed uint8 data needs gather_axis and quantize_axis to differ"));
                    }
                    let mut shape = data.shape.clone();
                    *shape.last_mut().expect("rank >= 1") *= per;
                    (shape, unpack(&data.to_i64(), bits), bits, 0, 1u8 << (bits - 1))
                }
                d => return Err(a.err(format!("data of type {d} with bits {bits} is not supported"))),
            };
            let block = block_of(shape[quant_axis])?;
            let ss = scale_shape(&shape, block);
            if s.shape != ss {
                return Err(
                    a.err(format!("scales are {:?}; the table {shape:?} in blocks of {block} needs {ss:?}", s.shape))
                );
            }
            let zeros = match zp {
                None => Zeros::All(zero),
                Some(z) if z.dtype != data.dtype => {
                    return Err(a.err(format!("zero_points are {}, the data {}", z.dtype, data.dtype)))
                }
                Some(z) => {
                    let zc: Vec<u8> = if data.dtype == DType::U8 && bits < 8 {
                        unpack(&z.to_i64(), bits)
                    } else {
                        z.to_i64().iter().map(|&x| (x + offset) as u8).collect()
                    };
                    if zc.len() != scales.len() {
                        return Err(a.err(format!("zero_points {:?} do not match the scales {ss:?}", z.shape)));
                    }
                    Zeros::Blocks(zc)
                }
            };
            let scale_dtype = if s.dtype == DType::F16 { DType::F16 } else { DType::F32 };
            let q = Quantized { shape: &shape, bits, codes, scales, scale_dtype, zeros };
            let placed = q.blocked(quant_axis, block);
            placed.blocks.check().map_err(|r| a.err(format!("the quantized table: {r}")))?;
            let t =
                Tensor { dtype: s.dtype, shape: placed.stored.clone(), data: Data::Blocks(Arc::new(placed.blocks)) };
            let stored = Builder::new(&mut self.g, name).const_named("table", t);
            match placed.perm {
                None => stored,
                Some(perm) => self.emit(name, "table_view", Op::Transpose { perm: Some(perm) }, &[Some(stored)])?,
            }
        };
        let outs = self.define_outputs(name, &node.output, &Op::Gather { axis: 0 })?;
        self.emit_into(a, "", Op::Gather { axis: gather_axis as i64 }, &[Some(table), Some(indices)], outs)
    }
}
