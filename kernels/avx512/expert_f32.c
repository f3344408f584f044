/* expert_f32.c — the AVX-512 expert kernel sets of the f32 recipe: bf16 12x16, FP8 32x16. */
#include "select/kernel.h"

/*
 * kernels/avx512/expert_f32_common.h has the register tile, the epilogue and the prefetch.
 * Weights are widened in registers, never in memory:
 *  - bf16 pairs: one 64-byte load per projection and k-pair; k = 2q is the dword shifted left
 *    by 16, k = 2q+1 the dword with its low half cleared (2 ALU ops per 32 weights). gate and
 *    up (down: its even and odd pairs) are two streams of the tile, read side by side; the
 *    micro-kernels are kernels/avx512/expert_pairs_f32_body.h's (the f32-weight set's too).
 *  - FP8, k-major codes: the 32 codes of k (16 gate rows, 16 up rows) sign-extend to words
 *    (vpmovsxbw); (w << 7) & 0xBFFF is the f16 of e4m3(code) · 2^-8 (bit 15 = sign from the
 *    extension, bit 14 cleared); vcvtph2ps of each half gives the gate and up vectors
 *    exactly. That is 8 uops per 32 codes (16 FMAs at m = 8); the micro-kernels are
 *    kernels/avx512/expert_fp8_f32_body.h's (kernels/avx512vbmi/ has a cheaper decode).
 */

#include "kernels/avx512/expert_f32_common.h"

/* ---- bf16 weights: the pairs body over the widening ---------------------------------- */

#define PAIR_LINE MOE_XL_BF16_LINE
#define PAIR_XL(fn) moe_xl_bf16_##fn

/* The 16 rows' pair at p as two f32 vectors: k = 2q (even) and k = 2q + 1 (odd). */
INLINE void pair_load(const unsigned char *p, __m512 *even, __m512 *odd)
{
    const __m512i l = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(l, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The even half of the pair at p (a half pair: its odd half is padding). */
INLINE __m512 pair_even(const unsigned char *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
}

#include "kernels/avx512/expert_pairs_f32_body.h"

/* ---- FP8 weights, k-major codes: the f16 decode --------------------------------------- */

typedef struct fp8_dec {
    __m512i mask; /* 0xBFFF per word: bit 14 cleared */
} fp8_dec;

INLINE fp8_dec fp8_dec_init(void)
{
    fp8_dec d = {_mm512_set1_epi16((short)0xBFFF)};
    return d;
}

/* 32 codes as the f16 words of e4m3(code) · 2^-8, each half widened to 16 f32. */
INLINE void fp8_decode32(const fp8_dec *d, const unsigned char *c, __m512 *w0, __m512 *w1)
{
    __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)c));
    w = _mm512_and_si512(_mm512_slli_epi16(w, 7), d->mask);
    *w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
    *w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
}

INLINE void fp8_decode64(const fp8_dec *d, const unsigned char *c, __m512 w[4])
{
    fp8_decode32(d, c, &w[0], &w[1]);
    fp8_decode32(d, c + 32, &w[2], &w[3]);
}

#include "kernels/avx512/expert_fp8_f32_body.h"

MOE_XL_SET(moe_expert_bf16_f32_12x16__avx512, MOE_RECIPE_F32, MOE_REQ_AVX512, MR_BF16,
           MOE_XL_BF16_LAYOUT, .gateup = gateup_pairs, .down = down_pairs);

MOE_XL_SET(moe_expert_fp8_f32_32x16__avx512, MOE_RECIPE_F32, MOE_REQ_AVX512, MR_FP8,
           MOE_XL_FP8_LAYOUT(fp8), .gateup = gateup_fp8, .down = down_fp8,
           .gateup_tiles = gateup_fp8_tiles, .down_tiles = down_fp8_tiles, .tiles_from_m = MR + 1,
           .tiles_to_m = DIRECT_PAIRS);
