/* gate_blocking.h — internal: the loop nest every SIMD router gate kernel shares (BLIS style). */
#ifndef MOE_KERNELS_GATE_BLOCKING_H
#define MOE_KERNELS_GATE_BLOCKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cvt.h"
#include "kernels/gate.h"

/*
 * Portable C, included by the kernels/<isa>/gate_*.c files (BLIS style: the framework here,
 * the register tiles there). A SIMD gate kernel is this loop nest plus one tile function:
 *
 *   for each chunk of KC hidden elements (the packed bytes are chunk-major, so the weight
 *   streams front to back once per row block, and a chunk — E × KC weights, 128 KiB for
 *   E = 256 in bf16 — stays in L2 while the row blocks reuse it):
 *     for each block of up to MR rows (m split into blocks as equal as possible):
 *       x is read in place (f32 rows; bf16 rows in pairs for vdpbf16ps), or — bf16 x for an
 *       FMA kernel — widened to f32 once for the chunk into a buffer on the stack;
 *       for each group of up to NT(mr) tiles of 16 experts (of the call's tile range):
 *         tile function: mr × 16·nt accumulators in registers, loaded from the logits (zero
 *         in the first chunk), one FMA per weight in increasing h with x[row][h] broadcast
 *         from its row, stored back (the epilogue in the last chunk).
 *
 * Decode (m ≤ MR) is one row block: the weight is read once, at memory speed, while a tile
 * function with few rows takes many tiles (AVX-512: 8 for one row) so that enough independent
 * FMA chains hide the latency. Prefill reuses each chunk from L2 across all row blocks, with
 * tiles of many accumulators (AVX-512: 6 rows × 4 tiles) to keep the FMA units busy. The
 * per-element order is kernels/gate.h's whatever mr, nt or m are: a row's logits are the same
 * bits in any batch.
 */

#define MOE_GATE_MR_MAX 6 /* rows a tile function may be given; the widening buffer's size */

/* One call of a tile function. */
typedef struct moe_gate_tile {
    size_t mr;          /* rows, 1 .. the kernel's MR */
    size_t nt;          /* tiles of 16 experts, 1 .. the kernel's NT(mr) */
    size_t kc;          /* hidden elements in this chunk */
    const void *x;      /* row 0 of x for this chunk: f32, or bf16 for the pairs kernel */
    size_t x_ld;        /* elements from one row of x to the next */
    const uint8_t *w;   /* the group's first tile in this chunk */
    size_t tile_stride; /* bytes from one tile to the next */
    float *c;           /* logits of row 0 at the group's first expert */
    size_t ldc;         /* floats between rows of c */
    size_t n_valid;     /* experts of the group that exist: in (16 (nt - 1), 16 nt] */
    const float *bias;  /* the bias at the group's first expert, or NULL */
    bool first;         /* the first chunk: start from +0 instead of c */
    bool last;          /* the last chunk: bias, rounding, final store */
    int round_bf16;
} moe_gate_tile;

typedef void moe_gate_tile_fn(const moe_gate_tile *t);

/* How x reaches the tile function. */
typedef enum moe_gate_x_kind {
    MOE_GATE_X_F32 = 0,      /* f32 rows, read in place */
    MOE_GATE_X_BF16_F32 = 1, /* bf16 rows widened (exactly) into an f32 buffer per chunk */
    MOE_GATE_X_BF16 = 2      /* bf16 rows read in place, in pairs (vdpbf16ps) */
} moe_gate_x_kind;

/* What one SIMD kernel is made of. */
typedef struct moe_gate_blocking {
    size_t mr_max;         /* ≤ MOE_GATE_MR_MAX */
    const uint8_t *nt_max; /* nt_max[mr]: tiles per call for mr rows (index 0 unused) */
    moe_gate_x_kind x_kind;
    size_t w_size; /* bytes per packed weight */
    bool pairs;    /* the bf16 layout (h pairs) */
    moe_gate_tile_fn *tile;
    moe_cvt_bf16_f32_ukernel *widen; /* MOE_GATE_X_BF16_F32: the ISA's bf16 -> f32 rows */
} moe_gate_blocking;

/* Widens rows [i0, i0 + mr) of a bf16 x, hidden [h0, h0 + kc), into buf ([mr][KC] f32) with
 * the ISA's bf16 -> f32 conversion kernel (kernels/cvt.h: exact), once per chunk and row
 * block, so the tile function broadcasts floats as it does for f32 x. */
static inline const float *moe_gate_widen(const moe_gate_args *a, moe_cvt_bf16_f32_ukernel *cvt,
                                          size_t i0, size_t mr, size_t h0, size_t kc, float *buf)
{
    const uint16_t *x = (const uint16_t *)a->x + i0 * a->x_stride + h0;
    for (size_t i = 0; i < mr; i++)
        cvt(kc, x + i * a->x_stride, buf + i * MOE_GATE_KC);
    return buf;
}

/* Runs the whole problem a through kernel b (the loop nest above). */
static inline void moe_gate_drive(const moe_gate_args *a, const moe_gate_blocking *b)
{
    if (a->m == 0 || a->tile_begin >= a->tile_end) return;
    _Alignas(64) float widened[MOE_GATE_MR_MAX * MOE_GATE_KC];
    size_t tiles = moe_gate_tiles(a->n);
    size_t nblocks = (a->m + b->mr_max - 1) / b->mr_max;
    size_t nchunks = (a->k + MOE_GATE_KC - 1) / MOE_GATE_KC;
    size_t x_size = b->x_kind == MOE_GATE_X_F32 ? 4 : 2;
    for (size_t c = 0; c < nchunks; c++) {
        size_t h0 = c * MOE_GATE_KC, kc = moe_gate_chunk_k(a->k, c);
        size_t kcp = b->pairs ? (kc + 1) & ~(size_t)1 : kc;
        const uint8_t *wc = (const uint8_t *)a->w + h0 * tiles * MOE_GATE_NR * b->w_size;
        moe_gate_tile t = {.kc = kc,
                           .tile_stride = MOE_GATE_NR * kcp * b->w_size,
                           .ldc = a->ld,
                           .first = c == 0,
                           .last = c + 1 == nchunks,
                           .round_bf16 = a->round_bf16};
        for (size_t blk = 0; blk < nblocks; blk++) {
            size_t i0 = blk * a->m / nblocks, i1 = (blk + 1) * a->m / nblocks;
            t.mr = i1 - i0;
            if (b->x_kind == MOE_GATE_X_BF16_F32) {
                t.x = moe_gate_widen(a, b->widen, i0, t.mr, h0, kc, widened);
                t.x_ld = MOE_GATE_KC;
            } else {
                t.x = (const uint8_t *)a->x + (i0 * a->x_stride + h0) * x_size;
                t.x_ld = a->x_stride;
            }
            size_t ntm = b->nt_max[t.mr];
            for (size_t t0 = a->tile_begin; t0 < a->tile_end; t0 += ntm) {
                size_t e0 = t0 * MOE_GATE_NR;
                t.nt = a->tile_end - t0 < ntm ? a->tile_end - t0 : ntm;
                t.n_valid = a->n - e0 < t.nt * MOE_GATE_NR ? a->n - e0 : t.nt * MOE_GATE_NR;
                t.w = wc + t0 * t.tile_stride;
                t.c = a->logits + i0 * a->ld + e0;
                t.bias = a->bias ? a->bias + e0 : NULL;
                b->tile(&t);
            }
        }
    }
}

/* The mask of the lanes of tile j (16 lanes) that hold existing experts. */
static inline uint32_t moe_gate_lane_mask(size_t n_valid, size_t j)
{
    size_t lo = j * MOE_GATE_NR;
    size_t nv = n_valid > lo ? n_valid - lo : 0;
    return nv >= MOE_GATE_NR ? 0xFFFFu : (1u << nv) - 1u;
}

#endif
