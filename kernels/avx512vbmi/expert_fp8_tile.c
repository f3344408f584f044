/* expert_fp8_tile.c — the AVX512-VBMI expert kernel set of the tile recipe for FP8 block weights,
 * 12x16: up to four tokens on codes decoded in registers by byte tables, more on the AVX-512 set. */
#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512/expert_tile_chunk.h"
#include "kernels/avx512vbmi/fp8_bytes.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "select/kernel.h"

/*
 * At one token the AVX-512 set (kernels/avx512/expert_fp8_tile.c) is bound by its vector ports,
 * not by the memory: per 32 codes 6 operations widen them to bf16 pair lines in an L1 buffer,
 * and 2 more split each line into the chains' f32 operands. Here, up to DEC_MR tokens, the
 * codes never go to memory: one 64-byte load holds 32 codes of each of two 16-row streams at
 * one k-pair (gate/up: the tile's gate and up pair lines, adjacent in the FP8 pairs layout;
 * down: the same pair of two tiles, read side by side), and fp8_bytes_decode makes them the
 * four chains' operands in 9 operations: per stream the even and the odd elements of 8 of its
 * rows, the stream's rows 0-3 and 8-11 in the first vector of each kind, 4-7 and 12-15 in the
 * second (lanes 0-7 the first stream, 8-15 the second). The rows are put back in order once,
 * after K (fp8_bytes_rows).
 *
 * Each row's arithmetic is the AVX-512 set's, operation for operation (kernels/expert.h, "The
 * tile recipe"): per 128-K block the sums start at +0; per 32-K chunk an even and an odd chain
 * from +0 under DAZ and FTZ over its 16 pair steps (those past K with zero weights and zero
 * activations, as the reference pads them), then sum += e + o; after the block MXCSR is put
 * back and acc = fma(sum, s_b, acc), each stream's lanes with its own packed scale. So the bits
 * are the reference's, and the AVX-512 and AMX-BF16 sets', at every m.
 */

/* Tokens on the register decode: 4 chains and 4 totals each, so past two tokens the compiler
 * keeps some on the stack. At 4 tokens 0.62-0.65 of the read floor against the AVX-512 set's
 * 0.47 (bench/NOTES.md, v32). */
#define DEC_MR 4
#define BLOCK_CHUNKS (MOE_XL_KB / CHUNK)

static const moe_expert_kernels *const wide = &moe_expert_fp8_tile_12x16__avx512;

/* Two streams of 16 rows: pair q's 32 codes at a + q·step and b + q·step; block b's packed
 * scales at sa + b·sstep and sb + b·sstep. */
typedef struct streams {
    const unsigned char *a, *b, *sa, *sb;
    size_t step, sstep;
} streams;

/* Pair q's codes of both streams: one load where they are adjacent (gate/up). */
INLINE __m512i load_pair(const int np, const streams *s, size_t q)
{
    const unsigned char *a = s->a + q * s->step;
    if (np == 2) return _mm512_loadu_si512(a);
    const __m256i lo = _mm256_loadu_si256((const __m256i *)a);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                              _mm256_loadu_si256((const __m256i *)(s->b + q * s->step)), 1);
}

INLINE void prefetch_pair(const int np, const streams *s, size_t q)
{
    if (np == 2) {
        prefetch_ahead(s->a + q * s->step);
    } else if (q % 2 == 0) { /* one per 64-byte line of each tile */
        prefetch_ahead(s->a + q * s->step);
        if (s->b != s->a) prefetch_ahead(s->b + q * s->step);
    }
}

/* The totals over K of both streams for M ≤ DEC_MR tokens, in the decode's lane order:
 * acc[i][0] the first vector of each kind's rows, acc[i][1] the second's. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x, const streams *s,
                 __m512 acc[][2])
{
    const fp8_dec d = fp8_dec_init();
    const size_t pairs = (size_t)moe_xl_kpad((int64_t)k) / 2;
    const size_t chunks = moe_xl_tile_chunks((int64_t)k);
    float xs[DEC_MR][CHUNK] __attribute__((aligned(64)));
    const unsigned char *sa = s->sa, *sb = s->sb;
    UNROLL
    for (size_t i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (size_t c0 = 0; c0 < chunks; c0 += BLOCK_CHUNKS, sa += s->sstep, sb += s->sstep) {
        const size_t c1 = c0 + BLOCK_CHUNKS < chunks ? c0 + BLOCK_CHUNKS : chunks;
        __m512 sum[DEC_MR][2];
        UNROLL
        for (size_t i = 0; i < M; i++)
            sum[i][0] = sum[i][1] = _mm512_setzero_ps();
        fence_sums(M, acc);
        const dp_state st = dp_enter();
        fence_sums(M, sum);
        for (size_t c = c0; c < c1; c++) {
            widen_chunk(M, x, k, c, xs);
            __m512 e[DEC_MR][2], o[DEC_MR][2];
            UNROLL
            for (size_t i = 0; i < M; i++) {
                e[i][0] = e[i][1] = o[i][0] = o[i][1] = _mm512_setzero_ps();
                fence_sums(1, &e[i]);
                fence_sums(1, &o[i]);
            }
            const size_t q0 = c * STEPS, n = pairs - q0 < STEPS ? pairs - q0 : STEPS;
            for (size_t j = 0; j < STEPS; j++) {
                __m512 w[4];
                if (j < n) {
                    prefetch_pair(np, s, q0 + j);
                    fp8_bytes_decode(&d, load_pair(np, s, q0 + j), w);
                } else { /* past K: the reference's zero-padded steps */
                    w[0] = w[1] = w[2] = w[3] = _mm512_setzero_ps();
                }
                UNROLL
                for (size_t i = 0; i < M; i++) {
                    const __m512 xe = _mm512_set1_ps(xs[i][j]);
                    const __m512 xo = _mm512_set1_ps(xs[i][STEPS + j]);
                    e[i][0] = _mm512_fmadd_ps(w[0], xe, e[i][0]);
                    o[i][0] = _mm512_fmadd_ps(w[1], xo, o[i][0]);
                    e[i][1] = _mm512_fmadd_ps(w[2], xe, e[i][1]);
                    o[i][1] = _mm512_fmadd_ps(w[3], xo, o[i][1]);
                }
            }
            UNROLL
            for (size_t i = 0; i < M; i++)
                for (int v = 0; v < 2; v++)
                    sum[i][v] = _mm512_add_ps(sum[i][v], _mm512_add_ps(e[i][v], o[i][v]));
        }
        fence_sums(M, sum);
        dp_leave(st);
        fence_sums(M, sum);
        const __m512 sc =
            _mm512_insertf32x8(_mm512_set1_ps(load_f32(sa)), _mm256_set1_ps(load_f32(sb)), 1);
        UNROLL
        for (size_t i = 0; i < M; i++)
            for (int v = 0; v < 2; v++)
                acc[i][v] = _mm512_fmadd_ps(sum[i][v], sc, acc[i][v]);
    }
    fence_sums(M, acc);
}

INLINE void gateup_m(const size_t M, size_t k, const void *const *xv, const unsigned char *tile,
                     const moe_act_params *act, uint16_t *h, size_t hs, size_t n_valid)
{
    const uint16_t *x[DEC_MR];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = xv[i];
    const unsigned char *sc = tile + moe_xl_bias_bytes(2);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 2);
    const streams s = {codes, codes + 2 * NR, sc, sc + 4, 2 * moe_xl_fp8_step_bytes(2), 8};
    __m512 acc[DEC_MR][2];
    dots(M, 2, k, x, &s, acc);
    const __m512 bg = _mm512_loadu_ps(tile), bu = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const __m512 g = _mm512_add_ps(fp8_bytes_rows(acc[i][0], acc[i][1], false), bg);
        const __m512 u = _mm512_add_ps(fp8_bytes_rows(acc[i][0], acc[i][1], true), bu);
        _mm256_mask_storeu_epi16(h + i * hs, mask, to_bf16(act16(act, g, u)));
    }
}

/* Down over tiles ta and tb side by side (tb == ta for a tile alone, its second copy not
 * stored: yb NULL). */
INLINE void down_m(const size_t M, size_t k, const void *const *hv, const unsigned char *ta,
                   const unsigned char *tb, float *ya, float *yb, size_t ys, size_t na, size_t nb)
{
    const uint16_t *x[DEC_MR];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = hv[i];
    const size_t sb = moe_xl_bias_bytes(1), cb = moe_xl_fp8_codes((int64_t)k, 1);
    const streams s = {ta + cb, tb + cb, ta + sb, tb + sb, 2 * moe_xl_fp8_step_bytes(1), 4};
    __m512 acc[DEC_MR][2];
    dots(M, 1, k, x, &s, acc);
    const __m512 ba = _mm512_loadu_ps(ta), bb = _mm512_loadu_ps(tb);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        _mm512_mask_storeu_ps(ya + i * ys, rows_mask(na),
                              _mm512_add_ps(fp8_bytes_rows(acc[i][0], acc[i][1], false), ba));
        if (yb)
            _mm512_mask_storeu_ps(yb + i * ys, rows_mask(nb),
                                  _mm512_add_ps(fp8_bytes_rows(acc[i][0], acc[i][1], true), bb));
    }
}

static void gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile, size_t n_tiles,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    const size_t bytes = moe_xl_fp8_gateup_bytes((int64_t)k);
    for (size_t t = 0; t < n_tiles; t++) {
        const unsigned char *tt = (const unsigned char *)tile + t * bytes;
        uint16_t *ht = (uint16_t *)h + t * NR;
        const size_t nv = t + 1 < n_tiles ? NR : n_valid;
        switch (m) {
        case 1: gateup_m(1, k, x, tt, act, ht, h_stride, nv); break;
        case 2: gateup_m(2, k, x, tt, act, ht, h_stride, nv); break;
        case 3: gateup_m(3, k, x, tt, act, ht, h_stride, nv); break;
        case 4: gateup_m(4, k, x, tt, act, ht, h_stride, nv); break;
        default: wide->gateup(m, k, x, tt, act, ht, h_stride, nv); break;
        }
    }
}

static void down_tiles(size_t m, size_t k, const void *const *h, const void *tile, size_t n_tiles,
                       float *y, size_t y_stride, size_t n_valid)
{
    const size_t bytes = moe_xl_fp8_down_bytes((int64_t)k);
    for (size_t t = 0; t < n_tiles; t += 2) {
        const unsigned char *ta = (const unsigned char *)tile + t * bytes;
        const bool two = t + 1 < n_tiles;
        const unsigned char *tb = two ? ta + bytes : ta;
        float *ya = y + t * NR, *yb = two ? ya + NR : NULL;
        const size_t na = t + 1 < n_tiles ? NR : n_valid, nb = t + 2 < n_tiles ? NR : n_valid;
        switch (m) {
        case 1: down_m(1, k, h, ta, tb, ya, yb, y_stride, na, nb); break;
        case 2: down_m(2, k, h, ta, tb, ya, yb, y_stride, na, nb); break;
        case 3: down_m(3, k, h, ta, tb, ya, yb, y_stride, na, nb); break;
        case 4: down_m(4, k, h, ta, tb, ya, yb, y_stride, na, nb); break;
        default:
            wide->down(m, k, h, ta, ya, y_stride, na);
            if (two) wide->down(m, k, h, tb, yb, y_stride, nb);
            break;
        }
    }
}

static void gateup_one(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    gateup_tiles(m, k, x, tile, 1, act, h, h_stride, n_valid);
}

static void down_one(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    down_tiles(m, k, h, tile, 1, y, y_stride, n_valid);
}

/* The multi-tile entries up to DEC_MR tokens, where down reads two tiles side by side. */
MOE_XL_SET(moe_expert_fp8_tile_12x16__avx512vbmi, MOE_RECIPE_TILE, MOE_REQ_AVX512VBMI, MR_TILE,
           MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_one, .down = down_one,
           .gateup_tiles = gateup_tiles, .down_tiles = down_tiles, .tiles_from_m = MR_TILE + 1,
           .tiles_to_m = DEC_MR);
