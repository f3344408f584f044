/* tile_x_chunk.h — internal: one 32-K chunk of a bf16 activation row, zeros past its end (the tile
 * recipe's reference sets). */
#ifndef MOE_KERNELS_REF_TILE_X_CHUNK_H
#define MOE_KERNELS_REF_TILE_X_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ref/expert_layout.h"

/* Chunk c of a row of k bf16 codes into out, zeros past k (nothing past x[k-1] is read). */
static inline void moe_xr_tile_x_chunk(const uint16_t *x, size_t k, size_t c,
                                       uint16_t out[MOE_XL_TILE_CHUNK])
{
    const size_t k0 = c * MOE_XL_TILE_CHUNK;
    const size_t n = k - k0 < MOE_XL_TILE_CHUNK ? k - k0 : MOE_XL_TILE_CHUNK;
    memset(out, 0, MOE_XL_TILE_CHUNK * sizeof out[0]);
    memcpy(out, x + k0, n * sizeof out[0]);
}

#endif
