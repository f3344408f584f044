/* gate.h — internal: the router gate (logits = x · Wᵀ + b), packed once, kernels chosen purely. */
#ifndef MOE_GATE_GATE_H
#define MOE_GATE_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe.h"
#include "select/select.h"

/* What the gate's eligibility function looks at. */
typedef struct moe_gate_problem {
    moe_dtype weight_dtype; /* BF16, F16 or F32: the checkpoint's router weight */
    moe_dtype input_dtype;  /* F32 or BF16: the hidden states of a forward */
    moe_dtype logits_dtype; /* F32, or BF16 for the parity mode */
    bool has_bias;          /* gpt-oss router bias */
    int64_t n_experts, hidden;
} moe_gate_problem;

/* The eligibility function: a pure function of (caps, problem) returning the kernel (with the
 * packing that goes with it) and the reason. Called at creation for each input dtype, and
 * again by moe_gate_set_logits_dtype. MOE_EINVAL / MOE_EDTYPE for a problem no kernel takes. */
moe_status moe_select_gate(const moe_cpu_caps *allowed, const moe_gate_problem *problem,
                           moe_kernel_choice *out);

typedef struct moe_gate moe_gate;

/* The router tensors as the checkpoint holds them (data may be unaligned). */
typedef struct moe_gate_src {
    const void *weight; /* [n_experts, hidden] */
    moe_dtype weight_dtype;
    const void *bias; /* [n_experts] or NULL */
    moe_dtype bias_dtype;
    int64_t n_experts, hidden;
} moe_gate_src;

/* Packs the weight (and converts the bias to f32) once, and selects the kernels for f32 and
 * bf16 input under ALLOWED. logits_dtype: F32, BF16, or INVALID = not decided yet (forward
 * then uses F32, the documented resolution). */
moe_status moe_gate_create(const moe_gate_src *src, const moe_cpu_caps *allowed,
                           moe_dtype logits_dtype, moe_gate **out);
void moe_gate_destroy(moe_gate *gate);

/* Re-runs moe_select_gate with the new logits dtype (the same function creation ran). The
 * once-only / before-first-forward rule is the layer's. */
moe_status moe_gate_set_logits_dtype(moe_gate *gate, const moe_cpu_caps *allowed,
                                     moe_dtype logits_dtype);

/* logits [m, n_experts] (ld floats apart) for m rows of x (f32 or bf16, x_stride elements
 * apart): the experts of share `part` of `parts` (0 ≤ part < parts; the tiles of 16 experts
 * cut into parts contiguous shares as equal as they go), the other logits untouched; part 0 of
 * 1 is all of them. Thread-safe and allocation-free, so the layer may split rows, or a decode
 * step's experts, between threads; a logit does not depend on m, on the other rows or on the
 * share. */
void moe_gate_forward(const moe_gate *gate, size_t m, const void *x, moe_dtype x_dtype,
                      size_t x_stride, float *logits, size_t ld, size_t part, size_t parts);

/* The kernel chosen for input dtype X_DTYPE, with its reason; packed bytes; the resolved
 * logits dtype. */
const moe_kernel_choice *moe_gate_choice(const moe_gate *gate, moe_dtype x_dtype);
size_t moe_gate_packed_bytes(const moe_gate *gate);
moe_dtype moe_gate_logits_dtype(const moe_gate *gate);

#endif
