/* expert_shared.h — internal: what every AVX-512 expert kernel set shares: the epilogue, h's bf16
 * rounding, the rows mask, scale loads, the dispatch on m. */
#ifndef MOE_KERNELS_AVX512_EXPERT_SHARED_H
#define MOE_KERNELS_AVX512_EXPERT_SHARED_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/expert.h"

/* An f32 stored in a packed tile (any alignment). */
static inline __attribute__((always_inline)) float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The epilogue: moe_xr_act (kernels/ref/expert_ref.h) on 16 lanes. */
static inline __attribute__((always_inline)) __m512 act16(const moe_act_params *a, __m512 g,
                                                          __m512 u)
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

/* moe_f32_to_bf16 on 16 lanes (nearest even, NaN quiet, subnormals kept), narrowed to 16
 * words: integer operations, not vcvtneps2bf16, which would flush subnormal results. */
static inline __attribute__((always_inline)) __m256i to_bf16(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    r = _mm512_srli_epi32(r, 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, q);
    return _mm512_cvtepi32_epi16(r);
}

/* The lanes of a tile's n_valid rows (n_valid ≤ 16). */
static inline __attribute__((always_inline)) __mmask16 rows_mask(size_t n_valid)
{
    return (__mmask16)((1u << n_valid) - 1u);
}

/* m tokens in groups of at most gmax, as equal as they go: group j of ng has base + (j < extra)
 * tokens (m = 9, gmax = 8: 5 and 4 rather than 8 and 1, whose one token would leave its FMA
 * or vpdpbusd chains bound by latency). */
typedef struct group_split {
    size_t ng, base, extra;
} group_split;

static inline __attribute__((always_inline)) group_split group_split_of(size_t m, size_t gmax)
{
    const size_t ng = (m + gmax - 1) / gmax;
    group_split s = {ng, m / ng, m % ng};
    return s;
}

/* case n: body(n, ...): each token count its own instantiation, so every loop over a call's
 * tokens unrolls and its accumulators stay in registers. */
#define DISPATCH_CASE(n, body, ...)                                                                \
    case n:                                                                                        \
        body(n, __VA_ARGS__);                                                                      \
        break;
#define DISPATCH_CASES_8(body, ...)                                                                \
    DISPATCH_CASE(1, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(2, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(3, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(4, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(5, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(6, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(7, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(8, body, __VA_ARGS__)
#define DISPATCH_CASES_11(body, ...)                                                               \
    DISPATCH_CASES_8(body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(9, body, __VA_ARGS__)                                                            \
    DISPATCH_CASE(10, body, __VA_ARGS__)                                                           \
    DISPATCH_CASE(11, body, __VA_ARGS__)

/* body(M, ...) with M = m as a compile-time constant, for m = 1..8 (nothing otherwise). */
#define DISPATCH(body, m, ...)                                                                     \
    do {                                                                                           \
        switch (m) {                                                                               \
            DISPATCH_CASES_8(body, __VA_ARGS__)                                                    \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

/* The same for m = 1..12 (the bf16 set of the f32 recipe: 12 tokens' 24 accumulators). */
#define DISPATCH12(body, m, ...)                                                                   \
    do {                                                                                           \
        switch (m) {                                                                               \
            DISPATCH_CASE(9, body, __VA_ARGS__)                                                    \
            DISPATCH_CASE(10, body, __VA_ARGS__)                                                   \
            DISPATCH_CASE(11, body, __VA_ARGS__)                                                   \
            DISPATCH_CASE(12, body, __VA_ARGS__)                                                   \
        default: DISPATCH(body, m, __VA_ARGS__); break;                                            \
        }                                                                                          \
    } while (0)

#endif
