/* select.h — internal: kernel selection, a pure function of (allowed caps, problem). */
#ifndef MOE_SELECT_SELECT_H
#define MOE_SELECT_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "select/kernel.h"
#include "kernels/expert.h"

/*
 * A packed weight layout chosen together with its kernel: how one row-major [rows, cols]
 * checkpoint matrix becomes the bytes the kernel reads, and back. Families whose weight is one
 * matrix use it (the router gate: every kernel of a gate family reads its family's layout;
 * kernels/gate.h draws them). Conversion kernels read the checkpoint layout as is (NULL).
 */
typedef struct moe_packing moe_packing;
struct moe_packing {
    const char *name; /* for explain: the element type and the tile, e.g. "bf16 16-row tiles..." */
    moe_dtype dtype;  /* the element type the packed bytes keep (the source's: nothing converts) */
    /* Bytes of the packed [rows, cols] matrix, with checked arithmetic: MOE_EOVERFLOW naming
     * the shape if it does not fit in size_t; MOE_EINVAL for rows or cols below 1. */
    moe_status (*bytes)(int64_t rows, int64_t cols, size_t *out);
    /* Packs src (row-major [rows, cols] of `dtype`, any alignment) into dst (bytes() long,
     * 64-byte aligned). MOE_EVALUE naming the row and column of a NaN or Inf, which no router
     * weight may hold; dst is then unspecified. */
    moe_status (*pack)(const void *src, int64_t rows, int64_t cols, void *dst);
    /* Rebuilds the row-major [rows, cols] matrix of `dtype` from packed bytes, bit for bit. */
    void (*unpack)(const void *packed, int64_t rows, int64_t cols, void *dst);
};

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
 * The ISA ladder every selection ends with, for entry points that live outside select.c
 * (moe_select_gate): among `family`'s registered kernels, the most preferred one the
 * normalized `allowed` can run, with the reason and the decisive missing feature; packing
 * NULL (the caller sets it). Pure. MOE_EUNSUPPORTED if no kernel of the family can run; *out
 * is untouched on error. Callers validate the family and the problem first.
 */
moe_status moe_select_isa_ladder(moe_kernel_family family, const moe_cpu_caps *allowed,
                                 moe_kernel_choice *out);

/* An expert MLP group's problem: what moe_select_experts looks at. */
typedef struct moe_expert_problem {
    int format;             /* moe_weight_format: MOE_EXPERT_FMT_BF16, _FP8_BLOCK, _MXFP4, _F32
                               or _F16, or _INT4_GROUP (I32 / U8 / I8 nibbles, BF16, F16 or
                               F32 group scales, H and I multiples of 32, recipe Q8 as MXFP4) */
    moe_dtype weight_dtype; /* BF16 (format BF16), F8_E4M3 (FP8_BLOCK), F4_E2M1 (MXFP4; the
                               U8 / I8 labels of packed codes are accepted), F32 (F32), F16
                               (F16) */
    moe_dtype scale_dtype;  /* FP8_BLOCK: F32, BF16, F8_E8M0 or U8; MXFP4: F8_E8M0 or U8;
                               ignored for BF16 */
    int64_t hidden;         /* H ≥ 1 (MXFP4: a multiple of 32) */
    int64_t intermediate;   /* I ≥ 1 (shared experts: already × n_shared; MXFP4: × 32) */
    int activation;         /* moe_activation: 0, 1 or 2 */
    bool has_bias;          /* gpt-oss expert biases (every kernel set takes them) */
    /* requested: F32 (the default, 0), BF16 or TILE for bf16 / FP8 weights. MXFP4 weights have
     * two recipes, Q8 and TILE: F32 (no preference) or Q8 select Q8, TILE selects TILE unless
     * mx_scales_unfoldable (then Q8, the reason saying why), BF16 is refused. F32 and F16
     * weights have one recipe, F32: a BF16 or TILE request resolves to it (the reason says
     * so), Q8 is refused. */
    moe_expert_recipe recipe;
    /* MXFP4: some E8M0 scale of the group lies outside [MOE_TILE_MX_SCALE_MIN,
     * MOE_TILE_MX_SCALE_MAX] (kernels/expert.h), so the tile recipe cannot widen its weights
     * to bf16 exactly (the caller looked at the scales; the tile packing refuses them too). */
    bool mx_scales_unfoldable;
} moe_expert_problem;

/* The outcome: the kernel set (with its packing) and why. */
typedef struct moe_expert_choice {
    const moe_expert_kernels *set; /* never NULL after MOE_OK */
    const moe_kernel *kernel;      /* its registry entry (name, family, isa, reference) */
    moe_expert_recipe recipe;      /* set->recipe */
    uint32_t missing;              /* as in moe_kernel_choice */
    char reason[320];              /* moe_kernel_choice's reason, then the recipe */
} moe_expert_choice;

/*
 * The eligibility function of the expert GEMMs: a pure function of (allowed caps, problem)
 * returning the kernel set, whose pack functions define the packed layout, and the reason.
 * bf16 and FP8 weights: the recipe is the problem's (F32 unless BF16 is asked for: on the
 * machines measured so far vdpbf16ps does half the flops of fp32 FMA per cycle, and the F32
 * recipe gives the same bits on every ISA). MXFP4 weights: the recipe is Q8 unless TILE is
 * asked for, whatever the CPU: the int8 dot products are exact, so the VNNI (vpdpbusd), AVX-512 and
 * AVX2 (vpmaddubsw) sets and the portable reference give the same bits, and the reason names the
 * instruction that runs it. The ISA ladder of the (format, recipe) family then picks the
 * set; the recipe never depends on the batch. A BF16 request on a CPU without AVX512-BF16
 * gets the reference set, and the reason says so.
 * The TILE recipe (bf16, FP8 and MXFP4 weights; MXFP4 only where every block scale folds
 * into bf16 exactly, else Q8 as above) is tdpbf16ps's arithmetic: the AMX-BF16 set where amx_bf16
 * is allowed, else the AVX-512, AVX2 or portable sets, which give its bits, the reason naming which
 * arithmetic runs ("tdpbf16ps tiles", or the tile unit's arithmetic as two FMA chains). MOE_EINVAL
 * for NULL arguments, shapes below 1, an unknown format, activation or recipe; MOE_EUNSUPPORTED for
 * bf16-format weights that are not BF16 (F16, F32), a BF16 request for MXFP4, or a Q8 request for
 * anything else; MOE_EDTYPE for a weight or scale dtype the format cannot have; MOE_ESHAPE for
 * MXFP4 shapes that are not multiples of 32; MOE_EOVERFLOW when a tile of this shape does not fit
 * in size_t. *out is untouched on error.
 */
moe_status moe_select_experts(const moe_cpu_caps *allowed, const moe_expert_problem *problem,
                              moe_expert_choice *out);

/*
 * Why one MOE_FEAT_* feature is or is not in info->allowed, for diagnostics: "allowed",
 * "not detected on this CPU", "not compiled into this build" or "capped by MOE_ISA=<level>".
 * Writes a terminated string into buf.
 */
void moe_cpu_feature_why(const moe_cpu_info *info, uint32_t feature, char *buf, size_t size);

#endif
