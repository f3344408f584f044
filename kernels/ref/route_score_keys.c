/* route_score_keys.c — moe_route_{sigmoid,sqrtsoftplus}_keys__ref: reference scores and keys. */
#include <math.h>

#include "kernels/ref/math_ref.h"
#include "kernels/route.h"

/* One element at a time through the scalar score function of math_ref.h (sigmoid, or
 * sqrt-softplus when SQRTSOFTPLUS), which the SIMD variants mirror operation for operation. */
static inline void score_keys(int sqrtsoftplus, size_t n, const float *z, const float *bias,
                              float *s, uint32_t *key)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(z[i])) {
            s[i] = 0.0f;
            key[i] = MOE_ROUTE_KEY_EXCLUDED;
            continue;
        }
        float si = sqrtsoftplus ? moe_math_sqrtsoftplus(z[i]) : moe_math_sigmoid(z[i]);
        float biased = bias ? si + bias[i] : si;
        s[i] = si;
        key[i] = isfinite(biased) ? moe_route_key_encode(biased) : MOE_ROUTE_KEY_EXCLUDED;
    }
}

void moe_route_sigmoid_keys__ref(size_t n, const float *z, const float *bias, float *s,
                                 uint32_t *key)
{
    score_keys(0, n, z, bias, s, key);
}

void moe_route_sqrtsoftplus_keys__ref(size_t n, const float *z, const float *bias, float *s,
                                      uint32_t *key)
{
    score_keys(1, n, z, bias, s, key);
}
