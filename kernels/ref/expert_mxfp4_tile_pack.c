/* expert_mxfp4_tile_pack.c — MXFP4 tiles of the tile recipe: sizes, packing with validation,
 * unpacking. */
#include <string.h>

#include "core/error.h"
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_mxfp4_tile_layout.h"

/*
 * Portable C shared by every MXFP4 set of the tile recipe (kernels/ref/
 * expert_mxfp4_tile_layout.h). The sources go through the Q8 layout's checks
 * (moe_mx_check_sources), then every scale is checked to fold exactly; only then is a byte
 * written, so a rejected source leaves dst untouched. Messages name the projection.
 */

#define NR MOE_MXT_NR
#define BLK MOE_MXT_BLOCK

static const char *const proj_names[2][2] = {{"down", "down"}, {"gate", "up"}};

static size_t tile_bytes(int64_t k, int np)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K || k % BLK != 0) return 0;
    const size_t nb = (size_t)(k / BLK);
    return moe_mxt_codes_at(np, nb, nb, 0);
}

size_t moe_mxt_gateup_bytes(int64_t k) { return tile_bytes(k, 2); }
size_t moe_mxt_down_bytes(int64_t k) { return tile_bytes(k, 1); }

static const unsigned char *row_codes(const moe_weight_src *s, int64_t r)
{
    return (const unsigned char *)s->data + r * s->row_stride;
}

static const unsigned char *row_scales(const moe_weight_src *s, int64_t r)
{
    return (const unsigned char *)s->scale + r * s->scale_stride;
}

/* Every scale of the source in [MOE_TILE_MX_SCALE_MIN, MOE_TILE_MX_SCALE_MAX]. */
static moe_status check_foldable(const moe_weight_src *s, const char *what)
{
    const int64_t nb = s->cols / BLK;
    for (int64_t r = 0; r < s->rows; r++) {
        const unsigned char *sc = row_scales(s, r);
        for (int64_t b = 0; b < nb; b++)
            if (!moe_tile_mx_scale_ok(sc[b]))
                return moe_error(MOE_EVALUE,
                                 "%s: E8M0 scale %u (2^%d) at row %lld, block %lld: the tile "
                                 "recipe folds scales 2^%d..2^%d into bf16 weights exactly, "
                                 "not this one",
                                 what, (unsigned)sc[b], (int)sc[b] - 127, (long long)r,
                                 (long long)b, MOE_TILE_MX_SCALE_MIN - 127,
                                 MOE_TILE_MX_SCALE_MAX - 127);
    }
    return MOE_OK;
}

/* Block c of rows r0 .. r0 + 15 of one projection: the scales and the 256 code bytes. */
static void pack_block(const moe_weight_src *s, int64_t r0, size_t c, unsigned char *scales,
                       unsigned char *codes)
{
    memset(codes, 0, MOE_MXT_CODE_BYTES);
    for (int n = 0; n < NR; n++) {
        const int64_t r = r0 + n;
        if (r >= s->rows) {
            scales[n] = MOE_MXT_PAD_SCALE;
            continue;
        }
        scales[n] = row_scales(s, r)[c];
        /* The checkpoint's byte j holds codes 2j (low) and 2j + 1 (high): pair j of the block,
         * the byte this layout keeps too, moved to row n of line j. */
        const unsigned char *src = row_codes(s, r) + c * (BLK / 2);
        for (int j = 0; j < BLK / 2; j++)
            codes[16 * j + n] = src[j];
    }
}

static void pack_tile(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    const size_t nb = (size_t)(src[0]->cols / BLK);
    float bias[2 * NR];
    for (int p = 0; p < np; p++)
        for (int n = 0; n < NR; n++)
            bias[p * NR + n] = moe_mx_bias_at(src[p], r0 + n);
    memcpy(tile, bias, moe_mxt_bias_bytes(np));
    const size_t sc_end = moe_mxt_scales_at(np, nb, 0);
    memset(tile + sc_end, 0, moe_mxt_codes_at(np, nb, 0, 0) - sc_end);
    for (size_t c = 0; c < nb; c++)
        for (int p = 0; p < np; p++)
            pack_block(src[p], r0, c, tile + moe_mxt_scales_at(np, c, p),
                       tile + moe_mxt_codes_at(np, nb, c, p));
}

static moe_status pack(const moe_weight_src *const *src, int np, void *dst)
{
    if (!dst) return moe_error(MOE_EINVAL, "%s: the destination is NULL", proj_names[np - 1][0]);
    moe_status st = moe_mx_check_sources(src, np);
    for (int p = 0; p < np && !st; p++)
        st = check_foldable(src[p], proj_names[np - 1][p]);
    if (st) return st;
    const int64_t rows = src[0]->rows;
    const size_t tb = tile_bytes(src[0]->cols, np);
    for (int64_t t = 0; t < (rows + NR - 1) / NR; t++)
        pack_tile(src, np, t * NR, (unsigned char *)dst + (size_t)t * tb);
    return MOE_OK;
}

moe_status moe_mxt_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    const moe_weight_src *src[2] = {gate, up};
    return pack(src, 2, dst);
}

moe_status moe_mxt_pack_down(const moe_weight_src *down, void *dst) { return pack(&down, 1, dst); }

/* ---- Unpacking ----------------------------------------------------------------------- */

static void unpack_one(const unsigned char *packed, int np, int p, const moe_weight_dst *d)
{
    const size_t nb = (size_t)(d->cols / BLK), tb = tile_bytes(d->cols, np);
    unsigned char *out = d->data, *sc = d->scale;
    for (int64_t r = 0; r < d->rows; r++) {
        const unsigned char *tile = packed + (size_t)(r / NR) * tb;
        const size_t n = (size_t)(r % NR);
        unsigned char *orow = out + (size_t)r * (nb * (BLK / 2));
        for (size_t c = 0; c < nb; c++) {
            const unsigned char *codes = tile + moe_mxt_codes_at(np, nb, c, p);
            for (size_t j = 0; j < BLK / 2; j++)
                orow[c * (BLK / 2) + j] = codes[16 * j + n];
            sc[(size_t)r * nb + c] = tile[moe_mxt_scales_at(np, c, p) + n];
        }
        if (d->bias) {
            float v;
            memcpy(&v, tile + ((size_t)p * NR + n) * sizeof v, sizeof v);
            moe_mx_store_bias(d, r, v);
        }
    }
}

static moe_status unpack(const void *packed, const moe_weight_dst *const *dst, int np)
{
    if (!packed) return moe_error(MOE_EINVAL, "unpack: the packed bytes are NULL");
    for (int p = 0; p < np; p++) {
        moe_status st = moe_mx_check_dst(dst[p], proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (dst[0]->rows != dst[1]->rows || dst[0]->cols != dst[1]->cols))
        return moe_error(MOE_ESHAPE, "unpack: gate and up destinations differ in shape");
    for (int p = 0; p < np; p++)
        unpack_one(packed, np, p, dst[p]);
    return MOE_OK;
}

moe_status moe_mxt_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                 const moe_weight_dst *up)
{
    const moe_weight_dst *dst[2] = {gate, up};
    return unpack(packed, dst, 2);
}

moe_status moe_mxt_unpack_down(const void *packed, const moe_weight_dst *down)
{
    return unpack(packed, &down, 1);
}
