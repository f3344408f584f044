/* expert_f32_f32.c — the AVX-512 expert kernel set for f32 (and f16) weights, f32 recipe: 12x16. */
#include "select/kernel.h"

/*
 * The bf16 set's micro-kernels (kernels/avx512/expert_pairs_f32_body.h, as in
 * kernels/avx512/expert_f32.c) on the f32 pair layout (kernels/ref/expert_layout.h): a pair is
 * a 128-byte line, the 16 rows at k = 2q and at 2q + 1, so its two weight vectors are plain
 * loads where the bf16 set widens one 64-byte line (and each stream's step prefetches two
 * lines). Same bits as the reference for every m.
 */

#include "kernels/avx512/expert_f32_common.h"

#define PAIR_LINE MOE_XL_F32_LINE
#define PAIR_XL(fn) moe_xl_f32_##fn

/* The pair line at p: k = 2q (its first 64 bytes) and k = 2q + 1 (the next 64). */
INLINE void pair_load(const unsigned char *p, __m512 *even, __m512 *odd)
{
    *even = _mm512_loadu_ps((const float *)p);
    *odd = _mm512_loadu_ps((const float *)(p + 64));
}

/* k = 2q of the pair at p (a half pair: its k = 2q + 1 half is padding, not read). */
INLINE __m512 pair_even(const unsigned char *p) { return _mm512_loadu_ps((const float *)p); }

#include "kernels/avx512/expert_pairs_f32_body.h"

MOE_XL_SET(moe_expert_f32_f32_12x16__avx512, MOE_RECIPE_F32, MOE_REQ_AVX512, MR_BF16,
           MOE_XL_F32_LAYOUT, .gateup = gateup_pairs, .down = down_pairs);
