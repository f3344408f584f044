/* expert_f32_f32.c — the AVX2 expert kernel set for f32 (and f16) weights, f32 recipe: 32x16. */
#include <stdbool.h>
#include <string.h>

#include "kernels/avx2/expert_f32_common.h"
#include "select/kernel.h"

/*
 * The f32 pair layout (kernels/ref/expert_layout.h) holds the weights as f32 already, so this
 * set is the bf16 set's buffered path (kernels/avx2/expert_f32.c) without the widening: the
 * tile is cut into blocks of 64 K (8 KB of gate/up, 4 KB of down, in L1 after the first pass)
 * and the tokens run over each block in passes of at most 3, each token's accumulators (gate/up:
 * 2 row groups of 8 per projection; down: 2 row groups per chain of even and odd k-pairs, 12 ymm
 * at 3 tokens) carried between blocks through totals on the stack, which is exact. Every
 * element's FMAs run in k order as kernels/ref/expert_f32.c's, so the bits equal the
 * reference's (and the AVX-512 set's) for every m and every position in the call. The first
 * pass over a block prefetches the next block 8 KB ahead into L2, both streams.
 */

#define NR MOE_XL_NR
#define MR 32  /* tokens per call */
#define PASS 3 /* tokens per pass: 12 accumulators of the 16 ymm */
#define KB 64  /* k per block (a multiple of 4: down's chains alternate every pair) */
#define LINE MOE_XL_F32_LINE

/* The 8 f32 at p. */
INLINE __m256 ld8(const unsigned char *p) { return _mm256_loadu_ps((const float *)p); }

/* Both streams' pair lines PF_BYTES past the line at l and its partner second bytes on, into L2. */
INLINE void prefetch_lines(const unsigned char *l, size_t second)
{
    prefetch(l + PF_BYTES);
    prefetch(l + PF_BYTES + 64);
    prefetch(l + second + PF_BYTES);
    prefetch(l + second + PF_BYTES + 64);
}

/* k = kk of gate/up for M tokens into acc (4 vectors of 8 per token: gate rows 0-7, 8-15, up rows
 * 0-7, 8-15). w: the weights, up: the second stream's offset; pf: prefetch (at even k). */
INLINE void gateup_k(const size_t M, const float *const *x, const unsigned char *w, size_t up,
                     size_t kk, bool pf, __m256 (*acc)[4])
{
    /* k = 2q + h sits at line q, half h (bytes 64·h), rows 8j.. at + 32·(j % 2). */
    const unsigned char *l = w + kk / 2 * LINE + (kk & 1) * 64;
    if (pf && (kk & 1) == 0) prefetch_lines(l, up);
    UNROLL
    for (size_t j = 0; j < 4; j++) {
        __m256 wj = ld8(l + (j / 2) * up + 32 * (j % 2));
        __asm__("" : "+x"(wj)); /* one load for all tokens (kernels/avx2/expert_f32.c) */
        UNROLL
        for (size_t i = 0; i < M; i++)
            acc[i][j] = _mm256_fmadd_ps(wj, _mm256_set1_ps(x[i][kk]), acc[i][j]);
    }
}

/* k = kk of down for M tokens: chain c (0: even k-pairs, 1: odd) of rows 8j.. in acc[i][2c + j].
 * Pair q lies in stream q & 1 (the second at odd), line q / 2; pf: prefetch (at k a multiple of
 * 4). */
INLINE void down_k(const size_t M, const float *const *x, const unsigned char *w, size_t odd,
                   size_t kk, bool pf, __m256 (*acc)[4])
{
    const size_t q = kk / 2, c = q & 1;
    const unsigned char *l = w + c * odd + q / 2 * LINE + (kk & 1) * 64;
    if (pf && (kk & 3) == 0) prefetch_lines(l, odd);
    UNROLL
    for (size_t j = 0; j < 2; j++) {
        __m256 wj = ld8(l + 32 * j);
        __asm__("" : "+x"(wj));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m256 xb = _mm256_set1_ps(x[i][kk]);
            if (c)
                acc[i][2 + j] = _mm256_fmadd_ps(wj, xb, acc[i][2 + j]);
            else
                acc[i][j] = _mm256_fmadd_ps(wj, xb, acc[i][j]);
        }
    }
}

/* k in [k0, k1) of gate/up (np 2) or down (np 1) for M tokens from their totals t (zeros before
 * the first block), in registers through the pass. */
INLINE void pass(const size_t M, const int np, const float *const *x, const unsigned char *w,
                 size_t second, size_t k0, size_t k1, bool pf, __m256 (*t)[4])
{
    __m256 acc[PASS][4];
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 4; j++)
        acc[i][j] = t[i][j];
    for (size_t kk = k0; kk < k1; kk++)
        if (np == 2)
            gateup_k(M, x, w, second, kk, pf, acc);
        else
            down_k(M, x, w, second, kk, pf, acc);
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 4; j++)
        t[i][j] = acc[i][j];
}

typedef void pass_fn(const float *const *x, const unsigned char *w, size_t second, size_t k0,
                     size_t k1, bool pf, __m256 (*t)[4]);

#define PASSES(name, np)                                                                           \
    static void name##1(const float *const *x, const unsigned char *w, size_t s, size_t k0,        \
                        size_t k1, bool pf, __m256(*t)[4])                                         \
    {                                                                                              \
        pass(1, np, x, w, s, k0, k1, pf, t);                                                       \
    }                                                                                              \
    static void name##2(const float *const *x, const unsigned char *w, size_t s, size_t k0,        \
                        size_t k1, bool pf, __m256(*t)[4])                                         \
    {                                                                                              \
        pass(2, np, x, w, s, k0, k1, pf, t);                                                       \
    }                                                                                              \
    static void name##3(const float *const *x, const unsigned char *w, size_t s, size_t k0,        \
                        size_t k1, bool pf, __m256(*t)[4])                                         \
    {                                                                                              \
        pass(3, np, x, w, s, k0, k1, pf, t);                                                       \
    }                                                                                              \
    static pass_fn *const name[PASS + 1] = {NULL, name##1, name##2, name##3};

PASSES(gateup_passes, 2)
PASSES(down_passes, 1)

/* Every token's totals (zeroed first) over the whole K, block by block, up to PASS tokens at a time
 * (pass_tokens). */
static void run_blocks(pass_fn *const *passes, size_t m, size_t k, const float *const *x,
                       const unsigned char *w, size_t second, __m256 (*t)[4])
{
    memset(t, 0, m * sizeof *t);
    for (size_t k0 = 0; k0 < k; k0 += KB) {
        const size_t k1 = k0 + KB < k ? k0 + KB : k;
        for (size_t i0 = 0; i0 < m;) {
            const size_t n = pass_tokens(m - i0);
            passes[n](x + i0, w, second, k0, k1, i0 == 0, t + i0);
            i0 += n;
        }
    }
}

static void gateup(size_t m, size_t k, const void *const *xv, const void *tilev,
                   const moe_act_params *act, void *hv, size_t hs, size_t n_valid)
{
    const unsigned char *tile = tilev;
    __m256 t[MR][4];
    run_blocks(gateup_passes, m, k, (const float *const *)xv, tile + moe_xl_bf16_weights(2),
               moe_xl_f32_stream2(2, (int64_t)k), t);
    for (size_t i = 0; i < m; i++) /* one token at a time: m is not a constant to unroll */
        gateup_out(1, t + i, tile, act, (float *)hv + i * hs, hs, n_valid);
}

static void down(size_t m, size_t k, const void *const *hv, const void *tilev, float *y, size_t ys,
                 size_t n_valid)
{
    const unsigned char *tile = tilev;
    __m256 t[MR][4];
    run_blocks(down_passes, m, k, (const float *const *)hv, tile + moe_xl_bf16_weights(1),
               moe_xl_f32_stream2(1, (int64_t)k), t);
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < 2; j++) /* chain a + chain b */
            t[i][j] = _mm256_add_ps(t[i][j], t[i][2 + j]);
        down_out(1, t + i, tile, y + i * ys, ys, n_valid);
    }
}

MOE_XL_SET(moe_expert_f32_f32_32x16__avx2, MOE_RECIPE_F32, MOE_REQ_AVX2, MR, MOE_XL_F32_LAYOUT,
           .gateup = gateup, .down = down);
