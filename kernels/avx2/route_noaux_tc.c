/* route_noaux_tc.c — moe_route_noaux_tc__avx2: noaux_tc rows over the AVX2 primitives. */
#include "kernels/ref/route_rows.h"
#include "kernels/route.h"

/* No fused path: the portable steps (route_rows.h) on the AVX2 score and top-k kernels, which
 * equal the reference's bit for bit, so the rows do too. */
void moe_route_noaux_tc__avx2(const moe_route_noaux_tc_args *args, size_t n_rows, const float *z,
                              int32_t *ids, float *w, moe_route_scratch *scratch)
{
    moe_route_noaux_tc_rows(args, moe_route_sigmoid_keys__avx2, moe_route_sqrtsoftplus_keys__avx2,
                            moe_route_topk__avx2, n_rows, z, ids, w, scratch);
}
