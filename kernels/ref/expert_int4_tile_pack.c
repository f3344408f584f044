/* expert_int4_tile_pack.c — INT4 tiles of the tile recipe: sizes, packing with validation,
 * unpacking. */
#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_int4_tile_layout.h"

/*
 * Portable C shared by every INT4 set of the tile recipe (kernels/ref/expert_int4_tile_layout.h).
 * The sources go through the Q8 INT4 layout's checks (moe_i4_check_sources: shapes, dtypes,
 * strides, group size a multiple of 32 dividing K, finite scales) before a byte is written, so a
 * rejected source leaves dst untouched. The group scales are converted to f32 once, here.
 */

#define NR MOE_I4T_NR
#define BLK MOE_I4T_BLOCK

static const char *const proj_names[2][2] = {{"down", "down"}, {"gate", "up"}};

static size_t tile_bytes(int64_t k, int np)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K || k % BLK != 0) return 0;
    const size_t nb = (size_t)(k / BLK);
    return moe_i4t_codes_at(np, nb, nb, 0);
}

size_t moe_i4t_gateup_bytes(int64_t k) { return tile_bytes(k, 2); }
size_t moe_i4t_down_bytes(int64_t k) { return tile_bytes(k, 1); }

/* Block c of rows r0 .. r0 + 15 of one projection: the scales of its group and the 256 code
 * bytes. */
static void pack_block(const moe_weight_src *s, int64_t r0, size_t c, unsigned char *scales,
                       unsigned char *codes)
{
    const int64_t g = (int64_t)c * BLK / s->block_cols;
    float v[NR];
    memset(codes, MOE_I4T_PAD_CODE, MOE_I4T_CODE_BYTES);
    for (int n = 0; n < NR; n++) {
        const int64_t r = r0 + n;
        v[n] = r < s->rows ? moe_i4_scale_at(s, r, g) : 0.0f;
        if (r >= s->rows) continue;
        /* The checkpoint's byte j holds elements 2j (low) and 2j + 1 (high): pair j of the
         * block, kept as it is, moved to row n of line j. */
        const unsigned char *src =
            (const unsigned char *)s->data + r * s->row_stride + c * (BLK / 2);
        for (int j = 0; j < BLK / 2; j++)
            codes[16 * j + n] = src[j];
    }
    memcpy(scales, v, sizeof v);
}

static void pack_tile(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    const size_t nb = (size_t)(src[0]->cols / BLK);
    float bias[2 * NR];
    for (int p = 0; p < np; p++)
        for (int n = 0; n < NR; n++)
            bias[p * NR + n] = moe_i4_bias_at(src[p], r0 + n);
    memcpy(tile, bias, moe_i4t_bias_bytes(np));
    unsigned char head[MOE_I4T_HEAD_BYTES] = {0};
    const uint32_t gc = (uint32_t)(src[0]->block_cols / BLK);
    memcpy(head, &gc, sizeof gc);
    memcpy(tile + moe_i4t_head_at(np), head, sizeof head);
    for (size_t c = 0; c < nb; c++)
        for (int p = 0; p < np; p++)
            pack_block(src[p], r0, c, tile + moe_i4t_scales_at(np, c, p),
                       tile + moe_i4t_codes_at(np, nb, c, p));
}

static moe_status pack(const moe_weight_src *const *src, int np, void *dst)
{
    if (!dst) return moe_error(MOE_EINVAL, "%s: the destination is NULL", proj_names[np - 1][0]);
    moe_status st = moe_i4_check_sources(src, np);
    if (st) return st;
    /* One group size per tile (its head): gate's and up's must agree. */
    if (np == 2 && src[0]->block_cols != src[1]->block_cols)
        return moe_error(MOE_EUNSUPPORTED,
                         "gate's group size %d and up's %d differ; a tile of the tile recipe has "
                         "one",
                         src[0]->block_cols, src[1]->block_cols);
    const int64_t rows = src[0]->rows;
    const size_t tb = tile_bytes(src[0]->cols, np);
    for (int64_t t = 0; t < (rows + NR - 1) / NR; t++)
        pack_tile(src, np, t * NR, (unsigned char *)dst + (size_t)t * tb);
    return MOE_OK;
}

moe_status moe_i4t_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    const moe_weight_src *src[2] = {gate, up};
    return pack(src, 2, dst);
}

moe_status moe_i4t_pack_down(const moe_weight_src *down, void *dst) { return pack(&down, 1, dst); }

/* ---- Unpacking ----------------------------------------------------------------------- */

static void unpack_one(const unsigned char *packed, int np, int p, const moe_weight_dst *d)
{
    const size_t nb = (size_t)(d->cols / BLK), tb = tile_bytes(d->cols, np);
    const size_t gb = (size_t)d->block_cols / BLK, ng = nb / gb;
    const size_t sb = moe_dtype_bits(d->scale_dtype) / 8, bb = moe_dtype_bits(d->bias_dtype) / 8;
    unsigned char *out = d->data, *sc = d->scale;
    for (int64_t r = 0; r < d->rows; r++) {
        const unsigned char *tile = packed + (size_t)(r / NR) * tb;
        const size_t n = (size_t)(r % NR);
        unsigned char *orow = out + (size_t)r * (nb * (BLK / 2));
        for (size_t c = 0; c < nb; c++) {
            const unsigned char *codes = tile + moe_i4t_codes_at(np, nb, c, p);
            for (size_t j = 0; j < BLK / 2; j++)
                orow[c * (BLK / 2) + j] = codes[16 * j + n];
            if (c % gb == 0) {
                float v;
                memcpy(&v, tile + moe_i4t_scales_at(np, c, p) + n * sizeof v, sizeof v);
                moe_i4_store_float(sc + ((size_t)r * ng + c / gb) * sb, d->scale_dtype, v);
            }
        }
        if (d->bias) {
            float v;
            memcpy(&v, tile + ((size_t)p * NR + n) * sizeof v, sizeof v);
            moe_i4_store_float((unsigned char *)d->bias + (size_t)r * bb, d->bias_dtype, v);
        }
    }
}

static moe_status unpack(const void *packed, const moe_weight_dst *const *dst, int np)
{
    if (!packed) return moe_error(MOE_EINVAL, "unpack: the packed bytes are NULL");
    for (int p = 0; p < np; p++) {
        moe_status st = moe_i4_check_dst(dst[p], proj_names[np - 1][p]);
        if (st) return st;
        if ((size_t)dst[p]->block_cols / BLK != moe_i4t_group_blocks(packed, np))
            return moe_error(
                MOE_EUNSUPPORTED, "%s: destination group size %d; the tiles hold groups of %zu",
                proj_names[np - 1][p], dst[p]->block_cols, moe_i4t_group_blocks(packed, np) * BLK);
    }
    if (np == 2 && (dst[0]->rows != dst[1]->rows || dst[0]->cols != dst[1]->cols))
        return moe_error(MOE_ESHAPE, "unpack: gate and up destinations differ in shape");
    for (int p = 0; p < np; p++)
        unpack_one(packed, np, p, dst[p]);
    return MOE_OK;
}

moe_status moe_i4t_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                 const moe_weight_dst *up)
{
    const moe_weight_dst *dst[2] = {gate, up};
    return unpack(packed, dst, 2);
}

moe_status moe_i4t_unpack_down(const void *packed, const moe_weight_dst *down)
{
    return unpack(packed, &down, 1);
}
