/* expert_tile_entries.h — internal: the AVX-512 tile sets' entries (bias, activation, stores) over
 * the includer's dots(); included by kernels/avx512/expert_bf16_tile.c and expert_fp8_tile.c. */
#ifndef MOE_KERNELS_AVX512_EXPERT_TILE_ENTRIES_H
#define MOE_KERNELS_AVX512_EXPERT_TILE_ENTRIES_H

/* The includer defines dots(M, np, k, x, tile, tot): the totals over K of the tile's np
 * projections for M ≤ MR_TILE tokens, as the recipe states them (bf16 pairs, or FP8 codes
 * widened to bf16 with the block scales applied); the entries below add the bias, run the
 * activation (gate/up) and store the tile's n_valid rows, the same for both formats. */

INLINE void gateup_m(const size_t M, size_t k, const void *const *xv, const unsigned char *tile,
                     const moe_act_params *act, uint16_t *h, size_t hs, size_t n_valid)
{
    const uint16_t *x[MR_TILE];
    __m512 tot[MR_TILE][2];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = xv[i];
    dots(M, 2, k, x, tile, tot);
    const __m512 bg = _mm512_loadu_ps(tile), bu = _mm512_loadu_ps(tile + 64);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const __m512 v = act16(act, _mm512_add_ps(tot[i][0], bg), _mm512_add_ps(tot[i][1], bu));
        _mm256_mask_storeu_epi16(h + i * hs, mask, to_bf16(v));
    }
}

INLINE void down_m(const size_t M, size_t k, const void *const *hv, const unsigned char *tile,
                   float *y, size_t ys, size_t n_valid)
{
    const uint16_t *x[MR_TILE];
    __m512 tot[MR_TILE][2];
    UNROLL
    for (size_t i = 0; i < M; i++)
        x[i] = hv[i];
    dots(M, 1, k, x, tile, tot);
    const __m512 b = _mm512_loadu_ps(tile);
    const __mmask16 mask = rows_mask(n_valid);
    UNROLL
    for (size_t i = 0; i < M; i++)
        _mm512_mask_storeu_ps(y + i * ys, mask, _mm512_add_ps(tot[i][0], b));
}

static void gateup_tile(size_t m, size_t k, const void *const *x, const void *tile,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    DISPATCH12(gateup_m, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down_tile(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                      size_t y_stride, size_t n_valid)
{
    DISPATCH12(down_m, m, k, h, tile, y, y_stride, n_valid);
}

#endif
