/* layer_shared_gate.h — internal: the shared expert's sigmoid gate (Qwen3-Next, Qwen3.5-MoE). */
#ifndef MOE_LAYER_LAYER_SHARED_GATE_H
#define MOE_LAYER_LAYER_SHARED_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "moe.h"

/* The partial sums of the gate's dot product (docs/layer.md, "The shared expert gate"). */
#define MOE_SHARED_GATE_LANES 8

/* The gate's weight W [1, H] (F32, BF16 or F16) widened exactly to f32 into *OUT (moe_free);
 * a non-finite value is MOE_EVALUE naming the tensor and the index. */
moe_status moe_shared_gate_make(const moe_tensor *w, int64_t hidden, float **out);

/* sigmoid(x · w) of one input row X (HIDDEN values of X_DTYPE, F32 or BF16, bf16 widened
 * exactly) in f32: the products rounded to f32 and added in MOE_SHARED_GATE_LANES partial
 * sums (element i into sum i % 8), the sums added pairwise (0+4, 1+5, ...; then 0+2, 1+3;
 * then 0+1), the sigmoid of kernels/ref/math_ref.h. The same bits on every machine. */
float moe_shared_gate_scale(const float *w, size_t hidden, const void *x, moe_dtype x_dtype);

#endif
