/* expert_fp8_tile.h — internal: the AVX-512 FP8 tile set's gate/up on chunk-major x rows. */
#ifndef MOE_KERNELS_AVX512_EXPERT_FP8_TILE_H
#define MOE_KERNELS_AVX512_EXPERT_FP8_TILE_H

#include <stddef.h>

#include "kernels/expert.h"

/* moe_expert_fp8_tile_12x16__avx512's gateup (m ≤ 12), bit for bit, on x rows laid out
 * chunk-major (kernels/expert.h, MOE_TILE_XBLOCK): the AMX-BF16 FP8 set hands its one- and
 * two-token calls to it. */
void moe_tile_avx512_fp8_gateup_xchunked(size_t m, size_t k, const void *const *x, const void *tile,
                                         const moe_act_params *act, void *h, size_t h_stride,
                                         size_t n_valid);

#endif
