/* select.h — internal: kernel selection, a pure function of (allowed caps, problem). */
#ifndef MOE_SELECT_SELECT_H
#define MOE_SELECT_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "select/kernel.h"

/* A packed weight layout chosen together with its kernel (pack function, tile, strides).
 * The GEMM families will define it; conversion kernels read the checkpoint layout as is. */
typedef struct moe_packing moe_packing;

/*
 * The outcome of a selection. Callers keep it (e.g. in a layer object); there is no global
 * "current kernel". reason is one line for `moe caps` and `explain`, naming the kernel and
 * the feature that decided, e.g.
 *   "moe_cvt_bf16_f32__avx512: avx512 allowed; preferred over moe_cvt_bf16_f32__avx2"
 *   "moe_cvt_bf16_f32__ref: moe_cvt_bf16_f32__avx2 needs avx2, which is not allowed"
 */
typedef struct moe_kernel_choice {
    const moe_kernel *kernel;   /* never NULL after MOE_OK */
    const moe_packing *packing; /* NULL: the kernel reads the unpacked (checkpoint) layout */
    uint32_t missing;           /* the MOE_FEAT_* bit that ruled out the next more preferred
                                   kernel; 0 when the family's most preferred one was chosen */
    char reason[192];
} moe_kernel_choice;

/* A conversion problem: one row. Every conversion kernel accepts any length and alignment,
 * so today n never vetoes a kernel; it is here so the call has the shape every family uses. */
typedef struct moe_cvt_problem {
    size_t n; /* elements in the row (blocks for MXFP4) */
} moe_cvt_problem;

/*
 * Chooses the conversion kernel of `family` for `problem` under `allowed` (normally
 * moe_cpu_info.allowed; tests pass made-up caps): the most preferred registered kernel whose
 * requirement `allowed` meets, falling back to the family's reference. Pure: the result
 * depends on the arguments only. MOE_EINVAL for a NULL argument or a family that is not a
 * conversion; *out is untouched on error.
 */
moe_status moe_select_cvt(moe_kernel_family family, const moe_cpu_caps *allowed,
                          const moe_cvt_problem *problem, moe_kernel_choice *out);

/* A routing problem: one router's shape. Every routing kernel accepts any row length, so
 * today the shape vetoes no kernel; it is validated, and kept for the reason and later
 * shape-specific kernels. */
typedef struct moe_route_problem {
    int n_experts; /* E, ≥ 1 */
    int top_k;     /* K, in [1, E] */
} moe_route_problem;

/*
 * Chooses the routing kernel of `family` (one of the MOE_KERNEL_FAMILY_ROUTE_* families) for
 * `problem` under `allowed`, by the same ISA ladder as moe_select_cvt. Pure. MOE_EINVAL for a
 * NULL argument, a family that is not a routing one, n_experts < 1, or top_k outside
 * [1, n_experts], naming the value; *out is untouched on error.
 */
moe_status moe_select_route(moe_kernel_family family, const moe_cpu_caps *allowed,
                            const moe_route_problem *problem, moe_kernel_choice *out);

/*
 * Why one MOE_FEAT_* feature is or is not in info->allowed, for diagnostics: "allowed",
 * "not detected on this CPU", "not compiled into this build" or "capped by MOE_ISA=<level>".
 * Writes a terminated string into buf.
 */
void moe_cpu_feature_why(const moe_cpu_info *info, uint32_t feature, char *buf, size_t size);

#endif
