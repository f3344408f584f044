/* expert_fp8_f32_body.h — internal: the AVX-512 FP8 micro-kernels of the f32 recipe, over a decode the includer supplies. */
#ifndef MOE_KERNELS_AVX512_EXPERT_FP8_F32_BODY_H
#define MOE_KERNELS_AVX512_EXPERT_FP8_F32_BODY_H

#include "kernels/avx512/expert_f32_common.h"

/*
 * Included by exactly one file per kernel set, after it defines the decode of its code order:
 *
 *   fp8_dec             whatever the decode keeps in registers (constants, tables)
 *   fp8_dec_init()      builds it, once per call
 *   fp8_decode64(d, c, w)  the 64 codes of the group at c into w[0..3], the f32 weights
 *                       e4m3(code) · 2^-8 of 16 rows each: gate k, up k, gate k + 1, up k + 1
 *                       for gate/up tiles (c at an even k), down k .. k + 3 for down tiles
 *                       (c at a k divisible by 4).
 *
 * The code area of every FP8 layout is padded with zero codes to a multiple of 64 bytes, so
 * a group at the end of K is always whole (the padding decodes to zeros and is never used).
 * Everything here is static; the includer defines the kernel set struct from gateup_fp8 and
 * down_fp8.
 *
 * Up to 8 tokens (the direct path) the weights are decoded in registers at every call; from
 * 9 tokens on (MR_FP8 32) each 128-K block is decoded once into a stack buffer (f32, 16 KB for
 * gate/up) and the tokens run over it in groups of at most 8, as equal as they go
 * (group_split_of), their weights loaded from L1. The multi-tile entries (gateup_fp8_tiles,
 * down_fp8_tiles) run that path on two tiles side by side, and the direct path too at one
 * token (DIRECT_PAIRS); from 2 to 8 tokens they go tile by tile. Each element's arithmetic is the
 * same on every path: the block's chain in k order, then one FMA with the block scale into the
 * total.
 */

#define MR_FP8 32 /* FP8 weights: 9..32 tokens take the buffered path */
#define GROUP 8

#define NT_MAX 2       /* tiles side by side on the direct path */
#define DIRECT_PAIRS 1 /* the multi-tile entries pair tiles on the direct path up to this m */
_Static_assert(DIRECT_PAIRS == 1, "the multi-tile entries pair tiles at one token only: their "
                                  "paired calls are the M = 1 instantiation");
/* At one token, a down block's steps (MOE_XL_KB / 4 = 32) unrolled whole, so a block has no
 * loop of its own: with one, the one-token down phase (33 KB tiles, 2 KB per block) streamed
 * 12 % slower than gate/up (bench/NOTES.md v15). */
#define FULL_BLOCK _Pragma("GCC unroll 32")

/* The first rows rows of the totals tot, zeroed. */
INLINE void totals_zero(float (*tot)[NR], size_t rows)
{
    for (size_t r = 0; r < rows; r++)
        _mm512_store_ps(tot[r], _mm512_setzero_ps());
}

/* The outputs of nt gate/up tiles (tile, tile + tb) from their totals tot[j] (gate, up per
 * token): bias, activation, h; tile j's outputs NR elements after tile j - 1's, n_valid rows
 * in the last. */
INLINE void gateup_fp8_out(size_t nt, size_t m, const unsigned char *tile, size_t tb,
                           float (*const *tot)[NR], const moe_act_params *act, float *h, size_t hs,
                           size_t n_valid)
{
    for (size_t j = 0; j < nt; j++) {
        const unsigned char *t = tile + j * tb;
        const __m512 bg = _mm512_loadu_ps(t), bu = _mm512_loadu_ps(t + 64);
        const __mmask16 mask = rows_mask(j + 1 == nt ? n_valid : NR);
        for (size_t i = 0; i < m; i++) {
            __m512 g = _mm512_add_ps(_mm512_load_ps(tot[j][2 * i]), bg);
            __m512 u = _mm512_add_ps(_mm512_load_ps(tot[j][2 * i + 1]), bu);
            _mm512_mask_storeu_ps(h + i * hs + j * NR, mask, act16(act, g, u));
        }
    }
}

/* The same for nt down tiles: bias, y. */
INLINE void down_fp8_out(size_t nt, size_t m, const unsigned char *tile, size_t tb,
                         float (*const *tot)[NR], float *y, size_t ys, size_t n_valid)
{
    for (size_t j = 0; j < nt; j++) {
        const __m512 b = _mm512_loadu_ps(tile + j * tb);
        const __mmask16 mask = rows_mask(j + 1 == nt ? n_valid : NR);
        for (size_t i = 0; i < m; i++)
            _mm512_mask_storeu_ps(y + i * ys + j * NR, mask,
                                  _mm512_add_ps(_mm512_load_ps(tot[j][i]), b));
    }
}

/* The direct path over NT (1 or 2) tiles tb bytes apart side by side, each with its own
 * chains and totals and the operations it gets alone; outputs NR elements apart, n_valid rows
 * in the last. Two tiles at one token (the multi-tile entries): each tile's chains take two
 * FMAs per step, so alone one token waits on their latency. */
INLINE void gateup_fp8_m(const size_t M, const size_t NT, size_t k, const void *const *xv,
                         const unsigned char *tile, size_t tb, const moe_act_params *act, float *h,
                         size_t hs, size_t n_valid)
{
    const float *x[MR];
    /* The totals over blocks: touched once per block, so memory is the right place. */
    float tot[NT_MAX][2 * MR][NR] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = xv[i];
    UNROLL
    for (size_t j = 0; j < NT; j++)
        totals_zero(tot[j], 2 * M);
    const fp8_dec dec = fp8_dec_init();
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m512 bg[NT_MAX][MR], bu[NT_MAX][MR];
        UNROLL
        for (size_t j = 0; j < NT; j++) {
            UNROLL
            for (size_t i = 0; i < M; i++)
                bg[j][i] = bu[j][i] = _mm512_setzero_ps();
        }
        size_t kk = k0;
        for (; kk + 2 <= k1; kk += 2) {
            UNROLL
            for (size_t j = 0; j < NT; j++) {
                const unsigned char *c = codes + j * tb + kk * 32;
                prefetch_side(c, tile + (j + 1) * tb, NT == 2 ? tb : 0);
                __m512 w[4];
                fp8_decode64(&dec, c, w);
                UNROLL
                for (size_t i = 0; i < M; i++) {
                    const __m512 x0 = _mm512_set1_ps(x[i][kk]), x1 = _mm512_set1_ps(x[i][kk + 1]);
                    bg[j][i] = _mm512_fmadd_ps(w[0], x0, bg[j][i]);
                    bu[j][i] = _mm512_fmadd_ps(w[1], x0, bu[j][i]);
                    bg[j][i] = _mm512_fmadd_ps(w[2], x1, bg[j][i]);
                    bu[j][i] = _mm512_fmadd_ps(w[3], x1, bu[j][i]);
                }
            }
        }
        if (kk < k1) { /* k odd: the last k, first half of its group */
            UNROLL
            for (size_t j = 0; j < NT; j++) {
                __m512 w[4];
                fp8_decode64(&dec, codes + j * tb + kk * 32, w);
                UNROLL
                for (size_t i = 0; i < M; i++) {
                    const __m512 xb = _mm512_set1_ps(x[i][kk]);
                    bg[j][i] = _mm512_fmadd_ps(w[0], xb, bg[j][i]);
                    bu[j][i] = _mm512_fmadd_ps(w[1], xb, bu[j][i]);
                }
            }
        }
        UNROLL
        for (size_t j = 0; j < NT; j++) {
            const __m512 sg = _mm512_set1_ps(load_f32(sc + j * tb)),
                         su = _mm512_set1_ps(load_f32(sc + j * tb + 4));
            UNROLL
            for (size_t i = 0; i < M; i++) {
                float *tg = tot[j][2 * i], *tu = tot[j][2 * i + 1];
                _mm512_store_ps(tg, _mm512_fmadd_ps(bg[j][i], sg, _mm512_load_ps(tg)));
                _mm512_store_ps(tu, _mm512_fmadd_ps(bu[j][i], su, _mm512_load_ps(tu)));
            }
        }
    }
    float(*const t[NT_MAX])[NR] = {tot[0], tot[1]};
    gateup_fp8_out(NT, M, tile, tb, t, act, h, hs, n_valid);
}

/* One step of the down direct path: k = kk .. kk + 3 of NT tiles into their chains a (the
 * even pair) and b (the odd). */
INLINE void down_fp8_step(const size_t M, const size_t NT, const fp8_dec *dec,
                          const unsigned char *codes, const unsigned char *tile, size_t tb,
                          const float *const *x, size_t kk, __m512 (*a)[MR], __m512 (*b)[MR])
{
    UNROLL
    for (size_t j = 0; j < NT; j++) {
        const unsigned char *c = codes + j * tb + kk * 16;
        prefetch_side(c, tile + (j + 1) * tb, NT == 2 ? tb : 0);
        __m512 w[4];
        fp8_decode64(dec, c, w);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[j][i] = _mm512_fmadd_ps(w[0], _mm512_set1_ps(x[i][kk]), a[j][i]);
            b[j][i] = _mm512_fmadd_ps(w[2], _mm512_set1_ps(x[i][kk + 2]), b[j][i]);
            a[j][i] = _mm512_fmadd_ps(w[1], _mm512_set1_ps(x[i][kk + 1]), a[j][i]);
            b[j][i] = _mm512_fmadd_ps(w[3], _mm512_set1_ps(x[i][kk + 3]), b[j][i]);
        }
    }
}

INLINE void down_fp8_m(const size_t M, const size_t NT, size_t k, const void *const *hv,
                       const unsigned char *tile, size_t tb, float *y, size_t ys, size_t n_valid)
{
    const float *x[MR];
    float tot[NT_MAX][MR][NR] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = hv[i];
    UNROLL
    for (size_t j = 0; j < NT; j++)
        totals_zero(tot[j], M);
    const fp8_dec dec = fp8_dec_init();
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m512 a[NT_MAX][MR], b[NT_MAX][MR]; /* the chains of the block's even and odd k-pairs */
        UNROLL
        for (size_t j = 0; j < NT; j++) {
            UNROLL
            for (size_t i = 0; i < M; i++)
                a[j][i] = b[j][i] = _mm512_setzero_ps();
        }
        size_t kk = k0;
        if (M == 1) {
            FULL_BLOCK
            for (; kk + 4 <= k1; kk += 4)
                down_fp8_step(M, NT, &dec, codes, tile, tb, x, kk, a, b);
        } else {
            for (; kk + 4 <= k1; kk += 4)
                down_fp8_step(M, NT, &dec, codes, tile, tb, x, kk, a, b);
        }
        /* The rest of the block (at most 3 k, one group): k and k + 1 are an even pair
         * (chain a), k + 2 starts an odd one (chain b). */
        if (kk < k1) {
            UNROLL
            for (size_t j = 0; j < NT; j++) {
                __m512 w[4];
                fp8_decode64(&dec, codes + j * tb + kk * 16, w);
                for (size_t r = 0; kk + r < k1; r++) {
                    UNROLL
                    for (size_t i = 0; i < M; i++) {
                        const __m512 xb = _mm512_set1_ps(x[i][kk + r]);
                        if (r >= 2)
                            b[j][i] = _mm512_fmadd_ps(w[r], xb, b[j][i]);
                        else
                            a[j][i] = _mm512_fmadd_ps(w[r], xb, a[j][i]);
                    }
                }
            }
        }
        UNROLL
        for (size_t j = 0; j < NT; j++) {
            const __m512 s = _mm512_set1_ps(load_f32(sc + j * tb));
            UNROLL
            for (size_t i = 0; i < M; i++)
                _mm512_store_ps(tot[j][i], _mm512_fmadd_ps(_mm512_add_ps(a[j][i], b[j][i]), s,
                                                           _mm512_load_ps(tot[j][i])));
        }
    }
    float(*const t[NT_MAX])[NR] = {tot[0], tot[1]};
    down_fp8_out(NT, M, tile, tb, t, y, ys, n_valid);
}

/* ---- 9..32 tokens: each 128-K block of the tile decoded once into L1 ------------------ */

/* Floats of one tile's decoded 128-K block: gate/up (32 per k) and down (16 per k). */
#define GATEUP_BUF (MOE_XL_KB * 2 * NR)
#define DOWN_BUF (MOE_XL_KB * NR)

/* The groups of 64 codes from codes on into f32 (64 floats per group). */
INLINE void fp8_decode(const fp8_dec *dec, const unsigned char *codes, size_t groups, float *buf)
{
    for (size_t j = 0; j < groups; j++) {
        __m512 w[4];
        fp8_decode64(dec, codes + 64 * j, w);
        for (int v = 0; v < 4; v++)
            _mm512_store_ps(buf + 64 * j + 16 * v, w[v]);
    }
}

/* The groups also bring the next block's codes (next, 32 bytes per k for gate/up, 16 for
 * down) into L2, a line every 64 bytes of this block's: each block is a new 4 KB page, where
 * the hardware prefetcher starts over, and decoding it would otherwise wait on memory with
 * the FMA ports idle. */
INLINE void gateup_group(const size_t M, const float *buf, size_t n, const float *const *x,
                         size_t k0, __m512 sg, __m512 su, float (*tot)[NR],
                         const unsigned char *next)
{
    __m512 bg[GROUP], bu[GROUP];
    UNROLL
    for (size_t i = 0; i < M; i++)
        bg[i] = bu[i] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < n; kk++) {
        _mm_prefetch((const char *)next + 32 * kk, _MM_HINT_T1);
        const __m512 g = _mm512_load_ps(buf + 32 * kk), u = _mm512_load_ps(buf + 32 * kk + 16);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k0 + kk]);
            bg[i] = _mm512_fmadd_ps(g, xb, bg[i]);
            bu[i] = _mm512_fmadd_ps(u, xb, bu[i]);
        }
    }
    UNROLL
    for (size_t i = 0; i < M; i++) {
        _mm512_store_ps(tot[2 * i], _mm512_fmadd_ps(bg[i], sg, _mm512_load_ps(tot[2 * i])));
        _mm512_store_ps(tot[2 * i + 1], _mm512_fmadd_ps(bu[i], su, _mm512_load_ps(tot[2 * i + 1])));
    }
}

/* One group over a decoded down block of n k (buf: 16 floats per k), two chains by pair. */
INLINE void down_group(const size_t M, const float *buf, size_t n, const float *const *x, size_t k0,
                       __m512 s, float (*tot)[NR], const unsigned char *next)
{
    __m512 a[GROUP], b[GROUP];
    UNROLL
    for (size_t i = 0; i < M; i++)
        a[i] = b[i] = _mm512_setzero_ps();
    size_t kk = 0;
    for (; kk + 4 <= n; kk += 4) {
        _mm_prefetch((const char *)next + 16 * kk, _MM_HINT_T1);
        const float *w = buf + 16 * kk;
        const __m512 a0 = _mm512_load_ps(w), a1 = _mm512_load_ps(w + 16);
        const __m512 b0 = _mm512_load_ps(w + 32), b1 = _mm512_load_ps(w + 48);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const float *xi = x[i] + k0 + kk;
            a[i] = _mm512_fmadd_ps(a0, _mm512_set1_ps(xi[0]), a[i]);
            b[i] = _mm512_fmadd_ps(b0, _mm512_set1_ps(xi[2]), b[i]);
            a[i] = _mm512_fmadd_ps(a1, _mm512_set1_ps(xi[1]), a[i]);
            b[i] = _mm512_fmadd_ps(b1, _mm512_set1_ps(xi[3]), b[i]);
        }
    }
    /* The rest of the block (at most 3 k): k and k + 1 are an even pair (chain a), k + 2
     * starts an odd one (chain b). */
    for (size_t j = 0; kk + j < n; j++) {
        const __m512 w = _mm512_load_ps(buf + 16 * (kk + j));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k0 + kk + j]);
            if (j >= 2)
                b[i] = _mm512_fmadd_ps(w, xb, b[i]);
            else
                a[i] = _mm512_fmadd_ps(w, xb, a[i]);
        }
    }
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_store_ps(tot[i],
                        _mm512_fmadd_ps(_mm512_add_ps(a[i], b[i]), s, _mm512_load_ps(tot[i])));
}

static void gateup_fp8_buffered(size_t m, size_t k, const void *const *xv,
                                const unsigned char *tile, const moe_act_params *act, float *h,
                                size_t hs, size_t n_valid)
{
    float buf[GATEUP_BUF] __attribute__((aligned(64)));
    float tot[2 * MR_FP8][NR] __attribute__((aligned(64)));
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++)
        x[i] = xv[i];
    totals_zero(tot, 2 * m);
    const fp8_dec dec = fp8_dec_init();
    const group_split sp = group_split_of(m, GROUP);
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(&dec, codes + k0 * 32, (n + 1) / 2, buf);
        const __m512 sg = _mm512_set1_ps(load_f32(sc)), su = _mm512_set1_ps(load_f32(sc + 4));
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 32;
        for (size_t j = 0, c = 0, g; j < sp.ng; j++, c += g) {
            g = sp.base + (j < sp.extra);
            DISPATCH(gateup_group, g, buf, n, x + c, k0, sg, su, tot + 2 * c, next);
        }
    }
    float(*const t[1])[NR] = {tot};
    gateup_fp8_out(1, m, tile, 0, t, act, h, hs, n_valid);
}

static void down_fp8_buffered(size_t m, size_t k, const void *const *hv, const unsigned char *tile,
                              float *y, size_t ys, size_t n_valid)
{
    float buf[DOWN_BUF] __attribute__((aligned(64)));
    float tot[MR_FP8][NR] __attribute__((aligned(64)));
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++)
        x[i] = hv[i];
    totals_zero(tot, m);
    const fp8_dec dec = fp8_dec_init();
    const group_split sp = group_split_of(m, GROUP);
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(&dec, codes + k0 * 16, (n + 3) / 4, buf);
        const __m512 s = _mm512_set1_ps(load_f32(sc));
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 16;
        for (size_t j = 0, c = 0, g; j < sp.ng; j++, c += g) {
            g = sp.base + (j < sp.extra);
            DISPATCH(down_group, g, buf, n, x + c, k0, s, tot + c, next);
        }
    }
    float(*const t[1])[NR] = {tot};
    down_fp8_out(1, m, tile, 0, t, y, ys, n_valid);
}

/* ---- 9..32 tokens: two tiles side by side (the multi-tile entries) -------------------- */

/*
 * Each block of two neighbouring tiles is decoded into two buffers and the tokens run over
 * both in groups: gate/up up to PAIR_GATEUP (6) tokens with 24 chains and 4 weight vectors per
 * k (4 FMAs per broadcast activation rather than 2); down up to PAIR_DOWN (5) with 20 chains
 * and 8 weight vectors per 4 k (2 FMAs per broadcast rather than 1). In L2 the whole expert ran
 * 5-10 % faster at 9-32 tokens; streaming, where a pair reads two tiles at once, more
 * (`moe bench` DeepSeek-V3 fp8, bench/NOTES.md v9). Every
 * chain, and the order of its FMAs, is the one-tile path's, so the bits are too.
 */
#define PAIR_GATEUP 6
#define PAIR_DOWN 5

/* tot = fma(acc, s, tot), in memory. */
INLINE void total_add(float *tot, __m512 acc, __m512 s)
{
    _mm512_store_ps(tot, _mm512_fmadd_ps(acc, s, _mm512_load_ps(tot)));
}

/* One group over the decoded gate/up blocks of two tiles (buf: tile 0's, GATEUP_BUF floats on
 * tile 1's; n k from k0; sc: the block's scales, gate and up, of tile 0, tb bytes before tile
 * 1's), into the totals tot[j]. The scales are read after the loop, which so keeps its
 * registers for the 24 chains. */
INLINE void gateup_pair_group(const size_t M, const float *buf, size_t n, const float *const *x,
                              size_t k0, const unsigned char *sc, size_t tb,
                              float (*const tot[2])[NR], const unsigned char *next)
{
    __m512 a[GROUP][4]; /* per token: gate, up of tile 0; gate, up of tile 1 */
    UNROLL
    for (size_t i = 0; i < M; i++)
        a[i][0] = a[i][1] = a[i][2] = a[i][3] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < n; kk++) {
        _mm_prefetch((const char *)next + 32 * kk, _MM_HINT_T1);
        _mm_prefetch((const char *)next + tb + 32 * kk, _MM_HINT_T1);
        const __m512 w0 = _mm512_load_ps(buf + 32 * kk), w1 = _mm512_load_ps(buf + 32 * kk + 16),
                     w2 = _mm512_load_ps(buf + GATEUP_BUF + 32 * kk),
                     w3 = _mm512_load_ps(buf + GATEUP_BUF + 32 * kk + 16);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k0 + kk]);
            a[i][0] = _mm512_fmadd_ps(w0, xb, a[i][0]);
            a[i][1] = _mm512_fmadd_ps(w1, xb, a[i][1]);
            a[i][2] = _mm512_fmadd_ps(w2, xb, a[i][2]);
            a[i][3] = _mm512_fmadd_ps(w3, xb, a[i][3]);
        }
    }
    const __m512 s[4] = {_mm512_set1_ps(load_f32(sc)), _mm512_set1_ps(load_f32(sc + 4)),
                         _mm512_set1_ps(load_f32(sc + tb)), _mm512_set1_ps(load_f32(sc + tb + 4))};
    UNROLL
    for (size_t i = 0; i < M; i++) {
        total_add(tot[0][2 * i], a[i][0], s[0]);
        total_add(tot[0][2 * i + 1], a[i][1], s[1]);
        total_add(tot[1][2 * i], a[i][2], s[2]);
        total_add(tot[1][2 * i + 1], a[i][3], s[3]);
    }
}

/* One group over the decoded down blocks of two tiles (buf: tile 0's, DOWN_BUF floats on
 * tile 1's; sc: tile 0's block scale, tb bytes before tile 1's), each with down_group's two
 * chains; the scales read after the loop, as in gateup_pair_group. */
INLINE void down_pair_group(const size_t M, const float *buf, size_t n, const float *const *x,
                            size_t k0, const unsigned char *sc, size_t tb,
                            float (*const tot[2])[NR], const unsigned char *next)
{
    __m512 a[GROUP][2], b[GROUP][2]; /* per token and tile: the even and the odd pairs' chains */
    UNROLL
    for (size_t i = 0; i < M; i++)
        a[i][0] = a[i][1] = b[i][0] = b[i][1] = _mm512_setzero_ps();
    size_t kk = 0;
    for (; kk + 4 <= n; kk += 4) {
        _mm_prefetch((const char *)next + 16 * kk, _MM_HINT_T1);
        _mm_prefetch((const char *)next + tb + 16 * kk, _MM_HINT_T1);
        __m512 w[2][4];
        UNROLL
        for (size_t j = 0; j < 2; j++) {
            UNROLL
            for (size_t v = 0; v < 4; v++)
                w[j][v] = _mm512_load_ps(buf + j * DOWN_BUF + 16 * (kk + v));
        }
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const float *xi = x[i] + k0 + kk;
            const __m512 x0 = _mm512_set1_ps(xi[0]), x1 = _mm512_set1_ps(xi[1]);
            const __m512 x2 = _mm512_set1_ps(xi[2]), x3 = _mm512_set1_ps(xi[3]);
            UNROLL
            for (size_t j = 0; j < 2; j++) {
                a[i][j] = _mm512_fmadd_ps(w[j][0], x0, a[i][j]);
                b[i][j] = _mm512_fmadd_ps(w[j][2], x2, b[i][j]);
                a[i][j] = _mm512_fmadd_ps(w[j][1], x1, a[i][j]);
                b[i][j] = _mm512_fmadd_ps(w[j][3], x3, b[i][j]);
            }
        }
    }
    for (size_t v = 0; kk + v < n; v++) { /* as down_group's rest */
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 xb = _mm512_set1_ps(x[i][k0 + kk + v]);
            UNROLL
            for (size_t j = 0; j < 2; j++) {
                const __m512 wv = _mm512_load_ps(buf + j * DOWN_BUF + 16 * (kk + v));
                if (v >= 2)
                    b[i][j] = _mm512_fmadd_ps(wv, xb, b[i][j]);
                else
                    a[i][j] = _mm512_fmadd_ps(wv, xb, a[i][j]);
            }
        }
    }
    const __m512 s0 = _mm512_set1_ps(load_f32(sc)), s1 = _mm512_set1_ps(load_f32(sc + tb));
    UNROLL
    for (size_t i = 0; i < M; i++) {
        total_add(tot[0][i], _mm512_add_ps(a[i][0], b[i][0]), s0);
        total_add(tot[1][i], _mm512_add_ps(a[i][1], b[i][1]), s1);
    }
}

/* Two gate/up tiles (tile, tile + tb) for 9..32 tokens: tile 1's outputs NR elements after
 * tile 0's, n_valid rows in tile 1. */
static void gateup_fp8_pair(size_t m, size_t k, const void *const *xv, const unsigned char *tile,
                            size_t tb, const moe_act_params *act, float *h, size_t hs,
                            size_t n_valid)
{
    float buf[2 * GATEUP_BUF] __attribute__((aligned(64)));
    float tot0[2 * MR_FP8][NR] __attribute__((aligned(64)));
    float tot1[2 * MR_FP8][NR] __attribute__((aligned(64)));
    float(*const tot[2])[NR] = {tot0, tot1};
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++)
        x[i] = xv[i];
    totals_zero(tot0, 2 * m);
    totals_zero(tot1, 2 * m);
    const fp8_dec dec = fp8_dec_init();
    const group_split sp = group_split_of(m, PAIR_GATEUP);
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(&dec, codes + k0 * 32, (n + 1) / 2, buf);
        fp8_decode(&dec, codes + tb + k0 * 32, (n + 1) / 2, buf + GATEUP_BUF);
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 32;
        for (size_t j = 0, c = 0, g; j < sp.ng; j++, c += g) {
            g = sp.base + (j < sp.extra);
            float(*const tj[2])[NR] = {tot[0] + 2 * c, tot[1] + 2 * c};
            DISPATCH(gateup_pair_group, g, buf, n, x + c, k0, sc, tb, tj, next);
        }
    }
    gateup_fp8_out(2, m, tile, tb, tot, act, h, hs, n_valid);
}

/* Two down tiles (tile, tile + tb) for 9..32 tokens: tile 1's outputs NR elements after tile
 * 0's, n_valid rows in tile 1. */
static void down_fp8_pair(size_t m, size_t k, const void *const *hv, const unsigned char *tile,
                          size_t tb, float *y, size_t ys, size_t n_valid)
{
    float buf[2 * DOWN_BUF] __attribute__((aligned(64)));
    float tot0[MR_FP8][NR] __attribute__((aligned(64)));
    float tot1[MR_FP8][NR] __attribute__((aligned(64)));
    float(*const tot[2])[NR] = {tot0, tot1};
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++)
        x[i] = hv[i];
    totals_zero(tot0, m);
    totals_zero(tot1, m);
    const fp8_dec dec = fp8_dec_init();
    const group_split sp = group_split_of(m, PAIR_DOWN);
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(&dec, codes + k0 * 16, (n + 3) / 4, buf);
        fp8_decode(&dec, codes + tb + k0 * 16, (n + 3) / 4, buf + DOWN_BUF);
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 16;
        for (size_t j = 0, c = 0, g; j < sp.ng; j++, c += g) {
            g = sp.base + (j < sp.extra);
            float(*const tj[2])[NR] = {tot[0] + c, tot[1] + c};
            DISPATCH(down_pair_group, g, buf, n, x + c, k0, sc, tb, tj, next);
        }
    }
    down_fp8_out(2, m, tile, tb, tot, y, ys, n_valid);
}

/* ---- Dispatch on m ------------------------------------------------------------------ */

static void gateup_fp8(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    if (m > MR)
        gateup_fp8_buffered(m, k, x, tile, act, h, h_stride, n_valid);
    else
        DISPATCH(gateup_fp8_m, m, 1, k, x, tile, 0, act, h, h_stride, n_valid);
}

static void down_fp8(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    if (m > MR)
        down_fp8_buffered(m, k, h, tile, y, y_stride, n_valid);
    else
        DISPATCH(down_fp8_m, m, 1, k, h, tile, 0, y, y_stride, n_valid);
}

/* n_tiles gate/up tiles: in pairs on the buffered path (9..32 tokens) and at one token, tile
 * by tile otherwise (and a last odd tile). */
static void gateup_fp8_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                             size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                             size_t n_valid)
{
    const size_t tb = moe_xl_fp8_gateup_bytes((int64_t)k);
    for (size_t j = 0, nt; j < n_tiles; j += nt) {
        nt = (m > MR || m <= DIRECT_PAIRS) && n_tiles - j >= 2 ? 2 : 1;
        const size_t nv = j + nt == n_tiles ? n_valid : NR;
        const unsigned char *t = (const unsigned char *)tile + j * tb;
        float *hj = (float *)h + j * NR;
        if (nt == 1)
            gateup_fp8(m, k, x, t, act, hj, h_stride, nv);
        else if (m > MR)
            gateup_fp8_pair(m, k, x, t, tb, act, hj, h_stride, nv);
        else
            gateup_fp8_m(1, 2, k, x, t, tb, act, hj, h_stride, nv);
    }
}

/* n_tiles down tiles: in pairs on the buffered path (9..32 tokens) and at one token, tile by
 * tile otherwise (and a last odd tile). */
static void down_fp8_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                           size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    const size_t tb = moe_xl_fp8_down_bytes((int64_t)k);
    for (size_t j = 0, nt; j < n_tiles; j += nt) {
        nt = (m > MR || m <= DIRECT_PAIRS) && n_tiles - j >= 2 ? 2 : 1;
        const size_t nv = j + nt == n_tiles ? n_valid : NR;
        const unsigned char *t = (const unsigned char *)tile + j * tb;
        if (nt == 1)
            down_fp8(m, k, h, t, y + j * NR, y_stride, nv);
        else if (m > MR)
            down_fp8_pair(m, k, h, t, tb, y + j * NR, y_stride, nv);
        else
            down_fp8_m(1, 2, k, h, t, tb, y + j * NR, y_stride, nv);
    }
}

#endif
