/* expert_w4_pack.c — the pack and unpack glue the 4-bit formats (MXFP4, INT4) share. */
#include "kernels/ref/expert_w4_pack.h"

#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_mxfp4_layout.h"

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK

const char *const moe_w4_proj_names[2][2] = {{"down", "down"}, {"gate", "up"}};

/* ---- Floats in a checkpoint's dtype ------------------------------------------------------ */

bool moe_w4_is_float_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_F32 || d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F16;
}

size_t moe_w4_dtype_bytes(moe_dtype d) { return moe_dtype_bits(d) / 8; }

float moe_w4_load_float(const unsigned char *p, moe_dtype d)
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

void moe_w4_store_float(unsigned char *p, moe_dtype d, float v)
{
    if (d == MOE_DTYPE_F32) {
        memcpy(p, &v, sizeof v);
        return;
    }
    uint16_t c = d == MOE_DTYPE_BF16 ? moe_f32_to_bf16(v) : moe_f32_to_f16(v);
    memcpy(p, &c, sizeof c);
}

float moe_w4_bias_at(const moe_weight_src *s, int64_t r)
{
    if (!s->bias || r >= s->rows) return 0.0f;
    const size_t es = moe_w4_dtype_bytes(s->bias_dtype);
    return moe_w4_load_float((const unsigned char *)s->bias + r * s->bias_stride * (int64_t)es,
                             s->bias_dtype);
}

void moe_w4_store_bias(const moe_weight_dst *d, int64_t r, float v)
{
    moe_w4_store_float((unsigned char *)d->bias + (size_t)r * moe_w4_dtype_bytes(d->bias_dtype),
                       d->bias_dtype, v);
}

/* ---- Checks ------------------------------------------------------------------------------ */

static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

moe_status moe_w4_check_span(int64_t rows, int64_t stride, int64_t span, size_t es,
                             const char *what, const char *part)
{
    int64_t a, b;
    if (stride == INT64_MIN || __builtin_mul_overflow(abs64(stride), rows - 1, &a) ||
        __builtin_mul_overflow(a, (int64_t)es, &b) || __builtin_add_overflow(b, span, &a))
        return moe_error(MOE_EOVERFLOW, "%s: the %s stride %lld over %lld rows overflows 64 bits",
                         what, part, (long long)stride, (long long)rows);
    return MOE_OK;
}

moe_status moe_w4_check_dst_shape(const moe_weight_dst *d, const char *what)
{
    if (!d || !d->data) return moe_error(MOE_EINVAL, "%s: the destination is NULL", what);
    if (d->rows < 1 || d->cols < 1 || d->cols > MOE_EXPERT_MAX_K || d->cols % BLK != 0)
        return moe_error(MOE_ESHAPE, "%s: destination shape [%lld, %lld]", what, (long long)d->rows,
                         (long long)d->cols);
    return MOE_OK;
}

moe_status moe_w4_check_sources(const moe_w4_format *f, const moe_weight_src *const *src, int np)
{
    for (int p = 0; p < np; p++) {
        moe_status st = f->check_src(src[p], moe_w4_proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (src[0]->rows != src[1]->rows || src[0]->cols != src[1]->cols))
        return moe_error(MOE_ESHAPE, "gate [%lld, %lld] and up [%lld, %lld] differ in shape",
                         (long long)src[0]->rows, (long long)src[0]->cols, (long long)src[1]->rows,
                         (long long)src[1]->cols);
    for (int p = 0; p < np; p++) {
        moe_status st = f->check_scales(src[p], moe_w4_proj_names[np - 1][p]);
        if (st) return st;
    }
    return MOE_OK;
}

/* ---- Packing ----------------------------------------------------------------------------- */

void moe_w4_pack_bias(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    float bias[2 * NR];
    for (int p = 0; p < np; p++)
        for (int n = 0; n < NR; n++)
            bias[p * NR + n] = moe_w4_bias_at(src[p], r0 + n);
    memcpy(tile, bias, moe_mx_bias_bytes(np));
}

moe_status moe_w4_pack(const moe_w4_format *f, const moe_weight_src *const *src, int np, void *dst)
{
    if (!dst)
        return moe_error(MOE_EINVAL, "%s: the destination is NULL", moe_w4_proj_names[np - 1][0]);
    moe_status st = moe_w4_check_sources(f, src, np);
    if (st) return st;
    const int64_t rows = src[0]->rows;
    const size_t tb = f->tile_bytes(src[0]->cols, np);
    for (int64_t t = 0; t < (rows + NR - 1) / NR; t++)
        f->pack_tile(src, np, t * NR, (unsigned char *)dst + (size_t)t * tb);
    return MOE_OK;
}

/* ---- Unpacking --------------------------------------------------------------------------- */

/* Row n's 16 code bytes of a unit, in the checkpoint's order (element 2i low in byte i). */
static void unpack_codes(const unsigned char *unit, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < 16; i++) {
        unsigned char c[2];
        for (size_t j = 0; j < 2; j++) {
            const size_t k = 2 * i + j;
            const unsigned char byte = unit[moe_mx_code_byte(n, k)];
            c[j] = moe_mx_code_high(k) ? byte >> 4 : byte & 0x0F;
        }
        out[i] = (unsigned char)(c[0] | c[1] << 4);
    }
}

static void unpack_one(const moe_w4_format *f, const unsigned char *packed, int np, int p,
                       const moe_weight_dst *d)
{
    const size_t nb = (size_t)(d->cols / BLK), tb = f->tile_bytes(d->cols, np);
    unsigned char *out = d->data;
    for (int64_t r = 0; r < d->rows; r++) {
        const unsigned char *tile = packed + (size_t)(r / NR) * tb;
        const size_t n = (size_t)(r % NR);
        unsigned char *orow = out + (size_t)r * (nb * 16);
        for (size_t b = 0; b < nb; b++) {
            unpack_codes(tile + f->unit_at(np, b, p), n, orow + b * 16);
            f->unpack_scales(tile, np, p, b, n, d, r);
        }
        if (d->bias) {
            float v;
            memcpy(&v, tile + ((size_t)p * NR + n) * sizeof v, sizeof v);
            moe_w4_store_bias(d, r, v);
        }
    }
}

moe_status moe_w4_unpack(const moe_w4_format *f, const void *packed,
                         const moe_weight_dst *const *dst, int np)
{
    if (!packed) return moe_error(MOE_EINVAL, "unpack: the packed bytes are NULL");
    for (int p = 0; p < np; p++) {
        moe_status st = f->check_dst(dst[p], moe_w4_proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (dst[0]->rows != dst[1]->rows || dst[0]->cols != dst[1]->cols))
        return moe_error(MOE_ESHAPE, "unpack: gate and up destinations differ in shape");
    for (int p = 0; p < np; p++)
        unpack_one(f, packed, np, p, dst[p]);
    return MOE_OK;
}
