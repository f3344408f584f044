/* expert_bf16_body.h — internal: the AVX-512 expert micro-kernels of the bf16 recipe (bf16 and FP8
 * weights), over a pair step the includer supplies. */
#ifndef MOE_KERNELS_AVX512_EXPERT_BF16_BODY_H
#define MOE_KERNELS_AVX512_EXPERT_BF16_BODY_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/expert_shared.h"
#include "kernels/avx512/fp8_pairs.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/inline.h"
#include "select/kernel.h"

/*
 * Included by exactly one file per pair of kernel sets (bf16 and FP8 weights), after it
 * defines the recipe's step on one k-pair of 16 rows:
 *
 *   DP(acc, w, x)    acc + (w.even · x.even + w.odd · x.odd) as vdpbf16ps computes it: w the
 *                    16 rows' bf16 pairs (dwords, even element in the low half), x one
 *                    activation pair broadcast; odd product first, each with one rounding,
 *                    denormal operands read as zero and denormal results flushed
 *   dp_state, dp_enter(), dp_leave(s)
 *                    what DP needs of the FP environment, set before a run of DP steps and
 *                    put back after it (the emulation's MXCSR; nothing for vdpbf16ps); the
 *                    block scale FMA of FP8 weights, the sum of down's two chains and the
 *                    epilogue run outside, as the reference computes them
 *   dp_fence(v)      keeps the compiler from moving v's arithmetic across dp_enter / dp_leave
 *
 * Tile 8x16: up to MR = 8 tokens by 16 rows, one zmm accumulator per token and projection
 * (down: per token its two chains over the even and the odd pairs). Activations are bf16;
 * per k-pair each token contributes one 32-bit broadcast of (x[2q], x[2q+1]) and one DP per
 * projection against the 16 rows' weight pairs. An odd K ends with the pair (x[K-1], 0),
 * read as one 16-bit element, against (w[K-1], 0). Prefetch as in the f32 sets.
 *
 * bf16 weights: the packed pair dwords are the operand as they are. FP8 weights, packed in
 * the pairs order (kernels/ref/expert_layout.h): the 32 codes of a projection's pair
 * sign-extend to words already in the operand's order, and become the bf16 of e4m3(code) ·
 * 2^-8 with integer operations (fp8_bf16, kernels/avx512/fp8_pairs.h; exact: 4 significant bits,
 * normal in bf16). Per 128-K block (64 pairs) the block sums are scaled into the totals with one
 * f32 FMA, as the reference does. h is rounded to bf16 with integer operations (moe_f32_to_bf16's
 * bits: nearest even, NaN quiet, subnormals kept), not vcvtneps2bf16, which would flush subnormal
 * results.
 */

#define NR MOE_XL_NR
#define MR 8
#define PF_BYTES 8192
#define UNROLL _Pragma("GCC unroll 8")

INLINE void prefetch(const unsigned char *p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* The activation pair q of a row (moe_xl_bf16_x_pair), broadcast. */
INLINE __m512i x_pair(const uint16_t *x, size_t q, size_t k)
{
    return _mm512_set1_epi32((int)moe_xl_bf16_x_pair(x, q, k));
}

/* ---- The products over K ---------------------------------------------------------------
 * gate/up (np = 2): acc[i][p] for token i and projection p. down (np = 1): acc[i][0] and
 * acc[i][1] are the chains of the even and the odd pairs (kernels/ref/expert_bf16.c), so one
 * token keeps two pair steps in flight; the caller adds them. */

/* The weight pair vectors of pair q for both slots: gate/up (up's pair `up` bytes after
 * gate's), or down's one projection. */
INLINE void pair_bf16(const int np, const unsigned char *w, size_t up, __m512i *w0, __m512i *w1)
{
    *w0 = _mm512_loadu_si512(w);
    *w1 = np == 2 ? _mm512_loadu_si512(w + up) : *w0;
}

INLINE void pair_fp8(const int np, const unsigned char *c, size_t up, __m512i *w0, __m512i *w1)
{
    *w0 = fp8_bf16(c);
    *w1 = np == 2 ? fp8_bf16(c + up) : *w0;
}

/* One pair q into acc: gate/up both projections; down the chain `chain`. */
INLINE void pair_dp(const size_t M, const int np, const int chain, const uint16_t *const *x,
                    size_t q, size_t k, __m512i w0, __m512i w1, __m512 acc[][2])
{
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const __m512i xp = x_pair(x[i], q, k);
        if (np == 2) {
            acc[i][0] = DP(acc[i][0], w0, xp);
            acc[i][1] = DP(acc[i][1], w1, xp);
        } else {
            acc[i][chain] = DP(acc[i][chain], w0, xp);
        }
    }
}

/* Pairs [q0, q1) (q0 even) of the weights at w (bf16) or the codes at c (FP8, pairs of step
 * bytes back to back), with q - q0 even into chain 0 and odd into chain 1 for down. bf16 tiles
 * are two streams (kernels/ref/expert_layout.h): gate/up, up's pairs `second` bytes after
 * gate's and 64-byte pairs in each; down, the odd pair after an even one `second` bytes on,
 * the even pairs 64 bytes apart. FP8: up's codes 32 bytes after gate's. */
INLINE void pairs_dp(const size_t M, const int np, const int fp8, const uint16_t *const *x,
                     size_t q0, size_t q1, size_t k, const unsigned char *base, size_t second,
                     size_t far_from, size_t far, __m512 acc[][2])
{
    /* next: pair q + 1 after pair q (q even); adv: both of them to pair q + 2. */
    const size_t step = fp8 ? 2 * moe_xl_fp8_step_bytes(np) : MOE_XL_BF16_LINE;
    const size_t next = fp8 || np == 2 ? step : second, adv = fp8 || np == 2 ? 2 * step : 64;
    const size_t up = fp8 ? 32 : second;
    const unsigned char *p = base + q0 / 2 * adv;
    size_t q = q0;
    for (int part = 0; part < 2; part++) { /* before far_from, and from there on */
        const size_t end = part == 0 && far_from < q1 ? far_from : q1;
        const size_t pf = part == 0 ? PF_BYTES : far;
        for (; q + 2 <= end; q += 2, p += adv) {
            UNROLL
            for (size_t o = 0; o < adv; o += 64) { /* each stream's lines of the two pairs */
                prefetch(p + pf + o);
                if (!fp8) prefetch(p + second + PF_BYTES + o);
            }
            __m512i w0, w1, v0, v1;
            if (fp8) {
                pair_fp8(np, p, up, &w0, &w1);
                pair_fp8(np, p + next, up, &v0, &v1);
            } else {
                pair_bf16(np, p, up, &w0, &w1);
                pair_bf16(np, p + next, up, &v0, &v1);
            }
            pair_dp(M, np, 0, x, q, k, w0, w1, acc);
            pair_dp(M, np, 1, x, q + 1, k, v0, v1, acc);
        }
    }
    if (q < q1) {
        __m512i w0, w1;
        if (fp8)
            pair_fp8(np, p, up, &w0, &w1);
        else
            pair_bf16(np, p, up, &w0, &w1);
        pair_dp(M, np, 0, x, q, k, w0, w1, acc);
    }
}

/* The chains of acc fenced (dp_fence), so no step of theirs moves across what follows. */
INLINE void fence_chains(const size_t M, __m512 acc[][2])
{
    UNROLL
    for (size_t i = 0; i < M; i++) {
        dp_fence(acc[i][0]);
        dp_fence(acc[i][1]);
    }
}

/* pairs_dp in DP's FP environment: entered before the chains' first step, left after the
 * last. */
INLINE void pairs_dp_env(const size_t M, const int np, const int fp8, const uint16_t *const *x,
                         size_t q0, size_t q1, size_t k, const unsigned char *base, size_t second,
                         size_t far_from, size_t far, __m512 acc[][2])
{
    const dp_state st = dp_enter();
    fence_chains(M, acc);
    pairs_dp(M, np, fp8, x, q0, q1, k, base, second, far_from, far, acc);
    fence_chains(M, acc);
    dp_leave(st);
    fence_chains(M, acc);
}

INLINE void dot_bf16(const size_t M, const int np, size_t k, const uint16_t *const *x,
                     const unsigned char *w, __m512 acc[][2])
{
    /* Two pairs per step, adv bytes along the first stream (moe_xl_prefetch_switch). */
    const size_t second = moe_xl_bf16_stream2(np, (int64_t)k), adv = np == 2 ? 128 : 64;
    const size_t far_from = 2 * moe_xl_prefetch_switch(second, PF_BYTES, adv, (k + 1) / 4);
    const size_t tb =
        np == 2 ? moe_xl_bf16_gateup_bytes((int64_t)k) : moe_xl_bf16_down_bytes((int64_t)k);
    pairs_dp_env(M, np, 0, x, 0, (k + 1) / 2, k, w, second, far_from, PF_BYTES + tb, acc);
}

INLINE void dot_fp8(const size_t M, const int np, size_t k, const uint16_t *const *x,
                    const unsigned char *tile, __m512 acc[][2])
{
    const unsigned char *sc = tile + moe_xl_bias_bytes(np);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np);
    const size_t pairs = (k + 1) / 2;
    for (size_t q0 = 0; q0 < pairs; q0 += MOE_XL_KB / 2, sc += 4 * (size_t)np) {
        const size_t q1 = q0 + MOE_XL_KB / 2 < pairs ? q0 + MOE_XL_KB / 2 : pairs;
        __m512 b[MR][2];
        UNROLL
        for (size_t i = 0; i < M; i++)
            b[i][0] = b[i][1] = _mm512_setzero_ps();
        pairs_dp_env(M, np, 1, x, q0, q1, k, codes, 0, SIZE_MAX, PF_BYTES, b);
        if (np == 1) {
            const __m512 s = _mm512_set1_ps(load_f32(sc));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][0] = _mm512_fmadd_ps(_mm512_add_ps(b[i][0], b[i][1]), s, acc[i][0]);
            continue;
        }
        UNROLL
        for (int p = 0; p < 2; p++) {
            const __m512 s = _mm512_set1_ps(load_f32(sc + 4 * (size_t)p));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][p] = _mm512_fmadd_ps(b[i][p], s, acc[i][p]);
        }
    }
}

/* ---- Kernels --------------------------------------------------------------------------- */

INLINE void gateup_m(const size_t M, const int fp8, size_t k, const void *const *xv,
                     const unsigned char *tile, const moe_act_params *act, uint16_t *h, size_t hs,
                     size_t n_valid)
{
    const uint16_t *x[MR];
    __m512 acc[MR][2];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    if (fp8)
        dot_fp8(M, 2, k, x, tile, acc);
    else
        dot_bf16(M, 2, k, x, tile + moe_xl_bf16_weights(2), acc);
    const __m512 bg = _mm512_loadu_ps(tile), bu = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        __m512 v = act16(act, _mm512_add_ps(acc[i][0], bg), _mm512_add_ps(acc[i][1], bu));
        _mm256_mask_storeu_epi16(h + i * hs, mask, to_bf16(v));
    }
}

INLINE void down_m(const size_t M, const int fp8, size_t k, const void *const *hv,
                   const unsigned char *tile, float *y, size_t ys, size_t n_valid)
{
    const uint16_t *x[MR];
    __m512 acc[MR][2];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = hv[i];
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    if (fp8) {
        dot_fp8(M, 1, k, x, tile, acc); /* the total in acc[i][0] */
    } else {
        dot_bf16(M, 1, k, x, tile + moe_xl_bf16_weights(1), acc);
        UNROLL
        for (size_t i = 0; i < M; i++)
            acc[i][0] = _mm512_add_ps(acc[i][0], acc[i][1]);
    }
    const __m512 b = _mm512_loadu_ps(tile);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(acc[i][0], b));
}

static void gateup_bf16(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH(gateup_m, m, 0, k, x, tile, act, h, h_stride, n_valid);
}

static void down_bf16(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    DISPATCH(down_m, m, 0, k, h, tile, y, y_stride, n_valid);
}

static void gateup_fp8(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH(gateup_m, m, 1, k, x, tile, act, h, h_stride, n_valid);
}

static void down_fp8(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    DISPATCH(down_m, m, 1, k, h, tile, y, y_stride, n_valid);
}

#endif
