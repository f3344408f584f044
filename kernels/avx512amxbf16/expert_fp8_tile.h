/* expert_fp8_tile.h — internal: the AMX-BF16 micro-kernels of the tile recipe for FP8 (E4M3,
 * 128 × 128 block scales) experts, 32x16. */
#ifndef MOE_KERNELS_AVX512AMXBF16_EXPERT_FP8_TILE_H
#define MOE_KERNELS_AVX512AMXBF16_EXPERT_FP8_TILE_H

#include <stddef.h>

#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/expert.h"

/*
 * The tile recipe's gate/up and down micro-kernels on tdpbf16ps for FP8 experts, over the FP8
 * pairs layout (kernels/ref/expert_layout.h, moe_xl_fp8p_pack_*): a tile of np projections
 * (gate/up 2, down 1) and K = k is the bias (np × 16 f32), the scales (for each 128-K block b
 * and projection p one f32 s''_b = scale · 2^8, padded to 64 bytes), then the E4M3 codes, for
 * each k-pair q and projection p 32 bytes (byte 2n row n at k = 2q, byte 2n + 1 at 2q + 1).
 *
 * Per output element (row n, token i), with w'' = e4m3(code) · 2^-8 as bf16 (exact):
 *
 *   acc = +0
 *   for each 128-K block b:
 *       C = +0; for each 32-K chunk c of b (the last chunk of K zero-padded in x and w''):
 *           C = tdpbf16ps(C, x[i] chunk c, w''_n chunk c)   (kernels/tile_bf16.h)
 *       acc = fmaf(C, s''_b, acc)                             (default MXCSR)
 *   v = acc + bias[n];  gate/up: h = bf16(act(v_gate, v_up)) (nearest even);  down: y = v
 *
 * Signatures of kernels/expert.h as moe_tile_amx_gateup / _down (kernels/avx512amxbf16/
 * expert_bf16_tile.h): m ≤ MOE_TILE_AMX_FP8_MR tokens, x[i] / h[i] bf16 codes, any alignment,
 * exactly k read per row; h out bf16 codes, y out f32; n_tiles consecutive tiles in the
 * multi-tile entries (tile i at tile + i · moe_xl_fp8_{gateup,down}_bytes(k)), their outputs
 * 16 elements apart in each row, every tile but the last with 16 valid rows. They need
 * amx_bf16 in the allowed caps, run with MXCSR at its defaults and leave the tile state
 * released.
 */

/* The most tokens one call takes: past 32, blocks of 32 run over each 128-K block of codes,
 * widened once per call. */
#define MOE_TILE_AMX_FP8_MR 64

void moe_tile_amx_fp8_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                             const moe_act_params *act, void *h, size_t h_stride, size_t n_valid);
void moe_tile_amx_fp8_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                           size_t y_stride, size_t n_valid);
void moe_tile_amx_fp8_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                                   size_t n_tiles, const moe_act_params *act, void *h,
                                   size_t h_stride, size_t n_valid);
void moe_tile_amx_fp8_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                                 size_t n_tiles, float *y, size_t y_stride, size_t n_valid);

#endif
