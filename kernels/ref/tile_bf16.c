/* tile_bf16.c — the portable reference of one tdpbf16ps tile operation, bit for bit. */
#include <math.h>
#include <stdbool.h>

#include "kernels/ref/math_ref.h"
#include "kernels/tile_bf16.h"

#define F32_EXP 0x7F800000u
#define F32_SIGN 0x80000000u
#define F32_QUIET 0x00400000u
#define F32_DEFAULT_NAN 0xFFC00000u /* x86's "real indefinite" */
#define F32_MIN_NORMAL 0x1p-126f
/* Below 2^-126 the 24-bit grid steps by 2^-150: an exact result under the midpoint
 * 2^-126 - 2^-151 rounds to 2^-126 - 2^-150, a denormal, so it is flushed. */
#define FTZ_MIDPOINT (0x1p-126 - 0x1p-151)

static bool is_nan(float x)
{
    const uint32_t u = moe_math_bits(x);
    return (u & F32_EXP) == F32_EXP && (u & ~(F32_EXP | F32_SIGN)) != 0;
}

static float quiet(float x) { return moe_math_from_bits(moe_math_bits(x) | F32_QUIET); }

/* A denormal read (or written) as a zero of its sign. */
static float daz(float x)
{
    const uint32_t u = moe_math_bits(x);
    return (u & F32_EXP) == 0 ? moe_math_from_bits(u & F32_SIGN) : x;
}

static float bf16(uint16_t code) { return daz(moe_math_from_bits((uint32_t)code << 16)); }

/*
 * x·y + z rounded once and flushed as the tile unit does; x, y, z already read with DAZ.
 * fmaf rounds a result below 2^-126 on the denormal grid, which matters only where it gives
 * exactly ±2^-126: then the exact sum decides. fma in double tells which side of the
 * midpoint it lies on: when |x·y| ≥ 2^-152 every term is a multiple of 2^-167 (16-bit
 * product significands, z a multiple of 2^-149), so a sum below 2^-125 is exact in double;
 * when |x·y| < 2^-152, z (a nonzero multiple of 2^-149, since the sum is near 2^-126) lies at
 * least 2^-151 from the midpoint and the sum at least 2^-152, far beyond double's rounding.
 */
static float fma_ftz(float x, float y, float z)
{
    if (is_nan(x)) return quiet(x);
    if (is_nan(y)) return quiet(y);
    if (is_nan(z)) return quiet(z);
    const float r = fmaf(x, y, z);
    if (is_nan(r)) return moe_math_from_bits(F32_DEFAULT_NAN); /* Inf·0, Inf - Inf */
    const float mag = fabsf(r);
    if (mag < F32_MIN_NORMAL) return copysignf(0.0f, r);
    if (mag == F32_MIN_NORMAL && fabs(fma((double)x, (double)y, (double)z)) < FTZ_MIDPOINT)
        return copysignf(0.0f, r);
    return r;
}

/* x + y rounded and flushed; x and y normal, zero, Inf or NaN, so a sum below 2^-126 is a
 * multiple of 2^-149 and exact: flushing it is all FTZ does. */
static float add_ftz(float x, float y)
{
    if (is_nan(x)) return quiet(x);
    if (is_nan(y)) return quiet(y);
    const float r = x + y;
    if (is_nan(r)) return moe_math_from_bits(F32_DEFAULT_NAN); /* Inf - Inf */
    return fabsf(r) < F32_MIN_NORMAL ? copysignf(0.0f, r) : r;
}

float moe_tile_bf16_dot_ref(float c, const uint16_t *x, const uint16_t *w, size_t kp)
{
    float even = 0.0f, odd = 0.0f;
    for (size_t k = 0; k < kp; k++) {
        even = fma_ftz(bf16(x[2 * k]), bf16(w[2 * k]), even);
        odd = fma_ftz(bf16(x[2 * k + 1]), bf16(w[2 * k + 1]), odd);
    }
    return add_ftz(daz(c), add_ftz(even, odd));
}

void moe_tile_bf16_dp_ref(size_t m, size_t n, size_t kp, float *c, size_t ldc, const uint16_t *a,
                          size_t lda, const uint16_t *b, size_t ldb)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            uint16_t w[2 * MOE_TILE_BF16_PAIRS];
            for (size_t k = 0; k < kp; k++) {
                w[2 * k] = b[k * ldb + 2 * j];
                w[2 * k + 1] = b[k * ldb + 2 * j + 1];
            }
            c[i * ldc + j] = moe_tile_bf16_dot_ref(c[i * ldc + j], a + i * lda, w, kp);
        }
}
