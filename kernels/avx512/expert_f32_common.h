/* expert_f32_common.h — internal: what the AVX-512 f32-recipe expert kernels share. */
#ifndef MOE_KERNELS_AVX512_EXPERT_F32_COMMON_H
#define MOE_KERNELS_AVX512_EXPERT_F32_COMMON_H

#include "kernels/avx512/expert_shared.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/inline.h"

/*
 * Register tile: up to 12 tokens (bf16 weights; FP8 weights 8, on the direct path) by the
 * tile's 16 rows, one zmm accumulator per token and projection for gate/up, two per token for
 * down (its chains over the even and the odd k-pairs), so 24 (FP8: 16) of the 32 registers
 * accumulate and one token keeps two FMA chains in flight. Each element is computed exactly as
 * in kernels/ref/expert_f32.c: FMAs in k order with the 16 rows' weight vector and the token's
 * activation broadcast, FP8 block sums scaled into totals kept on the stack (touched once per
 * 128-K block), so the bits equal the reference's for every m. m is a compile-time constant of
 * each instantiation (bf16 1..12, FP8 1..8), so the accumulators live in registers. Weights are
 * widened in registers, never in memory (the kernel sets say how).
 *
 * Prefetch runs 8 KB ahead into L2 and 2 KB ahead into L1, in the tile and on into the next
 * one: decode streams each tile once from memory. The hardware prefetcher alone left a
 * quarter of the read bandwidth unused on the development machine; the L1 prefetch beside
 * the L2 one took another 5–12 % at 1–16 tokens (bench/NOTES.md, v3). Where a bf16 tile's
 * first stream's L2 line would fall in its second stream, it goes to the next tile's second
 * stream instead (moe_xl_prefetch_switch).
 */

#define NR MOE_XL_NR
#define MR 8       /* FP8 weights: up to 8 tokens on the direct path */
#define MR_BF16 12 /* bf16 weights: 12 tokens, 24 accumulators */
#define PF_BYTES 8192
#define PF_L1_BYTES 2048
/* Every loop over the tokens of a tile unrolls, so its accumulators are registers. */
#define UNROLL _Pragma("GCC unroll 16")

INLINE void prefetch_ahead(const unsigned char *p)
{
    _mm_prefetch((const char *)p + PF_BYTES, _MM_HINT_T1);
    _mm_prefetch((const char *)p + PF_L1_BYTES, _MM_HINT_T0);
}

/* prefetch_ahead for one of two tiles read side by side (end: its own end; skip: the tile
 * size, 0 for a tile read alone): its L2 line by moe_xl_pair_prefetch. */
INLINE void prefetch_side(const unsigned char *p, const unsigned char *end, size_t skip)
{
    _mm_prefetch((const char *)moe_xl_pair_prefetch(p + PF_BYTES, end, skip), _MM_HINT_T1);
    _mm_prefetch((const char *)p + PF_L1_BYTES, _MM_HINT_T0);
}

/* The L2 line pf bytes past p and the L1 line PF_L1_BYTES past it. */
INLINE void prefetch_at(const unsigned char *p, size_t pf)
{
    _mm_prefetch((const char *)p + pf, _MM_HINT_T1);
    _mm_prefetch((const char *)p + PF_L1_BYTES, _MM_HINT_T0);
}

#endif
