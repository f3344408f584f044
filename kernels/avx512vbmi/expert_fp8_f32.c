/* expert_fp8_f32.c — the AVX512-VBMI expert kernel set of the f32 recipe for FP8 weights: byte-table decode, 32x16. */
#include "kernels/avx512/expert_f32_common.h"
#include "select/kernel.h"

/*
 * The micro-kernels of kernels/avx512/expert_fp8_f32_body.h over the groups order of the codes
 * (kernels/ref/expert_layout.h). A group of 64 codes becomes its four f32 weight vectors in
 * 11 uops instead of the k-major set's 16: two vpermt2b look the 7-bit magnitude up in the
 * tables of the low and the high byte of bf16(e4m3(code) · 2^-8) (exact for every non-NaN
 * code, subnormals included), one vpternlogd puts the code's sign into bit 7 of the high
 * byte, vpunpck{l,h}bw interleave the bytes into bf16 words, and a shift (the low word of a
 * dword) or a mask (the high word) makes each word an f32. The packing's order puts the
 * results in row order. The weights, and so every bit of the output, equal the k-major set's.
 */

/* bf16(e4m3(m) · 2^-8) for a magnitude m = 0..127 (127, NaN, is never packed): normal
 * m = 8e + f (e ≥ 1) is 2^(e-15) · (1 + f/8), biased exponent 112 + e; subnormal m = f < 8
 * is f · 2^-17, its leading bit setting the exponent (110, 111 or 112). */
#define SUB_BF16(f)                                                                                \
    ((f) == 0   ? 0                                                                                \
     : (f) >= 4 ? 112 << 7 | ((f) << 5 & 0x7F)                                                     \
     : (f) >= 2 ? 111 << 7 | ((f) << 6 & 0x7F)                                                     \
                : 110 << 7)
#define FP8_BF16(m) ((m) >= 8 ? (112 + ((m) >> 3)) << 7 | ((m)&7) << 4 : SUB_BF16(m))
#define LO(m) (FP8_BF16(m) & 0xFF)
#define HI(m) (FP8_BF16(m) >> 8)
#define ROW8(F, m) F(m), F(m + 1), F(m + 2), F(m + 3), F(m + 4), F(m + 5), F(m + 6), F(m + 7)
#define ROW64(F, m)                                                                                \
    ROW8(F, m), ROW8(F, m + 8), ROW8(F, m + 16), ROW8(F, m + 24), ROW8(F, m + 32),                 \
        ROW8(F, m + 40), ROW8(F, m + 48), ROW8(F, m + 56)

/* The low and the high bytes (bit 7, the sign, clear) of those bf16, by magnitude. */
static const unsigned char table_lo[128] __attribute__((aligned(64))) = {ROW64(LO, 0),
                                                                          ROW64(LO, 64)};
static const unsigned char table_hi[128] __attribute__((aligned(64))) = {ROW64(HI, 0),
                                                                          ROW64(HI, 64)};

typedef struct fp8_dec {
    __m512i lo0, lo1, hi0, hi1; /* the tables, magnitudes 0..63 and 64..127 */
    __m512i sign;               /* 0x80 per byte */
    __m512i high;               /* 0xFFFF0000 per dword */
} fp8_dec;

INLINE fp8_dec fp8_dec_init(void)
{
    fp8_dec d;
    d.lo0 = _mm512_load_si512(table_lo);
    d.lo1 = _mm512_load_si512(table_lo + 64);
    d.hi0 = _mm512_load_si512(table_hi);
    d.hi1 = _mm512_load_si512(table_hi + 64);
    d.sign = _mm512_set1_epi8((char)0x80);
    d.high = _mm512_set1_epi32((int)0xFFFF0000u);
    return d;
}

INLINE void fp8_decode64(const fp8_dec *d, const unsigned char *c, __m512 w[4])
{
    const __m512i v = _mm512_loadu_si512(c);
    const __m512i lo = _mm512_permutex2var_epi8(d->lo0, v, d->lo1);
    __m512i hi = _mm512_permutex2var_epi8(d->hi0, v, d->hi1);
    hi = _mm512_ternarylogic_epi32(hi, v, d->sign, 0xF8); /* hi | (v & 0x80) */
    const __m512i w01 = _mm512_unpacklo_epi8(lo, hi), w23 = _mm512_unpackhi_epi8(lo, hi);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w01, 16));
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(w01, d->high));
    w[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w23, 16));
    w[3] = _mm512_castsi512_ps(_mm512_and_si512(w23, d->high));
}

#include "kernels/avx512/expert_fp8_f32_body.h"

MOE_XL_SET(moe_expert_fp8_f32_32x16__avx512vbmi, MOE_RECIPE_F32, MOE_REQ_AVX512VBMI, MR_FP8,
           MOE_XL_FP8_LAYOUT(fp8g), .gateup = gateup_fp8, .down = down_fp8,
           .gateup_tiles = gateup_fp8_tiles, .down_tiles = down_fp8_tiles, .tiles_from_m = MR + 1,
           .tiles_to_m = DIRECT_PAIRS);
