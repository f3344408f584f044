/* fp8_bytes.h — internal: 64 E4M3 codes to bf16 words or four f32 weight vectors by two
 * byte-table lookups (VBMI). */
#ifndef MOE_KERNELS_AVX512VBMI_FP8_BYTES_H
#define MOE_KERNELS_AVX512VBMI_FP8_BYTES_H

#include <immintrin.h>
#include <stdbool.h>

#include "kernels/inline.h"

/*
 * Shared by the f32 recipe's VBMI set (kernels/avx512vbmi/expert_fp8_f32.c, the groups order)
 * and the tile recipe's VBMI and AMX-BF16 sets (kernels/avx512vbmi/expert_fp8_tile.c, the pairs
 * order; kernels/avx512amxbf16/expert_fp8_tile.c takes the bf16 words as B lines). 64 codes
 * become four f32 vectors in 9 operations: two vpermt2b look the 7-bit magnitude up in the
 * tables of the low and the high byte of bf16(e4m3(code) · 2^-8) (exact for every non-NaN code,
 * subnormals included), one vpternlogd puts the code's sign into bit 7 of the high byte,
 * vpunpck{l,h}bw interleave the bytes into bf16 words, and a shift (the low word of a dword) or
 * a mask (the high word) makes each word an f32. In each 128-bit lane L of the 64 codes, dword d
 * < 4 of w[0] / w[1] is the low / high word of codes 16L + 2d, 16L + 2d + 1, and dword d of
 * w[2] / w[3] the same for codes 16L + 8 + 2d, 16L + 9 + 2d.
 */

/* bf16(e4m3(m) · 2^-8) for a magnitude m = 0..127 (127, NaN, is never packed): normal
 * m = 8e + f (e ≥ 1) is 2^(e-15) · (1 + f/8), biased exponent 112 + e; subnormal m = f < 8
 * is f · 2^-17, its leading bit setting the exponent (110, 111 or 112). */
#define FP8B_SUB(f)                                                                                \
    ((f) == 0   ? 0                                                                                \
     : (f) >= 4 ? 112 << 7 | ((f) << 5 & 0x7F)                                                     \
     : (f) >= 2 ? 111 << 7 | ((f) << 6 & 0x7F)                                                     \
                : 110 << 7)
#define FP8B_BF16(m) ((m) >= 8 ? (112 + ((m) >> 3)) << 7 | ((m)&7) << 4 : FP8B_SUB(m))
#define FP8B_LO(m) (FP8B_BF16(m) & 0xFF)
#define FP8B_HI(m) (FP8B_BF16(m) >> 8)
#define FP8B_ROW8(F, m) F(m), F(m + 1), F(m + 2), F(m + 3), F(m + 4), F(m + 5), F(m + 6), F(m + 7)
#define FP8B_ROW64(F, m)                                                                           \
    FP8B_ROW8(F, m), FP8B_ROW8(F, m + 8), FP8B_ROW8(F, m + 16), FP8B_ROW8(F, m + 24),              \
        FP8B_ROW8(F, m + 32), FP8B_ROW8(F, m + 40), FP8B_ROW8(F, m + 48), FP8B_ROW8(F, m + 56)

/* The low and the high bytes (bit 7, the sign, clear) of those bf16, by magnitude. */
static const unsigned char fp8b_table_lo[128]
    __attribute__((aligned(64))) = {FP8B_ROW64(FP8B_LO, 0), FP8B_ROW64(FP8B_LO, 64)};
static const unsigned char fp8b_table_hi[128]
    __attribute__((aligned(64))) = {FP8B_ROW64(FP8B_HI, 0), FP8B_ROW64(FP8B_HI, 64)};

typedef struct fp8_dec {
    __m512i lo0, lo1, hi0, hi1; /* the tables, magnitudes 0..63 and 64..127 */
    __m512i sign;               /* 0x80 per byte */
    __m512i high;               /* 0xFFFF0000 per dword */
} fp8_dec;

INLINE fp8_dec fp8_dec_init(void)
{
    fp8_dec d;
    d.lo0 = _mm512_load_si512(fp8b_table_lo);
    d.lo1 = _mm512_load_si512(fp8b_table_lo + 64);
    d.hi0 = _mm512_load_si512(fp8b_table_hi);
    d.hi1 = _mm512_load_si512(fp8b_table_hi + 64);
    d.sign = _mm512_set1_epi8((char)0x80);
    d.high = _mm512_set1_epi32((int)0xFFFF0000u);
    return d;
}

/* The 64 codes in v as bf16 words, before the split: dword d of lane L of *w01 the codes
 * 16L + 2d (low word) and 16L + 2d + 1 (high word), of *w23 the same 8 codes further. */
INLINE void fp8_bytes_words(const fp8_dec *d, __m512i v, __m512i *w01, __m512i *w23)
{
    const __m512i lo = _mm512_permutex2var_epi8(d->lo0, v, d->lo1);
    __m512i hi = _mm512_permutex2var_epi8(d->hi0, v, d->hi1);
    hi = _mm512_ternarylogic_epi32(hi, v, d->sign, 0xF8); /* hi | (v & 0x80) */
    *w01 = _mm512_unpacklo_epi8(lo, hi);
    *w23 = _mm512_unpackhi_epi8(lo, hi);
}

/* The 64 codes in v into w[0..3] (the order above). */
INLINE void fp8_bytes_decode(const fp8_dec *d, __m512i v, __m512 w[4])
{
    __m512i w01, w23;
    fp8_bytes_words(d, v, &w01, &w23);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w01, 16));
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(w01, d->high));
    w[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w23, 16));
    w[3] = _mm512_castsi512_ps(_mm512_and_si512(w23, d->high));
}

/* Two 16-row streams decoded side by side (32 codes of each at one k-pair: the first stream's
 * in bytes 0-31, the second's in 32-63), the vectors a and b holding per lane what w01 and w23
 * hold (lanes 0-7 the first stream's rows 0-3 and 8-11 in a, 4-7 and 12-15 in b; lanes 8-15 the
 * second's): the 16 rows of the first (second = false) or the second stream in order. */
INLINE __m512 fp8_bytes_rows(__m512 a, __m512 b, bool second)
{
    const __m512i first_idx =
        _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second_idx =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    return _mm512_permutex2var_ps(a, second ? second_idx : first_idx, b);
}

#endif
