/* expert_f32.c — the AVX2 expert kernel sets of the f32 recipe: bf16 32x16, FP8 32x16. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/avx2/expert_f32_common.h"
#include "select/kernel.h"

/*
 * Register tile of the direct path: up to 2 tokens by the tile's 16 rows, each row group of 8
 * in one ymm, so a token holds 4 accumulators for gate/up (2 row groups per projection) and 4
 * for down (2 row groups × its 2 chains over the even and the odd k-pairs). With the 16 ymm
 * registers of AVX2, 8 accumulators, the weight vectors being widened and the broadcasts fit;
 * a third token would spill. Each element follows kernels/ref/expert_f32.c exactly (FMAs in k
 * order; FP8: per 128-K block, then one FMA with the block scale), so the bits equal the
 * reference's and the AVX-512 sets'.
 *
 * Widening as in the AVX-512 set, in registers: bf16 pair dwords shifted / masked; FP8 codes
 * sign-extended to words 16 at a time, (w << 7) & 0xBFFF (the f16 of e4m3 · 2^-8),
 * vcvtph2ps from a stack copy. From 3 tokens on both sets take a buffered path: each block of
 * K (FP8: 128, its scale block; bf16: 64) becomes f32 once in a stack buffer and the tokens
 * run over it a few at a time (FP8 up to 32 tokens, two at a time, as the AVX-512 file explains;
 * bf16 up to 32, three at a time). At one token the FP8 set's multi-tile entries read two tiles
 * side by side (below). Prefetch: 8 KB ahead into L2, as there.
 */

#define NR MOE_XL_NR
#define MR 2       /* the direct path: up to 2 tokens */
#define MR_FP8 32  /* FP8 weights: 3..32 tokens take the buffered path */
#define MR_BF16 32 /* bf16 weights: 3..32 tokens take the buffered path */
#define KB_BF16 64 /* k per widened bf16 block */

/* vcvtph2ps from memory: the 8 f16 at p widened to f32. The memory form is one ALU uop; the
 * register form adds a shuffle on port 5, with vpmovsxbw and the extract the FP8 decode's
 * bound (bench/NOTES.md v12). In asm: GCC and clang both forward a vector stored just before
 * in registers, and so emit the register form. */
INLINE __m256 cvtph_mem(const __m128i *p)
{
    __m256 r;
    __asm__("vcvtph2ps %1, %0" : "=x"(r) : "m"(*p));
    return r;
}

/* The f32 weights of 16 codes (rows 0..7 in lo, 8..15 in hi): e4m3(code) · 2^-8 via the
 * f16 trick, the 16 words widened and masked at once, then stored and widened from L1. */
INLINE void fp8_16(const unsigned char *codes, __m256 *lo, __m256 *hi)
{
    __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)codes));
    w = _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16((short)0xBFFF));
    __m128i f16[2] __attribute__((aligned(32)));
    _mm256_store_si256((__m256i *)f16, w);
    *lo = cvtph_mem(&f16[0]);
    *hi = cvtph_mem(&f16[1]);
}

/* ---- bf16 weights ------------------------------------------------------------------- */

/* A bf16 pair dword vector (8 rows' weights at k in the low words, k + 1 in the high) as the
 * f32 weights of k (w0) and k + 1 (w1). */
INLINE void widen_pair(__m256i l, __m256 *w0, __m256 *w1)
{
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(l, 16));
    *w1 = _mm256_castsi256_ps(_mm256_and_si256(l, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* acc[j] (j = 4 row groups of 8: gate 0-7, gate 8-15, up 0-7, up 8-15): gate's pair at w, up's
 * at w + up (the tile's two streams). */
INLINE void bf16_pair(const size_t M, const unsigned char *w, size_t up, const float *const *x,
                      size_t k0, __m256 acc[][4], bool both)
{
    UNROLL
    for (size_t j = 0; j < 4; j++) {
        __m256 w0, w1;
        widen_pair(_mm256_loadu_si256((const __m256i *)(w + (j / 2) * up + 32 * (j % 2))), &w0,
                   &w1);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            acc[i][j] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[i][k0]), acc[i][j]);
            if (both) acc[i][j] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[i][k0 + 1]), acc[i][j]);
        }
    }
}

/* gate/up over the weights at w. */
INLINE void bf16_dot(const size_t M, size_t k, const void *const *xv, const unsigned char *w,
                     __m256 acc[][4])
{
    const float *x[MR];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        UNROLL
        for (size_t j = 0; j < 4; j++)
            acc[i][j] = _mm256_setzero_ps();
    }
    const size_t up = moe_xl_bf16_stream2(2, (int64_t)k),
                 qs = moe_xl_prefetch_switch(up, PF_BYTES, 64, k / 2);
    const size_t pf_far = PF_BYTES + moe_xl_bf16_gateup_bytes((int64_t)k);
    size_t q = 0;
    for (; q < qs; q++, w += 64) {
        prefetch(w + PF_BYTES);
        prefetch(w + up + PF_BYTES);
        bf16_pair(M, w, up, x, 2 * q, acc, true);
    }
    for (; q < k / 2; q++, w += 64) { /* the gate stream's prefetch on to the next tile's up */
        prefetch(w + pf_far);
        prefetch(w + up + PF_BYTES);
        bf16_pair(M, w, up, x, 2 * q, acc, true);
    }
    if (k & 1) bf16_pair(M, w, up, x, 2 * q, acc, false);
}

/* ---- FP8 weights --------------------------------------------------------------------- */

/* FP8 gate/up: acc[i][j] for token i and row group j (gate 0-7, 8-15, up 0-7, 8-15). */
INLINE void fp8_dot(const size_t M, size_t k, const void *const *xv, const unsigned char *tile,
                    __m256 acc[][4])
{
    const float *x[MR];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m256 b[MR][4];
        UNROLL
        for (size_t i = 0; i < M; i++)
            b[i][0] = b[i][1] = b[i][2] = b[i][3] = _mm256_setzero_ps();
        for (size_t kk = k0; kk < k1; kk++) {
            const unsigned char *c = codes + kk * 32;
            prefetch(c + PF_BYTES);
            UNROLL
            for (size_t j = 0; j < 4; j += 2) {
                __m256 w0, w1;
                fp8_16(c + 8 * j, &w0, &w1);
                UNROLL
                for (size_t i = 0; i < M; i++) {
                    const __m256 xb = _mm256_set1_ps(x[i][kk]);
                    b[i][j] = _mm256_fmadd_ps(w0, xb, b[i][j]);
                    b[i][j + 1] = _mm256_fmadd_ps(w1, xb, b[i][j + 1]);
                }
            }
        }
        UNROLL
        for (size_t j = 0; j < 4; j++) {
            const __m256 s = _mm256_set1_ps(load_f32(sc + 4 * (j / 2)));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][j] = _mm256_fmadd_ps(b[i][j], s, acc[i][j]);
        }
    }
}

/* ---- down: two chains per element (even and odd k-pairs), 2 row groups of 8 --------------
 * d[i][c][j]: token i, chain c, rows 8j..8j+7. */

/* Pair q's weights (bf16 pair dwords of rows 8j..8j+7 at w + 32j) into chain c. */
INLINE void down_bf16_pair(const size_t M, const int c, const unsigned char *w,
                           const float *const *x, size_t k0, bool both, __m256 d[][2][2])
{
    UNROLL
    for (size_t j = 0; j < 2; j++) {
        __m256 w0, w1;
        widen_pair(_mm256_loadu_si256((const __m256i *)(w + 32 * j)), &w0, &w1);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            d[i][c][j] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[i][k0]), d[i][c][j]);
            if (both) d[i][c][j] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[i][k0 + 1]), d[i][c][j]);
        }
    }
}

/* Pair q's codes (k at c, k + 1 at c + 16, 16 rows each) into chain ch; `both` false: k only. */
INLINE void down_fp8_pair(const size_t M, const int ch, const unsigned char *c,
                          const float *const *x, size_t k0, bool both, __m256 d[][2][2])
{
    __m256 w[2][2]; /* [k, k + 1][rows 0..7, 8..15] */
    fp8_16(c, &w[0][0], &w[0][1]);
    if (both) fp8_16(c + 16, &w[1][0], &w[1][1]);
    UNROLL
    for (size_t j = 0; j < 2; j++)
        UNROLL
    for (size_t i = 0; i < M; i++) {
        d[i][ch][j] = _mm256_fmadd_ps(w[0][j], _mm256_set1_ps(x[i][k0]), d[i][ch][j]);
        if (both) d[i][ch][j] = _mm256_fmadd_ps(w[1][j], _mm256_set1_ps(x[i][k0 + 1]), d[i][ch][j]);
    }
}

/* Pairs [q0, q1) (q0 even) alternately into chains 0 and 1, starting from zero. p: the first
 * pair; each odd pair lies `odd` bytes after the even one before it, and p moves 64 bytes per
 * two pairs (FP8 k-major: 32-byte pairs back to back; bf16: the tile's even and odd streams). */
INLINE void down_pairs(const size_t M, const int fp8, const unsigned char *p, size_t odd,
                       size_t far_from, size_t far, const float *const *x, size_t q0, size_t q1,
                       size_t k, __m256 d[][2][2])
{
    UNROLL
    for (size_t i = 0; i < M; i++)
        d[i][0][0] = d[i][0][1] = d[i][1][0] = d[i][1][1] = _mm256_setzero_ps();
    size_t q = q0;
    for (int part = 0; part < 2; part++) { /* before far_from, and from there on */
        const size_t end = part == 0 && far_from < q1 ? far_from : q1;
        const size_t pf = part == 0 ? PF_BYTES : far;
        for (; q + 2 <= end; q += 2, p += 64) {
            prefetch(p + pf);
            if (!fp8) prefetch(p + odd + PF_BYTES);
            const bool last_half = 2 * q + 3 == k; /* pair q + 1 is (k - 1, padding) */
            if (fp8) {
                down_fp8_pair(M, 0, p, x, 2 * q, true, d);
                down_fp8_pair(M, 1, p + odd, x, 2 * q + 2, !last_half, d);
            } else {
                down_bf16_pair(M, 0, p, x, 2 * q, true, d);
                down_bf16_pair(M, 1, p + odd, x, 2 * q + 2, !last_half, d);
            }
        }
    }
    if (q < q1) {
        const bool whole = 2 * q + 1 < k;
        if (fp8)
            down_fp8_pair(M, 0, p, x, 2 * q, whole, d);
        else
            down_bf16_pair(M, 0, p, x, 2 * q, whole, d);
    }
}

INLINE void down_dot(const size_t M, const int fp8, size_t k, const void *const *xv,
                     const unsigned char *tile, __m256 acc[][4])
{
    const float *x[MR];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    }
    __m256 d[MR][2][2];
    const size_t pairs = (k + 1) / 2;
    if (!fp8) {
        const size_t odd = moe_xl_bf16_stream2(1, (int64_t)k);
        down_pairs(M, 0, tile + moe_xl_bf16_weights(1), odd,
                   2 * moe_xl_prefetch_switch(odd, PF_BYTES, 64, pairs / 2),
                   PF_BYTES + moe_xl_bf16_down_bytes((int64_t)k), x, 0, pairs, k, d);
        UNROLL
        for (size_t i = 0; i < M; i++)
            UNROLL
        for (size_t j = 0; j < 2; j++)
            acc[i][j] = _mm256_add_ps(d[i][0][j], d[i][1][j]);
        return;
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t q0 = 0; q0 < pairs; q0 += MOE_XL_KB / 2, sc += 4) {
        const size_t q1 = q0 + MOE_XL_KB / 2 < pairs ? q0 + MOE_XL_KB / 2 : pairs;
        down_pairs(M, 1, codes + q0 * 32, 32, SIZE_MAX, PF_BYTES, x, q0, q1, k, d);
        const __m256 s = _mm256_set1_ps(load_f32(sc));
        UNROLL
        for (size_t i = 0; i < M; i++)
            UNROLL
        for (size_t j = 0; j < 2; j++)
            acc[i][j] = _mm256_fmadd_ps(_mm256_add_ps(d[i][0][j], d[i][1][j]), s, acc[i][j]);
    }
}

/* ---- The four direct-path kernels (epilogues: kernels/avx2/expert_f32_common.h) ---------- */

INLINE void gateup_bf16_m(const size_t M, size_t k, const void *const *x, const unsigned char *tile,
                          const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    __m256 acc[MR][4];
    bf16_dot(M, k, x, tile + moe_xl_bf16_weights(2), acc);
    gateup_out(M, acc, tile, act, h, hs, n_valid);
}

INLINE void down_bf16_m(const size_t M, size_t k, const void *const *x, const unsigned char *tile,
                        float *y, size_t ys, size_t n_valid)
{
    __m256 acc[MR][4];
    down_dot(M, 0, k, x, tile, acc);
    down_out(M, acc, tile, y, ys, n_valid);
}

INLINE void gateup_fp8_m(const size_t M, size_t k, const void *const *x, const unsigned char *tile,
                         const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    __m256 acc[MR][4];
    fp8_dot(M, k, x, tile, acc);
    gateup_out(M, acc, tile, act, h, hs, n_valid);
}

INLINE void down_fp8_m(const size_t M, size_t k, const void *const *x, const unsigned char *tile,
                       float *y, size_t ys, size_t n_valid)
{
    __m256 acc[MR][4];
    down_dot(M, 1, k, x, tile, acc);
    down_out(M, acc, tile, y, ys, n_valid);
}

/* ---- FP8, 3..8 tokens: each 128-K block decoded once into L1, tokens in pairs over it -----
 * As in the AVX-512 set: the direct path decodes for every 2 tokens, so its decode bounds
 * it; here a block's codes become f32 once (16 KB for gate/up) and each pair of tokens runs
 * over them with the direct path's arithmetic (block chain in k order, then the scale). */

/* n steps of 16 codes into 16 f32 each. */
INLINE void fp8_decode(const unsigned char *codes, size_t n16, float *buf)
{
    for (size_t j = 0; j < n16; j++) {
        __m256 lo, hi;
        fp8_16(codes + 16 * j, &lo, &hi);
        _mm256_store_ps(buf + 16 * j, lo);
        _mm256_store_ps(buf + 16 * j + 8, hi);
    }
}

/* The chains of a buffered path: M tokens over n k of a block of f32 weights (buf; gate/up 32
 * per k: gate 0-7, 8-15, up 0-7, 8-15; down 16 per k), each element's FMAs in k order, from
 * the accumulators the caller gives. They also bring the next block's source into L2 (next,
 * and next2 when not NULL: a second stream; 32 bytes per k for gate/up, 16 for down), as in
 * the AVX-512 set: each block is a new 4 KB page; gate/up prefetches every pf_every k (FP8 1:
 * every line twice, which measured faster than once; bf16 2). Each weight vector is loaded once for
 * all tokens: the empty asm keeps GCC from folding the load into every FMA (a load per FMA, which
 * held the prefill back: bench/NOTES.md v12). */
INLINE void gateup_chains(const size_t M, const float *buf, size_t n, const float *const *x,
                          size_t k0, const unsigned char *next, const unsigned char *next2,
                          const size_t pf_every, __m256 b[][4])
{
    for (size_t kk = 0; kk < n; kk++) {
        if (kk % pf_every == 0) {
            prefetch(next + 32 * kk);
            if (next2) prefetch(next2 + 32 * kk);
        }
        const float *w = buf + 32 * kk;
        UNROLL
        for (size_t j = 0; j < 4; j++) {
            __m256 wj = _mm256_load_ps(w + 8 * j);
            __asm__("" : "+x"(wj));
            UNROLL
            for (size_t i = 0; i < M; i++)
                b[i][j] = _mm256_fmadd_ps(wj, _mm256_set1_ps(x[i][k0 + kk]), b[i][j]);
        }
    }
}

/* down: chains a (d[i][0], even pairs) and b (d[i][1], odd); k0 a multiple of 4, so the
 * parity of k's pair is that of kk / 2. */
INLINE void down_chains(const size_t M, const float *buf, size_t n, const float *const *x,
                        size_t k0, const unsigned char *next, const unsigned char *next2,
                        __m256 d[][2][2])
{
    for (size_t kk = 0; kk < n; kk++) {
        if (kk % 4 == 0) {
            prefetch(next + 16 * kk);
            if (next2) prefetch(next2 + 16 * kk);
        }
        const size_t c = (kk / 2) & 1;
        UNROLL
        for (size_t j = 0; j < 2; j++) {
            __m256 wj = _mm256_load_ps(buf + 16 * kk + 8 * j);
            __asm__("" : "+x"(wj));
            UNROLL
            for (size_t i = 0; i < M; i++) {
                const __m256 xb = _mm256_set1_ps(x[i][k0 + kk]);
                if (c)
                    d[i][1][j] = _mm256_fmadd_ps(wj, xb, d[i][1][j]);
                else
                    d[i][0][j] = _mm256_fmadd_ps(wj, xb, d[i][0][j]);
            }
        }
    }
}

/* FP8: a pair of tokens' block chains from zero, then into the totals with the block scales. */
INLINE void gateup_pair(const size_t M, const float *buf, size_t n, const float *const *x,
                        size_t k0, __m256 sg, __m256 su, float (*tot)[NR],
                        const unsigned char *next)
{
    __m256 b[MR][4];
    UNROLL
    for (size_t i = 0; i < M; i++)
        b[i][0] = b[i][1] = b[i][2] = b[i][3] = _mm256_setzero_ps();
    gateup_chains(M, buf, n, x, k0, next, NULL, 1, b);
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 4; j++) {
        float *t = tot[2 * i + j / 2] + 8 * (j % 2);
        _mm256_store_ps(t, _mm256_fmadd_ps(b[i][j], j < 2 ? sg : su, _mm256_load_ps(t)));
    }
}

INLINE void down_pair(const size_t M, const float *buf, size_t n, const float *const *x, size_t k0,
                      __m256 s, float (*tot)[NR], const unsigned char *next)
{
    __m256 d[MR][2][2];
    UNROLL
    for (size_t i = 0; i < M; i++)
        d[i][0][0] = d[i][0][1] = d[i][1][0] = d[i][1][1] = _mm256_setzero_ps();
    down_chains(M, buf, n, x, k0, next, NULL, d);
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 2; j++) {
        float *t = tot[i] + 8 * j;
        const __m256 sum = _mm256_add_ps(d[i][0][j], d[i][1][j]);
        _mm256_store_ps(t, _mm256_fmadd_ps(sum, s, _mm256_load_ps(t)));
    }
}

/* The gate/up outputs of m tokens from their totals (tot[2i] gate, tot[2i + 1] up): bias, then
 * the activation. */
INLINE void gateup_tot_out(size_t m, float (*tot)[NR], const unsigned char *tile,
                           const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    const float *b = (const float *)tile;
    for (size_t i = 0; i < m; i++) {
        __m256 acc[4];
        for (size_t j = 0; j < 4; j++)
            acc[j] = _mm256_add_ps(_mm256_load_ps(tot[2 * i + j / 2] + 8 * (j % 2)),
                                   _mm256_loadu_ps(b + 8 * j));
        store16(h + i * hs, act8(act, acc[0], acc[2]), act8(act, acc[1], acc[3]), n_valid);
    }
}

static void gateup_fp8_buffered(size_t m, size_t k, const void *const *xv,
                                const unsigned char *tile, const moe_act_params *act, float *h,
                                size_t hs, size_t n_valid)
{
    float buf[MOE_XL_KB * 2 * NR] __attribute__((aligned(32)));
    float tot[2 * MR_FP8][NR] __attribute__((aligned(32)));
    const float *x[MR_FP8];
    memset(tot, 0, 2 * m * sizeof tot[0]);
    for (size_t i = 0; i < m; i++)
        x[i] = xv[i];
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(codes + k0 * 32, 2 * n, buf);
        const __m256 sg = _mm256_set1_ps(load_f32(sc)), su = _mm256_set1_ps(load_f32(sc + 4));
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 32;
        for (size_t c = 0; c < m; c += MR) {
            if (m - c >= 2)
                gateup_pair(2, buf, n, x + c, k0, sg, su, tot + 2 * c, next);
            else
                gateup_pair(1, buf, n, x + c, k0, sg, su, tot + 2 * c, next);
        }
    }
    gateup_tot_out(m, tot, tile, act, h, hs, n_valid);
}

static __attribute__((noinline)) void down_fp8_buffered(size_t m, size_t k, const void *const *hv,
                                                        const unsigned char *tile, float *y,
                                                        size_t ys, size_t n_valid)
{
    float buf[MOE_XL_KB * NR] __attribute__((aligned(32)));
    float tot[MR_FP8][NR] __attribute__((aligned(32)));
    const float *x[MR_FP8];
    memset(tot, 0, m * sizeof tot[0]);
    for (size_t i = 0; i < m; i++)
        x[i] = hv[i];
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(codes + k0 * 16, n, buf);
        const __m256 s = _mm256_set1_ps(load_f32(sc));
        const unsigned char *next = codes + (k0 + n < k ? k0 + n : k0) * 16;
        for (size_t c = 0; c < m; c += MR) {
            if (m - c >= 2)
                down_pair(2, buf, n, x + c, k0, s, tot + c, next);
            else
                down_pair(1, buf, n, x + c, k0, s, tot + c, next);
        }
    }
    const float *b = (const float *)tile;
    for (size_t i = 0; i < m; i++)
        store16(y + i * ys, _mm256_add_ps(_mm256_load_ps(tot[i]), _mm256_loadu_ps(b)),
                _mm256_add_ps(_mm256_load_ps(tot[i] + 8), _mm256_loadu_ps(b + 8)), n_valid);
}

/* ---- bf16, 3..32 tokens: each 64-K block widened once into L1, tokens in threes over it ----
 * The direct path widens every weight again for each 2 tokens (a shift or a mask per 8
 * weights, on the FMA ports), and the engine called it once per 2 tokens over a run of tiles.
 * Here a block's pairs become f32 once (8 KB for gate/up) and the tokens run over them three at
 * a time (12 chains where the FMA latency wants 8; 4 tokens as 2 + 2, not 3 + 1, whose lone
 * token's 4 chains would wait on it), with the direct path's FMAs in the same order: an
 * element's chain runs on through its total in memory between blocks (stored and loaded
 * exactly), so the bits are the direct path's. Mid batches 1.1-1.2x (bench/NOTES.md v13). */

/* Pairs [0, np) of a gate/up block (gate's at w, up's at w + up) widened: k = 2q + e at
 * buf + 32k + 8j for row group j (gate 0-7, gate 8-15, up 0-7, up 8-15). */
INLINE void bf16_widen_gateup(const unsigned char *w, size_t up, size_t np, float *buf)
{
    for (size_t q = 0; q < np; q++)
        UNROLL
    for (size_t j = 0; j < 4; j++) {
        __m256 w0, w1;
        widen_pair(_mm256_loadu_si256((const __m256i *)(w + 64 * q + (j / 2) * up + 32 * (j % 2))),
                   &w0, &w1);
        _mm256_store_ps(buf + 64 * q + 8 * j, w0);
        _mm256_store_ps(buf + 64 * q + 32 + 8 * j, w1);
    }
}

/* Pairs [0, np) of a down block (even pairs at p, 64 bytes per two pairs; each odd one odd
 * bytes after the even one before it) widened: k = 2q + e at buf + 16k + 8j. */
INLINE void bf16_widen_down(const unsigned char *p, size_t odd, size_t np, float *buf)
{
    for (size_t q = 0; q < np; q++) {
        const unsigned char *src = p + 64 * (q / 2) + (q % 2 ? odd : 0);
        UNROLL
        for (size_t j = 0; j < 2; j++) {
            __m256 w0, w1;
            widen_pair(_mm256_loadu_si256((const __m256i *)(src + 32 * j)), &w0, &w1);
            _mm256_store_ps(buf + 32 * q + 8 * j, w0);
            _mm256_store_ps(buf + 32 * q + 16 + 8 * j, w1);
        }
    }
}

/* M ≤ 3 tokens over a widened gate/up block of n k: tot[2i] (gate) and tot[2i + 1] (up) carry
 * token i's chains from block to block. next: the next block's gate pairs (up's at next + up). */
INLINE void gateup_bf16_pass(const size_t M, const float *buf, size_t n, const float *const *x,
                             size_t k0, float (*tot)[NR], const unsigned char *next, size_t up)
{
    __m256 b[3][4]; /* M ≤ 3 */
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 4; j++)
        b[i][j] = _mm256_load_ps(tot[2 * i + j / 2] + 8 * (j % 2));
    gateup_chains(M, buf, n, x, k0, next, next + up, 2, b);
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t j = 0; j < 4; j++)
        _mm256_store_ps(tot[2 * i + j / 2] + 8 * (j % 2), b[i][j]);
}

/* down: tot[i] holds token i's chain a (even pairs) in [0, 16) and chain b (odd) in [16, 32). */
INLINE void down_bf16_pass(const size_t M, const float *buf, size_t n, const float *const *x,
                           size_t k0, float (*tot)[2 * NR], const unsigned char *next, size_t odd)
{
    __m256 d[3][2][2]; /* M ≤ 3 */
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t c = 0; c < 4; c++)
        d[i][c / 2][c % 2] = _mm256_load_ps(tot[i] + 8 * c);
    down_chains(M, buf, n, x, k0, next, next + odd, d);
    UNROLL
    for (size_t i = 0; i < M; i++)
        UNROLL
    for (size_t c = 0; c < 4; c++)
        _mm256_store_ps(tot[i] + 8 * c, d[i][c / 2][c % 2]);
}

static void gateup_bf16_buffered(size_t m, size_t k, const void *const *xv,
                                 const unsigned char *tile, const moe_act_params *act, float *h,
                                 size_t hs, size_t n_valid)
{
    float buf[KB_BF16 * 2 * NR] __attribute__((aligned(32)));
    float tot[2 * MR_BF16][NR] __attribute__((aligned(32)));
    const float *x[MR_BF16];
    memset(tot, 0, 2 * m * sizeof tot[0]);
    for (size_t i = 0; i < m; i++)
        x[i] = xv[i];
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    const size_t up = moe_xl_bf16_stream2(2, (int64_t)k);
    for (size_t k0 = 0; k0 < k; k0 += KB_BF16) {
        const size_t n = k0 + KB_BF16 < k ? KB_BF16 : k - k0;
        bf16_widen_gateup(w + 32 * k0, up, (n + 1) / 2, buf);
        const unsigned char *next = w + 32 * (k0 + n < k ? k0 + n : k0);
        for (size_t c = 0, g; c < m; c += g) {
            g = pass_tokens(m - c);
            if (g == 3)
                gateup_bf16_pass(3, buf, n, x + c, k0, tot + 2 * c, next, up);
            else if (g == 2)
                gateup_bf16_pass(2, buf, n, x + c, k0, tot + 2 * c, next, up);
            else
                gateup_bf16_pass(1, buf, n, x + c, k0, tot + 2 * c, next, up);
        }
    }
    gateup_tot_out(m, tot, tile, act, h, hs, n_valid);
}

static __attribute__((noinline)) void down_bf16_buffered(size_t m, size_t k, const void *const *hv,
                                                         const unsigned char *tile, float *y,
                                                         size_t ys, size_t n_valid)
{
    float buf[KB_BF16 * NR] __attribute__((aligned(32)));
    float tot[MR_BF16][2 * NR] __attribute__((aligned(32)));
    const float *x[MR_BF16];
    memset(tot, 0, m * sizeof tot[0]);
    for (size_t i = 0; i < m; i++)
        x[i] = hv[i];
    const unsigned char *p = tile + moe_xl_bf16_weights(1);
    const size_t odd = moe_xl_bf16_stream2(1, (int64_t)k);
    for (size_t k0 = 0; k0 < k; k0 += KB_BF16) {
        const size_t n = k0 + KB_BF16 < k ? KB_BF16 : k - k0;
        bf16_widen_down(p + 16 * k0, odd, (n + 1) / 2, buf);
        const unsigned char *next = p + 16 * (k0 + n < k ? k0 + n : k0);
        for (size_t c = 0, g; c < m; c += g) {
            g = pass_tokens(m - c);
            if (g == 3)
                down_bf16_pass(3, buf, n, x + c, k0, tot + c, next, odd);
            else if (g == 2)
                down_bf16_pass(2, buf, n, x + c, k0, tot + c, next, odd);
            else
                down_bf16_pass(1, buf, n, x + c, k0, tot + c, next, odd);
        }
    }
    const float *b = (const float *)tile;
    for (size_t i = 0; i < m; i++)
        store16(
            y + i * ys,
            _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(tot[i]), _mm256_load_ps(tot[i] + 16)),
                          _mm256_loadu_ps(b)),
            _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(tot[i] + 8), _mm256_load_ps(tot[i] + 24)),
                          _mm256_loadu_ps(b + 8)),
            n_valid);
}

static void gateup_bf16(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    if (m == 1) gateup_bf16_m(1, k, x, tile, act, h, h_stride, n_valid);
    if (m == 2) gateup_bf16_m(2, k, x, tile, act, h, h_stride, n_valid);
    if (m > 2) gateup_bf16_buffered(m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_bf16(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    if (m == 1) down_bf16_m(1, k, h, tile, y, y_stride, n_valid);
    if (m == 2) down_bf16_m(2, k, h, tile, y, y_stride, n_valid);
    if (m > 2) down_bf16_buffered(m, k, h, tile, y, y_stride, n_valid);
}

static void gateup_fp8(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    if (m == 1) gateup_fp8_m(1, k, x, tile, act, h, h_stride, n_valid);
    if (m == 2) gateup_fp8_m(2, k, x, tile, act, h, h_stride, n_valid);
    if (m > 2) gateup_fp8_buffered(m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_fp8(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    if (m == 1) down_fp8_m(1, k, h, tile, y, y_stride, n_valid);
    if (m == 2) down_fp8_m(2, k, h, tile, y, y_stride, n_valid);
    if (m > 2) down_fp8_buffered(m, k, h, tile, y, y_stride, n_valid);
}

/* ---- FP8, one token: two tiles side by side ----------------------------------------------
 * As the MXFP4 set (bench/NOTES.md v11): one core reads two streams faster than one. Both
 * tiles' block sums stay in registers (8 ymm), their totals go to the stack once per block;
 * each element gets the direct path's operations. A tile's L2 prefetch past its end goes one
 * tile further, to the next pair's tile of the same side (the partner reads the next tile). */

/* gate/up of the tiles at tile and tile + tb for the token x: tot[j][r] for row group r (gate
 * 0-7, 8-15, up 0-7, 8-15). */
INLINE void gateup_fp8_pair_dot(size_t k, const float *x, const unsigned char *tile, size_t tb,
                                float tot[2][4][8])
{
    memset(tot, 0, 2 * sizeof tot[0]);
    const size_t cs = moe_xl_fp8_codes((int64_t)k, 2), bias = moe_xl_bias_bytes(2);
    for (size_t k0 = 0, blk = 0; k0 < k; k0 += MOE_XL_KB, blk++) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m256 b[2][4];
        UNROLL
        for (size_t j = 0; j < 2; j++)
            b[j][0] = b[j][1] = b[j][2] = b[j][3] = _mm256_setzero_ps();
        for (size_t kk = k0; kk < k1; kk++) {
            const __m256 xb = _mm256_set1_ps(x[kk]);
            UNROLL
            for (size_t j = 0; j < 2; j++) {
                const unsigned char *c = tile + j * tb + cs + kk * 32;
                prefetch(moe_xl_pair_prefetch(c + PF_BYTES, tile + (j + 1) * tb, tb));
                UNROLL
                for (size_t r = 0; r < 4; r += 2) {
                    __m256 w0, w1;
                    fp8_16(c + 8 * r, &w0, &w1);
                    b[j][r] = _mm256_fmadd_ps(w0, xb, b[j][r]);
                    b[j][r + 1] = _mm256_fmadd_ps(w1, xb, b[j][r + 1]);
                }
            }
        }
        UNROLL
        for (size_t j = 0; j < 2; j++) {
            const unsigned char *sc = tile + j * tb + bias + 8 * blk;
            UNROLL
            for (size_t r = 0; r < 4; r++) {
                const __m256 s = _mm256_set1_ps(load_f32(sc + 4 * (r / 2)));
                _mm256_store_ps(tot[j][r], _mm256_fmadd_ps(b[j][r], s, _mm256_load_ps(tot[j][r])));
            }
        }
    }
}

/* down of the tiles at tile and tile + tb for the token x0: tot[j][r] for rows 8r..8r+7 (r <
 * 2, in gate/up's array, so one caller serves both). */
INLINE void down_fp8_pair_dot(size_t k, const float *x0, const unsigned char *tile, size_t tb,
                              float tot[2][4][8])
{
    memset(tot, 0, 2 * sizeof tot[0]);
    const float *const x[1] = {x0};
    const size_t cs = moe_xl_fp8_codes((int64_t)k, 1), bias = moe_xl_bias_bytes(1);
    const size_t pairs = (k + 1) / 2;
    for (size_t q0 = 0, blk = 0; q0 < pairs; q0 += MOE_XL_KB / 2, blk++) {
        const size_t q1 = q0 + MOE_XL_KB / 2 < pairs ? q0 + MOE_XL_KB / 2 : pairs;
        __m256 d[2][1][2][2]; /* [tile][token][chain][row group] */
        UNROLL
        for (size_t j = 0; j < 2; j++)
            d[j][0][0][0] = d[j][0][0][1] = d[j][0][1][0] = d[j][0][1][1] = _mm256_setzero_ps();
        size_t q = q0;
        for (; q + 2 <= q1; q += 2) {
            const bool last_half = 2 * q + 3 == k; /* pair q + 1 is (k - 1, padding) */
            UNROLL
            for (size_t j = 0; j < 2; j++) {
                const unsigned char *p = tile + j * tb + cs + q * 32;
                prefetch(moe_xl_pair_prefetch(p + PF_BYTES, tile + (j + 1) * tb, tb));
                down_fp8_pair(1, 0, p, x, 2 * q, true, d[j]);
                down_fp8_pair(1, 1, p + 32, x, 2 * q + 2, !last_half, d[j]);
            }
        }
        if (q < q1)
            for (size_t j = 0; j < 2; j++)
                down_fp8_pair(1, 0, tile + j * tb + cs + q * 32, x, 2 * q, 2 * q + 1 < k, d[j]);
        UNROLL
        for (size_t j = 0; j < 2; j++) {
            const __m256 s = _mm256_set1_ps(load_f32(tile + j * tb + bias + 4 * blk));
            UNROLL
            for (size_t r = 0; r < 2; r++) {
                const __m256 sum = _mm256_add_ps(d[j][0][0][r], d[j][0][1][r]);
                _mm256_store_ps(tot[j][r], _mm256_fmadd_ps(sum, s, _mm256_load_ps(tot[j][r])));
            }
        }
    }
}

/* n tiles of np projections: in pairs at one token (and a last odd tile), tile by tile
 * otherwise. */
INLINE void fp8_tiles(const int np, size_t m, size_t k, const void *const *x,
                      const unsigned char *tile, size_t n, const moe_act_params *act, float *out,
                      size_t os, size_t n_valid)
{
    const size_t tb =
        np == 2 ? moe_xl_fp8_gateup_bytes((int64_t)k) : moe_xl_fp8_down_bytes((int64_t)k);
    for (size_t j = 0; j < n;) {
        const size_t pair = m == 1 && n - j >= 2 ? 2 : 1;
        if (pair == 2) {
            float tot[2][4][8] __attribute__((aligned(32)));
            if (np == 2)
                gateup_fp8_pair_dot(k, x[0], tile + j * tb, tb, tot);
            else
                down_fp8_pair_dot(k, x[0], tile + j * tb, tb, tot);
            for (size_t i = 0; i < 2; i++) {
                __m256 acc[1][4];
                for (int r = 0; r < 2 * np; r++)
                    acc[0][r] = _mm256_load_ps(tot[i][r]);
                const unsigned char *t = tile + (j + i) * tb;
                const size_t nv = j + i + 1 == n ? n_valid : NR;
                if (np == 2)
                    gateup_out(1, acc, t, act, out + (j + i) * NR, os, nv);
                else
                    down_out(1, acc, t, out + (j + i) * NR, os, nv);
            }
        } else if (np == 2) {
            gateup_fp8(m, k, x, tile + j * tb, act, out + j * NR, os, j + 1 == n ? n_valid : NR);
        } else {
            down_fp8(m, k, x, tile + j * tb, out + j * NR, os, j + 1 == n ? n_valid : NR);
        }
        j += pair;
    }
}

static void gateup_fp8_tiles(size_t m, size_t k, const void *const *x, const void *tile, size_t n,
                             const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    fp8_tiles(2, m, k, x, tile, n, act, h, h_stride, n_valid);
}

static void down_fp8_tiles(size_t m, size_t k, const void *const *hv, const void *tile, size_t n,
                           float *y, size_t y_stride, size_t n_valid)
{
    fp8_tiles(1, m, k, hv, tile, n, NULL, y, y_stride, n_valid);
}

MOE_XL_SET(moe_expert_bf16_f32_32x16__avx2, MOE_RECIPE_F32, MOE_REQ_AVX2, MR_BF16,
           MOE_XL_BF16_LAYOUT, .gateup = gateup_bf16, .down = down_bf16);

MOE_XL_SET(moe_expert_fp8_f32_32x16__avx2, MOE_RECIPE_F32, MOE_REQ_AVX2, MR_FP8,
           MOE_XL_FP8_LAYOUT(fp8), .gateup = gateup_fp8, .down = down_fp8,
           .gateup_tiles = gateup_fp8_tiles, .down_tiles = down_fp8_tiles);
