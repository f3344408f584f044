/* expert_f32.c — the AVX-512 expert kernel sets of the f32 recipe: bf16 12x16, FP8 32x16. */
#include "select/kernel.h"

/*
 * kernels/avx512/expert_f32_common.h has the register tile, the epilogue and the prefetch.
 * Weights are widened in registers, never in memory:
 *  - bf16 pairs: one 64-byte load per projection and k-pair; k = 2q is the dword shifted left
 *    by 16, k = 2q+1 the dword with its low half cleared (2 ALU ops per 32 weights). gate and
 *    up (down: its even and odd pairs) are two streams of the tile, read side by side.
 *  - FP8, k-major codes: the 32 codes of k (16 gate rows, 16 up rows) sign-extend to words
 *    (vpmovsxbw); (w << 7) & 0xBFFF is the f16 of e4m3(code) · 2^-8 (bit 15 = sign from the
 *    extension, bit 14 cleared); vcvtph2ps of each half gives the gate and up vectors
 *    exactly. That is 8 uops per 32 codes (16 FMAs at m = 8); the micro-kernels are
 *    kernels/avx512/expert_fp8_f32_body.h's (kernels/avx512vbmi/ has a cheaper decode).
 */

#include "kernels/avx512/expert_f32_common.h"

/* ---- bf16 weights ------------------------------------------------------------------- */

/* The 16 rows' pair at p as two f32 vectors: k = 2q (even) and k = 2q + 1 (odd). */
INLINE void bf16_widen(const unsigned char *p, __m512 *even, __m512 *odd)
{
    const __m512i l = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(l, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The even half of the pair at p (a half pair: its odd half is padding). */
INLINE __m512 bf16_even(const unsigned char *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
}

/* Steps [s0, s1) of a bf16 tile's two streams side by side (the first at w0, the second at
 * w0 + second; 64 bytes each per step): step s holds k = kstep·s and + 1 of the first stream,
 * into a, and k = kstep·s + koff and + 1 of the second, into b. Gate/up: kstep 2, koff 0 (gate
 * and up at the same k); down: kstep 4, koff 2 (a line's even pair and its odd one). The
 * first stream's L2 prefetch runs pf1 bytes ahead. */
INLINE void bf16_streams(const size_t M, const size_t kstep, const size_t koff,
                         const float *const *x, const unsigned char *w0, size_t second, size_t s0,
                         size_t s1, size_t pf1, __m512 *a, __m512 *b)
{
    const unsigned char *w = w0 + s0 * 64;
    for (size_t s = s0; s < s1; s++, w += 64) {
        prefetch_at(w, pf1);
        prefetch_ahead(w + second);
        __m512 a0, a1, b0, b1;
        bf16_widen(w, &a0, &a1);
        bf16_widen(w + second, &b0, &b1);
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

INLINE void gateup_bf16_m(const size_t M, size_t k, const void *const *xv,
                          const unsigned char *tile, const moe_act_params *act, float *h, size_t hs,
                          size_t n_valid)
{
    const float *x[MR_BF16];
    __m512 ag[MR_BF16], au[MR_BF16];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = xv[i];
        ag[i] = au[i] = _mm512_setzero_ps();
    }
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    const size_t up = moe_xl_bf16_stream2(2, (int64_t)k);
    const size_t pairs = k / 2, qs = moe_xl_prefetch_switch(up, PF_BYTES, 64, pairs);
    bf16_streams(M, 2, 0, x, w, up, 0, qs, PF_BYTES, ag, au);
    bf16_streams(M, 2, 0, x, w, up, qs, pairs, PF_BYTES + moe_xl_bf16_gateup_bytes((int64_t)k), ag,
                 au);
    w += pairs * 64;
    if (k & 1) {
        const __m512 g0 = bf16_even(w), u0 = bf16_even(w + up);
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
    const float *x[MR_BF16];
    __m512 a[MR_BF16], b[MR_BF16]; /* the chains of the even and the odd k-pairs */
    UNROLL
    for (size_t i = 0; i < M; i++) {
        x[i] = hv[i];
        a[i] = b[i] = _mm512_setzero_ps();
    }
    /* w: the even pair q; its odd successor q + 1 lies `odd` bytes on, in the second stream. */
    const unsigned char *w = tile + moe_xl_bf16_weights(1);
    const size_t odd = moe_xl_bf16_stream2(1, (int64_t)k);
    const size_t full = k / 2, lines = full / 2,
                 ls = moe_xl_prefetch_switch(odd, PF_BYTES, 64, lines);
    bf16_streams(M, 4, 2, x, w, odd, 0, ls, PF_BYTES, a, b);
    bf16_streams(M, 4, 2, x, w, odd, ls, lines, PF_BYTES + moe_xl_bf16_down_bytes((int64_t)k), a,
                 b);
    w += lines * 64;
    size_t q = 2 * lines;
    if (q < full) { /* one more whole pair, even: chain a */
        __m512 w0, w1;
        bf16_widen(w, &w0, &w1);
        UNROLL
        for (size_t i = 0; i < M; i++) {
            a[i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[i][2 * q]), a[i]);
            a[i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[i][2 * q + 1]), a[i]);
        }
        q++; /* odd now: the half pair below sits at w + odd */
    }
    if (k & 1) { /* the half pair (w[k-1], 0), in the chain (and the stream) of its parity */
        const __m512 w0 = bf16_even(q & 1 ? w + odd : w);
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

/* ---- FP8 weights, k-major codes: the f16 decode --------------------------------------- */

typedef struct fp8_dec {
    __m512i mask; /* 0xBFFF per word: bit 14 cleared */
} fp8_dec;

INLINE fp8_dec fp8_dec_init(void)
{
    fp8_dec d = {_mm512_set1_epi16((short)0xBFFF)};
    return d;
}

/* 32 codes as the f16 words of e4m3(code) · 2^-8, each half widened to 16 f32. */
INLINE void fp8_decode32(const fp8_dec *d, const unsigned char *c, __m512 *w0, __m512 *w1)
{
    __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)c));
    w = _mm512_and_si512(_mm512_slli_epi16(w, 7), d->mask);
    *w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
    *w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
}

INLINE void fp8_decode64(const fp8_dec *d, const unsigned char *c, __m512 w[4])
{
    fp8_decode32(d, c, &w[0], &w[1]);
    fp8_decode32(d, c + 32, &w[2], &w[3]);
}

#include "kernels/avx512/expert_fp8_f32_body.h"

/* ---- Dispatch on m --------------------------------------------------------------------- */

static void gateup_bf16(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH12(gateup_bf16_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_bf16(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    DISPATCH12(down_bf16_m, m, k, h, tile, y, y_stride, n_valid);
}

const moe_expert_kernels moe_expert_bf16_f32_12x16__avx512 = {
    .name = "moe_expert_bf16_f32_12x16__avx512",
    .recipe = MOE_RECIPE_F32,
    .isa = MOE_REQ_AVX512,
    .mr = MR_BF16,
    .nr = NR,
    MOE_XL_BF16_LAYOUT,
    .gateup = gateup_bf16,
    .down = down_bf16,
};

const moe_expert_kernels moe_expert_fp8_f32_32x16__avx512 = {
    .name = "moe_expert_fp8_f32_32x16__avx512",
    .recipe = MOE_RECIPE_F32,
    .isa = MOE_REQ_AVX512,
    .mr = MR_FP8,
    .nr = NR,
    MOE_XL_FP8_LAYOUT(fp8),
    .gateup = gateup_fp8,
    .down = down_fp8,
    .gateup_tiles = gateup_fp8_tiles,
    .down_tiles = down_fp8_tiles,
    .tiles_from_m = MR + 1,
    .tiles_to_m = DIRECT_PAIRS,
};
