/* activations.c — activations in the recipes' types, once per forward: bf16 rounding, Q8 rows. */
#include <string.h>

#include "experts/experts.h"

/* The same rounding as moe_f32_to_bf16 (src/dtype), written as straight-line integer
 * arithmetic on every element so the compiler vectorises the loop: adding 0x7FFF plus the
 * lowest kept bit rounds the magnitude to nearest even, and a carry out of the top finite
 * value lands exactly on Inf. NaN keeps its sign and top payload bits and is quieted. */
void moe_act_round_bf16(size_t n, const float *x, uint16_t *y)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const uint32_t a = u & 0x7FFFFFFFu;
        const uint32_t rounded = (u & 0x80000000u) | (a + 0x7FFFu + ((a >> 16) & 1u));
        const uint32_t nan = u | 0x00400000u;
        y[i] = (uint16_t)((a > 0x7F800000u ? nan : rounded) >> 16);
    }
}

void moe_act_prepare(const moe_expert_group *g, size_t n, const float *x, size_t x_stride,
                     void *dst)
{
    const size_t k = (size_t)g->hidden;
    for (size_t r = 0; r < n; r++)
        g->ks->prepare_act(k, x + r * x_stride, (unsigned char *)dst + r * g->x_row_bytes);
}
