/* gate_gemm.c — the AVX-512F router gate kernels: fp32 FMA over f32 / bf16 / f16 weight tiles. */
#include "kernels/avx512/gate_avx512.h"

/*
 * Tile: mr rows × nt tiles of 16 experts, one zmm accumulator each. NT(mr) = 8, 8, 6, 4, 4, 4
 * for mr = 1..6: one or two rows (decode) take 8 tiles, so 8 independent FMA chains hide the
 * 4-cycle latency while the weight streams in; from four rows 24 accumulators, 4 weight
 * vectors and a broadcast fill the 32 registers (prefill). Per hidden element h: the nt
 * weight vectors (f32 loaded; f16 through vcvtph2ps; bf16 from the pair layout: a 64-byte
 * row shifted left by 16 bits gives h, and the same row loaded with its low halves masked
 * to zero gives h+1 — a second load rather than an AND of the first, so no register holds
 * the raw row across the FMAs of h), then per row one broadcast of x[h] from its row and nt
 * FMAs. The order per logit is kernels/gate.h's: these are the reference's bits. Edge tiles
 * use masked loads and stores, so nothing outside the logits rows is touched.
 */

enum { W_F32, W_BF16, W_F16 };

/* The weight vector of tile j at hidden element h (f32 / f16 layouts). */
MOE_GATE_INLINE __m512 load_w(const uint8_t *w, size_t stride, int j, size_t h, int kind)
{
    const uint8_t *p = w + (size_t)j * stride;
    if (kind == W_F32) return _mm512_loadu_ps(p + h * 64);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + h * 32)));
}

MOE_GATE_INLINE void tile_fma(const moe_gate_tile *t, const int MR, const int NT, const int kind)
{
    __m512 acc[6][8];
    __mmask16 mask[8];
    const float *x = t->x;
    const size_t ld = t->x_ld, stride = t->tile_stride;
    moe_gate_avx512_begin(t, acc, mask, MR, NT);
    if (kind == W_BF16) {
        size_t pairs = t->kc / 2;
        for (size_t q = 0; q < pairs; q++) {
            __m512 w[8];
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                w[j] = _mm512_castsi512_ps(
                    _mm512_slli_epi32(_mm512_loadu_si512(t->w + j * stride + q * 64), 16));
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                __m512 xb = _mm512_set1_ps(x[i * ld + 2 * q]);
#pragma GCC unroll 8
                for (int j = 0; j < NT; j++)
                    acc[i][j] = _mm512_fmadd_ps(xb, w[j], acc[i][j]);
            }
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                w[j] = _mm512_castsi512_ps(
                    _mm512_maskz_loadu_epi16(0xAAAAAAAAu, t->w + j * stride + q * 64));
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                __m512 xb = _mm512_set1_ps(x[i * ld + 2 * q + 1]);
#pragma GCC unroll 8
                for (int j = 0; j < NT; j++)
                    acc[i][j] = _mm512_fmadd_ps(xb, w[j], acc[i][j]);
            }
        }
        if (t->kc % 2) { /* the odd last h: the even half of the last pair only */
            __m512 w[8];
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                w[j] = _mm512_castsi512_ps(
                    _mm512_slli_epi32(_mm512_loadu_si512(t->w + j * stride + pairs * 64), 16));
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                __m512 xb = _mm512_set1_ps(x[i * ld + 2 * pairs]);
#pragma GCC unroll 8
                for (int j = 0; j < NT; j++)
                    acc[i][j] = _mm512_fmadd_ps(xb, w[j], acc[i][j]);
            }
        }
    } else {
        for (size_t h = 0; h < t->kc; h++) {
            __m512 w[8];
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                w[j] = load_w(t->w, stride, j, h, kind);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                __m512 xb = _mm512_set1_ps(x[i * ld + h]);
#pragma GCC unroll 8
                for (int j = 0; j < NT; j++)
                    acc[i][j] = _mm512_fmadd_ps(xb, w[j], acc[i][j]);
            }
        }
    }
    moe_gate_avx512_end(t, acc, mask, MR, NT);
}

static void tile_f32(const moe_gate_tile *t) { MOE_GATE_AVX512_DISPATCH(tile_fma, W_F32) }
static void tile_bf16(const moe_gate_tile *t) { MOE_GATE_AVX512_DISPATCH(tile_fma, W_BF16) }
static void tile_f16(const moe_gate_tile *t) { MOE_GATE_AVX512_DISPATCH(tile_fma, W_F16) }

/* One blocking per family: how x comes in, the weight size and layout, the tile function. */
#define BLOCKING(X, W_SIZE, PAIRS, TILE)                                                           \
    {                                                                                              \
        .mr_max = 6, .nt_max = moe_gate_avx512_nt_max, .x_kind = X, .w_size = W_SIZE,              \
        .pairs = PAIRS, .tile = TILE, .widen = moe_cvt_bf16_f32__avx512                            \
    }
static const moe_gate_blocking xf32_wf32 = BLOCKING(MOE_GATE_X_F32, 4, false, tile_f32);
static const moe_gate_blocking xf32_wbf16 = BLOCKING(MOE_GATE_X_F32, 2, true, tile_bf16);
static const moe_gate_blocking xf32_wf16 = BLOCKING(MOE_GATE_X_F32, 2, false, tile_f16);
static const moe_gate_blocking xbf16_wf32 = BLOCKING(MOE_GATE_X_BF16_F32, 4, false, tile_f32);
static const moe_gate_blocking xbf16_wbf16 = BLOCKING(MOE_GATE_X_BF16_F32, 2, true, tile_bf16);
static const moe_gate_blocking xbf16_wf16 = BLOCKING(MOE_GATE_X_BF16_F32, 2, false, tile_f16);

void moe_gate_xf32_wf32__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wf32); }
void moe_gate_xf32_wbf16__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wbf16); }
void moe_gate_xf32_wf16__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xf32_wf16); }
void moe_gate_xbf16_wf32__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wf32); }
void moe_gate_xbf16_wbf16__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wbf16); }
void moe_gate_xbf16_wf16__avx512(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wf16); }
