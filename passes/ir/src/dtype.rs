//! Element types: the dtypes a model declares, and the narrow float and integer formats among them.
//!
//! Every element takes 4 bytes on the GPU (see the storage legalization pass), so a narrow type is a set of values
//! rather than a layout: a float8, float4, bfloat16 or float16 value is an f32 that lies on the type's grid, an
//! int4 or uint2 value an i32 inside the type's range. What makes the type real is the Cast into it, which rounds
//! (half to even) or wraps exactly as onnxruntime and `ml_dtypes` do; [`DType::round`] and [`DType::wrap`] are
//! that rule on the host (constant folding, reading tensors), and the emitter writes the same rule in WGSL.

use std::fmt;

/// Logical element type of a tensor, as the model declares it. The storage type on the GPU is decided by
/// legalization (`int64` is stored as `i32`, `bool` as `u32`, every float type as `f32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F4E2M1,
    I64,
    I32,
    I16,
    I8,
    U8,
    U16,
    U32,
    U64,
    I4,
    U4,
    I2,
    U2,
    Bool,
}

/// The encodings a narrow float type reserves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specials {
    /// IEEE 754: the all-ones exponent holds infinities and NaNs (float16, bfloat16, float8e5m2).
    Ieee,
    /// No infinities; exponent and mantissa all ones is NaN (float8e4m3fn).
    AllOnesNan,
    /// No infinities and no −0: the sign bit alone is NaN (the `fnuz` types).
    NegZeroNan,
    /// Neither infinities nor NaNs (float4e2m1).
    None,
}

/// A float type narrower than f32: its bit layout and what happens at its edges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatFormat {
    pub exp_bits: u32,
    pub mantissa_bits: u32,
    pub bias: i32,
    /// The largest finite value.
    pub max: f32,
    pub specials: Specials,
    /// Whether Cast's `saturate` attribute applies (the 8-bit float types).
    pub saturable: bool,
}

impl FloatFormat {
    /// The exponent of the smallest normal value.
    pub fn min_exp(self) -> i32 {
        1 - self.bias
    }

    /// Whether the format has −0.
    pub fn signed_zero(self) -> bool {
        self.specials != Specials::NegZeroNan
    }

    /// What a magnitude that rounds above [`Self::max`] becomes (before the sign is applied).
    pub fn overflow(self, saturate: bool) -> f32 {
        match self.specials {
            Specials::None => self.max,
            _ if saturate && self.saturable => self.max,
            Specials::Ieee => f32::INFINITY,
            Specials::AllOnesNan | Specials::NegZeroNan => f32::NAN,
        }
    }

    /// What NaN becomes (float4e2m1 has no NaN; `ml_dtypes` writes a zero).
    pub fn nan(self) -> f32 {
        if self.specials == Specials::None {
            0.0
        } else {
            f32::NAN
        }
    }

    /// `x` rounded half to even onto the format's grid, with overflow and NaN as [`Self::overflow`] and
    /// [`Self::nan`] say. Computed in f64, where every step is exact.
    pub fn round(self, x: f32, saturate: bool) -> f32 {
        if x.is_nan() {
            return self.nan();
        }
        let a = (x as f64).abs();
        let r = if a.is_infinite() {
            f64::INFINITY
        } else if a == 0.0 {
            0.0
        } else {
            // a comes from an f32, so it is a normal f64 and its exponent field is exact.
            let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(self.min_exp());
            let q = 2f64.powi(e - self.mantissa_bits as i32);
            (a / q).round_ties_even() * q
        };
        let r = if r > self.max as f64 { self.overflow(saturate) } else { r as f32 };
        if x.is_sign_negative() && (r != 0.0 || self.signed_zero()) {
            -r
        } else {
            r
        }
    }

    /// The value of an encoding (the low `1 + exp_bits + mantissa_bits` bits of `bits`).
    pub fn decode(self, bits: u32) -> f32 {
        let (e, m) = (self.exp_bits, self.mantissa_bits);
        let sign = (bits >> (e + m)) & 1 == 1;
        let exp = (bits >> m) & ((1 << e) - 1);
        let man = bits & ((1 << m) - 1);
        let all_ones = (1 << e) - 1;
        let v = match self.specials {
            Specials::NegZeroNan if sign && exp == 0 && man == 0 => return f32::NAN,
            Specials::AllOnesNan if exp == all_ones && man == (1 << m) - 1 => return f32::NAN,
            Specials::Ieee if exp == all_ones => {
                if man != 0 {
                    return f32::NAN;
                }
                f64::INFINITY
            }
            _ if exp == 0 => man as f64 * 2f64.powi(self.min_exp() - m as i32),
            _ => (1.0 + man as f64 / (1u64 << m) as f64) * 2f64.powi(exp as i32 - self.bias),
        };
        let v = v as f32;
        if sign {
            -v
        } else {
            v
        }
    }
}

impl DType {
    /// The name used in plan.json and in error messages (ONNX's lower-case spelling).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "float64",
            DType::F8E4M3FN => "float8e4m3fn",
            DType::F8E4M3FNUZ => "float8e4m3fnuz",
            DType::F8E5M2 => "float8e5m2",
            DType::F8E5M2FNUZ => "float8e5m2fnuz",
            DType::F4E2M1 => "float4e2m1",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I4 => "int4",
            DType::U4 => "uint4",
            DType::I2 => "int2",
            DType::U2 => "uint2",
            DType::Bool => "bool",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64) || self.float_format().is_some()
    }

    pub fn is_int(self) -> bool {
        self.int_bits().is_some()
    }

    /// An integer type's width and signedness.
    pub fn int_bits(self) -> Option<(u32, bool)> {
        Some(match self {
            DType::I64 => (64, true),
            DType::U64 => (64, false),
            DType::I32 => (32, true),
            DType::U32 => (32, false),
            DType::I16 => (16, true),
            DType::U16 => (16, false),
            DType::I8 => (8, true),
            DType::U8 => (8, false),
            DType::I4 => (4, true),
            DType::U4 => (4, false),
            DType::I2 => (2, true),
            DType::U2 => (2, false),
            _ => return None,
        })
    }

    /// Bits one element takes in an ONNX tensor's `raw_data` (4-bit and 2-bit types are packed, low bits first).
    pub fn onnx_bits(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 64,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 16,
            DType::I8 | DType::U8 | DType::Bool => 8,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => 8,
            DType::F4E2M1 | DType::I4 | DType::U4 => 4,
            DType::I2 | DType::U2 => 2,
        }
    }

    /// The layout of a float type narrower than f32 (float16 included).
    pub fn float_format(self) -> Option<FloatFormat> {
        let f = |exp_bits, mantissa_bits, bias, max, specials, saturable| FloatFormat {
            exp_bits,
            mantissa_bits,
            bias,
            max,
            specials,
            saturable,
        };
        Some(match self {
            DType::F16 => f(5, 10, 15, 65504.0, Specials::Ieee, false),
            DType::BF16 => f(8, 7, 127, f32::from_bits(0x7f7f_0000), Specials::Ieee, false),
            DType::F8E4M3FN => f(4, 3, 7, 448.0, Specials::AllOnesNan, true),
            DType::F8E4M3FNUZ => f(4, 3, 8, 240.0, Specials::NegZeroNan, true),
            DType::F8E5M2 => f(5, 2, 15, 57344.0, Specials::Ieee, true),
            DType::F8E5M2FNUZ => f(5, 2, 16, 57344.0, Specials::NegZeroNan, true),
            DType::F4E2M1 => f(2, 1, 1, 6.0, Specials::None, false),
            _ => return None,
        })
    }

    /// A value converted into this float type (the identity for f32 and f64, which is computed as f32).
    pub fn round(self, x: f32, saturate: bool) -> f32 {
        match self.float_format() {
            Some(f) => f.round(x, saturate),
            None => x,
        }
    }

    /// An integer wrapped to this type's width, two's complement (the identity for 32- and 64-bit types).
    pub fn wrap(self, x: i64) -> i64 {
        match self.int_bits() {
            Some((w, signed)) if w < 32 => {
                let m = x & ((1i64 << w) - 1);
                if signed && m >= 1 << (w - 1) {
                    m - (1 << w)
                } else {
                    m
                }
            }
            _ => x,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The float8/float4 grids against values computed by `ml_dtypes` 0.6 (`np.float32(x).astype(t)`).
    #[test]
    fn rounding_matches_ml_dtypes() {
        type Case = (DType, bool, &'static [(f32, f32)]);
        let cases: &[Case] = &[
            (DType::F8E4M3FN, false, &[(449.0, 448.0), (464.0, 448.0), (465.0, f32::NAN), (0.4789, 0.46875)]),
            (DType::F8E4M3FN, true, &[(1e6, 448.0), (f32::INFINITY, 448.0), (-1e-7, -0.0)]),
            (DType::F8E4M3FNUZ, false, &[(247.0, 240.0), (248.0, f32::NAN), (-1e-7, 0.0)]),
            (DType::F8E5M2, false, &[(61439.0, 57344.0), (61440.0, f32::INFINITY), (-1e-9, -0.0)]),
            (DType::F8E5M2FNUZ, false, &[(61440.0, f32::NAN), (1.0e-9, 0.0)]),
            (
                DType::F4E2M1,
                false,
                &[(0.25, 0.0), (0.26, 0.5), (0.75, 1.0), (1.25, 1.0), (2.5, 2.0), (5.0, 4.0), (7.0, 6.0), (1e6, 6.0)],
            ),
            (DType::F4E2M1, false, &[(f32::NAN, 0.0), (f32::NEG_INFINITY, -6.0)]),
            (
                DType::BF16,
                false,
                &[(1.0 + 1.0 / 256.0, 1.0), (1.0 + 3.0 / 256.0, 1.0 + 4.0 / 256.0), (3.0e38, 3.0040553e38)],
            ),
            (DType::F16, false, &[(65519.0, 65504.0), (65520.0, f32::INFINITY), (1e-8, 0.0), (6e-8, 5.9604645e-8)]),
        ];
        for (t, sat, pairs) in cases {
            for &(x, want) in *pairs {
                let got = t.round(x, *sat);
                let same = (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits();
                assert!(same, "{t} (saturate {sat}): {x} → {got}, ml_dtypes gives {want}");
            }
        }
    }

    /// Every encoding of every 8-bit and 4-bit float decodes to a value that rounds back to itself.
    #[test]
    fn decoded_values_are_on_the_grid() {
        for t in [DType::F8E4M3FN, DType::F8E4M3FNUZ, DType::F8E5M2, DType::F8E5M2FNUZ, DType::F4E2M1] {
            let f = t.float_format().unwrap();
            let n = 1u32 << (1 + f.exp_bits + f.mantissa_bits);
            for bits in 0..n {
                let v = f.decode(bits);
                let r = f.round(v, false);
                assert!(
                    (v.is_nan() && r.is_nan()) || r.to_bits() == v.to_bits(),
                    "{t}: {bits:#x} = {v}, rounds to {r}"
                );
                assert!(v.is_nan() || v.is_infinite() || v.abs() <= f.max, "{t}: {bits:#x} = {v}");
            }
        }
        assert_eq!(DType::F8E4M3FN.float_format().unwrap().decode(0x7e), 448.0);
        assert_eq!(DType::F8E5M2FNUZ.float_format().unwrap().decode(0x7f), 57344.0);
    }

    #[test]
    fn wrap_is_twos_complement() {
        assert_eq!([8, 9, -9, 7].map(|x| DType::I4.wrap(x)), [-8, -7, 7, 7]);
        assert_eq!([-1, 4, 5].map(|x| DType::U2.wrap(x)), [3, 0, 1]);
        assert_eq!(DType::I8.wrap(200), -56);
        assert_eq!(DType::I32.wrap(1 << 40), 1 << 40);
    }
}
