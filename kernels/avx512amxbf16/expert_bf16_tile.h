/* expert_bf16_tile.h — internal: the AMX-BF16 micro-kernels of the tile recipe (bf16 experts),
 * 32x16. */
#ifndef MOE_KERNELS_AVX512AMXBF16_EXPERT_BF16_TILE_H
#define MOE_KERNELS_AVX512AMXBF16_EXPERT_BF16_TILE_H

#include <stddef.h>

#include "kernels/expert.h"

/*
 * The tile recipe's gate/up and down micro-kernels on tdpbf16ps, over the "tile pairs"
 * layout: a tile of np projections (gate/up 2, down 1) and K = k is
 *
 *   offset 0            bias, np × 16 f32 (gate's 16, then up's)
 *   offset 64·np        projection p's chunk c (c < ceil(k / 32)) at 64·np + (p·C + c)·1024,
 *                       C = ceil(k / 32): 16 rows of 64 bytes, row r the pair 16c + r, dword n
 *                       = w[row n][2q] | w[row n][2q + 1] << 16 (bf16 codes), zeros past K
 *                       and past the matrix's rows
 *
 * so chunk c is tdpbf16ps's B operand as it is. Per output element (row n, token i), acc = +0
 * and for each chunk acc = tdpbf16ps(acc, x[i][32c .. 32c + 31], w_n's chunk c) (the last
 * chunk zero-padded in x and w: kernels/tile_bf16.h states the instruction's arithmetic);
 * then v = acc + bias[n] in f32; gate/up write h = bf16(act(v_gate, v_up)) rounded to
 * nearest even (moe_f32_to_bf16's bits, as the bf16 recipe), down y = v.
 *
 * Signatures of kernels/expert.h (moe_expert_gateup_ukernel, moe_expert_down_ukernel and the
 * multi-tile twins): m ≤ MOE_TILE_AMX_MR tokens, x[i] / h[i] bf16 codes (uint16_t), any
 * alignment, exactly k of them read per row; h out bf16 codes, y out f32. They need amx_bf16
 * in the allowed caps (AMX-TILE and AMX-BF16 and the OS's grant of the tile data) and leave
 * the tile state released.
 */

/* The most tokens one call takes: two A tiles of 16 rows. */
#define MOE_TILE_AMX_MR 32
/* Tokens per call of the MXFP4 set, which widens its weights to bf16: more than 32 run in blocks
 * of 32 over each run of widened chunks, widened once per call. */
#define MOE_TILE_AMX_WIDEN_MR 64

void moe_tile_amx_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid);
void moe_tile_amx_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                       size_t y_stride, size_t n_valid);
/* n_tiles consecutive tiles (tile i at tile + i · tile bytes), their outputs 16 elements
 * apart in each row; every tile but the last has 16 valid rows, the last n_valid. They run
 * tiles side by side (gate/up 2 and down 4 up to 16 tokens, down 2 above: one A load feeds
 * four tdpbf16ps) and each group's epilogue while the next group's products run: faster than
 * tile-by-tile calls at every m (bench/bench_tile_amx.c). */
void moe_tile_amx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                               size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                               size_t n_valid);
void moe_tile_amx_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                             size_t n_tiles, float *y, size_t y_stride, size_t n_valid);

#endif
