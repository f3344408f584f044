/* expert_f32_common.h — internal: what the AVX2 f32-recipe expert kernel sets share: prefetch, the
 * passes' token split, the epilogues. */
#ifndef MOE_KERNELS_AVX2_EXPERT_F32_COMMON_H
#define MOE_KERNELS_AVX2_EXPERT_F32_COMMON_H

#include <immintrin.h>
#include <stddef.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/inline.h"

/*
 * A token's 16 rows are two ymm row groups of 8; acc[i][j] below is token i's row group j:
 * gate/up j = 0, 1 gate's rows 0-7, 8-15 and j = 2, 3 up's; down j = 0, 1 its rows (its two
 * chains already summed). Prefetch runs 8 KB ahead into L2 (bench/NOTES.md v3).
 */

#define PF_BYTES 8192
#define UNROLL _Pragma("GCC unroll 8")

INLINE void prefetch(const unsigned char *p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* Tokens in the next pass of a buffered path when rest remain: 3 (12 chains where the FMA
 * latency wants 8), but 4 as 2 + 2, not 3 + 1, whose lone token's 4 chains would wait on it. */
INLINE size_t pass_tokens(size_t rest) { return rest >= 3 && rest != 4 ? 3 : rest >= 2 ? 2 : 1; }

/* gate/up's outputs of M tokens: + bias, the activation, h. */
INLINE void gateup_out(const size_t M, __m256 acc[][4], const unsigned char *tile,
                       const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    const __m256 bg0 = _mm256_loadu_ps((const float *)tile),
                 bg1 = _mm256_loadu_ps((const float *)tile + 8);
    const __m256 bu0 = _mm256_loadu_ps((const float *)tile + 16),
                 bu1 = _mm256_loadu_ps((const float *)tile + 24);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        __m256 lo = act8(act, _mm256_add_ps(acc[i][0], bg0), _mm256_add_ps(acc[i][2], bu0));
        __m256 hi = act8(act, _mm256_add_ps(acc[i][1], bg1), _mm256_add_ps(acc[i][3], bu1));
        store16(h + i * hs, lo, hi, n_valid);
    }
}

/* down's outputs of M tokens: + bias, y. */
INLINE void down_out(const size_t M, __m256 acc[][4], const unsigned char *tile, float *y,
                     size_t ys, size_t n_valid)
{
    const __m256 b0 = _mm256_loadu_ps((const float *)tile),
                 b1 = _mm256_loadu_ps((const float *)tile + 8);
    UNROLL
    for (size_t i = 0; i < M; i++)
        store16(y + i * ys, _mm256_add_ps(acc[i][0], b0), _mm256_add_ps(acc[i][1], b1), n_valid);
}

#endif
