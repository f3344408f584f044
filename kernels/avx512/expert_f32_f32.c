/* expert_f32_f32.c — the AVX-512 expert kernel set for f32 (and f16) weights, f32 recipe: 12x16. */
#include "select/kernel.h"

/*
 * The bf16 set's register tile and order (kernels/avx512/expert_f32.c): up to 12 tokens by 16
 * rows, one zmm accumulator per token and projection for gate/up, two per token for down (the
 * chains of its even and odd k-pairs), FMAs in k order with the 16 rows' weights and the token's
 * activation broadcast. The tile is the f32 pair layout (kernels/ref/expert_layout.h): a pair
 * is a 128-byte line, the rows at k = 2q and at 2q + 1, so its two weight vectors are plain
 * loads where the bf16 set widens one 64-byte line. Two streams side by side as there (gate and
 * up; down's even and odd pairs), each prefetched 8 KB ahead into L2 and 2 KB into L1 (two
 * lines per step); the first stream's L2 line goes on to the next tile's second stream once it
 * would fall in this tile's (moe_xl_prefetch_switch). Same bits as the reference for every m.
 */

#include "kernels/avx512/expert_f32_common.h"

#define LINE MOE_XL_F32_LINE

/* Steps [s0, s1) of the two streams (the first at w0, the second at w0 + second; one line per
 * step each): step s holds k = kstep·s and + 1 of the first stream, into a, and k = kstep·s +
 * koff and + 1 of the second, into b. Gate/up: kstep 2, koff 0; down: kstep 4, koff 2. */
INLINE void f32_streams(const size_t M, const size_t kstep, const size_t koff,
                        const float *const *x, const unsigned char *w0, size_t second, size_t s0,
                        size_t s1, size_t pf1, __m512 *a, __m512 *b)
{
    const unsigned char *w = w0 + s0 * LINE;
    for (size_t s = s0; s < s1; s++, w += LINE) {
        prefetch_at(w, pf1);
        prefetch_at(w + 64, pf1);
        prefetch_ahead(w + second);
        prefetch_ahead(w + second + 64);
        const __m512 a0 = _mm512_loadu_ps((const float *)w);
        const __m512 a1 = _mm512_loadu_ps((const float *)(w + 64));
        const __m512 b0 = _mm512_loadu_ps((const float *)(w + second));
        const __m512 b1 = _mm512_loadu_ps((const float *)(w + second + 64));
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

INLINE void gateup_m(const size_t M, size_t k, const void *const *xv, const unsigned char *tile,
                     const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    const float *x[MR_BF16];
    __m512 ag[MR_BF16], au[MR_BF16];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        ag[i] = au[i] = _mm512_setzero_ps();
    }
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    const size_t up = moe_xl_f32_stream2(2, (int64_t)k);
    const size_t pairs = k / 2, qs = moe_xl_prefetch_switch(up, PF_BYTES, LINE, pairs);
    f32_streams(M, 2, 0, x, w, up, 0, qs, PF_BYTES, ag, au);
    f32_streams(M, 2, 0, x, w, up, qs, pairs, PF_BYTES + moe_xl_f32_gateup_bytes((int64_t)k), ag,
                au);
    w += pairs * LINE;
    if (k & 1) { /* the half pair: its k + 1 half is padding, not read */
        const __m512 g0 = _mm512_loadu_ps((const float *)w);
        const __m512 u0 = _mm512_loadu_ps((const float *)(w + up));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 x0 = _mm512_set1_ps(x[i][k - 1]);
            ag[i] = _mm512_fmadd_ps(g0, x0, ag[i]);
            au[i] = _mm512_fmadd_ps(u0, x0, au[i]);
        }
    }
    const __m512 bg = _mm512_loadu_ps((const float *)tile);
    const __m512 bu = _mm512_loadu_ps((const float *)(tile + 64));
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        __m512 v = act16(act, _mm512_add_ps(ag[i], bg), _mm512_add_ps(au[i], bu));
        _mm512_mask_storeu_ps(h + i * hs, mask, v);
    }
}

INLINE void down_m(const size_t M, size_t k, const void *const *hv, const unsigned char *tile,
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
    const size_t odd = moe_xl_f32_stream2(1, (int64_t)k);
    const size_t full = k / 2, lines = full / 2,
                 ls = moe_xl_prefetch_switch(odd, PF_BYTES, LINE, lines);
    f32_streams(M, 4, 2, x, w, odd, 0, ls, PF_BYTES, a, b);
    f32_streams(M, 4, 2, x, w, odd, ls, lines, PF_BYTES + moe_xl_f32_down_bytes((int64_t)k), a, b);
    w += lines * LINE;
    size_t q = 2 * lines;
    if (q < full) { /* one more whole pair, even: chain a */
        const __m512 w0 = _mm512_loadu_ps((const float *)w);
        const __m512 w1 = _mm512_loadu_ps((const float *)(w + 64));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[i][2 * q]), a[i]);
            a[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[i][2 * q + 1]), a[i]);
        }
        q++; /* odd now: the half pair below sits at w + odd */
    }
    if (k & 1) { /* the half pair (w[k-1], 0), in the chain (and the stream) of its parity */
        const __m512 w0 = _mm512_loadu_ps((const float *)(q & 1 ? w + odd : w));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k - 1]);
            if (q & 1)
                b[i] = _mm512_fmadd_ps(w0, xb, b[i]);
            else
                a[i] = _mm512_fmadd_ps(w0, xb, a[i]);
        }
    }
    const __m512 bias = _mm512_loadu_ps((const float *)tile);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(_mm512_add_ps(a[i], b[i]), bias));
}

static void gateup(size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH12(gateup_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    DISPATCH12(down_m, m, k, h, tile, y, y_stride, n_valid);
}

const moe_expert_kernels moe_expert_f32_f32_12x16__avx512 = {
    .name = "moe_expert_f32_f32_12x16__avx512",
    .recipe = MOE_RECIPE_F32,
    .isa = MOE_REQ_AVX512,
    .mr = MR_BF16,
    .nr = NR,
    MOE_XL_F32_LAYOUT,
    .gateup = gateup,
    .down = down,
};
