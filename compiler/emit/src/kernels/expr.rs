//! The op → WGSL expression table: one elementwise node applied to its operands' expressions.

use super::*;

impl Emitter<'_> {
    /// The WGSL expression of an elementwise op over already-loaded arguments.
    pub(super) fn op_expr(
        &self,
        n: NodeId,
        args: &[String],
        inputs: &[ValueId],
        out: &TensorType,
        helpers: &mut Helpers,
        coord: &dyn Fn(usize) -> String,
    ) -> Result<String, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let st = |v: ValueId| storage(g, v);
        let os = storage_of(out.dtype).expect("legalized");
        // The float type of float arithmetic in this expression.
        let fe = Elem::F32;
        let a = args.first().cloned().unwrap_or_default();
        Ok(match &node.op {
            Op::StridedCopy { .. } | Op::TileCopy => a,
            Op::Trilu { upper, k } => {
                let r = out.rank();
                let zero = if os.is_float() {
                    "0.0"
                } else if os == Storage::I32 {
                    "0i"
                } else {
                    "0u"
                };
                let cmp = if *upper { ">=" } else { "<=" };
                format!(
                    "select({zero}, {a}, {} - {} {cmp} {})",
                    coord(r - 1),
                    coord(r - 2),
                    i32_lit(k.expect("resolved"))
                )
            }
            Op::Unary(u) => {
                let float = st(inputs[0]).is_float();
                match (u, float) {
                    (UnaryOp::Neg, false) => narrow(format!("-{a}"), out.dtype),
                    (UnaryOp::Neg, _) => format!("-{a}"),
                    (UnaryOp::Abs, _) => format!("abs({a})"),
                    (UnaryOp::Relu, true) => format!("max({a}, 0.0)"),
                    (UnaryOp::Relu, false) => format!("max({a}, 0i)"),
                    (UnaryOp::Identity, _) => a,
                    (UnaryOp::Not, _) => format!("1u - {a}"),
                    (UnaryOp::Sign, _) => format!("sign({a})"),
                    (UnaryOp::Swish(al), true) => format!("{a} / (1.0 + exp(-{} * {a}))", fe.lit(*al)),
                    (UnaryOp::BitwiseNot, false) => narrow(format!("~{a}"), out.dtype),
                    (UnaryOp::BitwiseNot, true) => return Err(self.err(n, "BitwiseNot needs an integer input")),
                    (UnaryOp::IsNaN, true) => {
                        format!("select(0u, 1u, (bitcast<u32>({a}) & 0x7fffffffu) > 0x7f800000u)")
                    }
                    (UnaryOp::IsNaN, false) => "0u".into(),
                    (UnaryOp::Clip(lo, hi), true) => {
                        let mut e = a;
                        if lo.is_finite() {
                            e = format!("max({e}, {})", fe.lit(*lo));
                        }
                        if hi.is_finite() {
                            e = format!("min({e}, {})", fe.lit(*hi));
                        }
                        e
                    }
                    (UnaryOp::Clip(lo, hi), false) => {
                        let lo = if lo.is_finite() { lo.ceil() as i64 } else { i32::MIN as i64 };
                        let hi = if hi.is_finite() { hi.floor() as i64 } else { i32::MAX as i64 };
                        format!("clamp({a}, {}, {})", i32_lit(lo), i32_lit(hi))
                    }
                    (_, false) => return Err(self.err(n, "this op needs a float input")),
                    (UnaryOp::Sqrt, _) => format!("sqrt({a})"),
                    (UnaryOp::Reciprocal, _) => format!("1.0 / {a}"),
                    (UnaryOp::Exp, _) => format!("exp({a})"),
                    (UnaryOp::Log, _) => format!("log({a})"),
                    (UnaryOp::Floor, _) => format!("floor({a})"),
                    (UnaryOp::Ceil, _) => format!("ceil({a})"),
                    (UnaryOp::Sin, _) => format!("sin({a})"),
                    (UnaryOp::Cos, _) => format!("cos({a})"),
                    (UnaryOp::Tan, _) => format!("tan({a})"),
                    (UnaryOp::Asin, _) => format!("asin({a})"),
                    (UnaryOp::Acos, _) => format!("acos({a})"),
                    (UnaryOp::Atan, _) => format!("atan({a})"),
                    (UnaryOp::Sinh, _) => format!("sinh({a})"),
                    (UnaryOp::Cosh, _) => format!("cosh({a})"),
                    (UnaryOp::Asinh, _) => format!("asinh({a})"),
                    (UnaryOp::Acosh, _) => format!("acosh({a})"),
                    (UnaryOp::Atanh, _) => format!("atanh({a})"),
                    // Stable: max(x, 0) + log1p(exp(-|x|)).
                    (UnaryOp::Softplus, _) => {
                        helpers.log1p = true;
                        format!("(max({a}, 0.0) + log1p_(exp(-abs({a}))))")
                    }
                    (UnaryOp::Softsign, _) => format!("{a} / (1.0 + abs({a}))"),
                    (UnaryOp::Elu(al), _) => format!("select({a}, {} * (exp({a}) - 1.0), {a} < 0.0)", fe.lit(*al)),
                    (UnaryOp::Selu(al, ga), _) => {
                        format!("{} * select({a}, {} * (exp({a}) - 1.0), {a} <= 0.0)", fe.lit(*ga), fe.lit(*al))
                    }
                    (UnaryOp::Celu(al), _) => {
                        format!("(max({a}, 0.0) + min(0.0, {al} * (exp({a} / {al}) - 1.0)))", al = fe.lit(*al))
                    }
                    (UnaryOp::ThresholdedRelu(al), _) => format!("select(0.0, {a}, {a} > {})", fe.lit(*al)),
                    (UnaryOp::Mish, _) => {
                        helpers.tanh = true;
                        helpers.log1p = true;
                        format!("{a} * tanh_(max({a}, 0.0) + log1p_(exp(-abs({a}))))")
                    }
                    (UnaryOp::Round, _) => format!("round({a})"),
                    (UnaryOp::IsInf(p, ng), _) => format!(
                        "select(0u, 1u, ({} && bitcast<u32>({a}) == 0x7f800000u) || ({} && bitcast<u32>({a}) == 0xff800000u))",
                        p, ng
                    ),
                    (UnaryOp::Shrink(bias, l), _) => format!(
                        "select(select(0.0, {a} - {b}, {a} > {l}), {a} + {b}, {a} < -{l})",
                        b = fe.lit(*bias),
                        l = fe.lit(*l)
                    ),
                    (UnaryOp::Erf, _) => {
                        helpers.erf = true;
                        format!("erf_({a})")
                    }
                    (UnaryOp::Tanh, _) => {
                        helpers.tanh = true;
                        format!("tanh_({a})")
                    }
                    (UnaryOp::Sigmoid, _) => format!("1.0 / (1.0 + exp(-{a}))"),
                    (UnaryOp::Gelu, _) => {
                        helpers.erf = true;
                        format!("0.5 * {a} * (1.0 + erf_({a} * 0.70710678118654752))")
                    }
                    (UnaryOp::GeluTanh, _) => {
                        helpers.tanh = true;
                        format!("0.5 * {a} * (1.0 + tanh_(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))")
                    }
                    (UnaryOp::LeakyRelu(alpha), _) => {
                        format!("select({a}, {} * {a}, {a} < 0.0)", fe.lit(*alpha))
                    }
                    (UnaryOp::HardSigmoid(al, be), _) => {
                        format!("clamp({} * {a} + {}, 0.0, 1.0)", fe.lit(*al), fe.lit(*be))
                    }
                    (UnaryOp::HardSwish, _) => format!("{a} * clamp({a} / 6.0 + 0.5, 0.0, 1.0)"),
                }
            }
            Op::Binary(b) => {
                let (x, y) = (&args[0], &args[1]);
                let float = st(inputs[0]).is_float();
                match b {
                    BinaryOp::Add if !float => narrow(format!("({x} + {y})"), out.dtype),
                    BinaryOp::Sub if !float => narrow(format!("({x} - {y})"), out.dtype),
                    BinaryOp::Mul if !float => narrow(format!("({x} * {y})"), out.dtype),
                    BinaryOp::Add => format!("{x} + {y}"),
                    BinaryOp::Sub => format!("{x} - {y}"),
                    BinaryOp::Mul => format!("{x} * {y}"),
                    BinaryOp::Div => format!("{x} / {y}"),
                    BinaryOp::Max => format!("max({x}, {y})"),
                    BinaryOp::Min => format!("min({x}, {y})"),
                    BinaryOp::Pow => {
                        let yf = if st(inputs[1]).is_float() { y.clone() } else { fe.convert(y) };
                        let xf = if float { x.clone() } else { fe.convert(x) };
                        // A constant scalar exponent (x², √x: what exporters write) needs no general pow.
                        let c = g.const_data(inputs[1]).filter(|t| t.numel() == 1).map(|t| t.to_f64()[0]);
                        let e = match c {
                            Some(1.0) => xf,
                            Some(2.0) => format!("{xf} * {xf}"),
                            Some(3.0) => format!("{xf} * {xf} * {xf}"),
                            Some(0.5) => format!("sqrt({xf})"),
                            _ => {
                                helpers.pow = true;
                                format!("pow_({xf}, {yf})")
                            }
                        };
                        if float {
                            e
                        } else {
                            format!("i32({e})")
                        }
                    }
                    BinaryOp::Equal => format!("select(0u, 1u, {x} == {y})"),
                    BinaryOp::Less => format!("select(0u, 1u, {x} < {y})"),
                    BinaryOp::LessOrEqual => format!("select(0u, 1u, {x} <= {y})"),
                    BinaryOp::Greater => format!("select(0u, 1u, {x} > {y})"),
                    BinaryOp::GreaterOrEqual => format!("select(0u, 1u, {x} >= {y})"),
                    BinaryOp::And => format!("{x} & {y}"),
                    BinaryOp::Or => format!("{x} | {y}"),
                    BinaryOp::Xor => format!("{x} ^ {y}"),
                    BinaryOp::BitwiseAnd => format!("{x} & {y}"),
                    BinaryOp::BitwiseOr => format!("{x} | {y}"),
                    BinaryOp::BitwiseXor => format!("{x} ^ {y}"),
                    // Shifts by a negative amount or by the type's width or more give 0 (or -1 for negative
                    // signed values shifted right); signed right shifts are arithmetic.
                    BinaryOp::BitShiftLeft => {
                        let w = bit_width(out.dtype);
                        narrow(format!("select(({x} << u32({y})), 0i, {y} < 0i || {y} >= {w}i)"), out.dtype)
                    }
                    BinaryOp::BitShiftRight if is_signed(out.dtype) => {
                        let w = bit_width(out.dtype);
                        format!(
                            "select(({x} >> u32(min({y}, 31i))), select(0i, -1i, {x} < 0i), {y} < 0i || {y} >= {w}i)"
                        )
                    }
                    BinaryOp::BitShiftRight => {
                        let w = bit_width(out.dtype);
                        format!("select(i32(u32({x}) >> u32(min({y}, 31i))), 0i, {y} < 0i || {y} >= {w}i)")
                    }
                    BinaryOp::Mod { fmod: true } if float => format!("{x} % {y}"),
                    BinaryOp::Mod { fmod: true } => format!("select({x} % {y}, 0i, {y} == 0i)"),
                    BinaryOp::Mod { fmod: false } if float => format!("{x} - {y} * floor({x} / {y})"),
                    // Python's rule: the result takes the divisor's sign.
                    BinaryOp::Mod { fmod: false } => {
                        format!("select((({x} % {y}) + {y}) % {y}, 0i, {y} == 0i)")
                    }
                    BinaryOp::PRelu if float => format!("select({x}, {y} * {x}, {x} < 0.0)"),
                    BinaryOp::PRelu => format!("select({x}, {y} * {x}, {x} < 0i)"),
                }
            }
            Op::Where => format!("select({}, {}, {} != 0u)", args[2], args[1], args[0]),
            Op::Cast { to, saturate } => {
                let from = st(inputs[0]);
                let v = match (from, os) {
                    (f, t) if f == t => a,
                    (Storage::F32, Storage::I32) => format!("i32({a})"),
                    (Storage::I32, Storage::F32) | (Storage::U32, Storage::F32) => fe.convert(&a),
                    (Storage::U32, Storage::I32) => format!("i32({a})"),
                    (Storage::F32, Storage::U32) => format!("select(0u, 1u, {a} != 0.0)"),
                    (Storage::I32, Storage::U32) => format!("select(0u, 1u, {a} != 0i)"),
                    _ => return Err(self.err(n, format!("no cast to {to}"))),
                };
                // Onto the target type's values: a narrower integer wraps, a narrower float rounds.
                match (os, to.float_format()) {
                    (Storage::I32, _) => narrow(v, *to),
                    (_, Some(_)) if *to == wgslc_ir::DType::BF16 => {
                        helpers.round_bf16 = true;
                        format!("round_bf16_({v})")
                    }
                    (_, Some(f)) => {
                        helpers.round_float = true;
                        format!(
                            "round_float_({v}, {}i, {}i, {}, {}, {}, {})",
                            f.mantissa_bits,
                            f.min_exp(),
                            fe.lit(f.max),
                            fe.lit(f.overflow(*saturate)),
                            fe.lit(f.nan()),
                            f.signed_zero()
                        )
                    }
                    _ => v,
                }
            }
            other => return Err(self.err(n, format!("{} is not elementwise", other.name()))),
        })
    }
}
