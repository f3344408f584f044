/* expert_mxfp4_q8_body.h — internal: the AVX-512 MXFP4 Q8 micro-kernels, shared by the avx512
 * (vpmaddubsw) and avx512vnni (vpdpbusd) kernel sets. */
#ifndef MOE_KERNELS_AVX512_EXPERT_MXFP4_Q8_BODY_H
#define MOE_KERNELS_AVX512_EXPERT_MXFP4_Q8_BODY_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/expert_shared.h"
#include "kernels/avx512/q8_prepare.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_q8_weights.h"

/*
 * The INT4 sets include it too, with MOE_Q8_INT4 1 (and MOE_MX_AMX 0): their table and f32
 * scales (kernels/ref/expert_q8_weights.h); everything else below is the same for both formats.
 *
 * Included by exactly one file per set, after defining MOE_MX_VNNI (1: vpdpbusd; 0:
 * vpmaddubsw + vpmaddwd) and MOE_MX_AMX (1: the buffered path's sums as tdpbssd on tiles,
 * kernels/avx512amx/expert_mxfp4_q8_tiles.h; with MOE_MX_VNNI 1); everything here is static.
 *
 * Decode: a 64-byte chunk of a tile unit holds, per dword lane n, row n's codes of quad c in
 * the low nibbles and of quad c + 4 in the high nibbles (kernels/ref/expert_mxfp4_layout.h).
 * AND 0x0F, and shift-right-4 + AND, give the two index vectors; vpshufb through the 16-byte
 * table of w2 + 12 (broadcast to the four 128-bit lanes) turns each into the unsigned
 * operand of one vpdpbusd: 128 weights in 5 uops, nothing widened in memory.
 *
 * Dot: per block and token the integer sum starts at the row's correction (-12·Σq, stored by
 * prepare_act) and takes, per chunk, the two quads against 4 broadcast activation bytes
 * each: 8 vpdpbusd per 16 rows and block (non-VNNI: per chunk 2 vpmaddubsw summed in 16 bits
 * (≤ 2·2·24·127 = 12192) and one vpmaddwd: 5 uops). The sum is the reference's exactly.
 * Then, as the reference: S = wsh · xs (vmulps), acc = fma(cvt(isum), S, acc) in block order,
 * with wsh = 2^(e - 128) from vscalefps (exact, subnormal for e < 2).
 *
 * Paths: up to DIRECT tokens keep everything in registers and decode each chunk in
 * registers (decode is then 2 uops per token and 8-row... amortised over at most 4 tokens;
 * it is memory that bounds m = 1..4). More tokens (prefill, up to MR = 32): each block of
 * the tile is decoded once into a 1 KB stack buffer, the tokens run over it in groups,
 * their fp32 totals on the stack (touched once per block). The VNNI set's groups are
 * register-blocked by hand (kernels/avx512vnni/expert_mxfp4_q8_groups.h); the vpmaddubsw
 * set's are below. Same operations per element in every path, so same bits for every m.
 * The multi-tile entries run up to MX_TILES tiles side by side on the buffered path (each
 * block of each tile decoded in turn, the VNNI groups' gathered activations shared by all),
 * and two at a time on the direct one: one core then reads two streams, which it does faster
 * than one (bench/NOTES.md v9).
 *
 * Prefetch: 8 KB ahead into L2 and 2 KB ahead into L1, every 64 bytes consumed, into the
 * next tile too; decode streams each tile once from memory. A pair's L2 lines that fall past
 * their tile go one tile further, to the next pair's tile of the same side: otherwise the
 * first of the pair ran into its partner's start, read already, and the next pair's second
 * tile started cold (gpt-oss-20b T = 1: 0.78-0.84 -> 0.87-0.91 of the read floor, v10).
 */

#define MX_NR MOE_MX_NR
#define MX_BLK MOE_MX_BLOCK
#define MX_MR 32
#define MX_DIRECT 4
#define MX_PF 8192
#define MX_PF_L1 2048
#define MX_INLINE static inline __attribute__((always_inline))
#define MX_UNROLL _Pragma("GCC unroll 16")

/* The line MX_PF past p into L2, and the one MX_PF_L1 past p into L1. */
MX_INLINE void mx_prefetch_ahead(const unsigned char *p)
{
    _mm_prefetch((const char *)p + MX_PF, _MM_HINT_T1);
    _mm_prefetch((const char *)p + MX_PF_L1, _MM_HINT_T0);
}

/* mx_prefetch_ahead for a tile ending at end, one of a pair when skip is the tile size (0
 * alone): its L2 line by moe_xl_pair_prefetch. */
MX_INLINE void mx_prefetch_side(const unsigned char *p, const unsigned char *end, size_t skip)
{
    _mm_prefetch((const char *)moe_xl_pair_prefetch(p + MX_PF, end, skip), _MM_HINT_T1);
    _mm_prefetch((const char *)p + MX_PF_L1, _MM_HINT_T0);
}

MX_INLINE __m512i mx_lut(void) { return _mm512_broadcast_i32x4(_mm_setr_epi8(Q8W_WU_VALUES)); }

/* The two quads (c, c + 4) of one chunk as unsigned operands. */
MX_INLINE void mx_decode(const unsigned char *chunk, __m512i lut, __m512i *lo, __m512i *hi)
{
    const __m512i c = _mm512_loadu_si512(chunk), m = _mm512_set1_epi8(0x0F);
    *lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(c, m));
    *hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(c, 4), m));
}

/* acc + Σ over the two quads of w·x, per dword lane, exactly. */
MX_INLINE __m512i mx_dot(__m512i acc, __m512i wlo, __m512i xlo, __m512i whi, __m512i xhi)
{
#if MOE_MX_VNNI
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, wlo, xlo), whi, xhi);
#else
    const __m512i t =
        _mm512_add_epi16(_mm512_maddubs_epi16(wlo, xlo), _mm512_maddubs_epi16(whi, xhi));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(t, _mm512_set1_epi16(1)));
#endif
}

/* 2^(e - 128) for the 16 scale bytes at p, exactly. */
MX_INLINE __m512 mx_half_scales(const unsigned char *p)
{
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512 ex = _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(128)));
    return _mm512_scalef_ps(_mm512_set1_ps(1.0f), ex);
}

#if MOE_Q8_INT4
/* INT4: the 16 rows' f32 scales at p, as packing wrote them. */
MX_INLINE __m512 mx_weight_scales(const unsigned char *p) { return _mm512_loadu_ps(p); }
#else
#define mx_weight_scales mx_half_scales
#endif

MX_INLINE __m512i mx_bcast(const unsigned char *p)
{
    int v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* A prepared row's parts (kernels/expert.h). */
typedef struct mx_row {
    const unsigned char *q, *xs, *corr;
} mx_row;

MX_INLINE mx_row mx_row_of(const void *p, size_t k)
{
    const unsigned char *r = p;
    mx_row row = {r, r + moe_q8_scales_offset(k), r + moe_q8_corr_offset(k)};
    return row;
}

/* acc = fma(cvt(isum), wsh · xs_b, acc). */
MX_INLINE __m512 mx_scale_add(__m512i isum, __m512 wsh, const mx_row *r, size_t b, __m512 acc)
{
    const __m512 s = _mm512_mul_ps(wsh, _mm512_set1_ps(load_f32(r->xs + 4 * b)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc);
}

/* ---- Direct path: M ≤ MX_DIRECT tokens in registers ------------------------------------ */

/* NT (1 or 2) tiles tb bytes apart side by side, each its own stream and its own sums (the
 * same operations per tile as alone); outputs MX_NR elements apart, n_valid rows in the last.
 * Gate/up pairs keep 8·M sums, so they run up to MX_PAIR_GATEUP tokens; down pairs every M. */
#define MX_NT 2
#define MX_PAIR_GATEUP 2

MX_INLINE void mx_gateup_direct(const size_t M, const size_t NT, size_t k, const void *const *xv,
                                const unsigned char *tile, size_t tb, const moe_act_params *act,
                                float *h, size_t hs, size_t n_valid)
{
    mx_row r[MX_DIRECT];
    __m512 ag[MX_NT][MX_DIRECT], au[MX_NT][MX_DIRECT];
    MX_UNROLL
    for (size_t t = 0; t < M; t++) {
        r[t] = mx_row_of(xv[t], k);
        MX_UNROLL
        for (size_t j = 0; j < NT; j++)
            ag[j][t] = au[j][t] = _mm512_setzero_ps();
    }
    const __m512i lut = mx_lut();
    const size_t nb = k / MX_BLK, skip = NT == 2 ? tb : 0;
    for (size_t s = 0, b = 0; b < nb; s++) {
        const size_t len = moe_mx_step_len(2, nb, s);
        const unsigned char *base = tile + q8w_step_at(2, s);
        const unsigned char *line = base + len * 2 * MOE_MX_UNIT;
        MX_UNROLL
        for (size_t j = 0; j < NT; j++)
            mx_prefetch_side(line + j * tb, tile + (j + 1) * tb, skip);
        for (size_t i = 0; i < len; i++, b++) {
            __m512i ig[MX_NT][MX_DIRECT], iu[MX_NT][MX_DIRECT];
            MX_UNROLL
            for (size_t t = 0; t < M; t++) {
                const __m512i corr = mx_bcast(r[t].corr + 4 * b);
                MX_UNROLL
                for (size_t j = 0; j < NT; j++)
                    ig[j][t] = iu[j][t] = corr;
            }
            MX_UNROLL
            for (size_t c = 0; c < 4; c++) {
                MX_UNROLL
                for (size_t j = 0; j < NT; j++) {
                    const unsigned char *ug = base + j * tb + i * 2 * MOE_MX_UNIT,
                                        *uu = ug + MOE_MX_UNIT;
                    mx_prefetch_side(ug + 64 * c, tile + (j + 1) * tb, skip);
                    mx_prefetch_side(uu + 64 * c, tile + (j + 1) * tb, skip);
                    __m512i gl, gh, ul, uh;
                    mx_decode(ug + 64 * c, lut, &gl, &gh);
                    mx_decode(uu + 64 * c, lut, &ul, &uh);
                    MX_UNROLL
                    for (size_t t = 0; t < M; t++) {
                        const unsigned char *q = r[t].q + MX_BLK * b + 4 * c;
                        const __m512i xl = mx_bcast(q), xh = mx_bcast(q + 16);
                        ig[j][t] = mx_dot(ig[j][t], gl, xl, gh, xh);
                        iu[j][t] = mx_dot(iu[j][t], ul, xl, uh, xh);
                    }
                }
            }
            MX_UNROLL
            for (size_t j = 0; j < NT; j++) {
                const __m512 wg = mx_weight_scales(line + j * tb + 32 * Q8W_SCALE_BYTES * i),
                             wu = mx_weight_scales(line + j * tb + 32 * Q8W_SCALE_BYTES * i +
                                                   16 * Q8W_SCALE_BYTES);
                MX_UNROLL
                for (size_t t = 0; t < M; t++) {
                    ag[j][t] = mx_scale_add(ig[j][t], wg, &r[t], b, ag[j][t]);
                    au[j][t] = mx_scale_add(iu[j][t], wu, &r[t], b, au[j][t]);
                }
            }
        }
    }
    MX_UNROLL
    for (size_t j = 0; j < NT; j++) {
        const unsigned char *tj = tile + j * tb;
        const __m512 bg = _mm512_loadu_ps(tj), bu = _mm512_loadu_ps(tj + 64);
        const __mmask16 mask = rows_mask(j + 1 == NT ? n_valid : MX_NR);
        MX_UNROLL
        for (size_t t = 0; t < M; t++) {
            const __m512 v = act16(act, _mm512_add_ps(ag[j][t], bg), _mm512_add_ps(au[j][t], bu));
            _mm512_mask_storeu_ps(h + t * hs + j * MX_NR, mask, v);
        }
    }
}

MX_INLINE void mx_down_direct(const size_t M, const size_t NT, size_t k, const void *const *hv,
                              const unsigned char *tile, size_t tb, float *y, size_t ys,
                              size_t n_valid)
{
    mx_row r[MX_DIRECT];
    __m512 acc[MX_NT][MX_DIRECT];
    MX_UNROLL
    for (size_t t = 0; t < M; t++) {
        r[t] = mx_row_of(hv[t], k);
        MX_UNROLL
        for (size_t j = 0; j < NT; j++)
            acc[j][t] = _mm512_setzero_ps();
    }
    const __m512i lut = mx_lut();
    const size_t nb = k / MX_BLK, skip = NT == 2 ? tb : 0;
    for (size_t s = 0, b = 0; b < nb; s++) {
        const size_t len = moe_mx_step_len(1, nb, s);
        const unsigned char *base = tile + q8w_step_at(1, s);
        const unsigned char *line = base + len * MOE_MX_UNIT;
        MX_UNROLL
        for (size_t j = 0; j < NT; j++)
            mx_prefetch_side(line + j * tb, tile + (j + 1) * tb, skip);
        for (size_t i = 0; i < len; i++, b++) {
            __m512i is[MX_NT][MX_DIRECT];
            MX_UNROLL
            for (size_t t = 0; t < M; t++) {
                const __m512i corr = mx_bcast(r[t].corr + 4 * b);
                MX_UNROLL
                for (size_t j = 0; j < NT; j++)
                    is[j][t] = corr;
            }
            MX_UNROLL
            for (size_t c = 0; c < 4; c++) {
                MX_UNROLL
                for (size_t j = 0; j < NT; j++) {
                    const unsigned char *u = base + j * tb + i * MOE_MX_UNIT;
                    mx_prefetch_side(u + 64 * c, tile + (j + 1) * tb, skip);
                    __m512i wl, wh;
                    mx_decode(u + 64 * c, lut, &wl, &wh);
                    MX_UNROLL
                    for (size_t t = 0; t < M; t++) {
                        const unsigned char *q = r[t].q + MX_BLK * b + 4 * c;
                        is[j][t] = mx_dot(is[j][t], wl, mx_bcast(q), wh, mx_bcast(q + 16));
                    }
                }
            }
            MX_UNROLL
            for (size_t j = 0; j < NT; j++) {
                const __m512 w = mx_weight_scales(line + j * tb + 16 * Q8W_SCALE_BYTES * i);
                MX_UNROLL
                for (size_t t = 0; t < M; t++)
                    acc[j][t] = mx_scale_add(is[j][t], w, &r[t], b, acc[j][t]);
            }
        }
    }
    MX_UNROLL
    for (size_t j = 0; j < NT; j++) {
        const __m512 bias = _mm512_loadu_ps(tile + j * tb);
        const __mmask16 mask = rows_mask(j + 1 == NT ? n_valid : MX_NR);
        MX_UNROLL
        for (size_t t = 0; t < M; t++)
            _mm512_mask_storeu_ps(y + t * ys + j * MX_NR, mask, _mm512_add_ps(acc[j][t], bias));
    }
}

/* ---- Buffered path: each block decoded once, tokens in groups over it ------------------- */

/* The decoded block: for chunk c, [4c] gate quads c, [4c+1] gate quads c + 4, [4c+2] and
 * [4c+3] the same for up (down: [2c], [2c+1]). */
MX_INLINE void mx_decode_unit(const unsigned char *u, __m512i lut, __m512i *buf, size_t stride)
{
    MX_UNROLL
    for (size_t c = 0; c < 4; c++) {
        mx_prefetch_ahead(u + 64 * c);
        mx_decode(u + 64 * c, lut, &buf[stride * c], &buf[stride * c + 1]);
    }
}

/* The decoded gate/up block: chunk c's gate quads c and c + 4 in buf[S·c], buf[S·c + 1] and its
 * up quads MX_UP_AT further, S = MX_GU_STRIDE (AMX: gate in buf[0..7], up in buf[8..15], as
 * its B tiles take them; down: buf[2c], buf[2c + 1] in every set). */
#if MOE_MX_AMX
#define MX_GU_STRIDE 2
#define MX_UP_AT 8
#else
#define MX_GU_STRIDE 4
#define MX_UP_AT 2
#endif

#if MOE_MX_AMX
#include "kernels/avx512amx/expert_mxfp4_q8_tiles.h"
#elif MOE_MX_VNNI
#include "kernels/avx512vnni/expert_mxfp4_q8_groups.h"
#else
/* vpmaddubsw: the tokens in groups of 8, each group's integer sums and the block's weights in
 * registers as GCC allocates them. */
#define MX_GROUP 8

/* One group of G tokens over a decoded gate/up block b, into the totals tot[2t], tot[2t+1]. */
MX_INLINE void mx_gateup_group(const size_t G, const __m512i *buf, const mx_row *r, size_t b,
                               __m512 wg, __m512 wu, float (*tot)[MX_NR])
{
    __m512i ig[MX_GROUP], iu[MX_GROUP];
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        ig[t] = iu[t] = mx_bcast(r[t].corr + 4 * b);
    MX_UNROLL
    for (size_t c = 0; c < 4; c++) {
        const __m512i gl = buf[4 * c], gh = buf[4 * c + 1], ul = buf[4 * c + 2],
                      uh = buf[4 * c + 3];
        MX_UNROLL
        for (size_t t = 0; t < G; t++) {
            const unsigned char *q = r[t].q + MX_BLK * b + 4 * c;
            const __m512i xl = mx_bcast(q), xh = mx_bcast(q + 16);
            ig[t] = mx_dot(ig[t], gl, xl, gh, xh);
            iu[t] = mx_dot(iu[t], ul, xl, uh, xh);
        }
    }
    MX_UNROLL
    for (size_t t = 0; t < G; t++) {
        _mm512_store_ps(tot[2 * t], mx_scale_add(ig[t], wg, &r[t], b, _mm512_load_ps(tot[2 * t])));
        _mm512_store_ps(tot[2 * t + 1],
                        mx_scale_add(iu[t], wu, &r[t], b, _mm512_load_ps(tot[2 * t + 1])));
    }
}

MX_INLINE void mx_down_group(const size_t G, const __m512i *buf, const mx_row *r, size_t b,
                             __m512 w, float (*tot)[MX_NR])
{
    __m512i is[MX_GROUP];
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        is[t] = mx_bcast(r[t].corr + 4 * b);
    MX_UNROLL
    for (size_t c = 0; c < 4; c++) {
        const __m512i wl = buf[2 * c], wh = buf[2 * c + 1];
        MX_UNROLL
        for (size_t t = 0; t < G; t++) {
            const unsigned char *q = r[t].q + MX_BLK * b + 4 * c;
            is[t] = mx_dot(is[t], wl, mx_bcast(q), wh, mx_bcast(q + 16));
        }
    }
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        _mm512_store_ps(tot[t], mx_scale_add(is[t], w, &r[t], b, _mm512_load_ps(tot[t])));
}

/* The call's tokens: their prepared rows' parts. */
typedef struct mx_tokens {
    mx_row r[MX_MR];
} mx_tokens;

MX_INLINE void mx_tokens_init(mx_tokens *tk, size_t m, const void *const *v, size_t k)
{
    for (size_t t = 0; t < m; t++)
        tk->r[t] = mx_row_of(v[t], k);
}

/* Every group of the m tokens over the decoded gate/up block b. */
MX_INLINE void mx_gateup_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                               const __m512i *buf, __m512 wg, __m512 wu, float (*tot)[MX_NR])
{
    (void)k, (void)first;
    for (size_t t0 = 0; t0 < m; t0 += MX_GROUP) {
        const size_t g = m - t0 < MX_GROUP ? m - t0 : MX_GROUP;
        DISPATCH(mx_gateup_group, g, buf, tk->r + t0, b, wg, wu, tot + 2 * t0);
    }
}

MX_INLINE void mx_down_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                             const __m512i *buf, __m512 w, float (*tot)[MX_NR])
{
    (void)k, (void)first;
    for (size_t t0 = 0; t0 < m; t0 += MX_GROUP) {
        const size_t g = m - t0 < MX_GROUP ? m - t0 : MX_GROUP;
        DISPATCH(mx_down_group, g, buf, tk->r + t0, b, w, tot + t0);
    }
}

#endif

#if !MOE_MX_AMX
/* The groups decode the weights as vpdpbusd's unsigned operand and need nothing at the end. */
MX_INLINE __m512i mx_buf_lut(const mx_tokens *tk)
{
    (void)tk;
    return mx_lut();
}
MX_INLINE void mx_tokens_end(mx_tokens *tk) { (void)tk; }
#endif

/* The buffered paths, one driver for every group set (mx_tokens, mx_gateup_block and
 * mx_down_block above) over n ≤ MX_TILES consecutive tiles tb bytes apart: the tiles' steps
 * in order, in each step every tile's block b decoded once and every group of tokens run over
 * it (first: the first tile of the block, when the VNNI groups gather), totals on the stack,
 * the epilogue as the direct path's; tile j's outputs MX_NR elements after tile j - 1's,
 * n_valid rows in the last. A unit (tile j's block b) runs one unit late, after the next one
 * is decoded into the other buffer: its decoded codes are then in the cache, not still in the
 * store buffer (AMX's tile loads wait for those stores: bench/NOTES.md v16). */
#define MX_TILES 4

/* A decoded unit waiting to run: its buffer, scales, block and tile. */
typedef struct mx_unit {
    const __m512i *buf;
    __m512 w[2]; /* gate and up (down: [0]) */
    size_t b, j;
} mx_unit;

static void mx_gateup_buffered(size_t m, size_t k, const void *const *xv,
                               const unsigned char *tile, size_t n, size_t tb,
                               const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    __m512i buf[2][16] __attribute__((aligned(64)));
    mx_tokens tk __attribute__((aligned(64)));
    float tot[MX_TILES][2 * MX_MR][MX_NR] __attribute__((aligned(64)));
    mx_unit late = {0};
    size_t units = 0;
    mx_tokens_init(&tk, m, xv, k);
    for (size_t j = 0; j < n; j++)
        for (size_t t = 0; t < 2 * m; t++)
            _mm512_store_ps(tot[j][t], _mm512_setzero_ps());
    const __m512i lut = mx_buf_lut(&tk);
    const size_t nb = k / MX_BLK;
    for (size_t s = 0, b0 = 0; b0 < nb; s++) {
        const size_t len = moe_mx_step_len(2, nb, s);
        for (size_t i = 0; i < len; i++) {
            for (size_t j = 0; j < n; j++) {
                const unsigned char *base = tile + j * tb + q8w_step_at(2, s);
                const unsigned char *line = base + len * 2 * MOE_MX_UNIT;
                if (i == 0) mx_prefetch_ahead(line);
                const unsigned char *ug = base + i * 2 * MOE_MX_UNIT;
                __m512i *d = buf[units++ % 2];
                mx_decode_unit(ug, lut, d, MX_GU_STRIDE);
                mx_decode_unit(ug + MOE_MX_UNIT, lut, d + MX_UP_AT, MX_GU_STRIDE);
                if (late.buf)
                    mx_gateup_block(&tk, m, k, late.b, late.j == 0, late.buf, late.w[0], late.w[1],
                                    tot[late.j]);
                const mx_unit next = {
                    d,
                    {mx_weight_scales(line + 32 * Q8W_SCALE_BYTES * i),
                     mx_weight_scales(line + 32 * Q8W_SCALE_BYTES * i + 16 * Q8W_SCALE_BYTES)},
                    b0 + i,
                    j};
                late = next;
            }
        }
        b0 += len;
    }
    mx_gateup_block(&tk, m, k, late.b, late.j == 0, late.buf, late.w[0], late.w[1], tot[late.j]);
    mx_tokens_end(&tk);
    for (size_t j = 0; j < n; j++) {
        const unsigned char *tj = tile + j * tb;
        const __m512 bg = _mm512_loadu_ps(tj), bu = _mm512_loadu_ps(tj + 64);
        const __mmask16 mask = rows_mask(j + 1 == n ? n_valid : MX_NR);
        for (size_t t = 0; t < m; t++) {
            const __m512 g = _mm512_add_ps(_mm512_load_ps(tot[j][2 * t]), bg);
            const __m512 u = _mm512_add_ps(_mm512_load_ps(tot[j][2 * t + 1]), bu);
            _mm512_mask_storeu_ps(h + t * hs + j * MX_NR, mask, act16(act, g, u));
        }
    }
}

static void mx_down_buffered(size_t m, size_t k, const void *const *hv, const unsigned char *tile,
                             size_t n, size_t tb, float *y, size_t ys, size_t n_valid)
{
    __m512i buf[2][8] __attribute__((aligned(64)));
    mx_tokens tk __attribute__((aligned(64)));
    float tot[MX_TILES][MX_MR][MX_NR] __attribute__((aligned(64)));
    mx_unit late = {0};
    size_t units = 0;
    mx_tokens_init(&tk, m, hv, k);
    for (size_t j = 0; j < n; j++)
        for (size_t t = 0; t < m; t++)
            _mm512_store_ps(tot[j][t], _mm512_setzero_ps());
    const __m512i lut = mx_buf_lut(&tk);
    const size_t nb = k / MX_BLK;
    for (size_t s = 0, b0 = 0; b0 < nb; s++) {
        const size_t len = moe_mx_step_len(1, nb, s);
        for (size_t i = 0; i < len; i++) {
            for (size_t j = 0; j < n; j++) {
                const unsigned char *base = tile + j * tb + q8w_step_at(1, s);
                const unsigned char *line = base + len * MOE_MX_UNIT;
                if (i == 0) mx_prefetch_ahead(line);
                __m512i *d = buf[units++ % 2];
                mx_decode_unit(base + i * MOE_MX_UNIT, lut, d, 2);
                if (late.buf)
                    mx_down_block(&tk, m, k, late.b, late.j == 0, late.buf, late.w[0], tot[late.j]);
                const mx_unit next = {
                    d, {mx_weight_scales(line + 16 * Q8W_SCALE_BYTES * i)}, b0 + i, j};
                late = next;
            }
        }
        b0 += len;
    }
    mx_down_block(&tk, m, k, late.b, late.j == 0, late.buf, late.w[0], tot[late.j]);
    mx_tokens_end(&tk);
    for (size_t j = 0; j < n; j++) {
        const __m512 bias = _mm512_loadu_ps(tile + j * tb);
        const __mmask16 mask = rows_mask(j + 1 == n ? n_valid : MX_NR);
        for (size_t t = 0; t < m; t++)
            _mm512_mask_storeu_ps(y + t * ys + j * MX_NR, mask,
                                  _mm512_add_ps(_mm512_load_ps(tot[j][t]), bias));
    }
}

/* ---- Entry points ------------------------------------------------------------------------ */

#define MX_DIRECT_DISPATCH(body, m, ...)                                                           \
    do {                                                                                           \
        switch (m) {                                                                               \
            DISPATCH_CASE(1, body, __VA_ARGS__)                                                    \
            DISPATCH_CASE(2, body, __VA_ARGS__)                                                    \
            DISPATCH_CASE(3, body, __VA_ARGS__)                                                    \
        default: body(MX_DIRECT, __VA_ARGS__); break;                                              \
        }                                                                                          \
    } while (0)

static void mx_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                      const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    if (m > MX_DIRECT)
        mx_gateup_buffered(m, k, x, tile, 1, 0, act, h, h_stride, n_valid);
    else
        MX_DIRECT_DISPATCH(mx_gateup_direct, m, 1, k, x, tile, 0, act, h, h_stride, n_valid);
}

static void mx_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                    size_t y_stride, size_t n_valid)
{
    if (m > MX_DIRECT)
        mx_down_buffered(m, k, h, tile, 1, 0, y, y_stride, n_valid);
    else
        MX_DIRECT_DISPATCH(mx_down_direct, m, 1, k, h, tile, 0, y, y_stride, n_valid);
}

/* The direct path over n tiles tb bytes apart: two side by side where their sums fit in
 * registers (gate/up up to MX_PAIR_GATEUP tokens, down every m), a last odd tile alone. */
static void mx_gateup_direct_tiles(size_t m, size_t k, const void *const *x,
                                   const unsigned char *tile, size_t n, size_t tb,
                                   const moe_act_params *act, float *h, size_t hs, size_t n_valid)
{
    for (size_t j = 0, nt; j < n; j += nt) {
        nt = n - j >= 2 && m <= MX_PAIR_GATEUP ? 2 : 1;
        const size_t nv = j + nt == n ? n_valid : MX_NR;
        const unsigned char *t = tile + j * tb;
        float *hj = h + j * MX_NR;
        if (nt == 1)
            MX_DIRECT_DISPATCH(mx_gateup_direct, m, 1, k, x, t, 0, act, hj, hs, nv);
        else if (m == 1)
            mx_gateup_direct(1, 2, k, x, t, tb, act, hj, hs, nv);
        else
            mx_gateup_direct(2, 2, k, x, t, tb, act, hj, hs, nv);
    }
}

static void mx_down_direct_tiles(size_t m, size_t k, const void *const *h,
                                 const unsigned char *tile, size_t n, size_t tb, float *y,
                                 size_t ys, size_t n_valid)
{
    for (size_t j = 0, nt; j < n; j += nt) {
        nt = n - j >= 2 ? 2 : 1;
        const size_t nv = j + nt == n ? n_valid : MX_NR;
        const unsigned char *t = tile + j * tb;
        if (nt == 2)
            MX_DIRECT_DISPATCH(mx_down_direct, m, 2, k, h, t, tb, y + j * MX_NR, ys, nv);
        else
            MX_DIRECT_DISPATCH(mx_down_direct, m, 1, k, h, t, 0, y + j * MX_NR, ys, nv);
    }
}

/* n_tiles tiles, MX_TILES at a time: side by side on the buffered path (the VNNI groups then
 * gather each block's activations once for all of them), in pairs on the direct one. */
static void mx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                            size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                            size_t n_valid)
{
    const size_t tb = q8w_gateup_bytes((int64_t)k);
    for (size_t i = 0; i < n_tiles; i += MX_TILES) {
        const size_t n = n_tiles - i < MX_TILES ? n_tiles - i : MX_TILES;
        const size_t nv = i + n == n_tiles ? n_valid : MX_NR;
        const unsigned char *t = (const unsigned char *)tile + i * tb;
        float *hi = (float *)h + i * MX_NR;
        if (m > MX_DIRECT)
            mx_gateup_buffered(m, k, x, t, n, tb, act, hi, h_stride, nv);
        else
            mx_gateup_direct_tiles(m, k, x, t, n, tb, act, hi, h_stride, nv);
    }
}

static void mx_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                          size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    const size_t tb = q8w_down_bytes((int64_t)k);
    for (size_t i = 0; i < n_tiles; i += MX_TILES) {
        const size_t n = n_tiles - i < MX_TILES ? n_tiles - i : MX_TILES;
        const size_t nv = i + n == n_tiles ? n_valid : MX_NR;
        const unsigned char *t = (const unsigned char *)tile + i * tb;
        float *yi = y + i * MX_NR;
        if (m > MX_DIRECT)
            mx_down_buffered(m, k, h, t, n, tb, yi, y_stride, nv);
        else
            mx_down_direct_tiles(m, k, h, t, n, tb, yi, y_stride, nv);
    }
}

/* The kernel set NAME of this body, needing ISA (a MOE_REQ_* mask): each set's file is its
 * MOE_MX_VNNI and this line. */
#define MX_ZMM_SET(NAME, ISA)                                                                      \
    const moe_expert_kernels NAME = {                                                              \
        .name = #NAME,                                                                             \
        Q8W_SET_LAYOUT,                                                                            \
        .isa = ISA,                                                                                \
        .mr = MX_MR,                                                                               \
        .nr = MX_NR,                                                                               \
        .gateup = mx_gateup,                                                                       \
        .down = mx_down,                                                                           \
        .gateup_tiles = mx_gateup_tiles,                                                           \
        .down_tiles = mx_down_tiles,                                                               \
        .prepare_act = q8_prepare_avx512,                                                          \
    }

#endif
