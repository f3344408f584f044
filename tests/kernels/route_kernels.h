/* route_kernels.h — kernel tests: every routing kernel of each family, from the enumerators. */
#ifndef MOE_TEST_ROUTE_KERNELS_H
#define MOE_TEST_ROUTE_KERNELS_H

#include "kernels/route.h"
#include "kernel_table.h"

static const test_kernel logit_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_logit_keys = name}},
#include "kernels/route_logit_keys.inc"
#undef MOE_KERNEL
};
static const test_kernel sigmoid_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_sigmoid_keys = name}},
#include "kernels/route_sigmoid_keys.inc"
#undef MOE_KERNEL
};
static const test_kernel ssp_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_sqrtsoftplus_keys = name}},
#include "kernels/route_sqrtsoftplus_keys.inc"
#undef MOE_KERNEL
};
static const test_kernel topk_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_topk = name}},
#include "kernels/route_topk.inc"
#undef MOE_KERNEL
};
static const test_kernel expsum_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_expsum = name}},
#include "kernels/route_expsum.inc"
#undef MOE_KERNEL
};
static const test_kernel noaux_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.route_noaux_tc = name}},
#include "kernels/route_noaux_tc.inc"
#undef MOE_KERNEL
};

#endif
