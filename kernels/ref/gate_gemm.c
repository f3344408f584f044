/* gate_gemm.c — the reference router gate kernels: plain loops, the order of kernels/gate.h. */
#include <math.h>
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/gate.h"

/*
 * The executable specification of every gate family: for each row and expert, one fmaf per
 * hidden element in increasing h from +0.0f, then the bias in one fp32 addition, then the
 * bf16 rounding of src/dtype (moe_f32_to_bf16). The packed weight is read in
 * moe_gate_packed_index's layout (kernels/gate.h), a tile's 16 experts side by side so their
 * 16 independent fmaf chains overlap. No blocking, no tricks: the AVX2 and AVX-512 kernels
 * must give these bits exactly.
 */

enum { D_F32, D_BF16, D_F16 };

/* Element i of an array of `kind` (a constant in each caller, so this folds away); x and the
 * packed weight are aligned to their element type (kernels/gate.h). */
static inline float load(const void *base, size_t i, int kind)
{
    if (kind == D_F32) return ((const float *)base)[i];
    uint16_t c = ((const uint16_t *)base)[i];
    return kind == D_BF16 ? moe_bf16_to_f32(c) : moe_f16_to_f32(c);
}

static float epilogue(float acc, const float *bias, size_t e, int round_bf16)
{
    float v = bias ? acc + bias[e] : acc;
    if (!round_bf16) return v;
    uint32_t bits = (uint32_t)moe_f32_to_bf16(v) << 16;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The logits of one row for the 16 experts of tile t: one accumulator per expert, each fed in
 * increasing h, walking the tile's rows of the packed layout chunk by chunk. */
static inline void tile_row(const moe_gate_args *a, const void *xrow, int xk, int wk, size_t t,
                            float *out)
{
    bool pairs = wk == D_BF16;
    size_t tiles = moe_gate_tiles(a->n);
    float acc[MOE_GATE_NR] = {0};
    for (size_t h0 = 0, c = 0; h0 < a->k; h0 += MOE_GATE_KC, c++) {
        size_t kc = moe_gate_chunk_k(a->k, c);
        size_t kcp = pairs ? (kc + 1) & ~(size_t)1 : kc;
        size_t tile = h0 * tiles * MOE_GATE_NR + t * MOE_GATE_NR * kcp;
        for (size_t hl = 0; hl < kc; hl++) {
            float xv = load(xrow, h0 + hl, xk);
            for (size_t el = 0; el < MOE_GATE_NR; el++) {
                size_t wi = pairs ? tile + (hl / 2) * 2 * MOE_GATE_NR + el * 2 + (hl & 1)
                                  : tile + hl * MOE_GATE_NR + el;
                acc[el] = fmaf(xv, load(a->w, wi, wk), acc[el]);
            }
        }
    }
    for (size_t el = 0; el < MOE_GATE_NR && t * MOE_GATE_NR + el < a->n; el++)
        out[el] = epilogue(acc[el], a->bias, t * MOE_GATE_NR + el, a->round_bf16);
}

static inline void gate_ref(const moe_gate_args *a, int xk, int wk)
{
    size_t x_size = xk == D_F32 ? 4 : 2;
    for (size_t i = 0; i < a->m; i++) {
        const void *xrow = (const uint8_t *)a->x + i * a->x_stride * x_size;
        for (size_t t = a->tile_begin; t < a->tile_end; t++)
            tile_row(a, xrow, xk, wk, t, a->logits + i * a->ld + t * MOE_GATE_NR);
    }
}

void moe_gate_xf32_wf32__ref(const moe_gate_args *a) { gate_ref(a, D_F32, D_F32); }
void moe_gate_xf32_wbf16__ref(const moe_gate_args *a) { gate_ref(a, D_F32, D_BF16); }
void moe_gate_xf32_wf16__ref(const moe_gate_args *a) { gate_ref(a, D_F32, D_F16); }
void moe_gate_xbf16_wf32__ref(const moe_gate_args *a) { gate_ref(a, D_BF16, D_F32); }
void moe_gate_xbf16_wbf16__ref(const moe_gate_args *a) { gate_ref(a, D_BF16, D_BF16); }
void moe_gate_xbf16_wf16__ref(const moe_gate_args *a) { gate_ref(a, D_BF16, D_F16); }
