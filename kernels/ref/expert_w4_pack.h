/* expert_w4_pack.h — internal: the pack and unpack glue the 4-bit formats (MXFP4, INT4) share. */
#ifndef MOE_KERNELS_REF_EXPERT_W4_PACK_H
#define MOE_KERNELS_REF_EXPERT_W4_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/expert.h"

/*
 * MXFP4 and INT4 tiles (kernels/ref/expert_mxfp4_layout.h, expert_int4_layout.h) hold the same
 * code units and biases and are packed the same way: every source checked (each field, then
 * the values of its scales) before the first byte is written, then tile after tile of NR rows;
 * unpacking checks every destination first. A format supplies what differs: its checks, its
 * tile size, the writing of one tile, where a unit's codes start and the reading back of a
 * unit's scales. Messages name the projection ("gate", "up", "down"); the engine prepends the
 * tensor.
 */
typedef struct moe_w4_format {
    moe_status (*check_src)(const moe_weight_src *s, const char *what);
    moe_status (*check_scales)(const moe_weight_src *s, const char *what);
    moe_status (*check_dst)(const moe_weight_dst *d, const char *what);
    size_t (*tile_bytes)(int64_t k, int np);
    void (*pack_tile)(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile);
    /* The 256 code bytes of block b, projection p. */
    size_t (*unit_at)(int np, size_t b, int p);
    /* Row r (row n of its tile) of projection p's scales of block b, into d. */
    void (*unpack_scales)(const unsigned char *tile, int np, int p, size_t b, size_t n,
                          const moe_weight_dst *d, int64_t r);
} moe_w4_format;

/* The projections' names by [np - 1][p]: down alone, or gate and up. */
extern const char *const moe_w4_proj_names[2][2];

/* Every check of the np sources: each one's fields, gate and up alike in shape, then each
 * one's scales. */
moe_status moe_w4_check_sources(const moe_w4_format *f, const moe_weight_src *const *src, int np);
moe_status moe_w4_pack(const moe_w4_format *f, const moe_weight_src *const *src, int np, void *dst);
moe_status moe_w4_unpack(const moe_w4_format *f, const void *packed,
                         const moe_weight_dst *const *dst, int np);

/* |offset| of the farthest byte, (rows - 1)·|stride|·es + (span - 1), must fit in int64. */
moe_status moe_w4_check_span(int64_t rows, int64_t stride, int64_t span, size_t es,
                             const char *what, const char *part);
/* An unpack destination's opening checks: not NULL, data, shape. */
moe_status moe_w4_check_dst_shape(const moe_weight_dst *d, const char *what);

/* Floats in a checkpoint's float dtype (f32, bf16, f16): bytes per element, read, write (exact
 * for values read from the same dtype), and source row r's bias as f32 (0 past the rows or
 * without one). */
bool moe_w4_is_float_dtype(moe_dtype d);
size_t moe_w4_dtype_bytes(moe_dtype d);
float moe_w4_load_float(const unsigned char *p, moe_dtype d);
void moe_w4_store_float(unsigned char *p, moe_dtype d, float v);
float moe_w4_bias_at(const moe_weight_src *s, int64_t r);
/* Destination row r's bias. */
void moe_w4_store_bias(const moe_weight_dst *d, int64_t r, float v);

/* A tile's biases: np × NR f32, rows r0.. of each source (0 past the edge). */
void moe_w4_pack_bias(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile);

#endif
