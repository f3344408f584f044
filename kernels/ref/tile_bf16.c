/* tile_bf16.c — the portable reference of one tdpbf16ps tile operation, bit for bit. */
#include "kernels/ref/fma_ftz.h"
#include "kernels/tile_bf16.h"

float moe_tile_bf16_dot_ref(float c, const uint16_t *x, const uint16_t *w, size_t kp)
{
    float even = 0.0f, odd = 0.0f;
    for (size_t k = 0; k < kp; k++) {
        even = moe_xr_fma_ftz(moe_xr_bf16(x[2 * k]), moe_xr_bf16(w[2 * k]), even);
        odd = moe_xr_fma_ftz(moe_xr_bf16(x[2 * k + 1]), moe_xr_bf16(w[2 * k + 1]), odd);
    }
    return moe_xr_add_ftz(moe_xr_daz(c), moe_xr_add_ftz(even, odd));
}

void moe_tile_bf16_dp_ref(size_t m, size_t n, size_t kp, float *c, size_t ldc, const uint16_t *a,
                          size_t lda, const uint16_t *b, size_t ldb)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            uint16_t w[2 * MOE_TILE_BF16_PAIRS];
            for (size_t k = 0; k < kp; k++) {
                w[2 * k] = b[k * ldb + 2 * j];
                w[2 * k + 1] = b[k * ldb + 2 * j + 1];
            }
            c[i * ldc + j] = moe_tile_bf16_dot_ref(c[i * ldc + j], a + i * lda, w, kp);
        }
}
