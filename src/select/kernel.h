/* kernel.h — internal: the kernel descriptor, kernel families and their signatures. */
#ifndef MOE_SELECT_KERNEL_H
#define MOE_SELECT_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu.h"

/*
 * A kernel family is one operation with one signature (bf16 -> f32 rows, MXFP4 block
 * decode, ...). Each family has one enumerator file, kernels/<family>.inc, that lists its
 * kernels; docs/kernels.md has the contract and how to add one.
 */
typedef enum moe_kernel_family {
    MOE_KERNEL_FAMILY_CVT_BF16_F32 = 0,
    MOE_KERNEL_FAMILY_CVT_F16_F32 = 1,
    MOE_KERNEL_FAMILY_CVT_E4M3_F32 = 2,
    MOE_KERNEL_FAMILY_CVT_MXFP4_F32 = 3,
    /* Routing primitives: signatures below, the contract in kernels/route.h. */
    MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS = 4,
    MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS = 5,
    MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS = 6,
    MOE_KERNEL_FAMILY_ROUTE_TOPK = 7,
    MOE_KERNEL_FAMILY_ROUTE_EXPSUM = 8,
    /* The router gate GEMM, one family per (input, weight) dtype pair: x f32 or bf16 times
     * weights f32, bf16 or f16. Signature moe_gate_ukernel; contract in kernels/gate.h. */
    MOE_KERNEL_FAMILY_GATE_XF32_WF32 = 9,
    MOE_KERNEL_FAMILY_GATE_XF32_WBF16 = 10,
    MOE_KERNEL_FAMILY_GATE_XF32_WF16 = 11,
    MOE_KERNEL_FAMILY_GATE_XBF16_WF32 = 12,
    MOE_KERNEL_FAMILY_GATE_XBF16_WBF16 = 13,
    MOE_KERNEL_FAMILY_GATE_XBF16_WF16 = 14,
    /* Expert MLP kernel sets, one family per (weight format, recipe): a kernel is a whole
     * moe_expert_kernels (packing + micro-kernels); contract in kernels/expert.h. */
    MOE_KERNEL_FAMILY_EXPERT_BF16_F32 = 15,
    MOE_KERNEL_FAMILY_EXPERT_BF16_BF16 = 16,
    MOE_KERNEL_FAMILY_EXPERT_FP8_F32 = 17,
    MOE_KERNEL_FAMILY_EXPERT_FP8_BF16 = 18,
    /* noaux_tc routing of whole rows (scores, groups, top-k, weights); kernels/route.h. */
    MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC = 19,
    /* Expert MLP kernel sets for MXFP4 weights, Q8 recipe (kernels/expert.h). */
    MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8 = 20,
    /* Expert MLP kernel sets for f32 weights (and f16, widened at packing), f32 recipe. */
    MOE_KERNEL_FAMILY_EXPERT_F32_F32 = 21,
    /* Expert MLP kernel sets for bf16 weights, tile recipe (tdpbf16ps's arithmetic). */
    MOE_KERNEL_FAMILY_EXPERT_BF16_TILE = 22,
    /* Expert MLP kernel sets for FP8 block weights, tile recipe. */
    MOE_KERNEL_FAMILY_EXPERT_FP8_TILE = 23,
    /* Expert MLP kernel sets for MXFP4 weights, tile recipe. */
    MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE = 24,
    /* Expert MLP kernel sets for INT4 group weights (compressed-tensors), Q8 recipe. */
    MOE_KERNEL_FAMILY_EXPERT_INT4_Q8 = 25,
    /* Expert MLP kernel sets for INT4 group weights, tile recipe. */
    MOE_KERNEL_FAMILY_EXPERT_INT4_TILE = 26,
    MOE_KERNEL_FAMILY_COUNT_
} moe_kernel_family;

/* Converts n bf16 codes to f32. Any n (0 included), any alignment; x and y do not overlap. */
typedef void moe_cvt_bf16_f32_ukernel(size_t n, const uint16_t *x, float *y);
/* Converts n IEEE half codes to f32 (same contract). */
typedef void moe_cvt_f16_f32_ukernel(size_t n, const uint16_t *x, float *y);
/* Converts n FP8 E4M3 ("fn") codes to f32 (same contract). */
typedef void moe_cvt_e4m3_f32_ukernel(size_t n, const uint8_t *x, float *y);
/* Decodes nblocks MXFP4 blocks: blocks holds 16 bytes per block (32 E2M1 codes, low nibble
 * = even element), scales one E8M0 byte per block; y receives 32 * nblocks floats. */
typedef void moe_cvt_mxfp4_f32_ukernel(size_t nblocks, const uint8_t *blocks, const uint8_t *scales,
                                       float *y);

/* The routing primitives over uint32 keys (kernels/route.h has the key encoding and the full
 * contract, bit-exactness included). Keys from finite logits, non-finite ones excluded: */
typedef void moe_route_logit_keys_ukernel(size_t n, const float *z, uint32_t *key);
/* Scores s = sigmoid(z) and keys of s + bias (bias may be NULL): */
typedef void moe_route_sigmoid_keys_ukernel(size_t n, const float *z, const float *bias, float *s,
                                            uint32_t *key);
/* Scores s = sqrt(softplus(z)) and keys of s + bias (bias may be NULL): */
typedef void moe_route_sqrtsoftplus_keys_ukernel(size_t n, const float *z, const float *bias,
                                                 float *s, uint32_t *key);
/* The k largest keys, lower index first among equals, each marked TAKEN: */
typedef void moe_route_topk_ukernel(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top);
/* Σ exp(z[i] - m) over the finite z[i], in a fixed order of additions: */
typedef float moe_route_expsum_ukernel(size_t n, const float *z, float m);
/* noaux_tc on n_rows rows of logits: ids and weights, as moe_router_forward returns them
 * (kernels/route.h has the contract; SCRATCH is the portable row algorithms' workspace): */
typedef struct moe_route_scratch moe_route_scratch;
typedef struct moe_route_noaux_tc_args {
    const float *bias;    /* [n_experts] f32 correction bias, every value finite */
    int n_experts, top_k; /* a shape moe_route_check accepts */
    int n_group, topk_group;
    moe_score_func score; /* MOE_SCORE_SIGMOID or MOE_SCORE_SQRTSOFTPLUS */
    bool renormalize;     /* norm_topk_prob */
    float scale;          /* routed_scaling_factor, finite and > 0 */
} moe_route_noaux_tc_args;
typedef void moe_route_noaux_tc_ukernel(const moe_route_noaux_tc_args *args, size_t n_rows,
                                        const float *z, int32_t *ids, float *w,
                                        moe_route_scratch *scratch);

/* The router gate GEMM over a whole [m, k] x [k, n] problem, blocking included (every gate
 * family has this signature; kernels/gate.h defines the arguments and the contract): */
typedef struct moe_gate_args moe_gate_args;
typedef void moe_gate_ukernel(const moe_gate_args *args);

/* An expert kernel set: a struct of pack functions and micro-kernels (kernels/expert.h). */
typedef struct moe_expert_kernels moe_expert_kernels;

/* One pointer per family signature; the family field says which member is live. */
typedef union moe_kernel_fn {
    moe_cvt_bf16_f32_ukernel *cvt_bf16_f32;
    moe_cvt_f16_f32_ukernel *cvt_f16_f32;
    moe_cvt_e4m3_f32_ukernel *cvt_e4m3_f32;
    moe_cvt_mxfp4_f32_ukernel *cvt_mxfp4_f32;
    moe_route_logit_keys_ukernel *route_logit_keys;
    moe_route_sigmoid_keys_ukernel *route_sigmoid_keys;
    moe_route_sqrtsoftplus_keys_ukernel *route_sqrtsoftplus_keys;
    moe_route_topk_ukernel *route_topk;
    moe_route_expsum_ukernel *route_expsum;
    moe_route_noaux_tc_ukernel *route_noaux_tc;
    moe_gate_ukernel *gate; /* every MOE_KERNEL_FAMILY_GATE_* family */
    /* every MOE_KERNEL_FAMILY_EXPERT_* family: */
    const moe_expert_kernels *expert_set;
} moe_kernel_fn;

/* What a kernel needs, as MOE_FEAT_* masks: the flags its kernels/<isa>/ folder compiles with.
 * The avx512 folders also compile with AVX2/FMA/F16C, so they need avx2 too. */
#define MOE_REQ_SCALAR 0u
#define MOE_REQ_AVX2 ((uint32_t)MOE_FEAT_AVX2)
#define MOE_REQ_AVXVNNI (MOE_REQ_AVX2 | (uint32_t)MOE_FEAT_AVX_VNNI)
#define MOE_REQ_AVX512 ((uint32_t)(MOE_FEAT_AVX2 | MOE_FEAT_AVX512))
#define MOE_REQ_AVX512BF16 (MOE_REQ_AVX512 | (uint32_t)MOE_FEAT_AVX512_BF16)
#define MOE_REQ_AVX512VNNI (MOE_REQ_AVX512 | (uint32_t)MOE_FEAT_AVX512_VNNI)
#define MOE_REQ_AVX512VBMI (MOE_REQ_AVX512 | (uint32_t)MOE_FEAT_AVX512_VBMI)
#define MOE_REQ_AVX512AMX (MOE_REQ_AVX512VNNI | (uint32_t)MOE_FEAT_AMX_INT8)
/* The AMX-BF16 folder also compiles with VBMI, which every CPU with AMX-BF16 has: its FP8 set
 * widens its codes with the VBMI set's byte tables and runs one and two tokens on that set. */
#define MOE_REQ_AVX512AMXBF16                                                                      \
    (MOE_REQ_AVX512BF16 | (uint32_t)MOE_FEAT_AVX512_VBMI | (uint32_t)MOE_FEAT_AMX_BF16)

/* A registered kernel. Registry entries are constant and live for the whole process. */
typedef struct moe_kernel {
    const char *name; /* moe_<op>_<types>__<isa>, the C function's own name */
    moe_kernel_family family;
    uint32_t isa; /* MOE_REQ_* : features the allowed caps must all have */
    moe_kernel_fn fn;
    moe_kernel_fn ref; /* the family's reference kernel (== fn for the reference) */
} moe_kernel;

/* The family's short name ("cvt_bf16_f32"), "invalid" for an unknown value. */
const char *moe_kernel_family_name(moe_kernel_family family);

/* The ISA token a requirement mask stands for ("ref", "avx2", "avxvnni", "avx512",
 * "avx512bf16", "avx512vnni", "avx512vbmi", "avx512amx", "avx512amxbf16"), or NULL for a mask
 * that is none of the MOE_REQ_* values. */
const char *moe_kernel_isa_token(uint32_t isa);

/*
 * Every kernel compiled into this build, grouped by family in family order; within a
 * family from the reference (first) to the most preferred (last), as its .inc lists them.
 * *count receives the number of entries.
 */
const moe_kernel *moe_kernel_registry(size_t *count);

/* The registered kernel with this exact name, or NULL. */
const moe_kernel *moe_kernel_find(const char *name);

/* Features this build compiled kernel folders for (from the MOE_COMPILED_* definitions). */
moe_cpu_caps moe_kernels_compiled(void);

#endif
