/* x_chunked.h — gate/up's x rows laid out chunk-major for the sets that read them so (tests). */
#ifndef MOE_TEST_X_CHUNKED_H
#define MOE_TEST_X_CHUNKED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expert.h"
#include "test.h"

/*
 * A set with x_chunked (kernels/expert.h, MOE_TILE_XBLOCK) reads gate/up's x rows in blocks of
 * 16 rows, chunk by chunk: in a block, chunk c of its row q (32 codes) at c · 512 + 32q codes,
 * a block ceil(k / 32) · 512 codes. x_for_set copies m rows of k bf16 codes so (the offsets
 * written from that statement, not from the library's helpers), row i at block i / 16, and
 * points xc[i] at them; for any other set, or down, xc[i] = rows[i]. Returns the buffer to free
 * (NULL when nothing was copied).
 */
static inline void *x_for_set(const moe_expert_kernels *ks, bool gateup, size_t m, size_t k,
                              const void *const *rows, const void **xc)
{
    if (!gateup || !ks->x_chunked) {
        for (size_t i = 0; i < m; i++)
            xc[i] = rows[i];
        return NULL;
    }
    const size_t chunks = (k + 31) / 32, block = chunks * 16 * 32;
    uint16_t *buf = calloc((m + 15) / 16 * block, sizeof(uint16_t));
    REQUIRE(buf);
    for (size_t i = 0; i < m; i++) {
        uint16_t *dst = buf + i / 16 * block + i % 16 * 32;
        for (size_t c = 0; c < chunks; c++)
            memcpy(dst + c * 16 * 32, (const uint16_t *)rows[i] + 32 * c,
                   (k - 32 * c < 32 ? k - 32 * c : 32) * sizeof(uint16_t));
        xc[i] = dst;
    }
    return buf;
}

#endif
