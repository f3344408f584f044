/* expert_f32.c — the AVX-512 expert kernel sets of the f32 recipe: bf16 8x16, FP8 32x16. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * Register tile: up to 8 tokens by the tile's 16 rows, one zmm accumulator per token and
 * projection for gate/up, two per token for down (its chains over the even and the odd
 * k-pairs), so 16 of the 32 registers accumulate and one token keeps two FMA chains in
 * flight. Each element is computed exactly as in kernels/ref/expert_f32.c: FMAs in k order
 * with the 16 rows' weight vector and the token's activation broadcast, FP8 block sums scaled
 * into totals kept on the stack (touched once per 128-K block), so the bits equal the
 * reference's for every m. m is a compile-time constant of each instantiation (1..8), so the
 * accumulators live in registers.
 *
 * Weights are widened in registers, never in memory:
 *  - bf16 pairs: one 64-byte load per projection and k-pair; k = 2q is the dword shifted left
 *    by 16, k = 2q+1 the dword with its low half cleared (2 ALU ops per 32 weights).
 *  - FP8: the 32 codes of k (16 gate rows, 16 up rows) sign-extend to words (vpmovsxbw);
 *    (w << 7) & 0xBFFF is the f16 of e4m3(code) · 2^-8 (bit 15 = sign from the extension,
 *    bit 14 cleared); vcvtph2ps of each half gives the gate and up vectors exactly. That is
 *    8 uops per 16 FMAs at m = 8, so FP8 takes up to 32 tokens (MR 32): from 9 tokens on,
 *    each 128-K block is decoded once into a 16 KB stack buffer and the tokens run over it
 *    in groups of 8 (gateup_fp8_buffered), with the same arithmetic per element.
 * Prefetch runs 8 KB ahead (into L2) in the tile and on into the next one: decode streams
 * each tile once from memory, and the hardware prefetcher alone left a quarter of the read
 * bandwidth unused on the development machine (a 1 KB distance into L1 did no better).
 */

#define NR MOE_XL_NR
#define MR 8      /* bf16 weights; FP8 weights up to 8 tokens (the direct path) */
#define MR_FP8 32 /* FP8 weights: 9..32 tokens take the buffered path */
#define PF_BYTES 8192
#define INLINE static inline __attribute__((always_inline))
/* Every loop over the tokens of a tile unrolls, so its accumulators are registers. */
#define UNROLL _Pragma("GCC unroll 8")

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void prefetch(const unsigned char *p) { _mm_prefetch((const char *)p, _MM_HINT_T1); }

/* The epilogue: moe_xr_act (kernels/ref/expert_ref.h) on 16 lanes. */
INLINE __m512 act16(const moe_act_params *a, __m512 g, __m512 u)
{
    if (a->kind != 0) {
        const __m512 lim = _mm512_set1_ps(a->limit), nlim = _mm512_set1_ps(-a->limit);
        g = _mm512_min_ps(lim, g);
        u = _mm512_min_ps(lim, u);
        u = _mm512_max_ps(nlim, u);
    }
    if (a->kind == 2) {
        __m512 s = moe_sigmoid_avx512(_mm512_mul_ps(_mm512_set1_ps(a->alpha), g));
        return _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_add_ps(u, _mm512_set1_ps(1.0f)));
    }
    return _mm512_mul_ps(_mm512_mul_ps(g, moe_sigmoid_avx512(g)), u);
}

INLINE __mmask16 rows_mask(size_t n_valid) { return (__mmask16)((1u << n_valid) - 1u); }

/* The 16 f16 codes of e4m3(code) · 2^-8 for 16 codes in a 256-bit half of w16 (words). */
INLINE __m512i fp8_words(__m256i codes)
{
    __m512i w = _mm512_cvtepi8_epi16(codes);
    return _mm512_and_si512(_mm512_slli_epi16(w, 7), _mm512_set1_epi16((short)0xBFFF));
}

/* ---- bf16 weights ------------------------------------------------------------------- */

INLINE void gateup_bf16_m(const size_t M, size_t k, const void *const *xv,
                          const unsigned char *tile, const moe_act_params *act, float *h, size_t hs,
                          size_t n_valid)
{
    const float *x[MR];
    __m512 ag[MR], au[MR];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        ag[i] = au[i] = _mm512_setzero_ps();
    }
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const size_t pairs = k / 2;
    for (size_t q = 0; q < pairs; q++, w += 128) {
        prefetch(w + PF_BYTES);
        prefetch(w + PF_BYTES + 64);
        const __m512i lg = _mm512_loadu_si512(w), lu = _mm512_loadu_si512(w + 64);
        const __m512 g0 = _mm512_castsi512_ps(_mm512_slli_epi32(lg, 16));
        const __m512 u0 = _mm512_castsi512_ps(_mm512_slli_epi32(lu, 16));
        const __m512 g1 = _mm512_castsi512_ps(_mm512_and_si512(lg, hi));
        const __m512 u1 = _mm512_castsi512_ps(_mm512_and_si512(lu, hi));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            const __m512 x0 = _mm512_set1_ps(x[i][2 * q]), x1 = _mm512_set1_ps(x[i][2 * q + 1]);
            ag[i] = _mm512_fmadd_ps(g0, x0, ag[i]);
            au[i] = _mm512_fmadd_ps(u0, x0, au[i]);
            ag[i] = _mm512_fmadd_ps(g1, x1, ag[i]);
            au[i] = _mm512_fmadd_ps(u1, x1, au[i]);
        }
    }
    if (k & 1) {
        const __m512i lg = _mm512_loadu_si512(w), lu = _mm512_loadu_si512(w + 64);
        const __m512 g0 = _mm512_castsi512_ps(_mm512_slli_epi32(lg, 16));
        const __m512 u0 = _mm512_castsi512_ps(_mm512_slli_epi32(lu, 16));
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

INLINE void down_bf16_m(const size_t M, size_t k, const void *const *hv, const unsigned char *tile,
                        float *y, size_t ys, size_t n_valid)
{
    const float *x[MR];
    __m512 a[MR], b[MR]; /* the chains of the even and the odd k-pairs */
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = hv[i];
        a[i] = b[i] = _mm512_setzero_ps();
    }
    const unsigned char *w = tile + moe_xl_bf16_weights(1);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const size_t full = k / 2;
    size_t q = 0;
    for (; q + 2 <= full; q += 2, w += 128) {
        prefetch(w + PF_BYTES);
        prefetch(w + PF_BYTES + 64);
        const __m512i l0 = _mm512_loadu_si512(w), l1 = _mm512_loadu_si512(w + 64);
        const __m512 a0 = _mm512_castsi512_ps(_mm512_slli_epi32(l0, 16));
        const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(l0, hi));
        const __m512 b0 = _mm512_castsi512_ps(_mm512_slli_epi32(l1, 16));
        const __m512 b1 = _mm512_castsi512_ps(_mm512_and_si512(l1, hi));
        const size_t k0 = 2 * q;
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(a0, _mm512_set1_ps(x[i][k0]), a[i]);
            b[i] = _mm512_fmadd_ps(b0, _mm512_set1_ps(x[i][k0 + 2]), b[i]);
            a[i] = _mm512_fmadd_ps(a1, _mm512_set1_ps(x[i][k0 + 1]), a[i]);
            b[i] = _mm512_fmadd_ps(b1, _mm512_set1_ps(x[i][k0 + 3]), b[i]);
        }
    }
    if (q < full) { /* one more whole pair, even: chain a */
        const __m512i l = _mm512_loadu_si512(w);
        const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
        const __m512 w1 = _mm512_castsi512_ps(_mm512_and_si512(l, hi));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[i][2 * q]), a[i]);
            a[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[i][2 * q + 1]), a[i]);
        }
        q++, w += 64;
    }
    if (k & 1) { /* the half pair (w[k-1], 0), in the chain of its parity */
        const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(w), 16));
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

/* ---- FP8 weights --------------------------------------------------------------------- */

INLINE void gateup_fp8_m(const size_t M, size_t k, const void *const *xv, const unsigned char *tile,
                         const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    const float *x[MR];
    /* The totals over blocks: touched once per block, so memory is the right place. */
    float tot[2 * MR][NR] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        _mm512_store_ps(tot[2 * i], _mm512_setzero_ps());
        _mm512_store_ps(tot[2 * i + 1], _mm512_setzero_ps());
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m512 bg[MR], bu[MR];
        UNROLL
        for (size_t i = 0; i < M; i++)
            bg[i] = bu[i] = _mm512_setzero_ps();
        for (size_t kk = k0; kk < k1; kk++) {
            const unsigned char *c = codes + kk * 32;
            prefetch(c + PF_BYTES);
            const __m512i w16 = fp8_words(_mm256_loadu_si256((const __m256i *)c));
            const __m512 g = _mm512_cvtph_ps(_mm512_castsi512_si256(w16));
            const __m512 u = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w16, 1));
            UNROLL
            for (size_t i = 0; i < M; i++) {
                const __m512 xb = _mm512_set1_ps(x[i][kk]);
                bg[i] = _mm512_fmadd_ps(g, xb, bg[i]);
                bu[i] = _mm512_fmadd_ps(u, xb, bu[i]);
            }
        }
        const __m512 sg = _mm512_set1_ps(load_f32(sc)), su = _mm512_set1_ps(load_f32(sc + 4));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            _mm512_store_ps(tot[2 * i], _mm512_fmadd_ps(bg[i], sg, _mm512_load_ps(tot[2 * i])));
            _mm512_store_ps(tot[2 * i + 1],
                            _mm512_fmadd_ps(bu[i], su, _mm512_load_ps(tot[2 * i + 1])));
        }
    }
    const __m512 bgv = _mm512_loadu_ps(tile), buv = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        __m512 g = _mm512_add_ps(_mm512_load_ps(tot[2 * i]), bgv);
        __m512 u = _mm512_add_ps(_mm512_load_ps(tot[2 * i + 1]), buv);
        _mm512_mask_storeu_ps(h + i * hs, mask, act16(act, g, u));
    }
}

/* The f32 weights of k (low words) and k + 1 (high words) from 32 codes. */
INLINE void fp8_two(const unsigned char *c, __m512 *w0, __m512 *w1)
{
    const __m512i w16 = fp8_words(_mm256_loadu_si256((const __m256i *)c));
    *w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(w16));
    *w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w16, 1));
}

INLINE void down_fp8_m(const size_t M, size_t k, const void *const *hv, const unsigned char *tile,
                       float *y, size_t ys, size_t n_valid)
{
    const float *x[MR];
    float tot[MR][NR] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = hv[i];
        _mm512_store_ps(tot[i], _mm512_setzero_ps());
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        __m512 a[MR], b[MR]; /* the chains of the block's even and odd k-pairs */
        UNROLL
        for (size_t i = 0; i < M; i++)
            a[i] = b[i] = _mm512_setzero_ps();
        size_t kk = k0;
        for (; kk + 4 <= k1; kk += 4) {
            const unsigned char *c = codes + kk * 16;
            prefetch(c + PF_BYTES);
            __m512 a0, a1, b0, b1;
            fp8_two(c, &a0, &a1);
            fp8_two(c + 32, &b0, &b1);
            UNROLL
            for (size_t i = 0; i < M; i++) {
                a[i] = _mm512_fmadd_ps(a0, _mm512_set1_ps(x[i][kk]), a[i]);
                b[i] = _mm512_fmadd_ps(b0, _mm512_set1_ps(x[i][kk + 2]), b[i]);
                a[i] = _mm512_fmadd_ps(a1, _mm512_set1_ps(x[i][kk + 1]), a[i]);
                b[i] = _mm512_fmadd_ps(b1, _mm512_set1_ps(x[i][kk + 3]), b[i]);
            }
        }
        int odd = 0; /* the parity of the next pair */
        if (kk + 2 <= k1) {
            __m512 w0, w1;
            fp8_two(codes + kk * 16, &w0, &w1);
            UNROLL
            for (size_t i = 0; i < M; i++) {
                a[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[i][kk]), a[i]);
                a[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[i][kk + 1]), a[i]);
            }
            kk += 2, odd = 1;
        }
        if (kk < k1) {
            __m512 w0, w1;
            fp8_two(codes + kk * 16, &w0, &w1);
            UNROLL
            for (size_t i = 0; i < M; i++) {
                const __m512 xb = _mm512_set1_ps(x[i][kk]);
                if (odd)
                    b[i] = _mm512_fmadd_ps(w0, xb, b[i]);
                else
                    a[i] = _mm512_fmadd_ps(w0, xb, a[i]);
            }
        }
        const __m512 s = _mm512_set1_ps(load_f32(sc));
        UNROLL
        for (size_t i = 0; i < M; i++)
            _mm512_store_ps(tot[i],
                            _mm512_fmadd_ps(_mm512_add_ps(a[i], b[i]), s, _mm512_load_ps(tot[i])));
    }
    const __m512 bias = _mm512_loadu_ps(tile);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(_mm512_load_ps(tot[i]), bias));
}

/* ---- FP8, 9..32 tokens: each 128-K block of the tile decoded once into L1 ---------------
 * The direct path decodes the codes in registers for every call, so its decode (8 uops per k
 * for 16 FMAs at m = 8) bounds it near two thirds of the FMA peak. For more tokens the block
 * is decoded once into a stack buffer (f32, 16 KB for gate/up) and the tokens run over it
 * in groups of 8, their weights loaded from L1. Each element's arithmetic is the direct
 * path's: the block's chain in k order, then one FMA with the block scale into the total. */

#define GROUP 8

/* n k-steps of 32 codes (gate 16 | up 16, or down k | k + 1 for step 2) into f32. */
INLINE void fp8_decode(const unsigned char *codes, size_t n32, float *buf)
{
    for (size_t j = 0; j < n32; j++) {
        const __m512i w16 = fp8_words(_mm256_loadu_si256((const __m256i *)(codes + 32 * j)));
        _mm512_store_ps(buf + 32 * j, _mm512_cvtph_ps(_mm512_castsi512_si256(w16)));
        _mm512_store_ps(buf + 32 * j + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w16, 1)));
    }
}

/* One group of M tokens over a decoded gate/up block [k0, k0 + n), into the totals. */
INLINE void gateup_group(const size_t M, const float *buf, size_t n, const float *const *x,
                         size_t k0, __m512 sg, __m512 su, float (*tot)[NR])
{
    __m512 bg[GROUP], bu[GROUP];
    UNROLL
    for (size_t i = 0; i < M; i++)
        bg[i] = bu[i] = _mm512_setzero_ps();
    for (size_t kk = 0; kk < n; kk++) {
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
                       __m512 s, float (*tot)[NR])
{
    __m512 a[GROUP], b[GROUP];
    UNROLL
    for (size_t i = 0; i < M; i++)
        a[i] = b[i] = _mm512_setzero_ps();
    size_t kk = 0;
    for (; kk + 4 <= n; kk += 4) {
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

#define GROUP_DISPATCH(body, m, ...)                                                               \
    do {                                                                                           \
        switch (m) {                                                                               \
        case 1: body(1, __VA_ARGS__); break;                                                       \
        case 2: body(2, __VA_ARGS__); break;                                                       \
        case 3: body(3, __VA_ARGS__); break;                                                       \
        case 4: body(4, __VA_ARGS__); break;                                                       \
        case 5: body(5, __VA_ARGS__); break;                                                       \
        case 6: body(6, __VA_ARGS__); break;                                                       \
        case 7: body(7, __VA_ARGS__); break;                                                       \
        default: body(8, __VA_ARGS__); break;                                                      \
        }                                                                                          \
    } while (0)

static void gateup_fp8_buffered(size_t m, size_t k, const void *const *xv,
                                const unsigned char *tile, const moe_act_params *act, float *h,
                                size_t hs, size_t n_valid)
{
    float buf[MOE_XL_KB * 2 * NR] __attribute__((aligned(64)));
    float tot[2 * MR_FP8][NR] __attribute__((aligned(64)));
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++) {
        x[i] = xv[i];
        _mm512_store_ps(tot[2 * i], _mm512_setzero_ps());
        _mm512_store_ps(tot[2 * i + 1], _mm512_setzero_ps());
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 8) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(codes + k0 * 32, n, buf);
        const __m512 sg = _mm512_set1_ps(load_f32(sc)), su = _mm512_set1_ps(load_f32(sc + 4));
        for (size_t c = 0; c < m; c += GROUP)
            GROUP_DISPATCH(gateup_group, m - c, buf, n, x + c, k0, sg, su, tot + 2 * c);
    }
    const __m512 bg = _mm512_loadu_ps(tile), bu = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    for (size_t i = 0; i < m; i++) {
        __m512 g = _mm512_add_ps(_mm512_load_ps(tot[2 * i]), bg);
        __m512 u = _mm512_add_ps(_mm512_load_ps(tot[2 * i + 1]), bu);
        _mm512_mask_storeu_ps(h + i * hs, mask, act16(act, g, u));
    }
}

static void down_fp8_buffered(size_t m, size_t k, const void *const *hv, const unsigned char *tile,
                              float *y, size_t ys, size_t n_valid)
{
    float buf[MOE_XL_KB * NR] __attribute__((aligned(64)));
    float tot[MR_FP8][NR] __attribute__((aligned(64)));
    const float *x[MR_FP8];
    for (size_t i = 0; i < m; i++) {
        x[i] = hv[i];
        _mm512_store_ps(tot[i], _mm512_setzero_ps());
    }
    const unsigned char *sc = tile + moe_xl_bias_bytes(1);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1);
    for (size_t k0 = 0; k0 < k; k0 += MOE_XL_KB, sc += 4) {
        const size_t n = k0 + MOE_XL_KB < k ? MOE_XL_KB : k - k0;
        fp8_decode(codes + k0 * 16, (n + 1) / 2, buf);
        const __m512 s = _mm512_set1_ps(load_f32(sc));
        for (size_t c = 0; c < m; c += GROUP)
            GROUP_DISPATCH(down_group, m - c, buf, n, x + c, k0, s, tot + c);
    }
    const __m512 b = _mm512_loadu_ps(tile);
    const __mmask16 mask = rows_mask(n_valid);
    for (size_t i = 0; i < m; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(_mm512_load_ps(tot[i]), b));
}

/* ---- Dispatch on m: one instantiation per m, so every loop over tokens unrolls --------- */

#define DISPATCH(body, m, ...)                                                                     \
    do {                                                                                           \
        switch (m) {                                                                               \
        case 1: body(1, __VA_ARGS__); break;                                                       \
        case 2: body(2, __VA_ARGS__); break;                                                       \
        case 3: body(3, __VA_ARGS__); break;                                                       \
        case 4: body(4, __VA_ARGS__); break;                                                       \
        case 5: body(5, __VA_ARGS__); break;                                                       \
        case 6: body(6, __VA_ARGS__); break;                                                       \
        case 7: body(7, __VA_ARGS__); break;                                                       \
        case 8: body(8, __VA_ARGS__); break;                                                       \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

static void gateup_bf16(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH(gateup_bf16_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_bf16(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    DISPATCH(down_bf16_m, m, k, h, tile, y, y_stride, n_valid);
}

static void gateup_fp8(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    if (m > MR)
        gateup_fp8_buffered(m, k, x, tile, act, h, h_stride, n_valid);
    else
        DISPATCH(gateup_fp8_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_fp8(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    if (m > MR)
        down_fp8_buffered(m, k, h, tile, y, y_stride, n_valid);
    else
        DISPATCH(down_fp8_m, m, k, h, tile, y, y_stride, n_valid);
}

const moe_expert_kernels moe_expert_bf16_f32_8x16__avx512 = {
    .name = "moe_expert_bf16_f32_8x16__avx512",
    .format = MOE_EXPERT_FMT_BF16,
    .recipe = MOE_RECIPE_F32,
    .isa = MOE_REQ_AVX512,
    .mr = MR,
    .nr = NR,
    .gateup_tile_bytes = moe_xl_bf16_gateup_bytes,
    .down_tile_bytes = moe_xl_bf16_down_bytes,
    .pack_gateup = moe_xl_bf16_pack_gateup,
    .pack_down = moe_xl_bf16_pack_down,
    .unpack_gateup = moe_xl_bf16_unpack_gateup,
    .unpack_down = moe_xl_bf16_unpack_down,
    .gateup = gateup_bf16,
    .down = down_bf16,
};

const moe_expert_kernels moe_expert_fp8_f32_32x16__avx512 = {
    .name = "moe_expert_fp8_f32_32x16__avx512",
    .format = MOE_EXPERT_FMT_FP8_BLOCK,
    .recipe = MOE_RECIPE_F32,
    .isa = MOE_REQ_AVX512,
    .mr = MR_FP8,
    .nr = NR,
    .gateup_tile_bytes = moe_xl_fp8_gateup_bytes,
    .down_tile_bytes = moe_xl_fp8_down_bytes,
    .pack_gateup = moe_xl_fp8_pack_gateup,
    .pack_down = moe_xl_fp8_pack_down,
    .unpack_gateup = moe_xl_fp8_unpack_gateup,
    .unpack_down = moe_xl_fp8_unpack_down,
    .gateup = gateup_fp8,
    .down = down_fp8,
};
