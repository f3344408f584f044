/* route_sigmoid_keys.c — moe_route_sigmoid_keys__ref: reference sigmoid scores and keys. */
#include <math.h>

#include "kernels/ref/math_ref.h"
#include "kernels/route.h"

/* One element at a time through the scalar sigmoid of math_ref.h, which the SIMD variants
 * mirror operation for operation. */
void moe_route_sigmoid_keys__ref(size_t n, const float *z, const float *bias, float *s,
                                 uint32_t *key)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(z[i])) {
            s[i] = 0.0f;
            key[i] = MOE_ROUTE_KEY_EXCLUDED;
            continue;
        }
        float si = moe_math_sigmoid(z[i]);
        float biased = bias ? si + bias[i] : si;
        s[i] = si;
        key[i] = isfinite(biased) ? moe_route_key_encode(biased) : MOE_ROUTE_KEY_EXCLUDED;
    }
}
