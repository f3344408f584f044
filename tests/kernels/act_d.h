/* act_d.h — expert kernel tests: the gate/up activation of kernels/expert.h in float64. */
#ifndef MOE_TEST_ACT_D_H
#define MOE_TEST_ACT_D_H

#include <math.h>

#include "kernels/expert.h"

static inline double sigmoid_d(double z) { return 1.0 / (1.0 + exp(-z)); }

static inline double act_d(const moe_act_params *a, double g, double u)
{
    if (a->kind != 0) {
        g = g < a->limit ? g : a->limit;
        u = u < a->limit ? u : a->limit;
        u = u > -a->limit ? u : -a->limit;
    }
    if (a->kind == 2) return g * sigmoid_d((double)a->alpha * g) * (u + 1.0);
    return g * sigmoid_d(g) * u;
}

#endif
