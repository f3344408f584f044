/* gate.h — internal: the router gate GEMM kernels (logits = x · Wᵀ + b, fused fp32 epilogue). */
#ifndef MOE_KERNELS_GATE_H
#define MOE_KERNELS_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "select/select.h" /* moe_gate_ukernel (kernel.h) and moe_packing */

/*
 * logits[i][e] = Σ_h x[i][h] · W[e][h] (+ bias[e]), accumulated in fp32 from the hidden input
 * as given (f32 or bf16) and the exact stored weight values (bf16, f16 or f32, packed once at
 * creation into the family's layout, below). The epilogue adds the bias in fp32 and either
 * stores the fp32 sum or, in the bf16-logits parity mode, its round-to-nearest-even bf16 value
 * (stored widened in the f32 logits array). There is no separate cast pass.
 *
 * Families: one per (input, weight) dtype pair, MOE_KERNEL_FAMILY_GATE_X<in>_W<w>, each with
 * its enumerator kernels/gate_x<in>_w<w>.inc (reference first). Every kernel takes any m
 * (0 included), any n ≥ 1 and k ≥ 1, any x_stride ≥ k and ld ≥ n; x aligned to its element
 * type; it computes the experts of the tiles [tile_begin, tile_end) (tiles of NR = 16, below;
 * 0 ≤ tile_begin ≤ tile_end ≤ ceil(n / 16)), reads x, w and bias only where they exist and
 * writes logits[i][16·tile_begin .. min(n, 16·tile_end)) only (rows ld floats apart, nothing
 * in between). It may store partial sums in those logits elements before the final values.
 * No allocation, no state: any number of threads may call a kernel at once on disjoint logits
 * rows or disjoint tile ranges (a decode step's few rows split over threads by experts).
 *
 * The order of operations, the same in every kernel except the AVX512-BF16 one:
 *   acc = +0.0f;  for h = 0, 1, ..., k-1:  acc = fmaf(x[i][h], W[e][h], acc);
 *   v = bias ? acc + bias[e] : acc;   logits[i][e] = round_bf16 ? rne_bf16(v) : v.
 * One fused multiply-add per weight, sequential in h, one rounding per step: so the reference,
 * AVX2 and AVX-512 kernels give the same bits for every input (NaN payloads aside), and a
 * row's logits never depend on m, on the other rows or on how a kernel blocks the work. A
 * bf16 x or weight is widened exactly first. Kernels that split h into chunks store the fp32
 * partial sum and reload it, which changes nothing; they never feed padding through the
 * accumulator (an fma with 0·0 would turn an underflowed -0 into +0).
 *
 * The AVX512-BF16 kernel (x bf16 and weights bf16 only) uses vdpbf16ps, which for each pair
 * (h, h+1) does acc += x[h+1]·W[e][h+1], then acc += x[h]·W[e][h] (the SDM's order; nothing
 * here depends on it): the products of two bf16 are exact in fp32, so only the order within
 * a pair differs from the sequence above. But the instruction treats denormal inputs (bf16 x
 * and weights, and the fp32 accumulator) as zero and flushes denormal results to zero,
 * whatever MXCSR says. Its logits stay within the tolerance of the float64 sum,
 * |err| ≤ 1e-5 · Σ_h |x_h·W_h|, unless that sum is below 1.2e-33 (a flushed result) or a term
 * with a denormal factor (below 1.2e-38) weighs 1e-5 of it (its other factor beyond 1e33):
 * no real router. Its logits are the same bits for a row whatever m is, but not the
 * reference's bits.
 *
 * rne_bf16(v): round to nearest, ties to even, to bf16 (subnormals rounded, not flushed; NaN
 * quieted with its sign and top payload bits: exactly moe_f32_to_bf16 of src/dtype/dtype.h),
 * returned as the f32 whose upper half is that bf16.
 */
struct moe_gate_args {
    size_t m;          /* token rows */
    size_t n;          /* experts E */
    size_t k;          /* hidden H */
    const void *x;     /* [m, k] f32 or bf16 (the family's), x_stride elements between rows */
    size_t x_stride;   /* ≥ k */
    const void *w;     /* the packed weight of the family's layout */
    const float *bias; /* [n] or NULL */
    int round_bf16;    /* nonzero: bf16-logits parity mode */
    float *logits;     /* [m, n], ld floats between rows */
    size_t ld;         /* ≥ n */
    size_t tile_begin; /* the tiles of 16 experts computed: [tile_begin, tile_end) */
    size_t tile_end;
};

/*
 * The packed layout (one per weight dtype, shared by every kernel that reads that dtype).
 * Experts are grouped in tiles of NR = 16 (a tile is one AVX-512 vector of logits, two AVX2
 * ones; the last tile is zero-padded); the hidden dimension is cut into chunks of KC = 256
 * (the last one shorter; E × KC weights stay in L2 while a prefill's row blocks reuse them:
 * 128 KiB for E = 256 in bf16), and the bytes are chunk-major, so a kernel that works through
 * the chunks in order streams the whole weight once, front to back:
 *
 *   | chunk 0: tile 0 | tile 1 | ... | chunk 1: tile 0 | tile 1 | ... | last chunk: ... |
 *
 * f32 and f16 tiles hold kc rows of 16 weights, one row per h (a kernel broadcasts x[h] and
 * multiplies one vector):
 *
 *   tile (kc × 16):  W[e0][h0]   W[e0+1][h0]   ...  W[e0+15][h0]
 *                    W[e0][h0+1] W[e0+1][h0+1] ...  W[e0+15][h0+1]   ...
 *
 * bf16 tiles hold pairs (h, h+1) next to each other for every expert, which is the operand
 * layout of vdpbf16ps; one 64-byte row is 16 experts × 2 h, and an FMA kernel gets the two
 * f32 vectors from it with one shift (h) and one mask (h+1). An odd last chunk gets one zero
 * column:
 *
 *   tile (kc/2 × 32):  W[e0][h0] W[e0][h0+1]  W[e0+1][h0] W[e0+1][h0+1] ... W[e0+15][h0+1]
 *                      W[e0][h0+2] W[e0][h0+3] ...
 *
 * The packed weight keeps the checkpoint's 16-bit (or 32-bit) values bit for bit: nothing is
 * converted, and bf16 / f16 weights stay 2 bytes each, so a decode step reads E × H × 2 bytes.
 * Packed bytes: ceil(E/16) × 16 × H × size (bf16: H rounded up to even).
 */
#define MOE_GATE_NR 16
#define MOE_GATE_KC 256

/* Tiles of NR experts for n experts. */
static inline size_t moe_gate_tiles(size_t n) { return (n + MOE_GATE_NR - 1) / MOE_GATE_NR; }

/* The hidden elements in chunk c (c < ceil(k / KC)). */
static inline size_t moe_gate_chunk_k(size_t k, size_t c)
{
    size_t rest = k - c * MOE_GATE_KC;
    return rest < MOE_GATE_KC ? rest : MOE_GATE_KC;
}

/* Where W[e][h] sits in the packed layout of n experts × k hidden, in elements; pairs is true
 * for the bf16 layout. Packing and unpacking use it; the reference kernels walk the same
 * formula a tile row at a time. */
static inline size_t moe_gate_packed_index(size_t n, size_t k, bool pairs, size_t e, size_t h)
{
    size_t tiles = moe_gate_tiles(n);
    size_t c = h / MOE_GATE_KC, hl = h % MOE_GATE_KC;
    size_t kc = moe_gate_chunk_k(k, c);
    size_t kcp = pairs ? (kc + 1) & ~(size_t)1 : kc;
    size_t t = e / MOE_GATE_NR, el = e % MOE_GATE_NR;
    size_t tile = c * MOE_GATE_KC * tiles * MOE_GATE_NR + t * MOE_GATE_NR * kcp;
    if (pairs) return tile + (hl / 2) * 2 * MOE_GATE_NR + el * 2 + (hl & 1);
    return tile + hl * MOE_GATE_NR + el;
}

/* The three layouts, with their bytes / pack / unpack (kernels/ref/gate_pack.c). */
extern const moe_packing moe_gate_packing_f32;
extern const moe_packing moe_gate_packing_bf16;
extern const moe_packing moe_gate_packing_f16;

/* The kernels, from their enumerators. */
#define MOE_KERNEL(name, isa, ref) moe_gate_ukernel name;
#include "kernels/gate_xf32_wf32.inc"
#include "kernels/gate_xf32_wbf16.inc"
#include "kernels/gate_xf32_wf16.inc"
#include "kernels/gate_xbf16_wf32.inc"
#include "kernels/gate_xbf16_wbf16.inc"
#include "kernels/gate_xbf16_wf16.inc"
#undef MOE_KERNEL

#endif
