/* expert_pairs_f32_body.h — internal: the AVX-512 f32-recipe micro-kernels over pair tiles (bf16 or
 * f32 weights), over a pair load the includer supplies. */
#ifndef MOE_KERNELS_AVX512_EXPERT_PAIRS_F32_BODY_H
#define MOE_KERNELS_AVX512_EXPERT_PAIRS_F32_BODY_H

#include "kernels/avx512/expert_f32_common.h"

/*
 * Included by exactly one file per kernel set, after it defines how its layout's k-pairs load
 * (kernels/ref/expert_layout.h: the bf16 pair layout and the f32 pair layout have the same
 * streams, one line per projection and pair):
 *
 *   PAIR_LINE            bytes of one projection's pair, one step of a stream (a multiple of 64)
 *   PAIR_XL(fn)          the layout's moe_xl_<layout>_fn (stream2, gateup_bytes, down_bytes)
 *   pair_load(p, e, o)   the 16 rows' f32 weights of the pair at p: k = 2q into e, 2q + 1 into o
 *   pair_even(p)         k = 2q alone (a half pair: its odd half is padding, not read)
 *
 * Everything here is static; the includer defines the kernel set struct from gateup_pairs and
 * down_pairs. Register tile 12x16 (kernels/avx512/expert_f32_common.h): one zmm accumulator per
 * token and projection for gate/up, two per token for down (its chains over the even and the
 * odd k-pairs), FMAs in k order with the 16 rows' weights and the token's activation broadcast,
 * so every element is kernels/ref/expert_f32.c's for every m. The tile's two streams (gate and
 * up; down's even and odd pairs) are read side by side, each prefetched 8 KB ahead into L2 and
 * 2 KB into L1, every 64-byte line of a step; the first stream's L2 line goes on to the next
 * tile's second stream once it would fall in this tile's (moe_xl_prefetch_switch).
 */

/* Steps [s0, s1) of a tile's two streams side by side (the first at w0, the second at w0 +
 * second; one pair per step each): step s holds k = kstep·s and + 1 of the first stream, into a,
 * and k = kstep·s + koff and + 1 of the second, into b. Gate/up: kstep 2, koff 0 (gate and up at
 * the same k); down: kstep 4, koff 2 (a line's even pair and its odd one). The first stream's L2
 * prefetch runs pf1 bytes ahead. */
INLINE void pair_streams(const size_t M, const size_t kstep, const size_t koff,
                         const float *const *x, const unsigned char *w0, size_t second, size_t s0,
                         size_t s1, size_t pf1, __m512 *a, __m512 *b)
{
    const unsigned char *w = w0 + s0 * PAIR_LINE;
    for (size_t s = s0; s < s1; s++, w += PAIR_LINE) {
        UNROLL
        for (size_t l = 0; l < PAIR_LINE; l += 64)
            prefetch_at(w + l, pf1);
        UNROLL
        for (size_t l = 0; l < PAIR_LINE; l += 64)
            prefetch_ahead(w + second + l);
        __m512 a0, a1, b0, b1;
        pair_load(w, &a0, &a1);
        pair_load(w + second, &b0, &b1);
        const size_t ka = kstep * s, kb = ka + koff;
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(a0, _mm512_set1_ps(x[i][ka]), a[i]);
            b[i] = _mm512_fmadd_ps(b0, _mm512_set1_ps(x[i][kb]), b[i]);
            a[i] = _mm512_fmadd_ps(a1, _mm512_set1_ps(x[i][ka + 1]), a[i]);
            b[i] = _mm512_fmadd_ps(b1, _mm512_set1_ps(x[i][kb + 1]), b[i]);
        }
    }
}

INLINE void gateup_pairs_m(const size_t M, size_t k, const void *const *xv,
                           const unsigned char *tile, const moe_act_params *act, float *h,
                           size_t hs, size_t n_valid)
{
    const float *x[MR_BF16];
    __m512 ag[MR_BF16], au[MR_BF16];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        ag[i] = au[i] = _mm512_setzero_ps();
    }
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    const size_t up = PAIR_XL(stream2)(2, (int64_t)k);
    const size_t pairs = k / 2, qs = moe_xl_prefetch_switch(up, PF_BYTES, PAIR_LINE, pairs);
    pair_streams(M, 2, 0, x, w, up, 0, qs, PF_BYTES, ag, au);
    pair_streams(M, 2, 0, x, w, up, qs, pairs, PF_BYTES + PAIR_XL(gateup_bytes)((int64_t)k), ag,
                 au);
    w += pairs * PAIR_LINE;
    if (k & 1) {
        const __m512 g0 = pair_even(w), u0 = pair_even(w + up);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 x0 = _mm512_set1_ps(x[i][k - 1]);
            ag[i] = _mm512_fmadd_ps(g0, x0, ag[i]);
            au[i] = _mm512_fmadd_ps(u0, x0, au[i]);
        }
    }
    const __m512 bg = _mm512_loadu_ps(tile), bu = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        __m512 v = act16(act, _mm512_add_ps(ag[i], bg), _mm512_add_ps(au[i], bu));
        _mm512_mask_storeu_ps(h + i * hs, mask, v);
    }
}

INLINE void down_pairs_m(const size_t M, size_t k, const void *const *hv, const unsigned char *tile,
                         float *y, size_t ys, size_t n_valid)
{
    const float *x[MR_BF16];
    __m512 a[MR_BF16], b[MR_BF16]; /* the chains of the even and the odd k-pairs */
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = hv[i];
        a[i] = b[i] = _mm512_setzero_ps();
    }
    /* w: the even pair q; its odd successor q + 1 lies `odd` bytes on, in the second stream. */
    const unsigned char *w = tile + moe_xl_bf16_weights(1);
    const size_t odd = PAIR_XL(stream2)(1, (int64_t)k);
    const size_t full = k / 2, lines = full / 2,
                 ls = moe_xl_prefetch_switch(odd, PF_BYTES, PAIR_LINE, lines);
    pair_streams(M, 4, 2, x, w, odd, 0, ls, PF_BYTES, a, b);
    pair_streams(M, 4, 2, x, w, odd, ls, lines, PF_BYTES + PAIR_XL(down_bytes)((int64_t)k), a, b);
    w += lines * PAIR_LINE;
    size_t q = 2 * lines;
    if (q < full) { /* one more whole pair, even: chain a */
        __m512 w0, w1;
        pair_load(w, &w0, &w1);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[i][2 * q]), a[i]);
            a[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[i][2 * q + 1]), a[i]);
        }
        q++; /* odd now: the half pair below sits at w + odd */
    }
    if (k & 1) { /* the half pair (w[k-1], 0), in the chain (and the stream) of its parity */
        const __m512 w0 = pair_even(q & 1 ? w + odd : w);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k - 1]);
            if (q & 1)
                b[i] = _mm512_fmadd_ps(w0, xb, b[i]);
            else
                a[i] = _mm512_fmadd_ps(w0, xb, a[i]);
        }
    }
    const __m512 bias = _mm512_loadu_ps(tile);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(_mm512_add_ps(a[i], b[i]), bias));
}

static void gateup_pairs(size_t m, size_t k, const void *const *x, const void *tile,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH12(gateup_pairs_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_pairs(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                       size_t y_stride, size_t n_valid)
{
    DISPATCH12(down_pairs_m, m, k, h, tile, y, y_stride, n_valid);
}

#endif
