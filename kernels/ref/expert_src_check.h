/* expert_src_check.h — internal: the opening checks of an expert weight source, every format. */
#ifndef MOE_KERNELS_REF_EXPERT_SRC_CHECK_H
#define MOE_KERNELS_REF_EXPERT_SRC_CHECK_H

#include <stdint.h>

#include "kernels/expert.h"

/* What every pack checks first, before its format's own checks: S not NULL (MOE_EINVAL), its
 * data not NULL (MOE_EINVAL), at least one row and column (MOE_ESHAPE), at most
 * MOE_EXPERT_MAX_K columns (MOE_EOVERFLOW); messages start with WHAT (the projection). */
moe_status moe_expert_src_check_shape(const moe_weight_src *s, const char *what);

/* A bias (source or destination) of bf16, f16 or f32; else MOE_EDTYPE naming WHAT. */
moe_status moe_expert_check_bias_dtype(moe_dtype d, const char *what);

#endif
