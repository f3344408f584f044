/* layer_shared_gate.c — the shared expert sigmoid gate (Qwen3-Next): f32 weight, token scale. */
#include "layer/layer_shared_gate.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/math_ref.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

moe_status moe_shared_gate_make(const moe_tensor *w, int64_t hidden, float **out)
{
    float *v = moe_malloc((size_t)hidden * sizeof *v);
    if (!v)
        return moe_error(MOE_ENOMEM, "allocating the shared expert gate of %lld values",
                         (long long)hidden);
    for (int64_t i = 0; i < hidden; i++) {
        float f;
        if (w->dtype == MOE_DTYPE_F32) {
            memcpy(&f, (const char *)w->data + i * 4, 4);
        } else {
            uint16_t c;
            memcpy(&c, (const char *)w->data + i * 2, 2);
            f = w->dtype == MOE_DTYPE_BF16 ? moe_bf16_to_f32(c) : moe_f16_to_f32(c);
        }
        if (!isfinite(f)) {
            moe_free(v);
            return moe_error(MOE_EVALUE,
                             "tensor '%s' holds %g at [0, %lld]: the shared expert "
                             "gate's weights must be finite",
                             w->name, (double)f, (long long)i);
        }
        v[i] = f;
    }
    *out = v;
    return MOE_OK;
}

float moe_shared_gate_scale(const float *w, size_t hidden, const void *x, moe_dtype x_dtype)
{
    /* Eight partial sums of x_i · w_i, lane i % 8, each product rounded to f32 and then added
     * (no FMA), summed pairwise at the end: one fixed order whatever the machine. */
    float acc[MOE_SHARED_GATE_LANES] = {0};
    const bool bf16 = x_dtype == MOE_DTYPE_BF16;
    for (size_t i = 0; i < hidden; i++) {
        const float xi = bf16 ? moe_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
        const float p = xi * w[i];
        acc[i % MOE_SHARED_GATE_LANES] += p;
    }
    for (size_t span = MOE_SHARED_GATE_LANES / 2; span > 0; span /= 2)
        for (size_t j = 0; j < span; j++)
            acc[j] += acc[j + span];
    return moe_math_sigmoid(acc[0]);
}
