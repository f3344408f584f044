/* expert_q8_ref.h — internal: the Q8 recipe's reference loops the MXFP4 and INT4 sets share. */
#ifndef MOE_KERNELS_REF_EXPERT_Q8_REF_H
#define MOE_KERNELS_REF_EXPERT_Q8_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/expert.h"

/*
 * The executable specification of the Q8 recipe (kernels/expert.h), one output element at a
 * time: for each 32-block b, isum = Σ w·q over the block in plain int32 (w the integer weight
 * of each stored nibble by the format's table, q the activation code from the prepared row),
 * S = xs_b · ws_b (one f32 multiply: ws_b the row's weight scale of block b as an f32),
 * acc = fmaf((float)isum, S, acc) in increasing b; then + bias and, for gate/up, the
 * activation (moe_xr_act) of the two projections; h and y are f32. The SIMD sets sum the same
 * integers in other orders (exact) and repeat the f32 steps as they are, so their bits equal
 * these for every m. A format's set file names its table and scale kind and calls these from
 * its two entries.
 */

/* The weight scales of a tile, and with them its step layout. */
typedef enum moe_q8_ref_scales {
    /* MXFP4 (kernels/ref/expert_mxfp4_layout.h): one E8M0 byte e per row and block, ws =
     * 2^(e - 128), the 2^-1 undoing the table's doubled E2M1 values. */
    MOE_Q8_REF_E8M0,
    /* INT4 (kernels/ref/expert_int4_layout.h): one f32 group scale per row and block. */
    MOE_Q8_REF_F32,
} moe_q8_ref_scales;

typedef struct moe_q8_ref_weights {
    int8_t value[16]; /* the integer weight of stored nibble u */
    moe_q8_ref_scales scales;
} moe_q8_ref_weights;

void moe_q8_ref_gateup(const moe_q8_ref_weights *w, size_t m, size_t k, const void *const *x,
                       const void *tile, const moe_act_params *act, void *h, size_t h_stride,
                       size_t n_valid);
void moe_q8_ref_down(const moe_q8_ref_weights *w, size_t m, size_t k, const void *const *h,
                     const void *tile, float *y, size_t y_stride, size_t n_valid);

#endif
