/* gate_xbf16_wbf16.c — moe_gate_xbf16_wbf16__avx512bf16: bf16 x · bf16 weights with vdpbf16ps. */
#include <string.h>

#include "kernels/avx512/gate_avx512.h"

/*
 * Tile: mr rows × nt tiles of 16 experts, one zmm accumulator each, with the AVX-512 kernel's
 * NT(mr) = 8, 8, 6, 4, 4, 4. The packed bf16 tile row of a pair (h, h+1) is exactly the
 * vdpbf16ps operand "16 lanes × 2 bf16", and a bf16 row of x holds the same pairs in place,
 * so per pair: nt weight loads, then per row one 32-bit broadcast of (x[h], x[h+1]) and nt
 * vdpbf16ps (32 multiply-adds each, with no widening). An odd last chunk ends with the pair
 * (x[k-1], 0) against (W[k-1], 0).
 *
 * The arithmetic is kernels/gate.h's AVX512-BF16 paragraph: products exact, but h+1 added
 * before h within a pair, and denormal inputs and results flushed to zero by the instruction
 * (it ignores MXCSR). The epilogue (bias, bf16 rounding, masked stores) is the AVX-512 one;
 * the rounding uses integer operations, not vcvtneps2bf16, which would flush denormal sums.
 *
 * Speed (bench figures in docs/kernels.md): where vdpbf16ps issues at half the rate of
 * vfmadd231ps, as on the machine this was tuned on, this kernel beats the AVX-512 FMA one
 * for decode (no widening uops) and loses to it for prefill.
 */

/* KIND is unused: the shared dispatch passes one. */
MOE_GATE_INLINE void tile_dp(const moe_gate_tile *t, const int MR, const int NT, const int KIND)
{
    __m512 acc[6][8];
    __mmask16 mask[8];
    const uint16_t *x = t->x;
    const size_t ld = t->x_ld, stride = t->tile_stride;
    (void)KIND;
    moe_gate_avx512_begin(t, acc, mask, MR, NT);
    size_t pairs = t->kc / 2;
    for (size_t q = 0; q < pairs; q++) {
        __m512i w[8];
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++)
            w[j] = _mm512_loadu_si512(t->w + j * stride + q * 64);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            uint32_t xp; /* (x[h], x[h+1]); a bf16 row is only 2-byte aligned */
            memcpy(&xp, x + i * ld + 2 * q, 4);
            __m512bh xb = (__m512bh)_mm512_set1_epi32((int)xp);
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w[j], xb);
        }
    }
    if (t->kc % 2) { /* the odd last h: the pair (x[k-1], 0) against (W[k-1], 0) */
        __m512i w[8];
#pragma GCC unroll 8
        for (int j = 0; j < NT; j++)
            w[j] = _mm512_loadu_si512(t->w + j * stride + pairs * 64);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[i * ld + 2 * pairs]);
#pragma GCC unroll 8
            for (int j = 0; j < NT; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w[j], xb);
        }
    }
    moe_gate_avx512_end(t, acc, mask, MR, NT);
}

static void tile_pairs(const moe_gate_tile *t) { MOE_GATE_AVX512_DISPATCH(tile_dp, 0) }

/* x stays bf16, read in pairs in place: no widening. */
static const moe_gate_blocking xbf16_wbf16 = {.mr_max = 6,
                                              .nt_max = moe_gate_avx512_nt_max,
                                              .x_kind = MOE_GATE_X_BF16,
                                              .w_size = 2,
                                              .pairs = true,
                                              .tile = tile_pairs,
                                              .widen = NULL};

void moe_gate_xbf16_wbf16__avx512bf16(const moe_gate_args *a) { moe_gate_drive(a, &xbf16_wbf16); }
