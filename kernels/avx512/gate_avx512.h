/* gate_avx512.h — internal: the AVX-512 router gate tile frame (masks, accumulators, epilogue). */
#ifndef MOE_KERNELS_AVX512_GATE_AVX512_H
#define MOE_KERNELS_AVX512_GATE_AVX512_H

#include <immintrin.h>

#include "kernels/gate_blocking.h"

/*
 * Shared by the FMA kernels (kernels/avx512/gate_gemm.c) and the vdpbf16ps kernel
 * (kernels/avx512bf16/, compiled with the AVX-512 flags too): everything of a tile function
 * but its inner loop. Tiles are up to 6 rows × 8 tiles of 16 experts (NT(mr) below), one
 * zmm accumulator each; the helpers are always inlined with constant MR and NT, so the
 * accumulator array lives in registers.
 */

#define MOE_GATE_INLINE static inline __attribute__((always_inline))

/* Tiles per call for mr rows: 8 independent chains for decode, 24 accumulators from 4 rows. */
static const uint8_t moe_gate_avx512_nt_max[7] = {0, 8, 8, 6, 4, 4, 4};

/* Round to nearest even to bf16, kept as the upper half of an f32; NaN quieted (dtype.h). */
MOE_GATE_INLINE __m512 moe_gate_avx512_rne_bf16(__m512 v)
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    __m512i q = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_mask_blend_epi32(nan, r, q), hi));
}

/* The lane masks of the tiles, and the accumulators: +0 in the first chunk, else the partial
 * sums stored in the logits. */
MOE_GATE_INLINE void moe_gate_avx512_begin(const moe_gate_tile *t, __m512 acc[6][8],
                                           __mmask16 mask[8], const int MR, const int NT)
{
#pragma GCC unroll 8
    for (int j = 0; j < NT; j++)
        mask[j] = (__mmask16)moe_gate_lane_mask(t->n_valid, (size_t)j);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++)
            acc[i][j] = t->first ? _mm512_setzero_ps()
                                 : _mm512_maskz_loadu_ps(mask[j], t->c + i * t->ldc + 16 * j);
}

/* Stores the accumulators; in the last chunk the epilogue first: + bias, then the rounding. */
MOE_GATE_INLINE void moe_gate_avx512_end(const moe_gate_tile *t, __m512 acc[6][8],
                                         const __mmask16 mask[8], const int MR, const int NT)
{
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++) {
            __m512 v = acc[i][j];
            if (t->last && t->bias)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[j], t->bias + 16 * j));
            if (t->last && t->round_bf16) v = moe_gate_avx512_rne_bf16(v);
            _mm512_mask_storeu_ps(t->c + i * t->ldc + 16 * j, mask[j], v);
        }
    }
}

/* A switch over (mr, nt) calling TILE(t, MR, NT, KIND) with constants, per nt_max above. */
#define MOE_GATE_AVX512_NT1_4(TILE, MR, KIND)                                                      \
    case (MR)*16 + 1: TILE(t, MR, 1, KIND); return;                                                \
    case (MR)*16 + 2: TILE(t, MR, 2, KIND); return;                                                \
    case (MR)*16 + 3: TILE(t, MR, 3, KIND); return;                                                \
    case (MR)*16 + 4:                                                                              \
        TILE(t, MR, 4, KIND);                                                                      \
        return;
#define MOE_GATE_AVX512_NT5_6(TILE, MR, KIND)                                                      \
    case (MR)*16 + 5: TILE(t, MR, 5, KIND); return;                                                \
    case (MR)*16 + 6:                                                                              \
        TILE(t, MR, 6, KIND);                                                                      \
        return;
#define MOE_GATE_AVX512_NT7_8(TILE, MR, KIND)                                                      \
    case (MR)*16 + 7: TILE(t, MR, 7, KIND); return;                                                \
    case (MR)*16 + 8:                                                                              \
        TILE(t, MR, 8, KIND);                                                                      \
        return;
#define MOE_GATE_AVX512_DISPATCH(TILE, KIND)                                                       \
    switch (t->mr * 16 + t->nt) {                                                                  \
        MOE_GATE_AVX512_NT1_4(TILE, 1, KIND)                                                       \
        MOE_GATE_AVX512_NT5_6(TILE, 1, KIND)                                                       \
        MOE_GATE_AVX512_NT7_8(TILE, 1, KIND)                                                       \
        MOE_GATE_AVX512_NT1_4(TILE, 2, KIND)                                                       \
        MOE_GATE_AVX512_NT5_6(TILE, 2, KIND)                                                       \
        MOE_GATE_AVX512_NT7_8(TILE, 2, KIND)                                                       \
        MOE_GATE_AVX512_NT1_4(TILE, 3, KIND)                                                       \
        MOE_GATE_AVX512_NT5_6(TILE, 3, KIND)                                                       \
        MOE_GATE_AVX512_NT1_4(TILE, 4, KIND)                                                       \
        MOE_GATE_AVX512_NT1_4(TILE, 5, KIND)                                                       \
        MOE_GATE_AVX512_NT1_4(TILE, 6, KIND)                                                       \
    }

#endif
