//! The translation of each ONNX node into IR ops: attributes with the spec's defaults, the attribute-vs-input
//! variants of each opset normalised into the input form, and Dropout's mask; the ops imported as several nodes
//! (losses, variadic Max/Min/Sum/Mean, integer products) are in composite.rs.

use crate::proto::{AttributeProto, NodeProto};
use crate::{tensor, tensor::dtype_from_onnx, ImportError};
use std::collections::HashMap;
use std::path::Path;
use wgslc_ir::{AutoPad, BinaryOp, Builder, Graph, Op, PoolKind, ReduceOp, Tensor, UnaryOp, ValueId, Window};

pub(crate) struct Importer<'a> {
    pub(crate) g: Graph,
    pub(crate) names: HashMap<String, ValueId>,
    pub(crate) opset: i64,
    pub(crate) model_dir: Option<&'a Path>,
    /// Values lowerings compute once for every node that reads the same inputs (GroupQueryAttention's positions
    /// and rotary rows, alike in every layer), by what they are and the values they come from.
    pub(crate) shared: HashMap<(&'static str, Vec<ValueId>), ValueId>,
}

/// Attribute lookup for one node, with errors that name it.
pub(crate) struct Attrs<'n> {
    pub(crate) node: &'n NodeProto,
    pub(crate) name: &'n str,
}

impl<'n> Attrs<'n> {
    pub(crate) fn get(&self, key: &str) -> Option<&'n AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == key)
    }
    pub(crate) fn err(&self, reason: impl Into<String>) -> ImportError {
        ImportError::Node { node: self.name.to_string(), op: self.node.op_type.clone(), reason: reason.into() }
    }
    pub(crate) fn int(&self, key: &str, default: i64) -> i64 {
        self.get(key).map(|a| a.i).unwrap_or(default)
    }
    pub(crate) fn float(&self, key: &str, default: f32) -> f32 {
        self.get(key).map(|a| a.f).unwrap_or(default)
    }
    pub(crate) fn ints(&self, key: &str) -> Option<Vec<i64>> {
        self.get(key).map(|a| a.ints.clone())
    }
    pub(crate) fn string(&self, key: &str) -> Option<String> {
        self.get(key).map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }
    pub(crate) fn usizes(&self, key: &str) -> Result<Vec<usize>, ImportError> {
        self.ints(key)
            .unwrap_or_default()
            .into_iter()
            .map(|x| usize::try_from(x).map_err(|_| self.err(format!("attribute '{key}' has a negative value {x}"))))
            .collect()
    }
}

impl Importer<'_> {
    pub(crate) fn node(&mut self, index: usize, node: &NodeProto) -> Result<(), ImportError> {
        let name = if node.name.is_empty() { format!("{}_{index}", node.op_type) } else { node.name.clone() };
        let a = Attrs { node, name: &name };
        let own = node.domain == crate::WGSLC_DOMAIN && node.op_type == "Sample";
        let contrib = node.domain == "com.microsoft" && crate::contrib::CONTRIB_OPS.contains(&node.op_type.as_str());
        if !(node.domain.is_empty() || node.domain == "ai.onnx" || own || contrib) {
            return Err(ImportError::UnknownDomain {
                node: name.clone(),
                op: node.op_type.clone(),
                domain: node.domain.clone(),
            });
        }
        if node.domain.is_empty() {
            match node.op_type.as_str() {
                "If" => return self.inline_if(index, node, &name),
                "Loop" => return self.unroll_loop(index, node, &name),
                "Scan" => return self.unroll_scan(index, node, &name),
                _ => {}
            }
        }
        if node.attribute.iter().any(|at| !at.ref_attr_name.is_empty() || at.g.is_some() || !at.graphs.is_empty()) {
            return Err(a.err(
                "subgraph and reference attributes (Loop, Scan, functions; If with a condition computed at run \
                 time) are not supported",
            ));
        }
        if node.output.iter().all(|o| o.is_empty()) {
            return Err(a.err("the node has no outputs"));
        }
        // wgslc needs every op's first output (ONNX lets some ops omit it, LSTM's Y for one). Refused once the op
        // is known to be supported, so that an unsupported op is named as such; the imports that write their
        // outputs themselves check first.
        let omitted = || a.err("its first output is omitted (only later outputs are named), which wgslc needs");
        let first_omitted = node.output[0].is_empty();
        let writes_itself = [
            "Constant",
            "Max",
            "Min",
            "Sum",
            "Mean",
            "NegativeLogLikelihoodLoss",
            "SoftmaxCrossEntropyLoss",
            "MatMulInteger",
            "ConvInteger",
            "QLinearMatMul",
            "QLinearConv",
            "SimplifiedLayerNormalization",
            "SkipLayerNormalization",
            "SkipSimplifiedLayerNormalization",
        ];
        if first_omitted && writes_itself.contains(&node.op_type.as_str()) {
            return Err(omitted());
        }
        let mut inputs = Vec::with_capacity(node.input.len());
        for n in &node.input {
            if n.is_empty() {
                inputs.push(None);
            } else {
                let v = *self
                    .names
                    .get(n)
                    .ok_or_else(|| ImportError::UndefinedValue { node: name.clone(), value: n.clone() })?;
                inputs.push(Some(v));
            }
        }
        if contrib {
            return self.contrib(&a, node, inputs);
        }
        let opset = self.opset;
        if let Some((attr, since)) = moved_to_input(&node.op_type, opset).find(|(attr, _)| a.get(attr).is_some()) {
            // Read as the older opset would, this model means something else; ignored, the op would silently
            // change meaning (a ReduceMean over every axis instead of the last). onnxruntime rejects it too.
            return Err(a.err(format!(
                "attribute '{attr}' is not part of {} at opset {opset}: since opset {since} it is an input",
                node.op_type
            )));
        }
        let op = match node.op_type.as_str() {
            "Constant" => return self.constant(&a, node),
            "Sample" if own => Op::Sample,
            "Add" => Op::Binary(BinaryOp::Add),
            "Sub" => Op::Binary(BinaryOp::Sub),
            "Mul" => Op::Binary(BinaryOp::Mul),
            "Div" => Op::Binary(BinaryOp::Div),
            "Pow" => Op::Binary(BinaryOp::Pow),
            "Equal" => Op::Binary(BinaryOp::Equal),
            "Less" => Op::Binary(BinaryOp::Less),
            "LessOrEqual" => Op::Binary(BinaryOp::LessOrEqual),
            "Greater" => Op::Binary(BinaryOp::Greater),
            "GreaterOrEqual" => Op::Binary(BinaryOp::GreaterOrEqual),
            "And" => Op::Binary(BinaryOp::And),
            "Or" => Op::Binary(BinaryOp::Or),
            "Max" | "Min" | "Sum" | "Mean" => return self.variadic(&a, node, inputs),
            "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => return self.nll(&a, node, inputs),
            "SimplifiedLayerNormalization" => return self.simplified_layer_norm(&a, node, inputs),
            "MatMulInteger" | "ConvInteger" | "QLinearMatMul" | "QLinearConv" => {
                return self.quantized_product(&a, node, inputs)
            }
            "Xor" => Op::Binary(BinaryOp::Xor),
            "BitwiseAnd" => Op::Binary(BinaryOp::BitwiseAnd),
            "BitwiseOr" => Op::Binary(BinaryOp::BitwiseOr),
            "BitwiseXor" => Op::Binary(BinaryOp::BitwiseXor),
            "BitwiseNot" => Op::Unary(UnaryOp::BitwiseNot),
            "BitShift" => match a.string("direction").as_deref() {
                Some("LEFT") => Op::Binary(BinaryOp::BitShiftLeft),
                Some("RIGHT") => Op::Binary(BinaryOp::BitShiftRight),
                _ => return Err(a.err("direction must be LEFT or RIGHT")),
            },
            "Mod" => Op::Binary(BinaryOp::Mod { fmod: a.int("fmod", 0) != 0 }),
            "PRelu" => Op::Binary(BinaryOp::PRelu),
            "Tan" => Op::Unary(UnaryOp::Tan),
            "Asin" => Op::Unary(UnaryOp::Asin),
            "Acos" => Op::Unary(UnaryOp::Acos),
            "Atan" => Op::Unary(UnaryOp::Atan),
            "Sinh" => Op::Unary(UnaryOp::Sinh),
            "Cosh" => Op::Unary(UnaryOp::Cosh),
            "Asinh" => Op::Unary(UnaryOp::Asinh),
            "Acosh" => Op::Unary(UnaryOp::Acosh),
            "Atanh" => Op::Unary(UnaryOp::Atanh),
            "Softplus" => Op::Unary(UnaryOp::Softplus),
            "Softsign" => Op::Unary(UnaryOp::Softsign),
            "Mish" => Op::Unary(UnaryOp::Mish),
            "Sign" => Op::Unary(UnaryOp::Sign),
            "Round" => Op::Unary(UnaryOp::Round),
            "Elu" => Op::Unary(UnaryOp::Elu(a.float("alpha", 1.0))),
            "Selu" => Op::Unary(UnaryOp::Selu(a.float("alpha", 1.673_263_2), a.float("gamma", 1.050_701))),
            "Celu" => Op::Unary(UnaryOp::Celu(a.float("alpha", 1.0))),
            "ThresholdedRelu" => Op::Unary(UnaryOp::ThresholdedRelu(a.float("alpha", 1.0))),
            "IsInf" => Op::Unary(UnaryOp::IsInf(a.int("detect_positive", 1) != 0, a.int("detect_negative", 1) != 0)),
            "Shrink" => Op::Unary(UnaryOp::Shrink(a.float("bias", 0.0), a.float("lambd", 0.5))),
            "CastLike" => Op::CastLike { saturate: a.int("saturate", 1) != 0 },
            "Size" => Op::Size,
            "EyeLike" => Op::EyeLike {
                k: a.int("k", 0),
                dtype: a.get("dtype").map(|d| dtype_from_onnx(d.i as i32)).transpose().map_err(|r| a.err(r))?,
            },
            "Tile" => Op::Tile,
            "Attention" => {
                if a.get("left_window_size").is_some_and(|w| w.i >= 0)
                    || a.get("right_window_size").is_some_and(|w| w.i >= 0)
                {
                    return Err(a.err("sliding-window attention is not supported"));
                }
                if a.get("softmax_precision").is_some_and(|p| p.i != 1) {
                    return Err(a.err("softmax_precision other than float32 is not supported"));
                }
                let heads = |k: &str| a.get(k).map(|x| x.i as usize);
                Op::Attention(wgslc_ir::AttentionAttrs {
                    is_causal: a.int("is_causal", 0) != 0,
                    q_num_heads: heads("q_num_heads"),
                    kv_num_heads: heads("kv_num_heads"),
                    scale: a.get("scale").map(|x| x.f),
                    softcap: a.float("softcap", 0.0),
                    qk_matmul_output_mode: a.int("qk_matmul_output_mode", 0),
                    own_key_seen: false,
                })
            }
            "DepthToSpace" => Op::DepthToSpace {
                blocksize: a.int("blocksize", 0).max(0) as usize,
                crd: a.string("mode").as_deref() == Some("CRD"),
            },
            "SpaceToDepth" => Op::SpaceToDepth {
                blocksize: a.int("blocksize", 0).max(0) as usize,
                crd: a.string("mode").as_deref() == Some("CRD"),
            },
            "TopK" => {
                if opset < 10 {
                    let k = a.int("k", 1);
                    inputs.truncate(1);
                    inputs.push(Some(self.ints_const(&name, "k", vec![k])));
                }
                Op::TopK { axis: a.int("axis", -1), largest: a.int("largest", 1) != 0, k: None }
            }
            "ScatterElements" | "Scatter" | "ScatterND" => {
                let reduction = match a.string("reduction").as_deref().unwrap_or("none") {
                    "none" => wgslc_ir::ScatterReduction::None,
                    "add" => wgslc_ir::ScatterReduction::Add,
                    "mul" => wgslc_ir::ScatterReduction::Mul,
                    "max" => wgslc_ir::ScatterReduction::Max,
                    "min" => wgslc_ir::ScatterReduction::Min,
                    r => return Err(a.err(format!("unknown reduction '{r}'"))),
                };
                let axis = (node.op_type != "ScatterND").then(|| a.int("axis", 0));
                Op::Scatter { axis, reduction }
            }
            "CenterCropPad" => {
                if let Some(axes) = a.ints("axes") {
                    inputs.truncate(2);
                    inputs.push(Some(self.ints_const(&name, "axes", axes)));
                }
                Op::CenterCropPad
            }
            "OneHot" => Op::OneHot { axis: a.int("axis", -1) },
            "LpNormalization" => Op::LpNormalization { axis: a.int("axis", -1), p: a.int("p", 2) },
            "LRN" => {
                let size = a.get("size").map(|x| x.i).ok_or_else(|| a.err("the 'size' attribute is required"))?;
                if size < 1 {
                    return Err(a.err(format!("size must be at least 1, got {size}")));
                }
                Op::Lrn {
                    size: size as usize,
                    alpha: a.float("alpha", 1e-4),
                    beta: a.float("beta", 0.75),
                    bias: a.float("bias", 1.0),
                }
            }
            "Hardmax" => Op::Hardmax { axis: a.int("axis", if opset < 13 { 1 } else { -1 }), legacy: opset < 13 },
            "InstanceNormalization" => Op::InstanceNorm { epsilon: a.float("epsilon", 1e-5) },
            "RotaryEmbedding" => {
                let (rotary, heads) = (a.int("rotary_embedding_dim", 0), a.int("num_heads", 0));
                let (Ok(rotary_dim), Ok(num_heads)) = (usize::try_from(rotary), usize::try_from(heads)) else {
                    return Err(a.err(format!("rotary_embedding_dim {rotary} or num_heads {heads} is negative")));
                };
                Op::RotaryEmbedding { interleaved: a.int("interleaved", 0) != 0, rotary_dim, num_heads, doubled: false }
            }
            "GroupNormalization" => {
                if opset < 21 {
                    return Err(a.err("GroupNormalization-18 (per-group scale) is not supported; use opset 21"));
                }
                Op::GroupNorm { epsilon: a.float("epsilon", 1e-5), groups: a.int("num_groups", 1).max(1) as usize }
            }
            "Swish" => Op::Unary(UnaryOp::Swish(a.float("alpha", 1.0))),
            "Pad" => {
                let mode = match a.string("mode").as_deref().unwrap_or("constant") {
                    "constant" => wgslc_ir::PadMode::Constant,
                    "reflect" => wgslc_ir::PadMode::Reflect,
                    "edge" => wgslc_ir::PadMode::Edge,
                    "wrap" => wgslc_ir::PadMode::Wrap,
                    m => return Err(a.err(format!("unknown mode '{m}'"))),
                };
                if opset < 11 {
                    let pads = a.ints("pads").ok_or_else(|| a.err("missing 'pads'"))?;
                    let p = self.ints_const(&name, "pads", pads);
                    let v = self.scalar_const(&name, "value", a.float("value", 0.0));
                    inputs.truncate(1);
                    inputs.extend([Some(p), Some(v)]);
                }
                Op::Pad { mode, pads: None, value: 0.0 }
            }
            "Trilu" => Op::Trilu { upper: a.int("upper", 1) != 0, k: None },
            "GatherElements" => Op::GatherElements { axis: a.int("axis", 0) },
            "Resize" | "Upsample" => {
                let upsample = node.op_type == "Upsample";
                let mode = match a.string("mode").as_deref().unwrap_or("nearest") {
                    "nearest" => wgslc_ir::ResizeMode::Nearest,
                    "linear" | "bilinear" => wgslc_ir::ResizeMode::Linear,
                    "cubic" | "bicubic" => wgslc_ir::ResizeMode::Cubic,
                    m => return Err(a.err(format!("unknown mode '{m}'"))),
                };
                // Upsample and opset-10 Resize sample at x / scale, nearest rounding down.
                let legacy = upsample || opset < 11;
                let coordinates = if legacy {
                    "asymmetric".into()
                } else {
                    a.string("coordinate_transformation_mode").unwrap_or("half_pixel".into())
                };
                let nearest = if legacy {
                    "floor".into()
                } else {
                    a.string("nearest_mode").unwrap_or("round_prefer_floor".into())
                };
                // The one input form: X, roi, scales, sizes.
                match (upsample, opset) {
                    (true, o) if o < 9 => {
                        let scales =
                            a.get("scales").map(|s| s.floats.clone()).ok_or_else(|| a.err("missing scales"))?;
                        let n = scales.len();
                        let c = self
                            .g
                            .add_const(self.g.fresh_name(&format!("{name}.scales")), Tensor::f32(vec![n], scales));
                        inputs = vec![inputs.first().copied().flatten(), None, Some(c)];
                    }
                    (true, _) | (false, 10) => {
                        inputs = vec![inputs.first().copied().flatten(), None, inputs.get(1).copied().flatten()]
                    }
                    _ => {}
                }
                Op::Resize(wgslc_ir::ResizeAttrs {
                    mode,
                    coordinates,
                    nearest,
                    cubic_coeff_a: a.float("cubic_coeff_a", -0.75),
                    exclude_outside: a.int("exclude_outside", 0) != 0,
                    antialias: a.int("antialias", 0) != 0,
                    axes: a.ints("axes"),
                    keep_aspect_ratio: a.string("keep_aspect_ratio_policy").unwrap_or("stretch".into()),
                    extrapolation_value: a.float("extrapolation_value", 0.0),
                })
            }
            "GatherND" => {
                let b = a.int("batch_dims", 0);
                Op::GatherNd {
                    batch_dims: usize::try_from(b).map_err(|_| a.err(format!("batch_dims {b} is negative")))?,
                }
            }
            "CumSum" | "CumProd" => {
                let (exclusive, reverse) = (a.int("exclusive", 0) != 0, a.int("reverse", 0) != 0);
                Op::CumSum { axis: None, exclusive, reverse, prod: node.op_type == "CumProd" }
            }
            "ArgMax" | "ArgMin" => Op::ArgReduce {
                max: node.op_type == "ArgMax",
                axis: a.int("axis", 0),
                keepdims: a.int("keepdims", 1) != 0,
                select_last: a.int("select_last_index", 0) != 0,
            },
            "LogSoftmax" => {
                let legacy = opset < 13;
                Op::Softmax { axis: a.int("axis", if legacy { 1 } else { -1 }), legacy, log: true }
            }
            "RMSNormalization" => {
                Op::LayerNorm { axis: a.int("axis", -1), epsilon: a.float("epsilon", 1e-5), rms: true }
            }
            "Neg" => Op::Unary(UnaryOp::Neg),
            "Abs" => Op::Unary(UnaryOp::Abs),
            "Sqrt" => Op::Unary(UnaryOp::Sqrt),
            "Reciprocal" => Op::Unary(UnaryOp::Reciprocal),
            "Exp" => Op::Unary(UnaryOp::Exp),
            "Log" => Op::Unary(UnaryOp::Log),
            "Erf" => Op::Unary(UnaryOp::Erf),
            "Tanh" => Op::Unary(UnaryOp::Tanh),
            "Sigmoid" => Op::Unary(UnaryOp::Sigmoid),
            "Relu" => Op::Unary(UnaryOp::Relu),
            "Floor" => Op::Unary(UnaryOp::Floor),
            "Ceil" => Op::Unary(UnaryOp::Ceil),
            "Sin" => Op::Unary(UnaryOp::Sin),
            "Cos" => Op::Unary(UnaryOp::Cos),
            "Not" => Op::Unary(UnaryOp::Not),
            "IsNaN" => Op::Unary(UnaryOp::IsNaN),
            "Gelu" => match a.string("approximate").as_deref().unwrap_or("none") {
                "none" => Op::Unary(UnaryOp::Gelu),
                "tanh" => Op::Unary(UnaryOp::GeluTanh),
                other => return Err(a.err(format!("unknown approximate='{other}'"))),
            },
            "LeakyRelu" => Op::Unary(UnaryOp::LeakyRelu(a.float("alpha", 0.01))),
            "HardSigmoid" => Op::Unary(UnaryOp::HardSigmoid(a.float("alpha", 0.2), a.float("beta", 0.5))),
            "HardSwish" => Op::Unary(UnaryOp::HardSwish),
            "Clip" => {
                if opset < 11 {
                    let lo = self.scalar_const(&name, "min", a.float("min", f32::NEG_INFINITY));
                    let hi = self.scalar_const(&name, "max", a.float("max", f32::INFINITY));
                    inputs.truncate(1);
                    inputs.extend([Some(lo), Some(hi)]);
                }
                Op::Clip
            }
            "Where" => Op::Where,
            "Cast" => {
                let to = a.get("to").ok_or_else(|| a.err("missing attribute 'to'"))?.i as i32;
                Op::Cast { to: dtype_from_onnx(to).map_err(|r| a.err(r))?, saturate: a.int("saturate", 1) != 0 }
            }
            "MatMul" => Op::MatMul,
            "Gemm" => Op::Gemm {
                alpha: a.float("alpha", 1.0),
                beta: a.float("beta", 1.0),
                trans_a: a.int("transA", 0) != 0,
                trans_b: a.int("transB", 0) != 0,
            },
            "Softmax" => {
                let legacy = opset < 13;
                Op::Softmax { axis: a.int("axis", if legacy { 1 } else { -1 }), legacy, log: false }
            }
            "LayerNormalization" => {
                if a.int("stash_type", 1) != 1 {
                    return Err(a.err("only stash_type=1 (float32 statistics) is supported"));
                }
                Op::LayerNorm { axis: a.int("axis", -1), epsilon: a.float("epsilon", 1e-5), rms: false }
            }
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare" | "ReduceL1"
            | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => {
                let op = match node.op_type.as_str() {
                    "ReduceSum" => ReduceOp::Sum,
                    "ReduceMean" => ReduceOp::Mean,
                    "ReduceMax" => ReduceOp::Max,
                    "ReduceMin" => ReduceOp::Min,
                    "ReduceProd" => ReduceOp::Prod,
                    "ReduceSumSquare" => ReduceOp::SumSquare,
                    "ReduceL1" => ReduceOp::L1,
                    "ReduceL2" => ReduceOp::L2,
                    "ReduceLogSum" => ReduceOp::LogSum,
                    _ => ReduceOp::LogSumExp,
                };
                let axes_as_input = if op == ReduceOp::Sum { opset >= 13 } else { opset >= 18 };
                if !axes_as_input {
                    inputs.truncate(1);
                    if let Some(axes) = a.ints("axes") {
                        inputs.push(Some(self.ints_const(&name, "axes", axes)));
                    }
                }
                Op::Reduce {
                    op,
                    axes: None,
                    keepdims: a.int("keepdims", 1) != 0,
                    noop_with_empty_axes: a.int("noop_with_empty_axes", 0) != 0,
                }
            }
            "Conv" => {
                if inputs.len() < 2 {
                    return Err(a.err("Conv needs X and W"));
                }
                Op::Conv { window: self.window(&a, false)?, group: a.int("group", 1).max(1) as usize }
            }
            "ConvTranspose" => {
                if inputs.len() < 2 {
                    return Err(a.err("ConvTranspose needs X and W"));
                }
                Op::ConvTranspose {
                    window: self.window(&a, false)?,
                    group: a.int("group", 1).max(1) as usize,
                    output_padding: a.usizes("output_padding")?,
                    output_shape: a.usizes("output_shape")?,
                }
            }
            "LSTM" | "GRU" | "RNN" => crate::rnn::attrs(&a)?,
            "QuantizeLinear" => {
                let output_dtype = match a.int("output_dtype", 0) {
                    0 => None,
                    t => Some(dtype_from_onnx(t as i32).map_err(|e| a.err(format!("output_dtype: {e}")))?),
                };
                Op::QuantizeLinear {
                    axis: a.int("axis", 1),
                    block_size: a.int("block_size", 0).max(0) as usize,
                    output_dtype,
                    saturate: a.int("saturate", 1) != 0,
                }
            }
            "DequantizeLinear" => {
                Op::DequantizeLinear { axis: a.int("axis", 1), block_size: a.int("block_size", 0).max(0) as usize }
            }
            "DynamicQuantizeLinear" => Op::DynamicQuantizeLinear,
            "Einsum" => Op::Einsum { equation: a.string("equation").ok_or_else(|| a.err("missing equation"))? },
            "LpPool" => Op::Pool {
                kind: PoolKind::Lp(a.int("p", 2).clamp(1, 16) as u32),
                window: self.window(&a, true)?,
                count_include_pad: false,
            },
            "MaxPool" | "AveragePool" => {
                if node.output.iter().skip(1).any(|o| !o.is_empty()) {
                    return Err(a.err("the Indices output of MaxPool is not supported"));
                }
                if a.int("storage_order", 0) != 0 {
                    return Err(a.err("storage_order=1 is not supported"));
                }
                let kind = if node.op_type == "MaxPool" { PoolKind::Max } else { PoolKind::Avg };
                Op::Pool { kind, window: self.window(&a, true)?, count_include_pad: a.int("count_include_pad", 0) != 0 }
            }
            "GlobalAveragePool" => Op::GlobalPool(PoolKind::Avg),
            "GlobalMaxPool" => Op::GlobalPool(PoolKind::Max),
            "BatchNormalization" => {
                if a.int("training_mode", 0) != 0 || node.output.iter().skip(1).any(|o| !o.is_empty()) {
                    return Err(a.err("training mode (extra outputs) is not supported; export in eval mode"));
                }
                Op::BatchNorm { epsilon: a.float("epsilon", 1e-5) }
            }
            "Reshape" => {
                if opset < 5 {
                    return Err(a.err("Reshape-1 (shape as attribute) is not supported"));
                }
                Op::Reshape { allowzero: a.int("allowzero", 0) != 0 }
            }
            "Flatten" => Op::Flatten { axis: a.int("axis", 1) },
            "Transpose" => Op::Transpose { perm: a.usizes("perm").ok().filter(|p| !p.is_empty()) },
            "Concat" => Op::Concat { axis: a.get("axis").ok_or_else(|| a.err("missing attribute 'axis'"))?.i },
            "Split" => {
                if opset < 13 {
                    inputs.truncate(1);
                    if let Some(split) = a.ints("split") {
                        inputs.push(Some(self.ints_const(&name, "split", split)));
                    }
                }
                if let Some(n) = a.get("num_outputs") {
                    if n.i as usize != node.output.len() {
                        return Err(a.err("num_outputs differs from the number of outputs"));
                    }
                }
                Op::Split { axis: a.int("axis", 0) }
            }
            "Slice" => {
                if opset < 10 {
                    let starts = a.ints("starts").ok_or_else(|| a.err("missing 'starts'"))?;
                    let ends = a.ints("ends").ok_or_else(|| a.err("missing 'ends'"))?;
                    let s = self.ints_const(&name, "starts", starts);
                    let e = self.ints_const(&name, "ends", ends);
                    inputs.truncate(1);
                    inputs.extend([Some(s), Some(e)]);
                    if let Some(axes) = a.ints("axes") {
                        inputs.push(Some(self.ints_const(&name, "axes", axes)));
                    }
                }
                Op::Slice
            }
            "Gather" => Op::Gather { axis: a.int("axis", 0) },
            "Unsqueeze" | "Squeeze" => {
                if opset < 13 {
                    inputs.truncate(1);
                    if let Some(axes) = a.ints("axes") {
                        inputs.push(Some(self.ints_const(&name, "axes", axes)));
                    }
                }
                if node.op_type == "Unsqueeze" {
                    Op::Unsqueeze
                } else {
                    Op::Squeeze
                }
            }
            "Expand" => Op::Expand,
            "Identity" => Op::Identity,
            "Dropout" => {
                if let Some(mask) = node.output.get(1).filter(|o| !o.is_empty()) {
                    // Outside training the mask is all true: Shape → ConstantOfShape(true).
                    let x = inputs.first().copied().flatten().ok_or_else(|| a.err("missing input"))?;
                    let shape = self.emit(&name, "shape", Op::Shape { start: 0, end: None }, &[Some(x)])?;
                    if self.names.contains_key(mask) {
                        return Err(ImportError::Duplicate(mask.clone()));
                    }
                    let m = self.g.add_value(mask.clone(), None);
                    self.names.insert(mask.clone(), m);
                    let ones = Op::ConstantOfShape(Tensor::bool(vec![1], vec![true]));
                    self.emit_into(&a, "mask", ones, &[Some(shape)], vec![m])?;
                }
                Op::Dropout
            }
            "Shape" => Op::Shape { start: a.int("start", 0), end: a.get("end").map(|x| x.i) },
            "ConstantOfShape" => {
                let value = match a.get("value").and_then(|v| v.t.as_ref()) {
                    Some(t) => tensor::decode(t, self.model_dir)?,
                    None => Tensor::f32(vec![1], vec![0.0]),
                };
                if value.numel() != 1 {
                    return Err(a.err("'value' must hold one element"));
                }
                Op::ConstantOfShape(value)
            }
            "Range" => Op::Range,
            _ => return Err(ImportError::UnsupportedOp { node: name, op: node.op_type.clone() }),
        };
        if first_omitted && !matches!(op, Op::Rnn(_)) {
            return Err(omitted());
        }
        // Drop trailing absent inputs so ops see only what is there.
        while inputs.last() == Some(&None) {
            inputs.pop();
        }
        let outputs = self.define_outputs(&name, &node.output, &op)?;
        self.emit_into(&a, "", op, &inputs, outputs)
    }

    pub(crate) fn define_outputs(&mut self, node: &str, outs: &[String], op: &Op) -> Result<Vec<ValueId>, ImportError> {
        // Single-output ops whose optional extra outputs were refused above keep only the first.
        let keep = match op {
            Op::Split { .. }
            | Op::LayerNorm { rms: false, .. }
            | Op::Attention(_)
            | Op::TopK { .. }
            | Op::Rnn(_)
            | Op::DynamicQuantizeLinear => outs.len(),
            _ => 1.min(outs.len()),
        };
        if keep == 0 {
            return Err(ImportError::Node {
                node: node.into(),
                op: op.name().into(),
                reason: "the node has no outputs".into(),
            });
        }
        let mut ids = Vec::new();
        for (i, o) in outs[..keep].iter().enumerate() {
            if o.is_empty() && (i > 0 || matches!(op, Op::Rnn(_))) && !matches!(op, Op::Split { .. }) {
                // An optional output nobody reads keeps its position with a private value.
                ids.push(self.g.add_value(self.g.fresh_name(&format!("{node}.unused{i}")), None));
                continue;
            }
            if o.is_empty() || self.names.contains_key(o) {
                return Err(ImportError::Duplicate(if o.is_empty() {
                    format!("(empty output of '{node}')")
                } else {
                    o.clone()
                }));
            }
            let v = self.g.add_value(o.clone(), None);
            self.names.insert(o.clone(), v);
            ids.push(v);
        }
        if matches!(op, Op::TopK { .. }) && ids.len() == 1 {
            // TopK always computes its indices; give them a private value when the model names none.
            ids.push(self.g.add_value(self.g.fresh_name(&format!("{node}.indices")), None));
        }
        Ok(ids)
    }

    fn constant(&mut self, a: &Attrs, node: &NodeProto) -> Result<(), ImportError> {
        let t = if let Some(t) = a.get("value").and_then(|x| x.t.as_ref()) {
            tensor::decode(t, self.model_dir)?
        } else if let Some(x) = a.get("value_float") {
            Tensor::f32(vec![], vec![x.f])
        } else if let Some(x) = a.get("value_floats") {
            Tensor::f32(vec![x.floats.len()], x.floats.clone())
        } else if let Some(x) = a.get("value_int") {
            Tensor::i64(vec![], vec![x.i])
        } else if let Some(x) = a.get("value_ints") {
            Tensor::i64(vec![x.ints.len()], x.ints.clone())
        } else {
            return Err(a.err("only tensor, float(s) and int(s) constants are supported"));
        };
        let out = node.output.first().ok_or_else(|| a.err("Constant has no output"))?;
        if self.names.contains_key(out) {
            return Err(ImportError::Duplicate(out.clone()));
        }
        let v = self.g.add_const(out.clone(), t);
        self.names.insert(out.clone(), v);
        Ok(())
    }

    /// Adds one node with a fresh output value and returns that value.
    pub(crate) fn emit(
        &mut self,
        name: &str,
        part: &str,
        op: Op,
        inputs: &[Option<ValueId>],
    ) -> Result<ValueId, ImportError> {
        let op_name = op.name();
        Builder::new(&mut self.g, name).op_named(part, op, inputs).map_err(|e| ImportError::Node {
            node: name.into(),
            op: op_name.into(),
            reason: e.to_string(),
        })
    }

    /// Adds node `name/part` (or `name` for an empty part) writing values that already exist.
    pub(crate) fn emit_into(
        &mut self,
        a: &Attrs,
        part: &str,
        op: Op,
        inputs: &[Option<ValueId>],
        outputs: Vec<ValueId>,
    ) -> Result<(), ImportError> {
        Builder::new(&mut self.g, a.name).op_into(part, op, inputs, outputs).map_err(|e| a.err(e.to_string()))?;
        Ok(())
    }

    pub(crate) fn ints_const(&mut self, node: &str, what: &str, v: Vec<i64>) -> ValueId {
        Builder::new(&mut self.g, node).const_named(what, Tensor::i64(vec![v.len()], v))
    }

    pub(crate) fn scalar_const(&mut self, node: &str, what: &str, v: f32) -> ValueId {
        Builder::new(&mut self.g, node).const_named(what, Tensor::f32(vec![], vec![v]))
    }

    pub(crate) fn window(&self, a: &Attrs, pool: bool) -> Result<Window, ImportError> {
        let auto_pad = match a.string("auto_pad").as_deref().unwrap_or("NOTSET") {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => return Err(a.err(format!("unknown auto_pad '{other}'"))),
        };
        let kernel = a.usizes("kernel_shape")?;
        if pool && kernel.is_empty() {
            return Err(a.err("missing attribute 'kernel_shape'"));
        }
        Ok(Window {
            kernel,
            strides: a.usizes("strides")?,
            pads: a.usizes("pads")?,
            dilations: a.usizes("dilations")?,
            auto_pad,
            ceil_mode: a.int("ceil_mode", 0) != 0,
        })
    }
}

/// The attributes of `op` that an ONNX opset turned into inputs, with that opset, where the model's opset is at
/// least it (so that a model carrying them is invalid, not an older form to translate).
fn moved_to_input(op: &str, opset: i64) -> impl Iterator<Item = (&'static str, i64)> {
    let moved: &[(&str, i64)] = match op {
        "ReduceSum" => &[("axes", 13)],
        "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare" | "ReduceL1" | "ReduceL2"
        | "ReduceLogSum" | "ReduceLogSumExp" => &[("axes", 18)],
        "Squeeze" | "Unsqueeze" => &[("axes", 13)],
        "Split" => &[("split", 13)],
        "Slice" => &[("starts", 10), ("ends", 10), ("axes", 10)],
        "Pad" => &[("pads", 11), ("value", 11)],
        "Clip" => &[("min", 11), ("max", 11)],
        "TopK" => &[("k", 10)],
        _ => &[],
    };
    moved.iter().copied().filter(move |&(_, since)| opset >= since)
}
