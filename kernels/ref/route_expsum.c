/* route_expsum.c — moe_route_expsum__ref: the reference exp-sum of a logit row. */
#include <math.h>

#include "kernels/ref/math_ref.h"
#include "kernels/route.h"

/* The 16 partial sums and the folds of route.h, spelled out on an array: this order is what
 * the AVX-512 register and the two AVX2 registers compute lane for lane. */
float moe_route_expsum__ref(size_t n, const float *z, float m)
{
    float acc[16] = {0};
    for (size_t i = 0; i < n; i++)
        if (isfinite(z[i])) acc[i % 16] += moe_math_exp(z[i] - m);
    for (size_t half = 8; half >= 1; half /= 2)
        for (size_t j = 0; j < half; j++)
            acc[j] += acc[j + half];
    return acc[0];
}
