/* cvt_mxfp4_f32.c — moe_cvt_mxfp4_f32__avx2: MXFP4 block decode with AVX2 byte shuffles. */
#include <immintrin.h>

#include "kernels/cvt.h"

/*
 * The decode is a 16-entry table lookup with vpshufb, the trick the MXFP4 GEMM kernels will
 * reuse (there with an int8 table). Every E2M1 value is exactly a bf16 (it has at most 2
 * significant bits), so two byte tables give the low and high byte of the value's bf16;
 * interleaving them and putting each 16-bit word in the top half of a 32-bit lane (unpack
 * with zero) yields the exact f32, -0 included. One multiply by the block scale 2^(s-127)
 * is then exact (or ±Inf beyond FLT_MAX), and a NaN scale turns the block into the quiet
 * NaN of cvt.h, because x86 returns the NaN operand of a multiply unchanged.
 *
 * Lane order. vpunpck* work inside 128-bit lanes, so the 16 input bytes are first
 * broadcast to both lanes and gathered (vpshufb) so that after the nibble split and the
 * three unpack levels each 256-bit register holds 8 consecutive outputs:
 *   lane 0 takes bytes 0,1, 4,5, 8,9, 12,13  -> elements 0-3, 8-11, 16-19, 24-27
 *   lane 1 takes bytes 2,3, 6,7, 10,11, 14,15 -> elements 4-7, 12-15, 20-23, 28-31
 * and unpacklo/hi of the words then give elements 0-7, 8-15, 16-23, 24-31.
 */

/* bf16 of E2M1 codes 0..15: +0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated
 * (0x0000 0x3F00 0x3F80 0x3FC0 0x4000 0x4040 0x4080 0x40C0, and | 0x8000). */
#define E2M1_BF16_LO 0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64
#define E2M1_BF16_HI 0, 63, 63, 63, 64, 64, 64, 64, -128, -65, -65, -65, -64, -64, -64, -64
#define GATHER_LANE0 0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13
#define GATHER_LANE1 2, 3, 6, 7, 10, 11, 14, 15, 2, 3, 6, 7, 10, 11, 14, 15

void moe_cvt_mxfp4_f32__avx2(size_t nblocks, const uint8_t *blocks, const uint8_t *scales, float *y)
{
    const __m256i gather = _mm256_setr_epi8(GATHER_LANE0, GATHER_LANE1);
    const __m256i table_lo = _mm256_setr_epi8(E2M1_BF16_LO, E2M1_BF16_LO);
    const __m256i table_hi = _mm256_setr_epi8(E2M1_BF16_HI, E2M1_BF16_HI);
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i zero = _mm256_setzero_si256();
    for (size_t b = 0; b < nblocks; b++) {
        __m128i q16 = _mm_loadu_si128((const __m128i *)(blocks + 16 * b));
        __m256i q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(q16), gather);
        __m256i lo = _mm256_and_si256(q, nibble);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
        __m256i codes = _mm256_unpacklo_epi8(lo, hi);
        __m256i vlo = _mm256_shuffle_epi8(table_lo, codes);
        __m256i vhi = _mm256_shuffle_epi8(table_hi, codes);
        __m256i w0 = _mm256_unpacklo_epi8(vlo, vhi);
        __m256i w1 = _mm256_unpackhi_epi8(vlo, vhi);
        __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32((int)moe_cvt_e8m0_bits(scales[b])));
        float *out = y + 32 * b;
        _mm256_storeu_ps(out,
                         _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w0)), s));
        _mm256_storeu_ps(out + 8,
                         _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w0)), s));
        _mm256_storeu_ps(out + 16,
                         _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w1)), s));
        _mm256_storeu_ps(out + 24,
                         _mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w1)), s));
    }
}
