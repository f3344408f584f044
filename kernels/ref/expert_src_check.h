/* expert_src_check.h — internal: the opening checks of an expert weight source, every format. */
#ifndef MOE_KERNELS_REF_EXPERT_SRC_CHECK_H
#define MOE_KERNELS_REF_EXPERT_SRC_CHECK_H

#include <stdint.h>

#include "kernels/expert.h"

/* K above 2^40 is refused by every expert pack: sizes below it fit in 64 bits unchecked. */
#define MOE_EXPERT_MAX_K ((int64_t)1 << 40)

/* What every pack checks first, before its format's own checks: S not NULL (MOE_EINVAL), its
 * data not NULL (MOE_EINVAL), at least one row and column (MOE_ESHAPE), at most
 * MOE_EXPERT_MAX_K columns (MOE_EOVERFLOW); messages start with WHAT (the projection). */
moe_status moe_expert_src_check_shape(const moe_weight_src *s, const char *what);

#endif
