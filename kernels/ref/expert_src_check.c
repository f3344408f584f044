/* expert_src_check.c — the opening checks of an expert weight source, every format. */
#include "kernels/ref/expert_src_check.h"

#include "core/error.h"

moe_status moe_expert_src_check_shape(const moe_weight_src *s, const char *what)
{
    if (!s) return moe_error(MOE_EINVAL, "%s: the weight source is NULL", what);
    if (!s->data) return moe_error(MOE_EINVAL, "%s: the weight data is NULL", what);
    if (s->rows < 1 || s->cols < 1)
        return moe_error(MOE_ESHAPE, "%s: shape [%lld, %lld] has no elements", what,
                         (long long)s->rows, (long long)s->cols);
    if (s->cols > MOE_EXPERT_MAX_K)
        return moe_error(MOE_EOVERFLOW, "%s: %lld columns exceed the kernels' limit of 2^40", what,
                         (long long)s->cols);
    return MOE_OK;
}

moe_status moe_expert_check_bias_dtype(moe_dtype d, const char *what)
{
    if (d != MOE_DTYPE_BF16 && d != MOE_DTYPE_F16 && d != MOE_DTYPE_F32)
        return moe_error(MOE_EDTYPE, "%s: bias dtype %s is not bf16, f16 or f32", what,
                         moe_dtype_name(d));
    return MOE_OK;
}
