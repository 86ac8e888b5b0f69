//! The ONNX ops imported as several IR nodes: the losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss),
//! variadic Max/Min/Sum/Mean, and the integer and QLinear products as float products of dequantized operands.

use crate::importer::{Attrs, Importer};
use crate::proto::NodeProto;
use crate::ImportError;
use wgslc_ir::{BinaryOp, Op, ReduceOp, UnaryOp, ValueId};

impl Importer<'_> {
    /// NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss as LogSoftmax over axis 1 followed by it, written
    /// with ops the compiler has: loss[n, d…] = −input[n, target, d…] · w[target], where w is the class weight
    /// (or 1) and 0 for ignore_index; mean divides the sum by Σ w.
    pub(crate) fn nll(&mut self, a: &Attrs, node: &NodeProto, inputs: Vec<Option<ValueId>>) -> Result<(), ImportError> {
        let name = a.name;
        let sce = node.op_type == "SoftmaxCrossEntropyLoss";
        let (scores, target) = match (inputs.first().copied().flatten(), inputs.get(1).copied().flatten()) {
            (Some(x), Some(t)) => (x, t),
            _ => return Err(a.err("needs input and target")),
        };
        let weight = inputs.get(2).copied().flatten();
        let reduction = a.string("reduction").unwrap_or_else(|| "mean".into());
        if !matches!(reduction.as_str(), "none" | "sum" | "mean") {
            return Err(a.err(format!("unknown reduction '{reduction}'")));
        }
        let outs: Vec<ValueId> = {
            let mut v = Vec::new();
            for (i, o) in node.output.iter().enumerate() {
                if o.is_empty() {
                    continue;
                }
                if i > usize::from(sce) {
                    return Err(a.err("too many outputs"));
                }
                if self.names.contains_key(o) {
                    return Err(ImportError::Duplicate(o.clone()));
                }
                let id = self.g.add_value(o.clone(), None);
                self.names.insert(o.clone(), id);
                v.push(id);
            }
            v
        };
        let input = if sce {
            let lp = Op::Softmax { axis: 1, legacy: false, log: true };
            match node.output.get(1).filter(|o| !o.is_empty()) {
                Some(_) => {
                    let out = outs[1];
                    self.emit_into(a, "log_softmax", lp, &[Some(scores)], vec![out])?;
                    out
                }
                None => self.emit(name, "log_softmax", lp, &[Some(scores)])?,
            }
        } else {
            scores
        };
        let one = Some(self.ints_const(name, "axis1", vec![1]));
        let t1 = self.emit(name, "target1", Op::Unsqueeze, &[Some(target), one])?;
        let picked1 = self.emit(name, "picked1", Op::GatherElements { axis: 1 }, &[Some(input), Some(t1)])?;
        let picked = self.emit(name, "picked", Op::Squeeze, &[Some(picked1), one])?;
        // w = weight[target] (or 1), zeroed where target == ignore_index.
        let mut w = match weight {
            Some(wv) => Some(self.emit(name, "w", Op::Gather { axis: 0 }, &[Some(wv), Some(target)])?),
            None => None,
        };
        if let Some(ii) = a.get("ignore_index").map(|x| x.i) {
            let ig = Some(self.ints_const(name, "ignore_index", vec![ii]));
            let eq = self.emit(name, "ignored", Op::Binary(BinaryOp::Equal), &[Some(target), ig])?;
            let keep = self.emit(name, "kept", Op::Unary(UnaryOp::Not), &[Some(eq)])?;
            let keepf = self.emit(name, "keptf", Op::CastLike { saturate: true }, &[Some(keep), Some(picked)])?;
            w = Some(match w {
                Some(w) => self.emit(name, "wk", Op::Binary(BinaryOp::Mul), &[Some(w), Some(keepf)])?,
                None => keepf,
            });
        }
        let neg = self.emit(name, "neg", Op::Unary(UnaryOp::Neg), &[Some(picked)])?;
        let loss = match w {
            Some(w) => self.emit(name, "weighted", Op::Binary(BinaryOp::Mul), &[Some(neg), Some(w)])?,
            None => neg,
        };
        let all = |op| Op::Reduce { op, axes: None, keepdims: false, noop_with_empty_axes: false };
        let result = match reduction.as_str() {
            "none" => loss,
            "sum" => self.emit(name, "sum", all(ReduceOp::Sum), &[Some(loss)])?,
            _ => match w {
                Some(w) => {
                    let num = self.emit(name, "sum", all(ReduceOp::Sum), &[Some(loss)])?;
                    let den = self.emit(name, "wsum", all(ReduceOp::Sum), &[Some(w)])?;
                    self.emit(name, "mean", Op::Binary(BinaryOp::Div), &[Some(num), Some(den)])?
                }
                None => self.emit(name, "mean", all(ReduceOp::Mean), &[Some(loss)])?,
            },
        };
        self.emit_into(a, "out", Op::Identity, &[Some(result)], vec![outs[0]])
    }

    /// Max, Min, Sum and Mean over any number of inputs: a chain of binary nodes (Mean divides at the end).
    pub(crate) fn variadic(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let ins: Vec<ValueId> = inputs.into_iter().flatten().collect();
        let (bop, name) = match node.op_type.as_str() {
            "Max" => (BinaryOp::Max, a.name),
            "Min" => (BinaryOp::Min, a.name),
            _ => (BinaryOp::Add, a.name),
        };
        if ins.is_empty() {
            return Err(a.err("needs at least one input"));
        }
        let outs = self.define_outputs(name, &node.output, &Op::Identity)?;
        let mean = node.op_type == "Mean" && ins.len() > 1;
        let mut acc = ins[0];
        if ins.len() == 1 {
            return self.emit_into(a, "", Op::Identity, &[Some(acc)], outs);
        }
        for (i, &v) in ins.iter().enumerate().skip(1) {
            let last = i == ins.len() - 1 && !mean;
            let out = if last { outs[0] } else { self.g.add_value(self.g.fresh_name(&format!("{name}.acc")), None) };
            self.emit_into(a, &i.to_string(), Op::Binary(bop), &[Some(acc), Some(v)], vec![out])?;
            acc = out;
        }
        if mean {
            let n = self.scalar_const(name, "count", ins.len() as f32);
            self.emit_into(a, "mean", Op::Binary(BinaryOp::Div), &[Some(acc), Some(n)], outs)?;
        }
        Ok(())
    }

    /// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv as the float product of their dequantized
    /// operands: DequantizeLinear (scale 1 for the integer ops; zero points per row of A, per column of B, per
    /// output channel of W), MatMul or Conv in f32, then a Cast to int32 (exact while every sum stays below 2^24
    /// in magnitude) or a QuantizeLinear into y's type. QLinearConv's int32 bias is scaled by x_scale · w_scale.
    pub(crate) fn quantized_product(
        &mut self,
        a: &Attrs,
        node: &NodeProto,
        inputs: Vec<Option<ValueId>>,
    ) -> Result<(), ImportError> {
        let name = a.name;
        let input = |i: usize| inputs.get(i).copied().flatten();
        let need = |i: usize, what: &str| input(i).ok_or_else(|| a.err(format!("missing {what}")));
        let outs = self.define_outputs(name, &node.output, &Op::Identity)?;
        let one = self.scalar_const(name, "one", 1.0);
        let dq = |this: &mut Self, part: &str, x: ValueId, s: ValueId, z: Option<ValueId>, axis: i64| {
            this.emit(name, part, Op::DequantizeLinear { axis, block_size: 0 }, &[Some(x), Some(s), z])
        };
        let conv = || -> Result<Op, ImportError> {
            Ok(Op::Conv { window: self.window(a, false)?, group: a.int("group", 1).max(1) as usize })
        };
        match node.op_type.as_str() {
            "MatMulInteger" | "ConvInteger" => {
                let is_conv = node.op_type == "ConvInteger";
                let op = if is_conv { conv()? } else { Op::MatMul };
                let (x, w) = (need(0, "A")?, need(1, "B")?);
                let xf = dq(self, "a", x, one, input(2), -2)?;
                let wf = dq(self, "b", w, one, input(3), if is_conv { 0 } else { -1 })?;
                let y = self.emit(name, "product", op, &[Some(xf), Some(wf)])?;
                self.emit_into(a, "", Op::cast(wgslc_ir::DType::I32), &[Some(y)], outs)
            }
            _ => {
                let is_conv = node.op_type == "QLinearConv";
                let op = if is_conv { conv()? } else { Op::MatMul };
                let (x, xs, xz) = (need(0, "x")?, need(1, "x_scale")?, input(2));
                let (w, ws, wz) = (need(3, "w")?, need(4, "w_scale")?, input(5));
                let (ys, yz) = (need(6, "y_scale")?, input(7));
                let xf = dq(self, "x", x, xs, xz, -2)?;
                let wf = dq(self, "w", w, ws, wz, if is_conv { 0 } else { -1 })?;
                let mut args = vec![Some(xf), Some(wf)];
                if let (true, Some(bias)) = (is_conv, input(8)) {
                    let bs = self.emit(name, "bias_scale", Op::Binary(BinaryOp::Mul), &[Some(xs), Some(ws)])?;
                    let bf = self.emit(name, "bias_f", Op::cast(wgslc_ir::DType::F32), &[Some(bias)])?;
                    args.push(Some(self.emit(name, "bias", Op::Binary(BinaryOp::Mul), &[Some(bf), Some(bs)])?));
                }
                let y = self.emit(name, "product", op, &args)?;
                let q = Op::QuantizeLinear { axis: -2, block_size: 0, output_dtype: None, saturate: true };
                self.emit_into(a, "", q, &[Some(y), Some(ys), yz], outs)
            }
        }
    }
}
