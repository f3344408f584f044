/* expert_f32_common.h — internal: what the AVX-512 f32-recipe expert kernels share. */
#ifndef MOE_KERNELS_AVX512_EXPERT_F32_COMMON_H
#define MOE_KERNELS_AVX512_EXPERT_F32_COMMON_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/ref/expert_layout.h"

/*
 * Register tile: up to 8 tokens by the tile's 16 rows, one zmm accumulator per token and
 * projection for gate/up, two per token for down (its chains over the even and the odd
 * k-pairs), so 16 of the 32 registers accumulate and one token keeps two FMA chains in
 * flight. Each element is computed exactly as in kernels/ref/expert_f32.c: FMAs in k order
 * with the 16 rows' weight vector and the token's activation broadcast, FP8 block sums scaled
 * into totals kept on the stack (touched once per 128-K block), so the bits equal the
 * reference's for every m. m is a compile-time constant of each instantiation (1..8), so the
 * accumulators live in registers. Weights are widened in registers, never in memory (the
 * kernel sets say how).
 *
 * Prefetch runs 8 KB ahead into L2 and 2 KB ahead into L1, in the tile and on into the next
 * one: decode streams each tile once from memory. The hardware prefetcher alone left a
 * quarter of the read bandwidth unused on the development machine; the L1 prefetch beside
 * the L2 one took another 5–12 % at 1–16 tokens (bench/NOTES.md, v3).
 */

#define NR MOE_XL_NR
#define MR 8 /* bf16 weights; FP8 weights up to 8 tokens (the direct path) */
#define PF_BYTES 8192
#define PF_L1_BYTES 2048
#define INLINE static inline __attribute__((always_inline))
/* Every loop over the tokens of a tile unrolls, so its accumulators are registers. */
#define UNROLL _Pragma("GCC unroll 8")

INLINE float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The line PF_BYTES past p into L2, and the one PF_L1_BYTES past p into L1. */
INLINE void prefetch_ahead(const unsigned char *p)
{
    _mm_prefetch((const char *)p + PF_BYTES, _MM_HINT_T1);
    _mm_prefetch((const char *)p + PF_L1_BYTES, _MM_HINT_T0);
}

/* The epilogue: moe_xr_act (kernels/ref/expert_ref.h) on 16 lanes. */
INLINE __m512 act16(const moe_act_params *a, __m512 g, __m512 u)
{
    if (a->kind != 0) {
        const __m512 lim = _mm512_set1_ps(a->limit), nlim = _mm512_set1_ps(-a->limit);
        g = _mm512_min_ps(lim, g);
        u = _mm512_min_ps(lim, u);
        u = _mm512_max_ps(nlim, u);
    }
    if (a->kind == 2) {
        __m512 s = moe_sigmoid_avx512(_mm512_mul_ps(_mm512_set1_ps(a->alpha), g));
        return _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_add_ps(u, _mm512_set1_ps(1.0f)));
    }
    return _mm512_mul_ps(_mm512_mul_ps(g, moe_sigmoid_avx512(g)), u);
}

INLINE __mmask16 rows_mask(size_t n_valid) { return (__mmask16)((1u << n_valid) - 1u); }

/* One instantiation per m, so every loop over tokens unrolls. */
#define DISPATCH(body, m, ...)                                                                     \
    do {                                                                                           \
        switch (m) {                                                                               \
        case 1: body(1, __VA_ARGS__); break;                                                       \
        case 2: body(2, __VA_ARGS__); break;                                                       \
        case 3: body(3, __VA_ARGS__); break;                                                       \
        case 4: body(4, __VA_ARGS__); break;                                                       \
        case 5: body(5, __VA_ARGS__); break;                                                       \
        case 6: body(6, __VA_ARGS__); break;                                                       \
        case 7: body(7, __VA_ARGS__); break;                                                       \
        case 8: body(8, __VA_ARGS__); break;                                                       \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

#endif
