//! onnxruntime's own ops, as its quantizers, transformers optimizer and model builder write them: `MatMulNBits` (a
//! product with a block-quantized weight) and `GatherBlockQuantized` (a lookup in a block-quantized table), each
//! weight one block-quantized constant (`wgslc_ir::Blocks`) that the kernels reading it decode, the op itself the
//! plain MatMul or Gather it computes; and the norms `SimplifiedLayerNormalization` (registered in the default
//! domain), `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization` (`com.microsoft`), which become the
//! IR's LayerNorm (an RMSNorm for the simplified ones) of the input, plus the residual for the Skip forms. The
//! attention ops are in [`attention`].

mod attention;

use crate::importer::{Attrs, Importer};
use crate::proto::NodeProto;
use crate::ImportError;
use std::sync::Arc;
use wgslc_ir::{BinaryOp, Blocks, Builder, DType, Data, Op, Quantized, Tensor, UnaryOp, ValueId, Zeros};

/// The `com.microsoft` ops wgslc imports.
pub(crate) const CONTRIB_OPS: &[&str] = &[
    "MatMulNBits",
    "GatherBlockQuantized",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "GroupQueryAttention",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "BiasGelu",
    "FastGelu",
    "Gelu",
    "QuickGelu",
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
            "MultiHeadAttention" => self.multi_head_attention(a, node, inputs),
            "RotaryEmbedding" => self.contrib_rotary_embedding(a, node, inputs),
            "BiasGelu" | "FastGelu" | "Gelu" | "QuickGelu" => self.contrib_gelu(a, node, inputs),
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

    /// The transformers optimizer's activations: `Gelu` (erf), `BiasGelu` (erf, of `A + B`), `FastGelu` (tanh
    /// approximation, of `X + bias` where a bias is given) and `QuickGelu` (`x · sigmoid(alpha · x)`).
    fn contrib_gelu(&mut self, a: &Attrs, node: &NodeProto, inputs: Vec<Option<ValueId>>) -> Result<(), ImportError> {
        let name = a.name;
        let x = inputs.first().copied().flatten().ok_or_else(|| a.err("missing its input"))?;
        let bias = inputs.get(1).copied().flatten();
        let x = match (node.op_type.as_str(), bias) {
            ("BiasGelu", None) => return Err(a.err("needs its bias")),
            ("BiasGelu" | "FastGelu", Some(b)) => {
                self.emit(name, "bias", Op::Binary(BinaryOp::Add), &[Some(x), Some(b)])?
            }
            (_, None) => x,
            (op, Some(_)) => return Err(a.err(format!("{op} takes one input"))),
        };
        let out = self.define_outputs(name, &node.output[..1], &Op::Unary(UnaryOp::Gelu))?;
        match node.op_type.as_str() {
            "QuickGelu" => {
                let alpha = self.scalar_const(name, "alpha", a.float("alpha", 1.702));
                let alpha = self.emit(name, "alpha", Op::CastLike { saturate: false }, &[Some(alpha), Some(x)])?;
                let ax = self.emit(name, "scaled", Op::Binary(BinaryOp::Mul), &[Some(x), Some(alpha)])?;
                let gate = self.emit(name, "gate", Op::Unary(UnaryOp::Sigmoid), &[Some(ax)])?;
                self.emit_into(a, "", Op::Binary(BinaryOp::Mul), &[Some(x), Some(gate)], out)
            }
            "FastGelu" => self.emit_into(a, "", Op::Unary(UnaryOp::GeluTanh), &[Some(x)], out),
            _ => self.emit_into(a, "", Op::Unary(UnaryOp::Gelu), &[Some(x)], out),
        }
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
        let Data::I64(packed) = &b.data else {
            return Err(a.err("B's bytes are not integers"));
        };
        let s = self.const_input(a, &inputs, 2, "scales")?.ok_or_else(|| a.err("missing input scales"))?;
        if !s.dtype.is_float() || s.numel() != n * kb {
            return Err(a.err(format!("scales are {}{:?}, not {n}x{kb} floats", s.dtype, s.shape)));
        }
        let scales: Vec<f32> = s.to_f64().into_iter().map(|x| x as f32).collect();
        let out_dtype = s.dtype;
        let per_byte = 8 / bits as usize;
        let mask = ((1u16 << bits) - 1) as u8;
        let code = |bytes: &[i64], i: usize| ((bytes[i / per_byte] as u8) >> ((i % per_byte) as u32 * bits)) & mask;
        // Each row's codes lie in order in its kb · blob bytes, low bits first (the last block padded past K).
        let mut codes: Vec<u8> = Vec::with_capacity(n * k);
        for row in packed.chunks_exact(kb * blob) {
            let unpacked =
                row.iter().flat_map(|&byte| (0..per_byte).map(move |j| ((byte as u8) >> (j as u32 * bits)) & mask));
            codes.extend(unpacked.take(k));
        }
        // Zero points: packed codes per row, floats (decoded below), or the default 2^(bits-1).
        let mut float_zeros = None;
        let zeros = match self.const_input(a, &inputs, 3, "zero_points")? {
            None => Zeros::All(1 << (bits - 1)),
            Some(z) if z.dtype == DType::U8 => {
                let row = (kb * bits as usize).div_ceil(8);
                if z.numel() != n * row {
                    return Err(a.err(format!("zero_points are uint8{:?}, not {n}x{row} packed codes", z.shape)));
                }
                let zb = z.to_i64();
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
