//! Elementwise ATen ops: arithmetic and comparisons with torch's promotion, and the unary functions.

use super::*;

impl Importer<'_> {
    /// An elementwise op: whether `base` is one (then translated).
    pub(super) fn elementwise(&mut self, n: &N, base: &str, overload: &str) -> R<bool> {
        use BinaryOp as B;
        use UnaryOp as U;
        let done: R<()> = match base {
            // ---- elementwise ----
            "add" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                self.binary(n, B::Add, Some(alpha))
            }
            "sub" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                self.binary(n, B::Sub, Some(alpha))
            }
            "rsub" => {
                // other − alpha · self
                let (dt, _) = self.out_meta(n, 0)?;
                let alpha = self.number(n, "alpha", Some(1.0))?;
                let x = self.operand(n, "self", dt)?;
                let y = self.operand(n, "other", dt)?;
                let x = if alpha != 1.0 {
                    let a = self.scalar(n, dt, alpha);
                    self.emit(n, "alpha", Op::Binary(B::Mul), &[Some(x), Some(a)])?
                } else {
                    x
                };
                self.finish(n, Op::Binary(B::Sub), &[Some(y), Some(x)])
            }
            "mul" | "multiply" => self.binary(n, B::Mul, None),
            "div" | "divide" | "true_divide" => {
                let mode = self.string(n, "rounding_mode")?;
                match mode.as_deref() {
                    None => self.binary(n, B::Div, None),
                    Some(m @ ("floor" | "trunc")) => {
                        // In float, then rounded (exact for the integers f32 holds).
                        let (out_dt, _) = self.out_meta(n, 0)?;
                        let x = self.operand(n, "self", DType::F32)?;
                        let y = self.operand(n, "other", DType::F32)?;
                        let q = self.emit(n, "div", Op::Binary(B::Div), &[Some(x), Some(y)])?;
                        let r = if m == "floor" {
                            self.emit(n, "floor", Op::Unary(U::Floor), &[Some(q)])?
                        } else {
                            // trunc(q) = sign(q) · floor(|q|)
                            let a = self.emit(n, "abs", Op::Unary(U::Abs), &[Some(q)])?;
                            let f = self.emit(n, "floor", Op::Unary(U::Floor), &[Some(a)])?;
                            let s = self.emit(n, "sign", Op::Unary(U::Sign), &[Some(q)])?;
                            self.emit(n, "trunc", Op::Binary(B::Mul), &[Some(s), Some(f)])?
                        };
                        if out_dt == DType::F32 {
                            self.alias(n, 0, r)
                        } else {
                            self.finish(n, Op::cast(out_dt), &[Some(r)])
                        }
                    }
                    Some(m) => Err(n.err(format!("rounding_mode '{m}'"))),
                }
            }
            "floor_divide" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let x = self.operand(n, "self", DType::F32)?;
                let y = self.operand(n, "other", DType::F32)?;
                let q = self.emit(n, "div", Op::Binary(B::Div), &[Some(x), Some(y)])?;
                let f = self.emit(n, "floor", Op::Unary(U::Floor), &[Some(q)])?;
                let f = self.cast(n, f, DType::F32, out_dt)?;
                self.alias(n, 0, f)
            }
            "pow" => {
                if self.tensor_name(n, "self").is_none() {
                    // pow.Scalar(self=number, exponent=tensor)
                    let (dt, _) = self.out_meta(n, 0)?;
                    let b = self.operand(n, "self", dt)?;
                    let e = self.operand(n, "exponent", dt)?;
                    return self.finish(n, Op::Binary(B::Pow), &[Some(b), Some(e)]).map(|()| true);
                }
                let (dt, _) = self.out_meta(n, 0)?;
                let x = self.operand(n, "self", dt)?;
                let e = self.operand(n, "exponent", dt)?;
                self.finish(n, Op::Binary(B::Pow), &[Some(x), Some(e)])
            }
            "maximum" | "max" if overload == "other" || base == "maximum" => self.binary(n, B::Max, None),
            "minimum" | "min" if overload == "other" || base == "minimum" => self.binary(n, B::Min, None),
            "fmod" => self.binary(n, B::Mod { fmod: true }, None),
            "remainder" => self.binary(n, B::Mod { fmod: false }, None),
            "eq" => self.binary(n, B::Equal, None),
            "lt" | "less" => self.binary(n, B::Less, None),
            "le" | "less_equal" => self.binary(n, B::LessOrEqual, None),
            "gt" | "greater" => self.binary(n, B::Greater, None),
            "ge" | "greater_equal" => self.binary(n, B::GreaterOrEqual, None),
            "ne" | "not_equal" => {
                // Not(Equal), compared in the promoted dtype.
                let (a, b) = (self.operand_dtype(n, "self")?, self.operand_dtype(n, "other")?);
                let dt = match (a, b) {
                    (Some(a), Some(b)) => promote(a, b),
                    (Some(a), None) if matches!(n.arg("other"), Some(Argument::AsFloat(_))) && !a.is_float() => {
                        DType::F32
                    }
                    (Some(a), None) => a,
                    (None, Some(b)) => b,
                    (None, None) => DType::F32,
                };
                let x = self.operand(n, "self", dt)?;
                let y = self.operand(n, "other", dt)?;
                let e = self.emit(n, "eq", Op::Binary(B::Equal), &[Some(x), Some(y)])?;
                self.finish(n, Op::Unary(U::Not), &[Some(e)])
            }
            "logical_and" | "__and__" | "bitwise_and" => self.binary(n, B::BitwiseAnd, None),
            "logical_or" | "__or__" | "bitwise_or" => self.binary(n, B::BitwiseOr, None),
            "logical_xor" | "__xor__" | "bitwise_xor" => self.binary(n, B::BitwiseXor, None),
            "logical_not" => {
                let (dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, dt, DType::Bool)?;
                self.finish(n, Op::Unary(U::Not), &[Some(x)])
            }
            "bitwise_not" => {
                let (dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                self.finish(n, Op::Unary(if dt == DType::Bool { U::Not } else { U::BitwiseNot }), &[Some(x)])
            }
            "where" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                if let Some(sm) = self.safe_softmax(n) {
                    let p = self.value(n, &sm)?;
                    let nan = self.emit(n, "isnan", Op::Unary(U::IsNaN), &[Some(p)])?;
                    let zero = self.scalar(n, out_dt, 0.0);
                    return self.finish(n, Op::Where, &[Some(nan), Some(zero), Some(p)]).map(|()| true);
                }
                let c = self.t(n, "condition")?;
                let (cdt, _) = self.arg_meta(n, "condition")?;
                let c = self.cast(n, c, cdt, DType::Bool)?;
                let x = self.operand(n, "self", out_dt)?;
                let y = self.operand(n, "other", out_dt)?;
                self.finish(n, Op::Where, &[Some(c), Some(x), Some(y)])
            }
            "masked_fill" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let x = self.t(n, "self")?;
                let m = self.t(n, "mask")?;
                let (mdt, _) = self.arg_meta(n, "mask")?;
                let m = self.cast(n, m, mdt, DType::Bool)?;
                let v = self.operand(n, "value", out_dt)?;
                self.finish(n, Op::Where, &[Some(m), Some(v), Some(x)])
            }
            "clamp" | "clip" | "clamp_min" | "clamp_max" | "hardtanh" | "relu6" => {
                let (lo, hi) = match base {
                    "hardtanh" => (self.number(n, "min_val", Some(-1.0))?, self.number(n, "max_val", Some(1.0))?),
                    "relu6" => (0.0, 6.0),
                    "clamp_min" => (self.number(n, "min", None)?, f64::INFINITY),
                    "clamp_max" => (f64::NEG_INFINITY, self.number(n, "max", None)?),
                    _ => {
                        if self.tensor_name(n, "min").is_some() || self.tensor_name(n, "max").is_some() {
                            return Err(n.err("clamp with tensor bounds is not supported"));
                        }
                        (
                            self.opt_number(n, "min")?.unwrap_or(f64::NEG_INFINITY),
                            self.opt_number(n, "max")?.unwrap_or(f64::INFINITY),
                        )
                    }
                };
                // Finite bounds: WGSL has no infinities in constants.
                let (lo, hi) = (lo.max(f32::MIN as f64) as f32, hi.min(f32::MAX as f64) as f32);
                self.unary(n, U::Clip(lo, hi))
            }
            "relu" => self.unary(n, U::Relu),
            "sigmoid" => self.unary(n, U::Sigmoid),
            "tanh" => self.unary(n, U::Tanh),
            "exp" => self.unary(n, U::Exp),
            "log" => self.unary(n, U::Log),
            "sqrt" => self.unary(n, U::Sqrt),
            "abs" => self.unary(n, U::Abs),
            "neg" | "negative" => self.unary(n, U::Neg),
            "reciprocal" => self.unary(n, U::Reciprocal),
            "erf" => self.unary(n, U::Erf),
            "sin" => self.unary(n, U::Sin),
            "cos" => self.unary(n, U::Cos),
            "tan" => self.unary(n, U::Tan),
            "asin" => self.unary(n, U::Asin),
            "acos" => self.unary(n, U::Acos),
            "atan" => self.unary(n, U::Atan),
            "sinh" => self.unary(n, U::Sinh),
            "cosh" => self.unary(n, U::Cosh),
            "floor" => self.unary(n, U::Floor),
            "ceil" => self.unary(n, U::Ceil),
            "round" if overload == "default" => self.unary(n, U::Round),
            "sign" => self.unary(n, U::Sign),
            "isnan" => self.unary(n, U::IsNaN),
            "hardswish" => self.unary(n, U::HardSwish),
            "hardsigmoid" => self.unary(n, U::HardSigmoid(1.0 / 6.0, 0.5)),
            "mish" => self.unary(n, U::Mish),
            "silu" => self.unary(n, U::Swish(1.0)),
            "softplus" => {
                if self.number(n, "beta", Some(1.0))? != 1.0 {
                    return Err(n.err("softplus with beta other than 1 is not supported"));
                }
                self.unary(n, U::Softplus)
            }
            "leaky_relu" => {
                let s = self.number(n, "negative_slope", Some(0.01))? as f32;
                self.unary(n, U::LeakyRelu(s))
            }
            "elu" => {
                let alpha = self.number(n, "alpha", Some(1.0))? as f32;
                if self.number(n, "scale", Some(1.0))? != 1.0 || self.number(n, "input_scale", Some(1.0))? != 1.0 {
                    return Err(n.err("elu with a scale is not supported"));
                }
                self.unary(n, U::Elu(alpha))
            }
            "gelu" => match self.string(n, "approximate")?.as_deref() {
                None | Some("none") => self.unary(n, U::Gelu),
                Some("tanh") => self.unary(n, U::GeluTanh),
                Some(a) => Err(n.err(format!("approximate '{a}'"))),
            },
            "rsqrt" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let (in_dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                let s = self.emit(n, "sqrt", Op::Unary(U::Sqrt), &[Some(x)])?;
                self.finish(n, Op::Unary(U::Reciprocal), &[Some(s)])
            }
            "log1p" | "expm1" | "log2" | "log10" | "exp2" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let (in_dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                match base {
                    "log1p" => {
                        let one = self.scalar(n, out_dt, 1.0);
                        let y = self.emit(n, "plus1", Op::Binary(B::Add), &[Some(x), Some(one)])?;
                        self.finish(n, Op::Unary(U::Log), &[Some(y)])
                    }
                    "expm1" => {
                        let e = self.emit(n, "exp", Op::Unary(U::Exp), &[Some(x)])?;
                        let one = self.scalar(n, out_dt, 1.0);
                        self.finish(n, Op::Binary(B::Sub), &[Some(e), Some(one)])
                    }
                    "exp2" => {
                        let two = self.scalar(n, out_dt, 2.0);
                        self.finish(n, Op::Binary(B::Pow), &[Some(two), Some(x)])
                    }
                    _ => {
                        let l = self.emit(n, "ln", Op::Unary(U::Log), &[Some(x)])?;
                        let k = self.scalar(
                            n,
                            out_dt,
                            if base == "log2" { std::f64::consts::LOG2_E } else { std::f64::consts::LOG10_E },
                        );
                        self.finish(n, Op::Binary(B::Mul), &[Some(l), Some(k)])
                    }
                }
            }
            _ => return Ok(false),
        };
        done.map(|()| true)
    }

    pub(super) fn binary(&mut self, n: &N, op: BinaryOp, alpha: Option<f64>) -> R<()> {
        let (out_dt, _) = self.out_meta(n, 0)?;
        let compute = if op.returns_bool() {
            let a = self.operand_dtype(n, "self")?;
            let b = self.operand_dtype(n, "other")?;
            let scalar_kind = |key: &str| -> DType {
                match n.arg(key) {
                    Some(Argument::AsFloat(_)) => DType::F32,
                    Some(Argument::AsBool(_)) => DType::Bool,
                    _ => DType::I64,
                }
            };
            match (a, b) {
                (Some(a), Some(b)) => promote(a, b),
                (Some(a), None) => {
                    let s = scalar_kind("other");
                    if promote(a, s) != a && (s.is_float() != a.is_float()) {
                        s
                    } else {
                        a
                    }
                }
                (None, Some(b)) => b,
                (None, None) => DType::F32,
            }
        } else {
            out_dt
        };
        let (op, compute) = match op {
            // Bitwise and/or/xor of bools are the logical ops.
            BinaryOp::BitwiseAnd if compute == DType::Bool => (BinaryOp::And, compute),
            BinaryOp::BitwiseOr if compute == DType::Bool => (BinaryOp::Or, compute),
            BinaryOp::BitwiseXor if compute == DType::Bool => (BinaryOp::Xor, compute),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => (op, DType::Bool),
            _ => (op, compute),
        };
        let x = self.operand(n, "self", compute)?;
        let mut y = self.operand(n, "other", compute)?;
        if let Some(a) = alpha.filter(|&a| a != 1.0) {
            let a = self.scalar(n, compute, a);
            y = self.emit(n, "alpha", Op::Binary(BinaryOp::Mul), &[Some(y), Some(a)])?;
        }
        self.finish(n, Op::Binary(op), &[Some(x), Some(y)])
    }

    pub(super) fn unary(&mut self, n: &N, op: UnaryOp) -> R<()> {
        let (out_dt, _) = self.out_meta(n, 0)?;
        let (in_dt, _) = self.arg_meta(n, "self")?;
        let x = self.t(n, "self")?;
        // Integer inputs of float functions (torch computes exp, sigmoid, ... of an int tensor in float).
        let x = if out_dt.is_float() { self.cast(n, x, in_dt, out_dt)? } else { x };
        self.finish(n, Op::Unary(op), &[Some(x)])
    }
}
