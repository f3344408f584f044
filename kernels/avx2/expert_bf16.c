/* expert_bf16.c — the AVX2 expert kernel sets of the bf16 recipe (bf16 and FP8), 32x16: vdpbf16ps's
 * arithmetic as two FMAs under DAZ and FTZ. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/fp8_pairs.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/inline.h"
#include "select/kernel.h"

/*
 * For CPUs without AVX-512 (the AVX-512 sets are kernels/avx512/expert_bf16_body.h; this is
 * their arithmetic on ymm). The direct path: up to MR = 2 tokens by 16 rows, each row group of
 * 8 in one ymm (3..32 tokens: the buffered path, below); per token four accumulators (gate/up: gate
 * rows 0-7, 8-15, up rows 0-7, 8-15; down: the even pairs' chain A and the odd pairs' chain B, each
 * in two halves). Per k-pair each token's activation pair (x[2q], x[2q+1]) is broadcast and widened
 * (a mask for the odd element, a shift for the even one), as are the 16 rows' weight pairs, and the
 * pair step is two FMAs, the odd products first, under MXCSR's DAZ and FTZ
 * (kernels/mxcsr_daz_ftz.h): the reference's bits (kernels/ref/expert_ref.h). FP8 codes (the pairs
 * order) become the bf16 of e4m3(code) · 2^-8 first, a byte at a time from byte tables
 * (fp8_bf16_32).
 */

#define NR MOE_XL_NR
#define MR 2
#define PF_BYTES 8192
#define UNROLL _Pragma("GCC unroll 8")

INLINE void prefetch(const unsigned char *p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* The activation pair q of a row (moe_xl_bf16_x_pair), broadcast. */
INLINE __m256i x_pair(const uint16_t *x, size_t q, size_t k)
{
    return _mm256_set1_epi32((int)moe_xl_bf16_x_pair(x, q, k));
}

/* acc + w · x over one pair of 8 rows, as vdpbf16ps computes it (DAZ and FTZ set). */
INLINE __m256 dp8(__m256 acc, __m256i w, __m256i x)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w, hi)),
                          _mm256_castsi256_ps(_mm256_and_si256(x, hi)), acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)),
                           _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), acc);
}

/* Where projection p's pair q lies among np projections from w: the FP8 pairs order (the
 * projections' 32 codes side by side per pair), or the bf16 pair streams. */
INLINE const unsigned char *pair_line(const int fp8, const int np, const unsigned char *w, size_t k,
                                      int p, size_t q)
{
    return fp8 ? w + (q * (size_t)np + (size_t)p) * 2 * NR
               : w + moe_xl_bf16_pair_at(np, (int64_t)k, p, q);
}

/* The weight pair vectors (rows 0-7, 8-15) of a pair at l: 32 FP8 codes, or 16 bf16 pairs. */
INLINE void pair_w(const int fp8, const unsigned char *l, __m256i v[2])
{
    if (fp8) {
        fp8_bf16_32(l, v);
    } else {
        v[0] = _mm256_loadu_si256((const __m256i *)l);
        v[1] = _mm256_loadu_si256((const __m256i *)(l + 32));
    }
}

/* The chains of acc fenced (dp_fence), so no step of theirs moves across what follows. */
INLINE void fence_chains(const size_t M, __m256 acc[][4])
{
    UNROLL
    for (size_t i = 0; i < M; i++) {
        UNROLL
        for (int j = 0; j < 4; j++)
            dp_fence(acc[i][j]);
    }
}

/* A run of pair steps on acc's chains in DP's FP environment: chains_enter before the first,
 * chains_leave after the last, each fencing the chains on both sides of the switch. */
INLINE dp_state chains_enter(const size_t M, __m256 acc[][4])
{
    const dp_state st = dp_enter();
    fence_chains(M, acc);
    return st;
}

INLINE void chains_leave(const size_t M, __m256 acc[][4], dp_state st)
{
    fence_chains(M, acc);
    dp_leave(st);
    fence_chains(M, acc);
}

/* Pair q into acc: gate/up into acc[i][0..1] (gate) and [2..3] (up); down into the chain
 * `chain`, acc[i][0..1] (A) or [2..3] (B). */
INLINE void pair_direct(const size_t M, const int fp8, const int np, const int chain,
                        const uint16_t *const *x, size_t q, size_t k, const unsigned char *w,
                        __m256 acc[][4])
{
    __m256i v[2][2];
    UNROLL
    for (int p = 0; p < np; p++) {
        const unsigned char *l = pair_line(fp8, np, w, k, p, q);
        prefetch(l + PF_BYTES);
        pair_w(fp8, l, v[p]);
    }
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const __m256i xp = x_pair(x[i], q, k);
        UNROLL
        for (int p = 0; p < np; p++) {
            const int slot = np == 2 ? 2 * p : 2 * chain;
            acc[i][slot] = dp8(acc[i][slot], v[p][0], xp);
            acc[i][slot + 1] = dp8(acc[i][slot + 1], v[p][1], xp);
        }
    }
}

/* Pairs [q0, q1) (q0 even; down: pair q into chain (q - q0) % 2), under DAZ and FTZ, fenced
 * on both sides. */
INLINE void pairs_dp(const size_t M, const int fp8, const int np, const uint16_t *const *x,
                     size_t q0, size_t q1, size_t k, const unsigned char *w, __m256 acc[][4])
{
    const dp_state st = chains_enter(M, acc);
    size_t q = q0;
    for (; q + 2 <= q1; q += 2) {
        pair_direct(M, fp8, np, 0, x, q, k, w, acc);
        pair_direct(M, fp8, np, 1, x, q + 1, k, w, acc);
    }
    if (q < q1) pair_direct(M, fp8, np, 0, x, q, k, w, acc);
    chains_leave(M, acc, st);
}

/* One token's FP8 block into its totals: acc = fma(block sum, the block's scale, acc), per
 * projection (slots 0-1 gate, 2-3 up), or for down (np 1) the sum of the chains A (slots 0-1)
 * and B (2-3) into slots 0-1. */
INLINE void block_scale(const int np, const __m256 b[4], const unsigned char *sc, __m256 acc[4])
{
    if (np == 1) {
        const __m256 s = _mm256_set1_ps(load_f32(sc));
        acc[0] = _mm256_fmadd_ps(_mm256_add_ps(b[0], b[2]), s, acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_add_ps(b[1], b[3]), s, acc[1]);
        return;
    }
    const __m256 sg = _mm256_set1_ps(load_f32(sc)), su = _mm256_set1_ps(load_f32(sc + 4));
    acc[0] = _mm256_fmadd_ps(b[0], sg, acc[0]);
    acc[1] = _mm256_fmadd_ps(b[1], sg, acc[1]);
    acc[2] = _mm256_fmadd_ps(b[2], su, acc[2]);
    acc[3] = _mm256_fmadd_ps(b[3], su, acc[3]);
}

/* The sums over K into acc. bf16 weights: one chain per element (down: chains A in slots 0-1
 * and B in 2-3, summed by down_row). FP8: per 128-K block the block's chains, then
 * block_scale (down: A + B before the scale, the total in slots 0-1, 2-3 zero). */
INLINE void dot(const size_t M, const int fp8, const int np, size_t k, const uint16_t *const *x,
                const unsigned char *tile, __m256 acc[][4])
{
    const size_t pairs = (k + 1) / 2;
    UNROLL
    for (size_t i = 0; i < M; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm256_setzero_ps();
    if (!fp8) {
        pairs_dp(M, 0, np, x, 0, pairs, k, tile + moe_xl_bf16_weights(np), acc);
        return;
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(np);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np);
    for (size_t q0 = 0; q0 < pairs; q0 += MOE_XL_KB / 2, sc += 4 * (size_t)np) {
        const size_t q1 = q0 + MOE_XL_KB / 2 < pairs ? q0 + MOE_XL_KB / 2 : pairs;
        __m256 b[MR][4];
        UNROLL
        for (size_t i = 0; i < M; i++)
            for (int j = 0; j < 4; j++)
                b[i][j] = _mm256_setzero_ps();
        pairs_dp(M, 1, np, x, q0, q1, k, codes, b);
        UNROLL
        for (size_t i = 0; i < M; i++)
            block_scale(np, b[i], sc, acc[i]);
    }
}

/* One token's down outputs from its sums (rows 0-7, 8-15 in slots 0-1; bf16 weights: chain A
 * there and B in 2-3, summed first): bias, y; n_valid rows stored. */
INLINE void down_row(const int fp8, const __m256 s[4], const unsigned char *tile, float *y,
                     size_t n_valid)
{
    const float *bias = (const float *)tile;
    __m256 lo = s[0], hi = s[1];
    if (!fp8) {
        lo = _mm256_add_ps(lo, s[2]);
        hi = _mm256_add_ps(hi, s[3]);
    }
    store16(y, _mm256_add_ps(lo, _mm256_loadu_ps(bias)),
            _mm256_add_ps(hi, _mm256_loadu_ps(bias + 8)), n_valid);
}

INLINE void gateup_m(const size_t M, const int fp8, size_t k, const void *const *xv,
                     const unsigned char *tile, const moe_act_params *act, uint16_t *h, size_t hs,
                     size_t n_valid)
{
    const uint16_t *x[MR];
    __m256 acc[MR][4];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = xv[i];
    dot(M, fp8, 2, k, x, tile, acc);
    UNROLL
    for (size_t i = 0; i < M; i++)
        gateup_row(acc[i][0], acc[i][1], acc[i][2], acc[i][3], tile, act, h + i * hs, n_valid);
}

INLINE void down_m(const size_t M, const int fp8, size_t k, const void *const *hv,
                   const unsigned char *tile, float *y, size_t ys, size_t n_valid)
{
    const uint16_t *x[MR];
    __m256 acc[MR][4];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = hv[i];
    dot(M, fp8, 1, k, x, tile, acc);
    UNROLL
    for (size_t i = 0; i < M; i++)
        down_row(fp8, acc[i], tile, y + i * ys, n_valid);
}

#define DISPATCH2(body, m, ...)                                                                    \
    do {                                                                                           \
        if ((m) == 1)                                                                              \
            body(1, __VA_ARGS__);                                                                  \
        else                                                                                       \
            body(2, __VA_ARGS__);                                                                  \
    } while (0)

/* ---- 3..32 tokens: each block widened once into L1 --------------------------------------
 * Per block of BP pairs (an FP8 scale block) the weights are widened once into a stack
 * buffer (per pair and projection: rows 0-7 odd, 8-15 odd, 0-7 even, 8-15 even, as f32), and
 * each token's activations once into another; then passes of at most 3 tokens (12 chains)
 * take each pair step as the direct path does, the weights as FMA memory operands. A chain
 * goes on across blocks through the totals in memory (bf16 weights) or starts at each block
 * and is scaled into them (FP8): each element's arithmetic is the direct path's. */

#define MR_BUF 32
#define BP (MOE_XL_KB / 2)

/* Pairs [q0, q0 + n) of np projections widened into buf. */
INLINE void widen_block(const int fp8, const int np, const unsigned char *w, size_t k, size_t q0,
                        size_t n, __m256 *buf)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    for (size_t j = 0; j < n; j++)
        for (int p = 0; p < np; p++) {
            const unsigned char *l = pair_line(fp8, np, w, k, p, q0 + j);
            prefetch(l + PF_BYTES);
            __m256i v[2];
            pair_w(fp8, l, v);
            __m256 *o = buf + (j * (size_t)np + (size_t)p) * 4;
            o[0] = _mm256_castsi256_ps(_mm256_and_si256(v[0], hi));
            o[1] = _mm256_castsi256_ps(_mm256_and_si256(v[1], hi));
            o[2] = _mm256_castsi256_ps(_mm256_slli_epi32(v[0], 16));
            o[3] = _mm256_castsi256_ps(_mm256_slli_epi32(v[1], 16));
        }
}

/* Elements [e0, e0 + n) of a bf16 row of k as f32 (0 past k). */
INLINE void widen_x(const uint16_t *x, size_t k, size_t e0, size_t n, float *out)
{
    size_t e = 0;
    for (; e + 8 <= n && e0 + e + 8 <= k; e += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + e0 + e)));
        _mm256_storeu_ps(out + e, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; e < n; e++) {
        const uint32_t b = e0 + e < k ? (uint32_t)x[e0 + e] << 16 : 0u;
        memcpy(out + e, &b, sizeof b);
    }
}

/* Pair j of a widened block into P tokens' chains: gate/up both projections (slots 0-1 and
 * 2-3), down the chain `chain` (slots 0-1: A, 2-3: B). The odd products of every chain, then
 * the even ones (as vdpbf16ps, per chain); each weight vector loaded once for the P tokens,
 * whose activations stay in registers (12 chains, 3 activations and a weight: 16 ymm). */
INLINE void pair_step(const size_t P, const int np, const int chain, const __m256 *buf, size_t j,
                      const float (*xw)[2 * BP], __m256 acc[][4])
{
    UNROLL
    for (int e = 0; e < 2; e++) {
        __m256 xv[3];
        UNROLL
        for (size_t t = 0; t < P; t++)
            xv[t] = _mm256_broadcast_ss(&xw[t][2 * j + 1 - (size_t)e]);
        UNROLL
        for (int p = 0; p < np; p++) {
            UNROLL
            for (int h = 0; h < 2; h++) {
                const __m256 wv = buf[(j * (size_t)np + (size_t)p) * 4 + 2 * (size_t)e + (size_t)h];
                const int s = (np == 2 ? 2 * p : 2 * chain) + h;
                UNROLL
                for (size_t t = 0; t < P; t++)
                    acc[t][s] = _mm256_fmadd_ps(wv, xv[t], acc[t][s]);
            }
        }
    }
}

/* One pass of P tokens over a widened block of n pairs (slots as the direct path's acc). */
INLINE void pass_block(const size_t P, const int fp8, const int np, const __m256 *buf, size_t n,
                       const float (*xw)[2 * BP], float (*tot)[4][8], const unsigned char *sc)
{
    __m256 acc[3][4];
    UNROLL
    for (size_t t = 0; t < P; t++) {
        UNROLL
        for (int s = 0; s < 4; s++)
            acc[t][s] = fp8 ? _mm256_setzero_ps() : _mm256_load_ps(tot[t][s]);
    }
    const dp_state st = chains_enter(P, acc);
    size_t j = 0;
    for (; j + 2 <= n; j += 2) {
        pair_step(P, np, 0, buf, j, xw, acc);
        pair_step(P, np, 1, buf, j + 1, xw, acc);
    }
    if (j < n) pair_step(P, np, 0, buf, j, xw, acc);
    chains_leave(P, acc, st);
    UNROLL
    for (size_t t = 0; t < P; t++) {
        __m256 out[4];
        UNROLL
        for (int s = 0; s < 4; s++)
            out[s] = fp8 ? _mm256_load_ps(tot[t][s]) : acc[t][s];
        if (fp8) block_scale(np, acc[t], sc, out);
        UNROLL
        for (int s = 0; s < 4; s++)
            _mm256_store_ps(tot[t][s], out[s]);
    }
}

/* The totals of m tokens over the whole tile (bf16 down: the two chains, not yet summed). */
INLINE void buffered(const int fp8, const int np, size_t m, size_t k, const uint16_t *const *x,
                     const unsigned char *tile, float (*tot)[4][8])
{
    __m256 buf[BP * 2 * 4];
    float xw[MR_BUF][2 * BP] __attribute__((aligned(32)));
    memset(tot, 0, m * sizeof *tot);
    const unsigned char *w =
        fp8 ? tile + moe_xl_fp8_codes((int64_t)k, np) : tile + moe_xl_bf16_weights(np);
    const unsigned char *sc = tile + moe_xl_bias_bytes(np);
    const size_t pairs = (k + 1) / 2;
    for (size_t q0 = 0; q0 < pairs; q0 += BP, sc += 4 * (size_t)np) {
        const size_t n = q0 + BP < pairs ? BP : pairs - q0;
        widen_block(fp8, np, w, k, q0, n, buf);
        for (size_t i = 0; i < m; i++)
            widen_x(x[i], k, 2 * q0, 2 * n, xw[i]);
        for (size_t t = 0, p; t < m; t += p) {
            const size_t rest = m - t;
            p = rest == 4 ? 2 : rest < 3 ? rest : 3; /* 4 as 2 + 2, not 3 + 1 */
            if (p == 3)
                pass_block(3, fp8, np, buf, n, (const float(*)[2 * BP]) xw + t, tot + t, sc);
            else if (p == 2)
                pass_block(2, fp8, np, buf, n, (const float(*)[2 * BP]) xw + t, tot + t, sc);
            else
                pass_block(1, fp8, np, buf, n, (const float(*)[2 * BP]) xw + t, tot + t, sc);
        }
    }
}

INLINE void gateup_buffered(const int fp8, size_t m, size_t k, const void *const *xv,
                            const unsigned char *tile, const moe_act_params *act, uint16_t *h,
                            size_t hs, size_t n_valid)
{
    float tot[MR_BUF][4][8] __attribute__((aligned(32)));
    buffered(fp8, 2, m, k, (const uint16_t *const *)xv, tile, tot);
    for (size_t i = 0; i < m; i++)
        gateup_row(_mm256_load_ps(tot[i][0]), _mm256_load_ps(tot[i][1]), _mm256_load_ps(tot[i][2]),
                   _mm256_load_ps(tot[i][3]), tile, act, h + i * hs, n_valid);
}

INLINE void down_buffered(const int fp8, size_t m, size_t k, const void *const *hv,
                          const unsigned char *tile, float *y, size_t ys, size_t n_valid)
{
    float tot[MR_BUF][4][8] __attribute__((aligned(32)));
    buffered(fp8, 1, m, k, (const uint16_t *const *)hv, tile, tot);
    for (size_t i = 0; i < m; i++) {
        const __m256 s[4] = {_mm256_load_ps(tot[i][0]), _mm256_load_ps(tot[i][1]),
                             _mm256_load_ps(tot[i][2]), _mm256_load_ps(tot[i][3])};
        down_row(fp8, s, tile, y + i * ys, n_valid);
    }
}

/* A call of m tokens: the direct path up to MR, the buffered one above. */
INLINE void gateup_any(const int fp8, size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t hs, size_t n_valid)
{
    if (m > MR)
        gateup_buffered(fp8, m, k, x, tile, act, h, hs, n_valid);
    else
        DISPATCH2(gateup_m, m, fp8, k, x, tile, act, h, hs, n_valid);
}

INLINE void down_any(const int fp8, size_t m, size_t k, const void *const *h, const void *tile,
                     float *y, size_t ys, size_t n_valid)
{
    if (m > MR)
        down_buffered(fp8, m, k, h, tile, y, ys, n_valid);
    else
        DISPATCH2(down_m, m, fp8, k, h, tile, y, ys, n_valid);
}

static void gateup_bf16(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    gateup_any(0, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_bf16(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    down_any(0, m, k, h, tile, y, y_stride, n_valid);
}

static void gateup_fp8(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    gateup_any(1, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_fp8(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    down_any(1, m, k, h, tile, y, y_stride, n_valid);
}

MOE_XL_BF16_RECIPE_SETS(moe_expert_bf16_bf16_32x16__avx2, moe_expert_fp8_bf16_32x16__avx2,
                        MOE_REQ_AVX2, MR_BUF);
