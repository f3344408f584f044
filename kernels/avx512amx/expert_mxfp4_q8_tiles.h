/* expert_mxfp4_q8_tiles.h — internal: the buffered path (m > 4 tokens) of the AMX MXFP4 Q8
 * kernels, the integer block sums as tdpbssd on tiles from 16 tokens; included by
 * kernels/avx512/expert_mxfp4_q8_body.h (whose helpers and includes it uses). */
#ifndef MOE_KERNELS_AVX512AMX_EXPERT_MXFP4_Q8_TILES_H
#define MOE_KERNELS_AVX512AMX_EXPERT_MXFP4_Q8_TILES_H

/*
 * Per 32-K block of a tile: the 16 rows' codes are decoded once, into one of the body's two
 * stack buffers, as signed w2 (so no correction: tdpbssd multiplies s8 by s8), each
 * projection's 8 quads as 8 consecutive 64-byte rows in the quad order 0, 4, 1, 5, 2, 6, 3, 7
 * — which is AMX's B operand as it is: row r holds, per dword lane n, weight row n's 4 codes
 * of one quad. The m tokens' 32 activation codes of the block are gathered once per block (on
 * the call's first tile) into rows of 32 bytes with their quads in the same order: the A
 * operand, up to 16 tokens per tile register. One tdpbssd per projection and 16 tokens then
 * gives every token's 16 integer sums of the block (C row t, lane n), exactly the reference's
 * Σ w2·q; the C tiles are stored and each row takes the recipe's f32 step (cvt, S = wsh · xs,
 * fma into the total), the same operations as the other sets, so the same bits.
 *
 * Tile registers (configured per call from m): 0 and 1 the A rows of tokens 0-15 and 16-31, 2
 * and 3 the gate and up B, 4 and 5 the gate and up sums of tokens 0-15, 6 and 7 of 16-31 (down:
 * B in 2, sums in 4 and 6). The vector units then do only the decode (shared by the m tokens)
 * and the f32 step: 3 operations per 16 rows, token and block where the vpdpbusd groups also
 * issue 8 vpdpbusd.
 */

#define MX_AMX_ROWS 16

/* Below MX_AMX_FROM tokens a call runs the AVX512-VNNI set's groups (on the same decoded
 * layout, with the unsigned table): at 8 tokens per call the tiles were 10-15 % slower than
 * they, at 16 and more faster (bench/NOTES.md v16). Their names get a prefix here. */
#define MX_AMX_FROM 16
#define mx_tokens mx_vnni_tokens
#define mx_tokens_init mx_vnni_tokens_init
#define mx_gateup_block mx_vnni_gateup_block
#define mx_down_block mx_vnni_down_block
#include "kernels/avx512vnni/expert_mxfp4_q8_groups.h"
#undef mx_tokens
#undef mx_tokens_init
#undef mx_gateup_block
#undef mx_down_block

/* w2 for the 16 E2M1 codes (sign in bit 3), signed: tdpbssd takes both operands signed. */
MX_INLINE __m512i mx_signed_lut(void)
{
    return _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

/* The palette-1 tile configuration, as LDTILECFG reads it (Intel SDM): 64 bytes. */
typedef struct mx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mx_tilecfg;

typedef struct mx_tokens {
    unsigned char q[MX_MR][MX_BLK] __attribute__((aligned(64)));      /* A rows, quads reordered */
    int32_t sums[4][MX_AMX_ROWS][MX_NR] __attribute__((aligned(64))); /* the C tiles, stored */
    float xs[MX_MR];
    const unsigned char *rows[MX_MR];
    mx_tilecfg cfg __attribute__((aligned(64)));
    size_t m;
    bool amx; /* m ≥ MX_AMX_FROM: the tiles, else the groups in v */
    mx_vnni_tokens v;
} mx_tokens;

/* Tile t as rows × colsb bytes (rows 0: unused). */
MX_INLINE void mx_tile_shape(mx_tilecfg *c, int t, size_t rows, size_t colsb)
{
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)(rows ? colsb : 0);
}

/* The call's tokens, and the tiles for m of them (or the groups'). */
MX_INLINE void mx_tokens_init(mx_tokens *tk, size_t m, const void *const *v, size_t k)
{
    tk->amx = m >= MX_AMX_FROM;
    if (!tk->amx) {
        mx_vnni_tokens_init(&tk->v, m, v, k);
        return;
    }
    for (size_t t = 0; t < m; t++)
        tk->rows[t] = v[t];
    tk->m = m;
    const size_t r0 = m < MX_AMX_ROWS ? m : MX_AMX_ROWS, r1 = m - r0;
    memset(&tk->cfg, 0, sizeof tk->cfg);
    tk->cfg.palette = 1;
    mx_tile_shape(&tk->cfg, 0, r0, MX_BLK);
    mx_tile_shape(&tk->cfg, 1, r1, MX_BLK);
    mx_tile_shape(&tk->cfg, 2, 8, 64);
    mx_tile_shape(&tk->cfg, 3, 8, 64);
    mx_tile_shape(&tk->cfg, 4, r0, 64);
    mx_tile_shape(&tk->cfg, 5, r0, 64);
    mx_tile_shape(&tk->cfg, 6, r1, 64);
    mx_tile_shape(&tk->cfg, 7, r1, 64);
    _tile_loadconfig(&tk->cfg);
}

/* The tile state back to its initial one (so the OS need not save it). */
MX_INLINE void mx_tokens_end(mx_tokens *tk)
{
    if (tk->amx) _tile_release();
}

/* The decode table: signed w2 for the tiles, the groups' unsigned w2 + 12 for them. */
MX_INLINE __m512i mx_buf_lut(const mx_tokens *tk) { return tk->amx ? mx_signed_lut() : mx_lut(); }

/* Block b's activation codes of every token as A rows (quads 0, 4, 1, 5, 2, 6, 3, 7, the
 * decoded weights' order) in tile registers 0 and 1, and their scales. */
MX_INLINE void mx_gather_tiles(mx_tokens *tk, size_t k, size_t b)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const size_t xo = moe_q8_scales_offset(k) + 4 * b;
    for (size_t t = 0; t < tk->m; t++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(tk->rows[t] + MX_BLK * b));
        _mm256_store_si256((__m256i *)tk->q[t], _mm256_permutevar8x32_epi32(q, order));
        memcpy(&tk->xs[t], tk->rows[t] + xo, 4);
    }
    _tile_loadd(0, tk->q[0], MX_BLK);
    if (tk->m > MX_AMX_ROWS) _tile_loadd(1, tk->q[MX_AMX_ROWS], MX_BLK);
}

/* tot[t · stride] = fma(cvt(sums of token t), wsh · xs_t, tot[t · stride]) for every token, the
 * sums of tokens 0-15 in s0 and of 16-31 in s1. */
MX_INLINE void mx_steps(const mx_tokens *tk, const int32_t (*s0)[MX_NR], const int32_t (*s1)[MX_NR],
                        __m512 wsh, float (*tot)[MX_NR], size_t stride)
{
    for (size_t t = 0; t < tk->m; t++) {
        const int32_t *row = t < MX_AMX_ROWS ? s0[t] : s1[t - MX_AMX_ROWS];
        float *acc = tot[t * stride];
        const __m512 s = _mm512_mul_ps(wsh, _mm512_set1_ps(tk->xs[t]));
        _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(row)), s,
                                             _mm512_load_ps(acc)));
    }
}

/* Tile C = A · B (tile 2) from zero, stored at dst; and the same for the gate (B in 2) and up
 * (B in 3) sums of one A tile, the two interleaved. Macros: tile numbers are immediates. */
#define MX_TILE_SUMS(A, C, dst)                                                                    \
    do {                                                                                           \
        _tile_zero(C);                                                                             \
        _tile_dpbssd(C, A, 2);                                                                     \
        _tile_stored(C, dst, 64);                                                                  \
    } while (0)
#define MX_TILE_SUMS2(A, CG, CU, dg, du)                                                           \
    do {                                                                                           \
        _tile_zero(CG);                                                                            \
        _tile_zero(CU);                                                                            \
        _tile_dpbssd(CG, A, 2);                                                                    \
        _tile_dpbssd(CU, A, 3);                                                                    \
        _tile_stored(CG, dg, 64);                                                                  \
        _tile_stored(CU, du, 64);                                                                  \
    } while (0)

/* Every token over the decoded gate/up block b of one tile (first: the call's first tile of
 * the block, which gathers its activations). */
MX_INLINE void mx_gateup_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                               const __m512i *buf, __m512 wg, __m512 wu, float (*tot)[MX_NR])
{
    if (!tk->amx) {
        mx_vnni_gateup_block(&tk->v, m, k, b, first, buf, wg, wu, tot);
        return;
    }
    if (first) mx_gather_tiles(tk, k, b);
    _tile_loadd(2, buf, 64);
    _tile_loadd(3, buf + MX_UP_AT, 64);
    MX_TILE_SUMS2(0, 4, 5, tk->sums[0], tk->sums[1]);
    if (m > MX_AMX_ROWS) MX_TILE_SUMS2(1, 6, 7, tk->sums[2], tk->sums[3]);
    mx_steps(tk, tk->sums[0], tk->sums[2], wg, tot, 2);
    mx_steps(tk, tk->sums[1], tk->sums[3], wu, tot + 1, 2);
}

MX_INLINE void mx_down_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                             const __m512i *buf, __m512 w, float (*tot)[MX_NR])
{
    if (!tk->amx) {
        mx_vnni_down_block(&tk->v, m, k, b, first, buf, w, tot);
        return;
    }
    if (first) mx_gather_tiles(tk, k, b);
    _tile_loadd(2, buf, 64);
    MX_TILE_SUMS(0, 4, tk->sums[0]);
    if (m > MX_AMX_ROWS) MX_TILE_SUMS(1, 6, tk->sums[2]);
    mx_steps(tk, tk->sums[0], tk->sums[2], w, tot, 1);
}

#endif
