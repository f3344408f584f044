/* dtype.c — scalar f32 <-> bf16/f16/FP8/FP4/E8M0/int4 conversions, the reference for kernels. */
#include <string.h>

#include "dtype/dtype.h"

/*
 * Everything here is integer arithmetic on the f32 bit pattern, so the results do not depend
 * on the FPU rounding mode, on FTZ/DAZ, or on the compiler's choice of instructions.
 *
 * bf16, f16, E4M3, E5M2 and E2M1 are one family: a sign bit, then a magnitude code
 * (exponent field << M | mantissa field) with bias B, an implicit leading 1 for normals and
 * IEEE subnormals (exponent field 0: mantissa × 2^(1-B-M)). Magnitude codes are ordered like
 * the values they stand for, which is what makes the shared encoder below work: rounding the
 * significand up past 2^(M+1) carries into the exponent field by plain addition.
 */

#define F32_ABS_MASK 0x7FFFFFFFu
#define F32_INF 0x7F800000u
#define F32_MAN_MASK 0x007FFFFFu
#define F32_IMPLICIT 0x00800000u

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* sig / 2^shift rounded to nearest, ties to even; 1 <= shift <= 31. */
static inline uint32_t rne_shift(uint32_t sig, unsigned shift)
{
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    return q + ((rem > half) | ((rem == half) & (q & 1u)));
}

/*
 * The magnitude code of the format (man_bits M, bias B) nearest to the f32 magnitude with bits
 * `a` (not NaN; Inf is fine), before any overflow clamp: a result above the largest finite
 * code means the value overflowed. Needs 1 - B >= -126 (true of every format here), so an f32
 * subnormal input always lands in the format's subnormal range or at its smallest normal.
 */
static inline uint32_t minifloat_round_mag(uint32_t a, unsigned man_bits, int bias)
{
    int e32 = (int)(a >> 23);
    uint32_t sig = a & F32_MAN_MASK;
    if (e32 != 0)
        sig |= F32_IMPLICIT;
    else
        e32 = 1; /* an f32 subnormal is sig × 2^-149, like exponent field 1 without the 1 */
    /* The value is sig × 2^(e32 - 150). The result's quantum is 2^(e_eff - M) where e_eff is
     * the value's binade, raised to the format's smallest normal exponent for subnormals. */
    int emin = 1 - bias;
    int e = e32 - 127;
    int e_eff = e > emin ? e : emin;
    int shift = e_eff - (int)man_bits - (e32 - 150); /* >= 23 - M >= 13 */
    if (shift > 31) shift = 31; /* sig < 2^24, so everything shifted that far rounds to 0 */
    uint32_t q = rne_shift(sig, (unsigned)shift);
    /* For normals q includes the implicit 2^M, which adds the 1 that biased exponents are
     * offset by; for subnormals e_eff == emin and q is the mantissa field itself. */
    return ((uint32_t)(e_eff - emin) << man_bits) + q;
}

/* The f32 bits of a finite magnitude code of the format (man_bits M, bias B). Needs
 * 1 - B - M >= -126, so the format's subnormals are f32 normals (not true of bf16, which
 * decodes by a plain shift instead). */
static inline uint32_t minifloat_decode_mag(uint32_t mag, unsigned man_bits, int bias)
{
    uint32_t man_mask = (1u << man_bits) - 1u;
    int exp = (int)(mag >> man_bits);
    uint32_t man = mag & man_mask;
    if (exp == 0) {
        if (man == 0) return 0;
        /* mantissa × 2^(1-B-M): shift its leading 1 into the implicit position. */
        exp = 1;
        while (!(man & (1u << man_bits))) {
            man <<= 1;
            exp--;
        }
        man &= man_mask;
    }
    return ((uint32_t)(exp - bias + 127) << 23) | (man << (23 - man_bits));
}

static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* ---- bf16: M 7, bias 127 (the top half of an f32) ----------------------------------- */

float moe_bf16_to_f32(uint16_t code) { return f32_from_bits((uint32_t)code << 16); }

uint16_t moe_f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    if (a > F32_INF) return (uint16_t)((u >> 16) | 0x0040u); /* keep sign and payload, quiet */
    uint32_t sign = (u >> 16) & 0x8000u;
    return (uint16_t)(sign | min_u32(minifloat_round_mag(a, 7, 127), 0x7F80u));
}

/* ---- f16: M 10, bias 15, Inf 0x7C00 ------------------------------------------------- */

float moe_f16_to_f32(uint16_t code)
{
    uint32_t sign = (uint32_t)(code & 0x8000u) << 16;
    uint32_t mag = code & 0x7FFFu;
    if (mag >= 0x7C00u) /* Inf, or NaN with its payload at the top of the f32 mantissa */
        return f32_from_bits(sign | F32_INF | ((mag & 0x3FFu) << 13));
    return f32_from_bits(sign | minifloat_decode_mag(mag, 10, 15));
}

uint16_t moe_f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    uint32_t sign = (u >> 16) & 0x8000u;
    if (a > F32_INF) return (uint16_t)(sign | 0x7E00u | ((a & F32_MAN_MASK) >> 13));
    return (uint16_t)(sign | min_u32(minifloat_round_mag(a, 10, 15), 0x7C00u));
}

/* ---- FP8 E4M3 "fn": M 3, bias 7, no Inf, NaN 0x7F/0xFF, max 0x7E = 448 -------------- */

float moe_e4m3_to_f32(uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    uint32_t mag = code & 0x7Fu;
    if (mag == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
    return f32_from_bits(sign | minifloat_decode_mag(mag, 3, 7));
}

uint8_t moe_f32_to_e4m3(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    uint32_t sign = (u >> 24) & 0x80u;
    if (a > F32_INF) return (uint8_t)(sign | 0x7Fu);
    /* Saturating: the would-be code 0x7F (480) and everything past it clamps to 448. */
    return (uint8_t)(sign | min_u32(minifloat_round_mag(a, 3, 7), 0x7Eu));
}

/* ---- FP8 E5M2: M 2, bias 15, Inf 0x7C, NaN 0x7D..0x7F -------------------------------- */

float moe_e5m2_to_f32(uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    uint32_t mag = code & 0x7Fu;
    if (mag >= 0x7Cu) return f32_from_bits(sign | F32_INF | ((mag & 0x3u) << 21));
    return f32_from_bits(sign | minifloat_decode_mag(mag, 2, 15));
}

uint8_t moe_f32_to_e5m2(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    uint32_t sign = (u >> 24) & 0x80u;
    if (a > F32_INF) return (uint8_t)(sign | 0x7Eu | ((a & F32_MAN_MASK) >> 21));
    return (uint8_t)(sign | min_u32(minifloat_round_mag(a, 2, 15), 0x7Cu));
}

/* ---- FP4 E2M1: M 1, bias 1, no Inf or NaN, max 0x7 = 6 ------------------------------ */

float moe_e2m1_to_f32(uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x8u) << 28;
    return f32_from_bits(sign | minifloat_decode_mag(code & 0x7u, 1, 1));
}

uint8_t moe_f32_to_e2m1(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    if (a > F32_INF) return 0;
    uint32_t sign = (u >> 28) & 0x8u;
    return (uint8_t)(sign | min_u32(minifloat_round_mag(a, 1, 1), 0x7u));
}

/* ---- E8M0: 2^(code - 127), 0xFF NaN -------------------------------------------------- */

float moe_e8m0_to_f32(uint8_t code)
{
    if (code == 0xFFu) return f32_from_bits(0x7FC00000u);
    if (code == 0) return f32_from_bits(0x00400000u); /* 2^-127 is an f32 subnormal */
    return f32_from_bits((uint32_t)code << 23);
}

/*
 * Nearest by value: between 2^k (code c) and 2^(k+1) (code c + 1) the midpoint is 1.5 × 2^k,
 * i.e. an f32 mantissa field of exactly 0x400000; there the even code wins.
 */
uint8_t moe_f32_to_e8m0(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    if (a > F32_INF) return 0xFFu;
    if (a == 0) return 0x00u; /* both zeros: the smallest scale, not NaN */
    if (u >> 31) return 0xFFu;
    uint32_t e32 = a >> 23;
    uint32_t man = a & F32_MAN_MASK;
    if (e32 == 0) /* f32 subnormal: 2^-127 is man 0x400000, 2^-126 would be 0x800000 */
        return man > 0x600000u ? 1u : 0u; /* the tie 1.5 × 2^-127 goes to the even code 0 */
    uint32_t half = 0x400000u;
    uint32_t code = e32 + ((man > half) | ((man == half) & (e32 & 1u)));
    return (uint8_t)min_u32(code, 0xFEu);
}

/* ---- int4: -8..7 as a two's complement nibble, or as value + 8 ----------------------- */

int8_t moe_int4_to_i8(uint8_t code) { return (int8_t)((int)((code & 0xFu) ^ 0x8u) - 8); }

int8_t moe_uint4_to_i8(uint8_t code) { return (int8_t)((int)(code & 0xFu) - 8); }

/* x rounded to the nearest integer (ties to even) and saturated to [-8, 7]; NaN -> 0. */
static int round_int4(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t a = u & F32_ABS_MASK;
    if (a > F32_INF) return 0;
    uint32_t mag;
    if (a >= 0x41000000u) /* |x| >= 8 saturates on either side */
        mag = 8;
    else if (a < 0x3F000000u) /* |x| < 0.5 */
        mag = 0;
    else /* |x| in [0.5, 8): sig × 2^(e32 - 150) with e32 in 126..129 */
        mag = rne_shift((a & F32_MAN_MASK) | F32_IMPLICIT, 150u - (a >> 23));
    int v = (u >> 31) ? -(int)mag : (int)mag;
    return v > 7 ? 7 : v;
}

uint8_t moe_f32_to_int4(float x) { return (uint8_t)((unsigned)round_int4(x) & 0xFu); }

uint8_t moe_f32_to_uint4(float x) { return (uint8_t)(round_int4(x) + 8); }
