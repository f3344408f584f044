/* cvt_mxfp4_f32.c — moe_cvt_mxfp4_f32__avx512: MXFP4 block decode with AVX-512 byte shuffles. */
#include <immintrin.h>

#include "kernels/cvt.h"

/*
 * The recipe of the AVX2 kernel (see kernels/avx2/cvt_mxfp4_f32.c): a nibble split, two
 * vpshufb lookups in 16-entry tables giving the low and high byte of each E2M1 value's
 * bf16, unpacks that place the bf16 in the top half of an f32, and one exact multiply by the
 * block scale (a NaN scale yields the contract's quiet NaN). Two blocks (32 bytes -> 64
 * floats, four 512-bit stores) per step.
 *
 * Lane order. The unpacks work inside 128-bit lanes; for output register k (elements
 * 16k..16k+15 of the two blocks) lane l must end up with elements 16k+4l..16k+4l+3, which
 * come from input bytes 8k+2l and 8k+2l+1, i.e. input 16-bit word 4k+l. So one vpermw
 * (AVX512BW, crosses lanes) first moves word 4k+l to word k of lane l (word 8l+k); words
 * 4..7 of each lane are not used. A last odd block runs the same step with the second
 * block's bytes zeroed and only its first two registers stored.
 */
#define E2M1_BF16_LO 0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64, -128, -64
#define E2M1_BF16_HI 0, 63, 63, 63, 64, 64, 64, 64, -128, -65, -65, -65, -64, -64, -64, -64

typedef struct mxfp4_consts {
    __m512i gather, table_lo, table_hi, nibble;
} mxfp4_consts;

static inline void decode2(const mxfp4_consts *k, __m256i q32, __m512 s0, __m512 s1, float *out,
                           int nblocks)
{
    const __m512i zero = _mm512_setzero_si512();
    __m512i q = _mm512_permutexvar_epi16(k->gather, _mm512_zextsi256_si512(q32));
    __m512i lo = _mm512_and_si512(q, k->nibble);
    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), k->nibble);
    __m512i codes = _mm512_unpacklo_epi8(lo, hi);
    __m512i vlo = _mm512_shuffle_epi8(k->table_lo, codes);
    __m512i vhi = _mm512_shuffle_epi8(k->table_hi, codes);
    __m512i w0 = _mm512_unpacklo_epi8(vlo, vhi);
    __m512i w1 = _mm512_unpackhi_epi8(vlo, vhi);
    _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0)), s0));
    _mm512_storeu_ps(out + 16,
                     _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0)), s0));
    if (nblocks < 2) return;
    _mm512_storeu_ps(out + 32,
                     _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1)), s1));
    _mm512_storeu_ps(out + 48,
                     _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1)), s1));
}

static inline __m512 scale_of(uint8_t s)
{
    return _mm512_castsi512_ps(_mm512_set1_epi32((int)moe_cvt_e8m0_bits(s)));
}

void moe_cvt_mxfp4_f32__avx512(size_t nblocks, const uint8_t *blocks, const uint8_t *scales,
                               float *y)
{
    /* Word 8l+k <- word 4k+l for k = 0..3; the rest repeat the pattern and are ignored. */
    const mxfp4_consts k = {
        .gather = _mm512_set_epi16(15, 11, 7, 3, 15, 11, 7, 3, 14, 10, 6, 2, 14, 10, 6, 2, 13, 9, 5,
                                   1, 13, 9, 5, 1, 12, 8, 4, 0, 12, 8, 4, 0),
        .table_lo = _mm512_broadcast_i32x4(_mm_setr_epi8(E2M1_BF16_LO)),
        .table_hi = _mm512_broadcast_i32x4(_mm_setr_epi8(E2M1_BF16_HI)),
        .nibble = _mm512_set1_epi8(0x0F),
    };
    size_t b = 0;
    for (; b + 2 <= nblocks; b += 2) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(blocks + 16 * b));
        decode2(&k, q, scale_of(scales[b]), scale_of(scales[b + 1]), y + 32 * b, 2);
    }
    if (b < nblocks) {
        __m256i q = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(blocks + 16 * b)));
        decode2(&k, q, scale_of(scales[b]), scale_of(scales[b]), y + 32 * b, 1);
    }
}
