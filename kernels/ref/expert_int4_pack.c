/* expert_int4_pack.c — INT4 expert tiles: sizes, packing with validation, unpacking. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_int4_layout.h"

/*
 * Portable C shared by every INT4 kernel set (kernels/ref/expert_int4_layout.h). The code units
 * are MXFP4's (moe_mx_pack_unit); the group scales are read in the checkpoint's dtype, checked
 * finite and written as f32, once per 32-block. Everything is checked before the first byte is
 * written; messages name the projection ("gate", "up", "down"), the engine prepends the tensor.
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK

static const char *const proj_names[2][2] = {{"down", "down"}, {"gate", "up"}};

/* ---- Sizes --------------------------------------------------------------------------- */

static size_t tile_bytes(int64_t k, int np)
{
    if (k < 1 || k > MOE_MX_MAX_K || k % BLK != 0) return 0;
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

static bool is_float_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_F32 || d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F16;
}

static size_t dtype_bytes(moe_dtype d) { return moe_dtype_bits(d) / 8; }

static float load_float(const unsigned char *p, moe_dtype d)
{
    if (d == MOE_DTYPE_F32) {
        float f;
        memcpy(&f, p, sizeof f);
        return f;
    }
    uint16_t c;
    memcpy(&c, p, sizeof c);
    return d == MOE_DTYPE_BF16 ? moe_bf16_to_f32(c) : moe_f16_to_f32(c);
}

void moe_i4_store_float(unsigned char *p, moe_dtype d, float v)
{
    if (d == MOE_DTYPE_F32) {
        memcpy(p, &v, sizeof v);
        return;
    }
    uint16_t c = d == MOE_DTYPE_BF16 ? moe_f32_to_bf16(v) : moe_f32_to_f16(v);
    memcpy(p, &c, sizeof c);
}

/* The scale of row r (< rows) for column group g. */
float moe_i4_scale_at(const moe_weight_src *s, int64_t r, int64_t g)
{
    const size_t es = dtype_bytes(s->scale_dtype);
    return load_float((const unsigned char *)s->scale + (r * s->scale_stride + g) * (int64_t)es,
                      s->scale_dtype);
}

float moe_i4_bias_at(const moe_weight_src *s, int64_t r)
{
    if (!s->bias || r >= s->rows) return 0.0f;
    const size_t es = dtype_bytes(s->bias_dtype);
    return load_float((const unsigned char *)s->bias + r * s->bias_stride * (int64_t)es,
                      s->bias_dtype);
}

/* ---- Validation ---------------------------------------------------------------------- */

static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

/* |offset| of the farthest byte, (rows - 1)·|stride|·es + (span - 1), must fit in int64. */
static moe_status check_span(int64_t rows, int64_t stride, int64_t span, size_t es,
                             const char *what, const char *part)
{
    int64_t a, b;
    if (stride == INT64_MIN || __builtin_mul_overflow(abs64(stride), rows - 1, &a) ||
        __builtin_mul_overflow(a, (int64_t)es, &b) || __builtin_add_overflow(b, span, &a))
        return moe_error(MOE_EOVERFLOW, "%s: the %s stride %lld over %lld rows overflows 64 bits",
                         what, part, (long long)stride, (long long)rows);
    return MOE_OK;
}

static moe_status check_src(const moe_weight_src *s, const char *what)
{
    if (!s) return moe_error(MOE_EINVAL, "%s: the weight source is NULL", what);
    if (!s->data) return moe_error(MOE_EINVAL, "%s: the weight data is NULL", what);
    if (s->rows < 1 || s->cols < 1)
        return moe_error(MOE_ESHAPE, "%s: shape [%lld, %lld] has no elements", what,
                         (long long)s->rows, (long long)s->cols);
    if (s->cols > MOE_MX_MAX_K)
        return moe_error(MOE_EOVERFLOW, "%s: %lld columns exceed the kernels' limit of 2^40", what,
                         (long long)s->cols);
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
    if (!is_float_dtype(s->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(s->scale_dtype));
    if (s->block_rows != 1 || s->block_cols < BLK || s->block_cols % BLK != 0)
        return moe_error(MOE_EUNSUPPORTED,
                         "%s: scale block [%d, %d]; INT4 groups are [1, G], G a multiple of 32",
                         what, s->block_rows, s->block_cols);
    if (s->cols % s->block_cols != 0)
        return moe_error(MOE_ESHAPE, "%s: group size %d does not divide %lld columns", what,
                         s->block_cols, (long long)s->cols);
    if (s->bias && !is_float_dtype(s->bias_dtype))
        return moe_error(MOE_EDTYPE, "%s: bias dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(s->bias_dtype));
    moe_status st = check_span(s->rows, s->row_stride, s->cols / 2, 1, what, "weight row");
    if (!st)
        st = check_span(s->rows, s->scale_stride, s->cols / s->block_cols,
                        dtype_bytes(s->scale_dtype), what, "scale row");
    if (!st && s->bias)
        st = check_span(s->rows, s->bias_stride, 1, dtype_bytes(s->bias_dtype), what, "bias");
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

moe_status moe_i4_check_sources(const moe_weight_src *const *src, int np)
{
    for (int p = 0; p < np; p++) {
        moe_status st = check_src(src[p], proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (src[0]->rows != src[1]->rows || src[0]->cols != src[1]->cols))
        return moe_error(MOE_ESHAPE, "gate [%lld, %lld] and up [%lld, %lld] differ in shape",
                         (long long)src[0]->rows, (long long)src[0]->cols, (long long)src[1]->rows,
                         (long long)src[1]->cols);
    for (int p = 0; p < np; p++) {
        moe_status st = check_scales(src[p], proj_names[np - 1][p]);
        if (st) return st;
    }
    return MOE_OK;
}

/* ---- Packing ------------------------------------------------------------------------- */

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
    float bias[2 * NR];
    for (int p = 0; p < np; p++)
        for (int n = 0; n < NR; n++)
            bias[p * NR + n] = moe_i4_bias_at(src[p], r0 + n);
    memcpy(tile, bias, moe_mx_bias_bytes(np));
    for (size_t b = 0; b < nb; b++)
        for (int p = 0; p < np; p++) {
            moe_mx_pack_unit(src[p], r0, (int64_t)b, tile + moe_i4_unit_at(np, b, p));
            pack_scales(src[p], r0, (int64_t)b, tile + moe_i4_scales_at(np, nb, b, p));
        }
}

static moe_status pack(const moe_weight_src *const *src, int np, void *dst)
{
    if (!dst) return moe_error(MOE_EINVAL, "%s: the destination is NULL", proj_names[np - 1][0]);
    moe_status st = moe_i4_check_sources(src, np);
    if (st) return st;
    const int64_t rows = src[0]->rows;
    const size_t tb = tile_bytes(src[0]->cols, np);
    for (int64_t t = 0; t < (rows + NR - 1) / NR; t++)
        pack_tile(src, np, t * NR, (unsigned char *)dst + (size_t)t * tb);
    return MOE_OK;
}

moe_status moe_i4_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    const moe_weight_src *src[2] = {gate, up};
    return pack(src, 2, dst);
}

moe_status moe_i4_pack_down(const moe_weight_src *down, void *dst) { return pack(&down, 1, dst); }

/* ---- Unpacking ----------------------------------------------------------------------- */

/* The destination: data [rows, cols/2] bytes (dtype I32, U8 or I8: the same bytes), scale
 * [rows, cols/G] of a float dtype (G = block_cols), bias optional. */
moe_status moe_i4_check_dst(const moe_weight_dst *d, const char *what)
{
    if (!d || !d->data) return moe_error(MOE_EINVAL, "%s: the destination is NULL", what);
    if (d->rows < 1 || d->cols < 1 || d->cols > MOE_MX_MAX_K || d->cols % BLK != 0)
        return moe_error(MOE_ESHAPE, "%s: destination shape [%lld, %lld]", what, (long long)d->rows,
                         (long long)d->cols);
    if (!is_code_dtype(d->dtype))
        return moe_error(MOE_EDTYPE, "%s: destination dtype %s; this layout holds int4 nibbles",
                         what, moe_dtype_name(d->dtype));
    if (d->bias && !is_float_dtype(d->bias_dtype))
        return moe_error(MOE_EDTYPE, "%s: bias dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(d->bias_dtype));
    if (!d->scale) return moe_error(MOE_EINVAL, "%s: the scale destination is NULL", what);
    if (!is_float_dtype(d->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(d->scale_dtype));
    if (d->block_rows != 1 || d->block_cols < BLK || d->block_cols % BLK != 0 ||
        d->cols % d->block_cols != 0)
        return moe_error(MOE_EUNSUPPORTED, "%s: scale block [%d, %d]", what, d->block_rows,
                         d->block_cols);
    return MOE_OK;
}

static void unpack_one(const unsigned char *packed, int np, int p, const moe_weight_dst *d)
{
    const size_t nb = (size_t)(d->cols / BLK), tb = tile_bytes(d->cols, np);
    const size_t gb = (size_t)d->block_cols / BLK, ng = nb / gb, sb = dtype_bytes(d->scale_dtype);
    unsigned char *out = d->data, *sc = d->scale;
    for (int64_t r = 0; r < d->rows; r++) {
        const unsigned char *tile = packed + (size_t)(r / NR) * tb;
        const size_t n = (size_t)(r % NR);
        unsigned char *orow = out + (size_t)r * (nb * 16);
        for (size_t b = 0; b < nb; b++) {
            const unsigned char *unit = tile + moe_i4_unit_at(np, b, p);
            for (size_t i = 0; i < 16; i++) {
                unsigned char c[2];
                for (size_t j = 0; j < 2; j++) {
                    const size_t k = 2 * i + j;
                    const unsigned char byte = unit[moe_mx_code_byte(n, k)];
                    c[j] = moe_mx_code_high(k) ? byte >> 4 : byte & 0x0F;
                }
                orow[b * 16 + i] = (unsigned char)(c[0] | c[1] << 4);
            }
            if (b % gb == 0) {
                float v;
                memcpy(&v, tile + moe_i4_scales_at(np, nb, b, p) + n * sizeof v, sizeof v);
                moe_i4_store_float(sc + ((size_t)r * ng + b / gb) * sb, d->scale_dtype, v);
            }
        }
        if (d->bias) {
            float v;
            memcpy(&v, tile + ((size_t)p * NR + n) * sizeof v, sizeof v);
            moe_i4_store_float((unsigned char *)d->bias + (size_t)r * dtype_bytes(d->bias_dtype),
                               d->bias_dtype, v);
        }
    }
}

static moe_status unpack(const void *packed, const moe_weight_dst *const *dst, int np)
{
    if (!packed) return moe_error(MOE_EINVAL, "unpack: the packed bytes are NULL");
    for (int p = 0; p < np; p++) {
        moe_status st = moe_i4_check_dst(dst[p], proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (dst[0]->rows != dst[1]->rows || dst[0]->cols != dst[1]->cols))
        return moe_error(MOE_ESHAPE, "unpack: gate and up destinations differ in shape");
    for (int p = 0; p < np; p++)
        unpack_one(packed, np, p, dst[p]);
    return MOE_OK;
}

moe_status moe_i4_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up)
{
    const moe_weight_dst *dst[2] = {gate, up};
    return unpack(packed, dst, 2);
}

moe_status moe_i4_unpack_down(const void *packed, const moe_weight_dst *down)
{
    return unpack(packed, &down, 1);
}
