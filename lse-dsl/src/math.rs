//! LOOM's transcendental functions on f32, defined once as a fixed sequence of IEEE
//! operations (`fma`, round-to-nearest-even, integer bit operations, one division).
//!
//! Every lowering computes exactly these operations in this order: the generated Rust calls
//! the functions below, and `lse-codegen` emits the same sequence as LLVM IR (`math.rs`
//! there) for the host, AMDGPU and NVPTX. So kernels that use `exp`, `log`, `sigmoid`, `silu`
//! or `tanh` keep the bit-exact agreement between the CPU reference and the host code, and
//! the host loops vectorise (no libm call).
//!
//! Accuracy against f64 libm, measured on every 61st f32 bit pattern by `lse-codegen`'s
//! `math` test (which bounds them at 1, 1, 3, 3 and 4 ulp): worst `exp` 0.92 ulp, `log`
//! 0.83 ulp, `sigmoid` 2.37 ulp, `silu` 2.64 ulp, `tanh` 3.88 ulp. `sigmoid` and `silu` flush
//! to 0 below `x = -87` (where `sigmoid(x)` is subnormal).
//! - `exp`: Cody–Waite reduction `x = k ln2 + r`, `|r| <= ln2/2`, degree-7 Taylor polynomial in
//!   Horner form with `fma`, scaling by `2^k` as two exact power-of-two multiplies. Overflow
//!   gives `+inf`, deep underflow `+0`, NaN stays NaN.
//! - `log`: `x = 2^k m`, `m` in `[sqrt(1/2), sqrt(2))`, `log(m) = 2 atanh(s)` with
//!   `s = (m-1)/(m+1)` and the fdlibm minimax polynomial; subnormals are pre-scaled by `2^23`.
//!   `log(0) = -inf`, `log(x<0) = NaN`, `log(+inf) = +inf`.
//! - `sigmoid(x) = 1 / (1 + exp(-x))`; `silu(x) = x * sigmoid(x)` (`silu(-inf)` is NaN, as in
//!   PyTorch's `x * sigmoid(x)`).
//! - `tanh`: an odd Taylor polynomial (to `x^9`) for `|x| < 0.125`, else
//!   `(1 - e) / (1 + e)` with `e = exp(-2|x|)`, sign restored.

/// Bits of the constants shared with the LLVM IR emitter.
pub mod consts {
    /// `ln 2` high part for `exp` (15 significant bits: `k * LN2_HI` is exact for `|k| <= 2^9`).
    pub const EXP_LN2_HI: u32 = 0x3f31_7200;
    /// `ln 2 - LN2_HI` for `exp`.
    pub const EXP_LN2_LO: u32 = 0x35bf_be8e;
    /// `ln 2` high part for `log`.
    pub const LOG_LN2_HI: u32 = 0x3f31_7180;
    /// `ln 2 - LN2_HI` for `log`.
    pub const LOG_LN2_LO: u32 = 0x3717_f7d1;
    /// Inputs of `exp` are clamped to `[EXP_MIN, EXP_MAX]` before the reduction.
    pub const EXP_MIN: f32 = -104.0;
    pub const EXP_MAX: f32 = 89.0;
    /// Below this `|x|`, `tanh` uses its Taylor polynomial.
    pub const TANH_SMALL: f32 = 0.125;

    /// `1/7!, 1/6!, ..., 1/2!`: the Taylor coefficients of `exp` above degree 1.
    pub fn exp_taylor() -> [f32; 6] {
        [5040.0f32, 720.0, 120.0, 24.0, 6.0, 2.0].map(|d| 1.0 / d)
    }

    /// fdlibm's `Lg1..Lg4` for `log`, rounded to f32.
    pub fn log_poly() -> [f32; 4] {
        [
            0xaa_aaaa as f32 / (1u32 << 24) as f32,
            0xcc_ce13 as f32 / (1u32 << 25) as f32,
            0x91_e9ee as f32 / (1u32 << 25) as f32,
            0xf8_9e26 as f32 / (1u32 << 26) as f32,
        ]
    }

    /// Taylor coefficients of `tanh x / x` in `x^2`, from `x^8` down to `x^2`:
    /// `62/2835, -17/315, 2/15, -1/3`.
    pub fn tanh_taylor() -> [f32; 4] {
        [62.0f32 / 2835.0, -17.0 / 315.0, 2.0 / 15.0, -1.0 / 3.0]
    }
}

/// `e^x` (see the module doc for the algorithm and accuracy).
#[inline]
pub fn exp(x: f32) -> f32 {
    // For NaN `clamp` gives NaN where the IR's maxnum gives EXP_MIN; the result is `x` either way.
    let xc = x.clamp(consts::EXP_MIN, consts::EXP_MAX);
    let kf = (xc * std::f32::consts::LOG2_E).round_ties_even();
    let nk = -kf;
    let r0 = nk.mul_add(f32::from_bits(consts::EXP_LN2_HI), xc);
    let r = nk.mul_add(f32::from_bits(consts::EXP_LN2_LO), r0);
    let t = consts::exp_taylor();
    let mut p = t[0].mul_add(r, t[1]);
    for c in &t[2..] {
        p = p.mul_add(r, *c);
    }
    p = p.mul_add(r, 1.0).mul_add(r, 1.0);
    let k = kf as i32;
    let k1 = k / 2;
    let k2 = k - k1;
    let s1 = f32::from_bits(((k1 + 127) << 23) as u32);
    let s2 = f32::from_bits(((k2 + 127) << 23) as u32);
    let y = p * s1 * s2;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Natural logarithm (see the module doc for the algorithm and accuracy).
#[inline]
pub fn log(x: f32) -> f32 {
    let sub = x < f32::MIN_POSITIVE;
    let xn = if sub { x * 8_388_608.0 } else { x };
    let kadj = if sub { -23 } else { 0 };
    let ix = xn.to_bits().wrapping_add(4_913_933);
    let k = (ix >> 23) as i32 - 127 + kadj;
    let m = f32::from_bits((ix & 0x007f_ffff) + 1_060_439_283);
    let f = m - 1.0;
    let s = f / (f + 2.0);
    let z = s * s;
    let w = z * z;
    let [lg1, lg2, lg3, lg4] = consts::log_poly();
    let t1 = w * w.mul_add(lg4, lg2);
    let t2 = z * w.mul_add(lg3, lg1);
    let rr = t2 + t1;
    let hfsq = f * 0.5 * f;
    let dk = k as f32;
    let q = dk.mul_add(f32::from_bits(consts::LOG_LN2_LO), s * (hfsq + rr));
    let y = dk.mul_add(f32::from_bits(consts::LOG_LN2_HI), q - hfsq + f);
    if x == f32::INFINITY || x.is_nan() {
        x
    } else if x < 0.0 {
        f32::NAN
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else {
        y
    }
}

/// `1 / (1 + e^-x)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// Hyperbolic tangent (see the module doc for the algorithm and accuracy).
#[inline]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let c = consts::tanh_taylor();
    let mut p = c[0].mul_add(z, c[1]);
    p = p.mul_add(z, c[2]);
    p = p.mul_add(z, c[3]);
    let small = (p * z).mul_add(x, x);
    let e = exp(-2.0 * a);
    let big = ((1.0 - e) / (1.0 + e)).copysign(x);
    if a < consts::TANH_SMALL {
        small
    } else if x.is_nan() {
        x
    } else {
        big
    }
}
