//! fp32 arithmetic as the compute engine defines it.
//!
//! Everything here uses only IEEE-754 basic operations (add, multiply,
//! divide, square root, conversions), which are exactly specified, so results
//! are bit-identical on every host. No host `libm` function is used.

/// The one NaN that fp32 arithmetic produces.
pub const CANONICAL_NAN: u32 = 0x7fff_ffff;

/// Bits of an arithmetic result, with any NaN replaced by the canonical NaN.
#[inline(always)]
pub fn canon(x: f32) -> u32 {
    if x.is_nan() {
        CANONICAL_NAN
    } else {
        x.to_bits()
    }
}

/// Round to nearest integer, ties to even, for |x| < 2^51.
#[inline(always)]
fn round_even(x: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    (x + MAGIC) - MAGIC
}

/// `2^x`, error ≤ 1 ulp (almost always correctly rounded).
#[inline]
pub fn exp2(x: f32) -> f32 {
    if x.is_nan() {
        return f32::from_bits(CANONICAL_NAN);
    }
    if x >= 128.0 {
        return f32::INFINITY;
    }
    if x <= -150.0 {
        return 0.0;
    }
    let xd = x as f64;
    let n = round_even(xd);
    let y = (xd - n) * std::f64::consts::LN_2; // |y| <= 0.3466
                                               // e^y by its Taylor series to y^13/13!: truncation < 1e-17 relative.
    let mut p = 1.0 / 6_227_020_800.0; // 1/13!
    let mut k = 12.0f64;
    while k >= 1.0 {
        p = p * y + fact_inv(k as u32);
        k -= 1.0;
    }
    p = p * y + 1.0;
    let scale = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (p * scale) as f32
}

#[inline(always)]
fn fact_inv(k: u32) -> f64 {
    const T: [f64; 13] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
    ];
    T[k as usize % 13]
}

/// `log2(x)`, error ≤ 1 ulp.
#[inline]
pub fn log2(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::from_bits(CANONICAL_NAN);
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return f32::INFINITY;
    }
    let xd = x as f64; // subnormal f32 values are normal f64 values
    let bits = xd.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.1716.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut p = 1.0 / 25.0;
    let mut k = 23.0f64;
    while k >= 1.0 {
        p = p * s2 + 1.0 / k;
        k -= 2.0;
    }
    let ln_m = 2.0 * s * p;
    (e as f64 + ln_m * std::f64::consts::LOG2_E) as f32
}

/// `1/sqrt(x)`, error ≤ 1 ulp.
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    (1.0 / (x as f64).sqrt()) as f32
}

/// `min` with IEEE-754 minNum semantics (a NaN operand is ignored) and
/// `-0 < +0`.
#[inline(always)]
pub fn fmin(a: f32, b: f32) -> u32 {
    if a.is_nan() {
        canon(b)
    } else if b.is_nan() || a < b {
        a.to_bits()
    } else if b < a {
        b.to_bits()
    } else {
        a.to_bits() | b.to_bits() // equal: -0 wins
    }
}

/// `max` with IEEE-754 maxNum semantics (a NaN operand is ignored) and
/// `-0 < +0`.
#[inline(always)]
pub fn fmax(a: f32, b: f32) -> u32 {
    if a.is_nan() {
        canon(b)
    } else if b.is_nan() || a > b {
        a.to_bits()
    } else if b > a {
        b.to_bits()
    } else {
        a.to_bits() & b.to_bits() // equal: +0 wins
    }
}

/// Fused multiply-add with a single rounding.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
