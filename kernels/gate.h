/* gate.h — internal: the router gate GEMM kernels (logits = x · Wᵀ + b, fused fp32 epilogue). */
#ifndef MOE_KERNELS_GATE_H
#define MOE_KERNELS_GATE_H

#include <stddef.h>
#include <stdint.h>

/*
 * logits[i][e] = Σ_h x[i][h] · W[e][h] (+ bias[e]), accumulated in fp32 from the hidden input
 * as given (f32 or bf16) and the exact stored weight values (bf16, f16 or f32, packed once at
 * creation into the kernel's layout). The epilogue adds the bias in fp32 and either stores
 * the fp32 sum or, in the bf16-logits parity mode, its round-to-nearest-even bf16 value
 * (stored widened in the f32 logits array). There is no separate cast pass.
 */
typedef struct moe_gate_args {
    size_t m;            /* token rows */
    size_t n;            /* experts E */
    size_t k;            /* hidden H */
    const void *x;       /* [m, k] f32 or bf16, x_stride elements between rows */
    size_t x_stride;
    const void *w;       /* the packed weight of the kernel's layout */
    const float *bias;   /* [n] or NULL */
    int round_bf16;      /* nonzero: bf16-logits parity mode */
    float *logits;       /* [m, n], ld floats between rows */
    size_t ld;
} moe_gate_args;

typedef void moe_gate_ukernel(const moe_gate_args *args);

#endif
