/* gate_gemm.c — the AVX2 router gate kernels: fp32 FMA over f32 / bf16 / f16 weight tiles. */
#include <immintrin.h>

#include "kernels/gate_blocking.h"
#include "kernels/inline.h"

/*
 * Tile: mr rows × nt tiles of 16 experts, two ymm accumulators per (row, tile). The
 * accumulators, the 2·nt weight vectors and a broadcast must fit AVX2's 16 registers:
 * NT(mr) = 3, 2, 1, 1 for mr = 1..4 (six or eight FMA chains in flight; larger tiles spilled
 * in GCC's allocation). Per hidden element h: the weight vectors of the tiles (f32 loaded;
 * f16 through vcvtph2ps; bf16 from the pair layout, 8 experts × (h, h+1) per 32-byte load, h
 * by a 16-bit shift and h+1 by a mask), then per row one broadcast of x[h] and 2·nt FMAs.
 * The order per logit is kernels/gate.h's: these are the reference's bits. Edge tiles use
 * vmaskmovps, so nothing outside the logits rows is touched.
 */

enum { W_F32, W_BF16, W_F16 };

/* Round to nearest even to bf16, kept as the upper half of an f32; NaN quieted (dtype.h). */
INLINE __m256 rne_bf16(__m256 v)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256 pick = _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q), nan);
    return _mm256_and_ps(pick, _mm256_castsi256_ps(hi));
}

/* Lanes of half s (0: experts 0–7, 1: 8–15) of tile j that exist, as a vmaskmovps mask. */
INLINE __m256i lane_mask(size_t n_valid, int j, int s)
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t lo = (size_t)j * 16 + (size_t)s * 8;
    int nv = n_valid > lo ? (n_valid - lo >= 8 ? 8 : (int)(n_valid - lo)) : 0;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), iota);
}

/* The weight vector of half s of tile j at hidden element h (f32 / f16 layouts). */
INLINE __m256 load_w(const uint8_t *w, size_t stride, int j, int s, size_t h, int kind)
{
    const uint8_t *p = w + (size_t)j * stride;
    if (kind == W_F32) return _mm256_loadu_ps((const float *)(p + h * 64 + (size_t)s * 32));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + h * 32 + (size_t)s * 16)));
}

/* Half s of tile j's bf16 pair row q: h (shift) or h+1 (mask). */
INLINE __m256 load_pair(const uint8_t *w, size_t stride, int j, int s, size_t q, int upper)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(w + (size_t)j * stride + q * 64 + s * 32));
    if (upper) return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* acc[i][2j+s] += x[i][h] · w[2j+s] for every row and half-tile (xh = &x[0][h]). */
INLINE void step(__m256 acc[4][6], const __m256 *w, const float *xh, size_t ld, const int MR,
                 const int NT)
{
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        __m256 xb = _mm256_broadcast_ss(xh + i * ld);
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NT; v++)
            acc[i][v] = _mm256_fmadd_ps(xb, w[v], acc[i][v]);
    }
}

INLINE void tile_fma(const moe_gate_tile *t, const int MR, const int NT, const int kind)
{
    __m256 acc[4][6];
    const float *x = t->x;
    const size_t ld = t->x_ld, stride = t->tile_stride;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NT; v++)
            acc[i][v] = t->first ? _mm256_setzero_ps()
                                 : _mm256_maskload_ps(t->c + i * t->ldc + 8 * v,
                                                      lane_mask(t->n_valid, v / 2, v % 2));
    if (kind == W_BF16 && MR <= 2) {
        /* Few rows: both halves of a pair row at once, the row's broadcasts from memory. */
        size_t pairs = t->kc / 2;
        for (size_t q = 0; q < pairs; q++) {
            const float *xe = x + 2 * q, *xo = xe + 1;
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++) {
                __m256 we = load_pair(t->w, stride, v / 2, v % 2, q, 0);
                __m256 wo = load_pair(t->w, stride, v / 2, v % 2, q, 1);
#pragma GCC unroll 8
                for (int i = 0; i < MR; i++) {
                    acc[i][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(xe + i * ld), we, acc[i][v]);
                    acc[i][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(xo + i * ld), wo, acc[i][v]);
                }
            }
        }
        if (t->kc % 2) {
            __m256 w[6];
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++)
                w[v] = load_pair(t->w, stride, v / 2, v % 2, pairs, 0);
            step(acc, w, x + 2 * pairs, ld, MR, NT);
        }
    } else if (kind == W_BF16) {
        /* More rows: h for every accumulator, then h+1. */
        size_t pairs = t->kc / 2;
        for (size_t q = 0; q < pairs; q++) {
            __m256 w[6];
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++)
                w[v] = load_pair(t->w, stride, v / 2, v % 2, q, 0);
            step(acc, w, x + 2 * q, ld, MR, NT);
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++)
                w[v] = load_pair(t->w, stride, v / 2, v % 2, q, 1);
            step(acc, w, x + 2 * q + 1, ld, MR, NT);
        }
        if (t->kc % 2) { /* the odd last h: the even half of the last pair only */
            __m256 w[6];
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++)
                w[v] = load_pair(t->w, stride, v / 2, v % 2, pairs, 0);
            step(acc, w, x + 2 * pairs, ld, MR, NT);
        }
    } else {
        for (size_t h = 0; h < t->kc; h++) {
            __m256 w[6];
#pragma GCC unroll 8
            for (int v = 0; v < 2 * NT; v++)
                w[v] = load_w(t->w, stride, v / 2, v % 2, h, kind);
            step(acc, w, x + h, ld, MR, NT);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NT; v++) {
            __m256i m = lane_mask(t->n_valid, v / 2, v % 2);
            __m256 r = acc[i][v];
            if (t->last && t->bias) r = _mm256_add_ps(r, _mm256_maskload_ps(t->bias + 8 * v, m));
            if (t->last && t->round_bf16) r = rne_bf16(r);
            _mm256_maskstore_ps(t->c + i * t->ldc + 8 * v, m, r);
        }
    }
}

/* mr × nt → the instantiation; NT(mr) = 3, 2, 1, 1. */
static const uint8_t nt_max[5] = {0, 3, 2, 1, 1};

#define ALL_TILES(K)                                                                               \
    switch (t->mr * 16 + t->nt) {                                                                  \
    case 1 * 16 + 1: tile_fma(t, 1, 1, K); return;                                                 \
    case 1 * 16 + 2: tile_fma(t, 1, 2, K); return;                                                 \
    case 1 * 16 + 3: tile_fma(t, 1, 3, K); return;                                                 \
    case 2 * 16 + 1: tile_fma(t, 2, 1, K); return;                                                 \
    case 2 * 16 + 2: tile_fma(t, 2, 2, K); return;                                                 \
    case 3 * 16 + 1: tile_fma(t, 3, 1, K); return;                                                 \
    case 4 * 16 + 1: tile_fma(t, 4, 1, K); return;                                                 \
    }

static void tile_f32(const moe_gate_tile *t) { ALL_TILES(W_F32) }
static void tile_bf16(const moe_gate_tile *t) { ALL_TILES(W_BF16) }
static void tile_f16(const moe_gate_tile *t) { ALL_TILES(W_F16) }

/* One blocking per family: how x comes in, the weight size and layout, the tile function. */
#define BLOCKING(X, W_SIZE, PAIRS, TILE)                                                           \
    {                                                                                              \
        .mr_max = 4, .nt_max = nt_max, .x_kind = X, .w_size = W_SIZE, .pairs = PAIRS,              \
        .tile = TILE, .widen = moe_cvt_bf16_f32__avx2                                              \
    }
static const moe_gate_blocking xf32_wf32 = BLOCKING(MOE_GATE_X_F32, 4, false, tile_f32);
static const moe_gate_blocking xf32_wbf16 = BLOCKING(MOE_GATE_X_F32, 2, true, tile_bf16);
static const moe_gate_blocking xf32_wf16 = BLOCKING(MOE_GATE_X_F32, 2, false, tile_f16);
static const moe_gate_blocking xbf16_wf32 = BLOCKING(MOE_GATE_X_BF16_F32, 4, false, tile_f32);
static const moe_gate_blocking xbf16_wbf16 = BLOCKING(MOE_GATE_X_BF16_F32, 2, true, tile_bf16);
static const moe_gate_blocking xbf16_wf16 = BLOCKING(MOE_GATE_X_BF16_F32, 2, false, tile_f16);

void moe_gate_xf32_wf32__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wf32); }
void moe_gate_xf32_wbf16__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wbf16); }
void moe_gate_xf32_wf16__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wf16); }
void moe_gate_xbf16_wf32__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wf32); }
void moe_gate_xbf16_wbf16__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wbf16); }
void moe_gate_xbf16_wf16__avx2(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wf16); }
