/* expert_mxfp4_q8_body.h — internal: the ymm MXFP4 Q8 kernels, shared by the avx2 (vpmaddubsw)
 * and avxvnni (VEX vpdpbusd) kernel sets. */
#ifndef MOE_KERNELS_AVX2_EXPERT_MXFP4_Q8_BODY_H
#define MOE_KERNELS_AVX2_EXPERT_MXFP4_Q8_BODY_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/q8_prepare.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_q8_weights.h"
#include "kernels/inline.h"
#include "select/kernel.h"

/*
 * The INT4 sets include it too, with MOE_Q8_INT4 1: their table and f32 scales
 * (kernels/ref/expert_q8_weights.h); everything else below is the same for both formats.
 *
 * Included by exactly one file per set, after defining MOE_MX_AVXVNNI (1: vpdpbusd on ymm,
 * AVX-VNNI; 0: vpmaddubsw + vpmaddwd); everything here is static.
 *
 * Decode: a 32-byte half of a tile chunk holds, per dword lane n, the codes of row n (rows
 * 0..7, or 8..15 for the upper half) for quad c in the low nibbles and quad c + 4 in the high
 * nibbles (kernels/ref/expert_mxfp4_layout.h). AND 0x0F, and shift-right-4 + AND, give the
 * two index vectors; vpshufb through the table of w2 + 12 (in both 128-bit lanes) turns each
 * into the unsigned operand of one vpmaddubsw (or vpdpbusd) against 4 broadcast activation
 * bytes.
 *
 * Dot, per projection, half and token: the block's 32 products as 8 vpmaddubsw (each 16-bit
 * lane the sum of two products of (w2 + 12) ∈ [0, 24] and q ∈ [-127, 127]: |·| ≤ 6096, so no
 * saturation), summed in 16 bits over two chunks (4 results: ≤ 24384 < 2^15), widened by
 * vpmaddwd against ones, added in 32 bits to the row's correction -12·Σq. With AVX-VNNI the
 * 8 products go straight into the int32 lanes as 8 vpdpbusd (u8 weights × s8 activations),
 * from two tokens on, for two row halves that read the same activations at once (gate and up
 * of a half; down's two halves), so each broadcast feeds both. Either sum is the reference's
 * Σ w2·q exactly: integers, any order. Then, as the reference: S = wsh · xs
 * (vmulps), acc = fma(cvt(isum), S, acc) in block order, wsh = 2^(e - 128) built bit-exactly (a
 * normal power of two for e ≥ 2, the subnormals 2^-128 and 2^-127 for e = 0, 1).
 *
 * Tokens run in groups of up to GROUP = 4 (4 integer sums and their 16-bit partials, or the
 * two row halves' 8 int32 sums, with the weight vectors, broadcasts and constants fill the 16
 * ymm registers); the f32 totals, touched once per block and projection half, live on the
 * stack. Up to GROUP tokens decode each chunk in registers; more tokens (up to MR = 32) decode
 * each block once into a 1 KB stack buffer and run over it group after group. Every element
 * sees the same operations in both paths, so the bits do not depend on m. The multi-tile
 * entries run two tiles side by side, block by block, on the register path (the engine's
 * decode calls), tile by tile on the buffered one.
 *
 * Prefetch: every 64 bytes consumed, 8 KB ahead into L2 (into the next tile too, or for one of
 * a pair into the next pair's) and 2 KB ahead into L1. From memory at one token the register
 * path alone read 0.56 of the read floor, with the L1 line and the pairs 0.88; from 2 tokens
 * on it is bound by its uops, not by memory (bench/NOTES.md v11).
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK
#define UNIT MOE_MX_UNIT
#define MR 32
#define GROUP 4
#define PF_BYTES 8192
#define PF_L1_BYTES 2048
#define UNROLL _Pragma("GCC unroll 8")

/* The line PF_BYTES past p into L2 (for a tile ending at end, one of a pair when skip is the
 * tile size: moe_xl_pair_prefetch) and the one PF_L1_BYTES past p into L1. */
INLINE void prefetch(const unsigned char *p, const unsigned char *end, size_t skip)
{
    _mm_prefetch((const char *)moe_xl_pair_prefetch(p + PF_BYTES, end, skip), _MM_HINT_T1);
    _mm_prefetch((const char *)p + PF_L1_BYTES, _MM_HINT_T0);
}

INLINE __m256i lut_w2u(void) { return _mm256_broadcastsi128_si256(_mm_setr_epi8(Q8W_WU_VALUES)); }

/* The two quads (c, c + 4) of one 32-byte chunk half as unsigned operands. */
INLINE void decode(const unsigned char *half, __m256i lut, __m256i *lo, __m256i *hi)
{
    const __m256i c = _mm256_loadu_si256((const __m256i *)half), m = _mm256_set1_epi8(0x0F);
    *lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(c, m));
    *hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(c, 4), m));
}

INLINE __m256i bcast(const unsigned char *p)
{
    int v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* 2^(e - 128) for the 8 scale bytes at p (e ≤ 254: packing refuses 0xFF), exactly: bits
 * e << 23 are 2^(e - 127) for e ≥ 1, and the max with 1 << 22 (2^-127) adds e = 0; halving a
 * power of two ≥ 2^-127 is exact, subnormal or not. */
INLINE __m256 half_scales(const unsigned char *p)
{
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i w = _mm256_max_epu32(_mm256_slli_epi32(e, 23), _mm256_set1_epi32(1 << 22));
    return _mm256_mul_ps(_mm256_castsi256_ps(w), _mm256_set1_ps(0.5f));
}

#if MOE_Q8_INT4
/* INT4: the 8 rows' f32 scales at p, as packing wrote them. */
INLINE __m256 weight_scales(const unsigned char *p) { return _mm256_loadu_ps((const float *)p); }
#else
#define weight_scales half_scales
#endif

/* Stores rows [8h, 8h + 8) ∩ [0, n_valid) of a result half. */
INLINE void store_half(float *out, size_t h, __m256 v, size_t n_valid)
{
    if (n_valid >= 8 * h + 8)
        _mm256_storeu_ps(out + 8 * h, v);
    else if (n_valid > 8 * h)
        _mm256_maskstore_ps(out + 8 * h, moe_tail_mask_avx2(n_valid - 8 * h), v);
}

/* A prepared row's parts (kernels/expert.h). */
typedef struct qrow {
    const unsigned char *q, *xs, *corr;
} qrow;

/* The f32 totals of one token: [2p + h] for projection p (gate, up; down: 0 only) and row
 * half h. */
typedef float totals[4][8];

/* Chunk c of a row half: its two quads' unsigned operands, from the tile (u) or from the
 * decoded block (d, when not NULL). */
INLINE void chunk_weights(const unsigned char *u, const __m256i *d, size_t c, __m256i lut,
                          __m256i *wl, __m256i *wh)
{
    if (d) {
        *wl = _mm256_load_si256(d + 2 * c);
        *wh = _mm256_load_si256(d + 2 * c + 1);
    } else {
        decode(u + 64 * c, lut, wl, wh);
    }
}

/* isum[t] += the block's 32 products per row of one row half, for G tokens: per chunk two
 * vpmaddubsw summed in 16 bits, two chunks per vpmaddwd against ones. */
INLINE void dot_maddubs(const size_t G, const unsigned char *u, const __m256i *d, __m256i lut,
                        const qrow *r, size_t b, __m256i *isum)
{
    const __m256i ones = _mm256_set1_epi16(1);
    UNROLL
    for (size_t cp = 0; cp < 2; cp++) {
        __m256i s16[GROUP];
        UNROLL
        for (size_t c2 = 0; c2 < 2; c2++) {
            const size_t c = 2 * cp + c2;
            __m256i wl, wh;
            chunk_weights(u, d, c, lut, &wl, &wh);
            UNROLL
            for (size_t t = 0; t < G; t++) {
                const unsigned char *q = r[t].q + BLK * b + 4 * c;
                const __m256i pr = _mm256_add_epi16(_mm256_maddubs_epi16(wl, bcast(q)),
                                                    _mm256_maddubs_epi16(wh, bcast(q + 16)));
                s16[t] = c2 ? _mm256_add_epi16(s16[t], pr) : pr;
            }
        }
        UNROLL
        for (size_t t = 0; t < G; t++)
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], ones));
    }
}

#if MOE_MX_AVXVNNI
/* The same sums as dot_maddubs through vpdpbusd, for two row halves a and b that read the
 * same activations (gate and up of one half, or down's two halves) at once: ia[t] and ib[t],
 * one chain each, and every broadcast activation dword feeds a vpdpbusd of both (8 chains,
 * the four weight vectors and two broadcasts fill 14 ymm registers at G = 4). */
INLINE void dot_vnni_pair(const size_t G, const unsigned char *ua, const __m256i *da,
                          const unsigned char *ub, const __m256i *db, __m256i lut, const qrow *r,
                          size_t b, __m256i *ia, __m256i *ib)
{
    UNROLL
    for (size_t c = 0; c < 4; c++) {
        __m256i al, ah, bl, bh;
        chunk_weights(ua, da, c, lut, &al, &ah);
        chunk_weights(ub, db, c, lut, &bl, &bh);
        UNROLL
        for (size_t t = 0; t < G; t++) {
            const unsigned char *q = r[t].q + BLK * b + 4 * c;
            const __m256i xl = bcast(q), xh = bcast(q + 16);
            ia[t] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(ia[t], al, xl), ah, xh);
            ib[t] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(ib[t], bl, xl), bh, xh);
        }
    }
}
#endif

/* Row half v = 2p + h (projection p, half h) of a block's units: its 32-byte column of each
 * chunk. */
INLINE const unsigned char *half_units(const unsigned char *units, size_t v)
{
    return units + v / 2 * UNIT + 32 * (v % 2);
}

/* isum[t] = row t's correction for block b, the start of every integer sum. */
INLINE void sums_init(const size_t G, const qrow *r, size_t b, __m256i *isum)
{
    UNROLL
    for (size_t t = 0; t < G; t++)
        isum[t] = bcast(r[t].corr + 4 * b);
}

/* The recipe's f32 step for row half v of G tokens: tot = fma(cvt(isum), wsh · xs_b, tot). */
INLINE void f32_step(const size_t G, const __m256i *isum, const unsigned char *scales, size_t v,
                     const qrow *r, size_t b, totals *tot)
{
    const __m256 wsh = weight_scales(scales + 8 * Q8W_SCALE_BYTES * v);
    UNROLL
    for (size_t t = 0; t < G; t++) {
        float *acc = tot[t][v];
        const __m256 s = _mm256_mul_ps(wsh, _mm256_set1_ps(load_f32(r[t].xs + 4 * b)));
        _mm256_store_ps(acc,
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), s, _mm256_load_ps(acc)));
    }
}

/*
 * One block b of one tile for G tokens: for each row half v = 2p + h (projection p < np, half
 * h) the exact integer sums, then the f32 step. The weights come from the tile (units: the
 * block's np code units, decoded in registers) or, when dec is not NULL, from the block
 * decoded by decode_block (row half v at dec + 8v). scales: the block's np × 16 scale bytes.
 * The AVX-VNNI set takes vpdpbusd from two tokens on, two row halves at a time (gate and up of
 * half h; down's halves 0 and 1), which shares each broadcast between them (prefill
 * 1.1-1.2x, bench/NOTES.md v13); at one token the vpmaddubsw form, which read 4 % faster
 * from memory there (v12).
 */
INLINE void block_group(const size_t G, const int np, const unsigned char *units,
                        const __m256i *dec, const unsigned char *scales, const qrow *r, size_t b,
                        totals *tot)
{
    const __m256i lut = lut_w2u();
#if MOE_MX_AVXVNNI
    if (G > 1) {
        UNROLL
        for (size_t i = 0; i < (size_t)np; i++) {
            const size_t va = np == 2 ? i : 0, vb = np == 2 ? i + 2 : 1;
            __m256i ia[GROUP], ib[GROUP];
            sums_init(G, r, b, ia);
            sums_init(G, r, b, ib);
            dot_vnni_pair(G, half_units(units, va), dec ? dec + 8 * va : NULL,
                          half_units(units, vb), dec ? dec + 8 * vb : NULL, lut, r, b, ia, ib);
            f32_step(G, ia, scales, va, r, b, tot);
            f32_step(G, ib, scales, vb, r, b, tot);
        }
        return;
    }
#endif
    UNROLL
    for (size_t v = 0; v < 2 * (size_t)np; v++) {
        __m256i isum[GROUP];
        sums_init(G, r, b, isum);
        dot_maddubs(G, half_units(units, v), dec ? dec + 8 * v : NULL, lut, r, b, isum);
        f32_step(G, isum, scales, v, r, b, tot);
    }
}

/* The block's np units decoded: dec[8(2p + h) + 2c] and [+ 1] the quads c and c + 4 of row
 * half h of projection p. */
INLINE void decode_block(const int np, const unsigned char *units, __m256i *dec)
{
    const __m256i lut = lut_w2u();
    for (int p = 0; p < np; p++)
        UNROLL
    for (size_t i = 0; i < 8; i++) {
        const size_t h = i / 4, c = i % 4;
        decode(units + (size_t)p * UNIT + 64 * c + 32 * h, lut,
               &dec[8 * (2 * (size_t)p + h) + 2 * c], &dec[8 * (2 * (size_t)p + h) + 2 * c + 1]);
    }
}

#define GROUP_DISPATCH(g, ...)                                                                     \
    do {                                                                                           \
        switch (g) {                                                                               \
        case 1: block_group(1, __VA_ARGS__); break;                                                \
        case 2: block_group(2, __VA_ARGS__); break;                                                \
        case 3: block_group(3, __VA_ARGS__); break;                                                \
        default: block_group(GROUP, __VA_ARGS__); break;                                           \
        }                                                                                          \
    } while (0)

/* The f32 totals of m ≤ MR tokens over nt tiles tb bytes apart and np projections, K = k:
 * tot[j] those of tile j. Two tiles run side by side, block by block, on the direct path only
 * (m ≤ GROUP): one core then reads two streams, which it does faster than one (bench/NOTES.md
 * v9, v11); their sums are the same operations as alone. */
INLINE void accumulate(const int np, const bool direct, size_t m, size_t k,
                       const void *const *xv, const unsigned char *tile, size_t nt, size_t tb,
                       totals (*tot)[MR])
{
    __m256i dec[32] __attribute__((aligned(32)));
    qrow r[MR];
    for (size_t t = 0; t < m; t++) {
        const unsigned char *row = xv[t];
        r[t] = (qrow){row, row + moe_q8_scales_offset(k), row + moe_q8_corr_offset(k)};
        for (size_t j = 0; j < nt; j++)
            memset(tot[j][t], 0, sizeof tot[j][t]);
    }
    const size_t nb = k / BLK, skip = nt == 2 ? tb : 0;
    for (size_t s = 0, b = 0; b < nb; s++) {
        const size_t len = moe_mx_step_len(np, nb, s);
        const size_t at = q8w_step_at(np, s), line = at + len * (size_t)np * UNIT;
        for (size_t j = 0; j < nt; j++)
            prefetch(tile + j * tb + line, tile + (j + 1) * tb, skip);
        for (size_t i = 0; i < len; i++, b++)
            for (size_t j = 0; j < nt; j++) {
                const unsigned char *units = tile + j * tb + at + i * (size_t)np * UNIT;
                const unsigned char *scales =
                    tile + j * tb + line + 16 * Q8W_SCALE_BYTES * i * (size_t)np;
                for (size_t c = 0; c < 4 * (size_t)np; c++)
                    prefetch(units + 64 * c, tile + (j + 1) * tb, skip);
                if (direct) {
                    GROUP_DISPATCH(m, np, units, NULL, scales, r, b, tot[j]);
                    continue;
                }
                decode_block(np, units, dec);
                for (size_t t0 = 0; t0 < m; t0 += GROUP) {
                    const size_t g = m - t0 < GROUP ? m - t0 : GROUP;
                    GROUP_DISPATCH(g, np, NULL, dec, scales, r + t0, b, tot[j] + t0);
                }
            }
    }
}

/* accumulate for each projection count and path, each compiled alone: inlined into one
 * function, the buffered path's registers cost the direct path's loop 4-7 % at one token
 * (bench/NOTES.md v13). */
#define ACCUMULATE_FN(name, np, direct)                                                            \
    static __attribute__((noinline)) void name(size_t m, size_t k, const void *const *xv,          \
                                               const unsigned char *tile, size_t nt, size_t tb,     \
                                               totals(*tot)[MR])                                   \
    {                                                                                              \
        accumulate(np, direct, m, k, xv, tile, nt, tb, tot);                                       \
    }
ACCUMULATE_FN(accumulate_down_direct, 1, true)
ACCUMULATE_FN(accumulate_down_buffered, 1, false)
ACCUMULATE_FN(accumulate_gateup_direct, 2, true)
ACCUMULATE_FN(accumulate_gateup_buffered, 2, false)

/* The epilogue of nt tiles' totals over np projections: bias, then (gate/up) the
 * activation; rows of the last tile below n_valid, tile j's outputs NR elements after tile
 * j - 1's. */
INLINE void tiles_out(const int np, size_t m, size_t nt, size_t tb, const unsigned char *tile,
                      totals (*tot)[MR], const moe_act_params *act, float *out, size_t os,
                      size_t n_valid)
{
    for (size_t j = 0; j < nt; j++) {
        const float *bias = (const float *)(tile + j * tb);
        const size_t nv = j + 1 == nt ? n_valid : NR;
        for (size_t t = 0; t < m; t++)
            for (size_t hf = 0; hf < 2; hf++) {
                __m256 v =
                    _mm256_add_ps(_mm256_load_ps(tot[j][t][hf]), _mm256_loadu_ps(bias + 8 * hf));
                if (np == 2)
                    v = act8(act, v,
                             _mm256_add_ps(_mm256_load_ps(tot[j][t][2 + hf]),
                                           _mm256_loadu_ps(bias + NR + 8 * hf)));
                store_half(out + t * os + j * NR, hf, v, nv);
            }
    }
}

/* n tiles of np projections: in pairs up to GROUP tokens (and a last odd tile), one by one
 * above. */
INLINE void run_tiles(const int np, size_t m, size_t k, const void *const *x,
                      const unsigned char *tile, size_t n, const moe_act_params *act, float *out,
                      size_t os, size_t n_valid)
{
    totals tot[2][MR] __attribute__((aligned(32)));
    const size_t tb = np == 2 ? q8w_gateup_bytes((int64_t)k) : q8w_down_bytes((int64_t)k);
    const size_t pair = m <= GROUP ? 2 : 1;
    for (size_t j = 0, nt; j < n; j += nt) {
        nt = n - j < pair ? n - j : pair;
        const unsigned char *t = tile + j * tb;
        if (np == 2)
            (m <= GROUP ? accumulate_gateup_direct : accumulate_gateup_buffered)(m, k, x, t, nt, tb,
                                                                                 tot);
        else
            (m <= GROUP ? accumulate_down_direct : accumulate_down_buffered)(m, k, x, t, nt, tb,
                                                                             tot);
        tiles_out(np, m, nt, tb, t, tot, act, out + j * NR, os, j + nt == n ? n_valid : NR);
    }
}

static void gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile, size_t n,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    run_tiles(2, m, k, x, tile, n, act, h, h_stride, n_valid);
}

static void down_tiles(size_t m, size_t k, const void *const *h, const void *tile, size_t n,
                       float *y, size_t y_stride, size_t n_valid)
{
    run_tiles(1, m, k, h, tile, n, NULL, y, y_stride, n_valid);
}

static void gateup(size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    run_tiles(2, m, k, x, tile, 1, act, h, h_stride, n_valid);
}

static void down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    run_tiles(1, m, k, h, tile, 1, NULL, y, y_stride, n_valid);
}

/* The kernel set NAME of this body, needing ISA (a MOE_REQ_* mask): each set's file is its
 * MOE_MX_AVXVNNI and this line. */
#define MX_YMM_SET(NAME, ISA)                                                                      \
    const moe_expert_kernels NAME = {                                                              \
        .name = #NAME,                                                                             \
        Q8W_SET_LAYOUT,                                                                            \
        .isa = ISA,                                                                                \
        .mr = MR,                                                                                  \
        .nr = NR,                                                                                  \
        .gateup = gateup,                                                                          \
        .down = down,                                                                              \
        .gateup_tiles = gateup_tiles,                                                              \
        .down_tiles = down_tiles,                                                                  \
        .prepare_act = q8_prepare_avx2,                                                            \
    }

#endif
