/* expert_tile_entries.h — internal: the tile recipe's reference entries (bias, activation,
 * stores) over the includer's dot(); included by kernels/ref/expert_bf16_tile.c and
 * expert_fp8_tile.c. */
#ifndef MOE_KERNELS_REF_EXPERT_TILE_ENTRIES_H
#define MOE_KERNELS_REF_EXPERT_TILE_ENTRIES_H

/* The includer defines dot(tile, np, p, n, k, x): row n of projection p of the tile (np
 * projections) times the bf16 row x, plus the row's bias, as the recipe states it for its
 * format; the entries run it for every token and row and write h (gate/up, with the
 * activation and the bf16 rounding) or y (down). */

static void gateup_tile(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++) {
        uint16_t *hi = (uint16_t *)h + i * h_stride;
        for (size_t n = 0; n < n_valid; n++) {
            const float g = dot(tile, 2, 0, n, k, x[i]), u = dot(tile, 2, 1, n, k, x[i]);
            hi[n] = moe_f32_to_bf16(moe_xr_act(act, g, u));
        }
    }
}

static void down_tile(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++)
        for (size_t n = 0; n < n_valid; n++)
            y[i * y_stride + n] = dot(tile, 1, 0, n, k, h[i]);
}

#endif
