/* expert_int4_pack.c — INT4 expert tiles: sizes, packing with validation, unpacking. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_src_check.h"
#include "kernels/ref/expert_w4_pack.h"

/*
 * Portable C shared by every INT4 kernel set (kernels/ref/expert_int4_layout.h). The code units
 * are MXFP4's (moe_mx_pack_unit); the group scales are read in the checkpoint's dtype, checked
 * finite and written as f32, once per 32-block. The checking and the loops over tiles are the
 * 4-bit formats' (kernels/ref/expert_w4_pack.h); this file holds what is INT4's.
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK

/* ---- Sizes --------------------------------------------------------------------------- */

static size_t tile_bytes(int64_t k, int np)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K || k % BLK != 0) return 0;
    const size_t nb = (size_t)(k / BLK), S = moe_mx_step_blocks(np);
    const size_t full = nb / S, rest = nb % S;
    return moe_mx_bias_bytes(np) + full * MOE_I4_STEP_BYTES +
           rest * (size_t)np * (MOE_MX_UNIT + NR * MOE_I4_SCALE_BYTES);
}

size_t moe_i4_gateup_bytes(int64_t k) { return tile_bytes(k, 2); }
size_t moe_i4_down_bytes(int64_t k) { return tile_bytes(k, 1); }

/* ---- Reading the sources ------------------------------------------------------------- */

static bool is_code_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_I32 || d == MOE_DTYPE_U8 || d == MOE_DTYPE_I8;
}

void moe_i4_store_float(unsigned char *p, moe_dtype d, float v) { moe_w4_store_float(p, d, v); }

/* The scale of row r (< rows) for column group g. */
float moe_i4_scale_at(const moe_weight_src *s, int64_t r, int64_t g)
{
    const size_t es = moe_w4_dtype_bytes(s->scale_dtype);
    return moe_w4_load_float(
        (const unsigned char *)s->scale + (r * s->scale_stride + g) * (int64_t)es, s->scale_dtype);
}

float moe_i4_bias_at(const moe_weight_src *s, int64_t r) { return moe_w4_bias_at(s, r); }

/* ---- Validation ---------------------------------------------------------------------- */

static moe_status check_src(const moe_weight_src *s, const char *what)
{
    moe_status st = moe_expert_src_check_shape(s, what);
    if (st) return st;
    if (s->cols % BLK != 0)
        return moe_error(MOE_ESHAPE, "%s: %lld columns are not a multiple of 32", what,
                         (long long)s->cols);
    if (!is_code_dtype(s->dtype))
        return moe_error(MOE_EDTYPE,
                         "%s: weight dtype %s; the INT4 expert kernels read packed nibbles (i32 "
                         "words, u8 or i8)",
                         what, moe_dtype_name(s->dtype));
    if (s->col_stride != 1)
        return moe_error(MOE_EUNSUPPORTED,
                         "%s: col_stride %lld; packed INT4 rows must be contiguous (1)", what,
                         (long long)s->col_stride);
    if (!s->scale) return moe_error(MOE_EINVAL, "%s: the INT4 group scales are NULL", what);
    if (!moe_w4_is_float_dtype(s->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(s->scale_dtype));
    if (s->block_rows != 1 || s->block_cols < BLK || s->block_cols % BLK != 0)
        return moe_error(MOE_EUNSUPPORTED,
                         "%s: scale block [%d, %d]; INT4 groups are [1, G], G a multiple of 32",
                         what, s->block_rows, s->block_cols);
    if (s->cols % s->block_cols != 0)
        return moe_error(MOE_ESHAPE, "%s: group size %d does not divide %lld columns", what,
                         s->block_cols, (long long)s->cols);
    if (s->bias) st = moe_expert_check_bias_dtype(s->bias_dtype, what);
    if (!st) st = moe_w4_check_span(s->rows, s->row_stride, s->cols / 2, 1, what, "weight row");
    if (!st)
        st = moe_w4_check_span(s->rows, s->scale_stride, s->cols / s->block_cols,
                               moe_w4_dtype_bytes(s->scale_dtype), what, "scale row");
    if (!st && s->bias)
        st = moe_w4_check_span(s->rows, s->bias_stride, 1, moe_w4_dtype_bytes(s->bias_dtype), what,
                               "bias");
    return st;
}

/* Every group scale finite: a NaN or an infinity would make every output that reads the group
 * NaN, so it is refused where it is, as MXFP4's scale 0xFF is. */
static moe_status check_scales(const moe_weight_src *s, const char *what)
{
    const int64_t ng = s->cols / s->block_cols;
    for (int64_t r = 0; r < s->rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            const float v = moe_i4_scale_at(s, r, g);
            if (!isfinite(v))
                return moe_error(MOE_EVALUE,
                                 "%s: group scale %s at row %lld, group %lld (columns "
                                 "%lld..%lld); INT4 scales must be finite",
                                 what, isnan(v) ? "NaN" : "infinite", (long long)r, (long long)g,
                                 (long long)(g * s->block_cols),
                                 (long long)((g + 1) * s->block_cols - 1));
        }
    return MOE_OK;
}

/* The destination: data [rows, cols/2] bytes (dtype I32, U8 or I8: the same bytes), scale
 * [rows, cols/G] of a float dtype (G = block_cols), bias optional. */
moe_status moe_i4_check_dst(const moe_weight_dst *d, const char *what)
{
    moe_status st = moe_w4_check_dst_shape(d, what);
    if (st) return st;
    if (!is_code_dtype(d->dtype))
        return moe_error(MOE_EDTYPE, "%s: destination dtype %s; this layout holds int4 nibbles",
                         what, moe_dtype_name(d->dtype));
    if (d->bias) {
        st = moe_expert_check_bias_dtype(d->bias_dtype, what);
        if (st) return st;
    }
    if (!d->scale) return moe_error(MOE_EINVAL, "%s: the scale destination is NULL", what);
    if (!moe_w4_is_float_dtype(d->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(d->scale_dtype));
    if (d->block_rows != 1 || d->block_cols < BLK || d->block_cols % BLK != 0 ||
        d->cols % d->block_cols != 0)
        return moe_error(MOE_EUNSUPPORTED, "%s: scale block [%d, %d]", what, d->block_rows,
                         d->block_cols);
    return MOE_OK;
}

/* ---- Packing and unpacking ----------------------------------------------------------- */

static void pack_scales(const moe_weight_src *s, int64_t r0, int64_t b, unsigned char *at)
{
    const int64_t g = b * BLK / s->block_cols;
    float v[NR];
    for (int n = 0; n < NR; n++)
        v[n] = r0 + n < s->rows ? moe_i4_scale_at(s, r0 + n, g) : 0.0f;
    memcpy(at, v, sizeof v);
}

static void pack_tile(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    const size_t nb = (size_t)(src[0]->cols / BLK);
    moe_w4_pack_bias(src, np, r0, tile);
    for (size_t b = 0; b < nb; b++)
        for (int p = 0; p < np; p++) {
            moe_mx_pack_unit(src[p], r0, (int64_t)b, tile + moe_i4_unit_at(np, b, p));
            pack_scales(src[p], r0, (int64_t)b, tile + moe_i4_scales_at(np, nb, b, p));
        }
}

/* Row r's scale of group b / G, once per group (at its first block). */
static void unpack_scales(const unsigned char *tile, int np, int p, size_t b, size_t n,
                          const moe_weight_dst *d, int64_t r)
{
    const size_t nb = (size_t)(d->cols / BLK), gb = (size_t)d->block_cols / BLK;
    if (b % gb != 0) return;
    float v;
    memcpy(&v, tile + moe_i4_scales_at(np, nb, b, p) + n * sizeof v, sizeof v);
    const size_t at = ((size_t)r * (nb / gb) + b / gb) * moe_w4_dtype_bytes(d->scale_dtype);
    moe_w4_store_float((unsigned char *)d->scale + at, d->scale_dtype, v);
}

/* ---- The entries: the 4-bit formats' glue with INT4's parts -------------------------- */

static const moe_w4_format int4 = {
    .check_src = check_src,
    .check_scales = check_scales,
    .check_dst = moe_i4_check_dst,
    .tile_bytes = tile_bytes,
    .pack_tile = pack_tile,
    .unit_at = moe_i4_unit_at,
    .unpack_scales = unpack_scales,
};

moe_status moe_i4_check_sources(const moe_weight_src *const *src, int np)
{
    return moe_w4_check_sources(&int4, src, np);
}

moe_status moe_i4_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    const moe_weight_src *src[2] = {gate, up};
    return moe_w4_pack(&int4, src, 2, dst);
}

moe_status moe_i4_pack_down(const moe_weight_src *down, void *dst)
{
    return moe_w4_pack(&int4, &down, 1, dst);
}

moe_status moe_i4_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up)
{
    const moe_weight_dst *dst[2] = {gate, up};
    return moe_w4_unpack(&int4, packed, dst, 2);
}

moe_status moe_i4_unpack_down(const void *packed, const moe_weight_dst *down)
{
    return moe_w4_unpack(&int4, packed, &down, 1);
}
