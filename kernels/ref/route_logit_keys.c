/* route_logit_keys.c — moe_route_logit_keys__ref: the reference logit -> key kernel. */
#include <math.h>

#include "kernels/route.h"

void moe_route_logit_keys__ref(size_t n, const float *z, uint32_t *key)
{
    for (size_t i = 0; i < n; i++)
        key[i] = isfinite(z[i]) ? moe_route_key_encode(z[i]) : MOE_ROUTE_KEY_EXCLUDED;
}
