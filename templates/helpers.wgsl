{%- if helpers.round_float %}
// x rounded half to even (WGSL's round) onto a float type with m mantissa bits whose smallest normal exponent is
// emin: the quantum at x's exponent is a power of two, so the scaling is exact. A magnitude above maxv after
// rounding becomes over (the type's max, infinity or NaN), NaN becomes nan, and -0 becomes +0 unless signed_zero.
fn round_float_(x: f32, m: i32, emin: i32, maxv: f32, over: f32, nan: f32, signed_zero: bool) -> f32 {
    let bits = bitcast<u32>(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return nan;
    }
    let e = max(i32((bits >> 23u) & 0xffu) - 127, emin);
    var r = round(abs(x) * ldexp(1.0, m - e)) * ldexp(1.0, e - m);
    if (r > maxv) {
        r = over;
    }
    if ((bits >> 31u) == 1u && (signed_zero || r != 0.0)) {
        r = -r;
    }
    return r;
}
{% endif -%}
{%- if helpers.round_bf16 %}
// x rounded half to even to bfloat16 on its bits (exact for subnormals, which a shader may flush); NaN stays NaN.
fn round_bf16_(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return x;
    }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
{% endif -%}
{%- if helpers.erf %}
// erf with |error| < 1.2e-7 (Chebyshev fit of erfc; Numerical Recipes 6.2).
fn erf_(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * exp(p);
    return select(r - 1.0, 1.0 - r, x >= 0.0);
}
{% endif -%}
{%- if helpers.pow %}
// ONNX Pow: negative bases with integral exponents are defined; pow(x, 0) is 1.
fn pow_(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    if (a >= 0.0) { return pow(a, b); }
    if (b != floor(b)) { return bitcast<f32>(non_finite_bits.z); }
    let r = pow(-a, b);
    return select(r, -r, abs(b) % 2.0 == 1.0);
}
{% endif -%}
{%- if helpers.log1p %}
// log(1 + t) without losing t when it is tiny (Goldberg's correction).
fn log1p_(t: f32) -> f32 {
    let u = 1.0 + t;
    if (u == 1.0) {
        return t;
    }
    return log(u) * t / (u - 1.0);
}
{% endif -%}
{%- if helpers.tanh %}
// tanh, saturated before exp overflows (some drivers return NaN for large |x|), and by its series near 0, where
// drivers that compute (e^2x - 1) / (e^2x + 1) lose most digits.
fn tanh_(x: f32) -> f32 {
    if (abs(x) < 0.0625) {
        let x2 = x * x;
        return x * (1.0 - x2 * (0.33333334 - x2 * (0.13333334 - x2 * 0.053968254)));
    }
    return tanh(clamp(x, -15.0, 15.0));
}
{% endif -%}
