/* tile_bf16.c — one tdpbf16ps tile operation on memory operands (AMX-BF16). */
#include <immintrin.h>
#include <string.h>

#include "kernels/tile_bf16.h"

/* The palette-1 tile configuration, as LDTILECFG reads it (Intel SDM): 64 bytes. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

void moe_tile_bf16_dp__avx512amxbf16(size_t m, size_t n, size_t kp, float *c, size_t ldc,
                                     const uint16_t *a, size_t lda, const uint16_t *b, size_t ldb)
{
    tile_config cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = (uint8_t)m; /* C: m × n f32 */
    cfg.colsb[0] = (uint16_t)(4 * n);
    cfg.rows[1] = (uint8_t)m; /* A: m × kp pairs */
    cfg.colsb[1] = (uint16_t)(4 * kp);
    cfg.rows[2] = (uint8_t)kp; /* B: kp × n pairs */
    cfg.colsb[2] = (uint16_t)(4 * n);
    _tile_loadconfig(&cfg);
    _tile_loadd(0, c, (long)(ldc * sizeof *c));
    _tile_loadd(1, a, (long)(lda * sizeof *a));
    _tile_loadd(2, b, (long)(ldb * sizeof *b));
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, c, (long)(ldc * sizeof *c));
    _tile_release();
}
