/* tile_bf16.h — internal: one tdpbf16ps (AMX-BF16) tile operation, its portable reference and the
 * instruction. */
#ifndef MOE_KERNELS_TILE_BF16_H
#define MOE_KERNELS_TILE_BF16_H

#include <stddef.h>
#include <stdint.h>

/*
 * tdpbf16ps C += A·B on tiles, element by element (docs/kernels.md, "The tile unit's bf16
 * arithmetic (tdpbf16ps)", has the manual's statement and the experiment that confirms it on
 * the development machine). A is m rows of 2·kp bf16 codes (kp pairs per row); B is kp rows, row k
 * holding for each column n the pair (b[k][2n], b[k][2n+1]) that meets A's pair k; C is m × n
 * f32. For every element (i, j), with x the A pair codes and w the B pair codes of column j:
 *
 *   e = 0, o = 0                                  (+0, not C)
 *   for k = 0 .. kp-1:
 *     e = FMA(x[2k],   w[2k],   e)                (even products: one chain)
 *     o = FMA(x[2k+1], w[2k+1], o)                (odd products: a second chain)
 *   C[i][j] = ADD(DAZ(C[i][j]), ADD(e, o))
 *
 * - bf16 operands are read with DAZ (a denormal code is a zero of its sign), C too.
 * - FMA is one fused multiply-add: the product is exact, never rounded or overflowed alone;
 *   the sum is rounded once to nearest even, then flushed (FTZ): a result whose magnitude
 *   after rounding to 24 significant bits with unbounded exponent is below 2^-126 becomes a
 *   zero of its sign. (So an exact result in [2^-126 - 2^-150, 2^-126 - 2^-151) is 0 here,
 *   where a C fmaf, which rounds to the denormal grid first, gives 2^-126.) ADD likewise; its
 *   operands are normal or zero, so its sum never needs that distinction.
 * - NaN: an operation with a NaN operand returns the first NaN, quieted, in the order
 *   (multiplicand from A, multiplicand from B, accumulator) for FMA and (left, right) for
 *   ADD: C before the products' sum, e before o. Inf·0, Inf - Inf give the default NaN
 *   0xFFC00000. MXCSR is neither read nor written.
 *
 * The order of the two chains over k, the sum e + o, and C last are fixed by the instruction:
 * a dot product longer than 16 pairs is a chain of instructions, C taking each one's sum, so
 * its bits depend on where K is cut into instructions.
 */

/* The largest tile: 16 rows of 64 bytes (16 f32, 16 bf16 pairs). */
#define MOE_TILE_BF16_ROWS 16
#define MOE_TILE_BF16_PAIRS 16

/* One element: DAZ(c) + the sum above over kp pairs (x[2k], x[2k+1]) · (w[2k], w[2k+1]);
 * kp ≤ MOE_TILE_BF16_PAIRS. Portable C; expects MXCSR's defaults (round to nearest, DAZ and
 * FTZ off), as the other references do. */
float moe_tile_bf16_dot_ref(float c, const uint16_t *x, const uint16_t *w, size_t kp);

/* One tile operation, m ≤ 16 rows, n ≤ 16 columns, kp ≤ 16 pairs: c[i·ldc + j] (f32) takes
 * moe_tile_bf16_dot_ref of A row i (a + i·lda, 2·kp codes) and B column j (the pairs
 * b[k·ldb + 2j], b[k·ldb + 2j + 1]). Strides in elements. */
void moe_tile_bf16_dp_ref(size_t m, size_t n, size_t kp, float *c, size_t ldc, const uint16_t *a,
                          size_t lda, const uint16_t *b, size_t ldb);

#ifdef MOE_COMPILED_AVX512AMXBF16
/* The same with the instruction: configures the tiles (palette 1), loads C, A and B, runs one
 * tdpbf16ps, stores C and releases the tiles. Needs amx_bf16 in the allowed caps (the CPU's
 * AMX-TILE and AMX-BF16 and the OS's grant of the tile data). */
void moe_tile_bf16_dp__avx512amxbf16(size_t m, size_t n, size_t kp, float *c, size_t ldc,
                                     const uint16_t *a, size_t lda, const uint16_t *b, size_t ldb);
#endif

#endif
