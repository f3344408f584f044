/* route_topk.c — moe_route_topk__ref: the reference top-k selection over keys. */
#include "kernels/route.h"

/* k passes of "the first index holding the largest key": a strict > keeps the lower index
 * among equals, and marking the pick TAKEN (0, below every other key) removes it. */
void moe_route_topk__ref(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top)
{
    for (size_t j = 0; j < k; j++) {
        size_t best = 0;
        uint32_t best_key = key[0];
        for (size_t i = 1; i < n; i++) {
            if (key[i] > best_key) {
                best_key = key[i];
                best = i;
            }
        }
        ids[j] = (int32_t)best;
        top[j] = best_key;
        key[best] = MOE_ROUTE_KEY_TAKEN;
    }
}
