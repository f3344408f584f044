/* route_noaux_tc.c — moe_route_noaux_tc__ref: the reference noaux_tc rows (the definition). */
#include "kernels/ref/route_rows.h"
#include "kernels/route.h"

/* The method's steps written once (route_rows.h), here on the reference primitives: this is the
 * definition every other noaux_tc kernel must reproduce bit for bit. */
void moe_route_noaux_tc__ref(const moe_route_noaux_tc_args *args, size_t n_rows, const float *z,
                             int32_t *ids, float *w, moe_route_scratch *scratch)
{
    moe_route_noaux_tc_rows(args, moe_route_sigmoid_keys__ref, moe_route_sqrtsoftplus_keys__ref,
                            moe_route_topk__ref, n_rows, z, ids, w, scratch);
}
