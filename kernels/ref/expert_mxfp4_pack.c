/* expert_mxfp4_pack.c — MXFP4 expert tiles: sizes, packing with validation, unpacking; Q8 rows. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_src_check.h"
#include "kernels/ref/expert_w4_pack.h"

/*
 * Portable C shared by every MXFP4 kernel set: the layout belongs to the format, not to the
 * ISA (kernels/ref/expert_mxfp4_layout.h). The checking and the loops over tiles are the
 * 4-bit formats' (kernels/ref/expert_w4_pack.h: everything checked first, written after, so
 * a rejected source leaves dst untouched); this file holds what is MXFP4's. The codes move a
 * byte at a time (two nibbles), so packing costs about a nanosecond per byte rather than per
 * weight.
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK

/* ---- Sizes --------------------------------------------------------------------------- */

static size_t tile_bytes(int64_t k, int np)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K || k % BLK != 0) return 0;
    const size_t nb = (size_t)(k / BLK), S = moe_mx_step_blocks(np);
    const size_t full = nb / S, rest = nb % S;
    size_t bytes = moe_mx_bias_bytes(np) + full * MOE_MX_STEP_BYTES;
    if (rest) bytes += rest * (size_t)np * MOE_MX_UNIT + MOE_MX_LINE;
    return bytes;
}

size_t moe_mx_gateup_bytes(int64_t k) { return tile_bytes(k, 2); }
size_t moe_mx_down_bytes(int64_t k) { return tile_bytes(k, 1); }

/* ---- Reading the sources ------------------------------------------------------------- */

static bool is_code_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_F4_E2M1 || d == MOE_DTYPE_U8 || d == MOE_DTYPE_I8;
}

static bool is_scale_dtype(moe_dtype d) { return d == MOE_DTYPE_F8_E8M0 || d == MOE_DTYPE_U8; }

/* Row r's packed bytes; offsets were checked to fit in int64 by moe_w4_check_span. */
static const unsigned char *row_bytes(const moe_weight_src *s, int64_t r)
{
    return (const unsigned char *)s->data + r * s->row_stride;
}

static const unsigned char *row_scales(const moe_weight_src *s, int64_t r)
{
    return (const unsigned char *)s->scale + r * s->scale_stride;
}

float moe_mx_bias_at(const moe_weight_src *s, int64_t r) { return moe_w4_bias_at(s, r); }

void moe_mx_store_bias(const moe_weight_dst *d, int64_t r, float v) { moe_w4_store_bias(d, r, v); }

/* ---- Validation ---------------------------------------------------------------------- */

static moe_status check_src(const moe_weight_src *s, const char *what)
{
    moe_status st = moe_expert_src_check_shape(s, what);
    if (st) return st;
    if (s->cols % BLK != 0)
        return moe_error(MOE_ESHAPE, "%s: %lld columns are not a multiple of the MXFP4 block (32)",
                         what, (long long)s->cols);
    if (!is_code_dtype(s->dtype))
        return moe_error(MOE_EDTYPE,
                         "%s: weight dtype %s; the MXFP4 expert kernels read packed E2M1 codes "
                         "(f4_e2m1, u8 or i8)",
                         what, moe_dtype_name(s->dtype));
    if (s->col_stride != 1)
        return moe_error(MOE_EUNSUPPORTED,
                         "%s: col_stride %lld; packed MXFP4 rows must be contiguous (1)", what,
                         (long long)s->col_stride);
    if (!s->scale) return moe_error(MOE_EINVAL, "%s: the MXFP4 scales are NULL", what);
    if (!is_scale_dtype(s->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not f8_e8m0 (or u8)", what,
                         moe_dtype_name(s->scale_dtype));
    if (s->block_rows != 1 || s->block_cols != BLK)
        return moe_error(MOE_EUNSUPPORTED, "%s: scale block [%d, %d]; MXFP4 scales are [1, 32]",
                         what, s->block_rows, s->block_cols);
    st = moe_w4_check_span(s->rows, s->row_stride, s->cols / 2, 1, what, "weight row");
    if (!st) st = moe_w4_check_span(s->rows, s->scale_stride, s->cols / BLK, 1, what, "scale row");
    if (!st && s->bias) st = moe_expert_check_bias_dtype(s->bias_dtype, what);
    if (!st && s->bias)
        st = moe_w4_check_span(s->rows, s->bias_stride, 1, moe_w4_dtype_bytes(s->bias_dtype), what,
                               "bias");
    return st;
}

/* No scale is 0xFF: E8M0's NaN, which the kernels' exact power of two cannot carry. */
static moe_status check_scales(const moe_weight_src *s, const char *what)
{
    const int64_t nb = s->cols / BLK;
    for (int64_t r = 0; r < s->rows; r++) {
        const unsigned char *sc = row_scales(s, r);
        for (int64_t b = 0; b < nb; b++)
            if (sc[b] == 0xFF)
                return moe_error(MOE_EVALUE,
                                 "%s: E8M0 scale 0xFF (NaN) at row %lld, block %lld (columns "
                                 "%lld..%lld)",
                                 what, (long long)r, (long long)b, (long long)(b * BLK),
                                 (long long)(b * BLK + BLK - 1));
    }
    return MOE_OK;
}

/* ---- Packing ------------------------------------------------------------------------- */

/* The 16 source bytes of row n's block b (zeros past the edge: codes +0). */
static void block_bytes(const moe_weight_src *s, int64_t r, int64_t b, unsigned char out[16])
{
    if (r >= s->rows) {
        memset(out, 0, 16);
        return;
    }
    memcpy(out, row_bytes(s, r) + b * (BLK / 2), 16);
}

/* Blocks (16 bytes each) ahead of the one being packed that a row's prefetch asks for. */
#define PF_BLOCKS 16

/* Bytes 0..3 of x to bytes 0, 2, 4, 6. */
static uint64_t spread_bytes(uint64_t x)
{
    x = (x | x << 16) & 0x0000FFFF0000FFFFull;
    return (x | x << 8) & 0x00FF00FF00FF00FFull;
}

static void store_u32(unsigned char *p, uint64_t v)
{
    const uint32_t u = (uint32_t)v;
    memcpy(p, &u, sizeof u);
}

/* One unit: 16 rows of block b, the checkpoint's adjacent nibble pairs regrouped into quads
 * (kernels/ref/expert_mxfp4_layout.h): row n's byte k (k < 16) holds code k in its low nibble
 * and code k + 16 in its high one, and bytes 4c..4c+3 go to chunk c at 4n. Eight bytes at a
 * time in 64-bit words (little-endian: byte i of a word is bits 8i..8i+7); unpack, which the
 * tests check against the checkpoint, reads the layout byte by byte. */
static void pack_unit(const moe_weight_src *s, int64_t r0, int64_t b, unsigned char *unit)
{
    const uint64_t lo4 = 0x0F0F0F0F0F0F0F0Full;
    for (int n = 0; n < NR; n++) {
        unsigned char src[16];
        /* A tile reads its 16 rows side by side, 16 bytes at a time: more streams than the
         * hardware prefetcher follows, so each row's line PF_BLOCKS blocks ahead is asked for
         * as the row enters a new line (a hint: past the row's end it fetches nothing used). */
        if (b % 4 == 0 && r0 + n < s->rows)
            __builtin_prefetch(row_bytes(s, r0 + n) + (b + PF_BLOCKS) * (BLK / 2));
        block_bytes(s, r0 + n, b, src);
        uint64_t a, c; /* codes 0..15 and 16..31, two per byte, the even one low */
        memcpy(&a, src, 8);
        memcpy(&c, src + 8, 8);
        const uint64_t even = (a & lo4) | (c & lo4) << 4; /* byte i: out byte 2i */
        const uint64_t odd = (a >> 4 & lo4) | (c & ~lo4); /* byte i: out byte 2i + 1 */
        const uint64_t w0 = spread_bytes(even & 0xFFFFFFFFu) | spread_bytes(odd & 0xFFFFFFFFu) << 8;
        const uint64_t w1 = spread_bytes(even >> 32) | spread_bytes(odd >> 32) << 8;
        unsigned char *at = unit + 4 * n;
        store_u32(at, w0);
        store_u32(at + MOE_MX_CHUNK, w0 >> 32);
        store_u32(at + 2 * MOE_MX_CHUNK, w1);
        store_u32(at + 3 * MOE_MX_CHUNK, w1 >> 32);
    }
}

/* The INT4 sets' code units are MXFP4's byte for byte (kernels/ref/expert_int4_layout.h). */
void moe_mx_pack_unit(const moe_weight_src *s, int64_t r0, int64_t b, unsigned char *unit)
{
    pack_unit(s, r0, b, unit);
}

static void pack_scales(const moe_weight_src *s, int64_t r0, int64_t b, unsigned char *line)
{
    for (int n = 0; n < NR; n++)
        line[n] = r0 + n < s->rows ? row_scales(s, r0 + n)[b] : MOE_MX_PAD_SCALE;
}

static void pack_tile(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    const size_t nb = (size_t)(src[0]->cols / BLK), S = moe_mx_step_blocks(np);
    moe_w4_pack_bias(src, np, r0, tile);
    for (size_t s = 0; s * S < nb; s++) {
        const size_t len = moe_mx_step_len(np, nb, s);
        unsigned char *line = tile + moe_mx_step_at(np, s) + len * (size_t)np * MOE_MX_UNIT;
        memset(line, 0, MOE_MX_LINE);
        for (size_t i = 0; i < len; i++)
            for (int p = 0; p < np; p++) {
                const size_t b = s * S + i;
                pack_unit(src[p], r0, (int64_t)b, tile + moe_mx_unit_at(np, b, p));
                pack_scales(src[p], r0, (int64_t)b, tile + moe_mx_scales_at(np, nb, b, p));
            }
    }
}

/* ---- Unpacking ----------------------------------------------------------------------- */

moe_status moe_mx_check_dst(const moe_weight_dst *d, const char *what)
{
    moe_status st = moe_w4_check_dst_shape(d, what);
    if (st) return st;
    if (!is_code_dtype(d->dtype))
        return moe_error(MOE_EDTYPE, "%s: destination dtype %s; this layout holds E2M1 codes", what,
                         moe_dtype_name(d->dtype));
    if (d->bias) {
        st = moe_expert_check_bias_dtype(d->bias_dtype, what);
        if (st) return st;
    }
    if (!d->scale) return moe_error(MOE_EINVAL, "%s: the scale destination is NULL", what);
    if (!is_scale_dtype(d->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not f8_e8m0 (or u8)", what,
                         moe_dtype_name(d->scale_dtype));
    if (d->block_rows != 1 || d->block_cols != BLK)
        return moe_error(MOE_EUNSUPPORTED, "%s: scale block [%d, %d]", what, d->block_rows,
                         d->block_cols);
    return MOE_OK;
}

static void unpack_scales(const unsigned char *tile, int np, int p, size_t b, size_t n,
                          const moe_weight_dst *d, int64_t r)
{
    const size_t nb = (size_t)(d->cols / BLK);
    ((unsigned char *)d->scale)[(size_t)r * nb + b] = tile[moe_mx_scales_at(np, nb, b, p) + n];
}

/* ---- The entries: the 4-bit formats' glue with MXFP4's parts ------------------------- */

static const moe_w4_format mxfp4 = {
    .check_src = check_src,
    .check_scales = check_scales,
    .check_dst = moe_mx_check_dst,
    .tile_bytes = tile_bytes,
    .pack_tile = pack_tile,
    .unit_at = moe_mx_unit_at,
    .unpack_scales = unpack_scales,
};

moe_status moe_mx_check_sources(const moe_weight_src *const *src, int np)
{
    return moe_w4_check_sources(&mxfp4, src, np);
}

moe_status moe_mx_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    const moe_weight_src *src[2] = {gate, up};
    return moe_w4_pack(&mxfp4, src, 2, dst);
}

moe_status moe_mx_pack_down(const moe_weight_src *down, void *dst)
{
    return moe_w4_pack(&mxfp4, &down, 1, dst);
}

moe_status moe_mx_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up)
{
    const moe_weight_dst *dst[2] = {gate, up};
    return moe_w4_unpack(&mxfp4, packed, dst, 2);
}

moe_status moe_mx_unpack_down(const void *packed, const moe_weight_dst *down)
{
    return moe_w4_unpack(&mxfp4, packed, &down, 1);
}

/* ---- Q8 activation rows (kernels/expert.h, "The Q8 recipe") -------------------------- */

size_t moe_q8_row_bytes(int64_t k)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K || k % BLK != 0) return 0;
    return moe_q8_corr_offset((size_t)k) + moe_q8_pad64((size_t)k / BLK * 4);
}

/* Round to the nearest integer, ties to even, for |v| ≤ 2^22: adding 1.5·2^23 lands where the
 * float spacing is 1, so the addition rounds (math_ref.h uses the same shifter). Written with
 * volatile-free plain arithmetic: C11 without -ffast-math keeps both operations. */
static float round_even(float v)
{
    const float shifter = 12582912.0f;
    return (v + shifter) - shifter;
}

static bool finite_block(const float *x)
{
    bool ok = true;
    for (int j = 0; j < BLK; j++)
        ok &= isfinite(x[j]) != 0;
    return ok;
}

/* One block: its scale, codes and correction. */
static void prepare_block(const float *x, int8_t *q, float *xs, int32_t *corr)
{
    memset(q, 0, BLK);
    *corr = 0;
    if (!finite_block(x)) {
        *xs = NAN;
        return;
    }
    float amax = 0.0f;
    for (int j = 0; j < BLK; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.0f;
    *xs = d;
    if (d == 0.0f) return;
    int32_t sum = 0;
    for (int j = 0; j < BLK; j++) {
        float v = round_even(x[j] / d);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        q[j] = (int8_t)v;
        sum += q[j];
    }
    *corr = -MOE_Q8_WOFFSET * sum;
}

void moe_q8_zero_padding(size_t k, void *row)
{
    unsigned char *r = row;
    const size_t nb = k / BLK, so = moe_q8_scales_offset(k), co = moe_q8_corr_offset(k);
    memset(r + nb * BLK, 0, so - nb * BLK);
    memset(r + so + 4 * nb, 0, co - so - 4 * nb);
    memset(r + co + 4 * nb, 0, moe_q8_row_bytes((int64_t)k) - co - 4 * nb);
}

void moe_q8_prepare_ref(size_t k, const float *x, void *dst)
{
    unsigned char *row = dst;
    const size_t nb = k / BLK, so = moe_q8_scales_offset(k), co = moe_q8_corr_offset(k);
    memset(row, 0, moe_q8_row_bytes((int64_t)k));
    for (size_t b = 0; b < nb; b++) {
        int8_t q[BLK];
        float xs;
        int32_t corr;
        prepare_block(x + b * BLK, q, &xs, &corr);
        memcpy(row + b * BLK, q, BLK);
        memcpy(row + so + b * sizeof xs, &xs, sizeof xs);
        memcpy(row + co + b * sizeof corr, &corr, sizeof corr);
    }
}
