/* registry.c — the table of every compiled kernel, generated from the family enumerators. */
#include <string.h>

#include "kernels/cvt.h"
#include "kernels/route.h"
#include "kernels/gate.h"
#include "kernels/expert.h"
#include "select/kernel.h"

/* Each family's lines expand to entries that store the pointer in that family's union member;
 * the enumerators' order (reference first, most preferred last) is kept. */
static const moe_kernel registry[] = {
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_CVT_BF16_F32, isa, {.cvt_bf16_f32 = name}, {.cvt_bf16_f32 = ref}},
#include "kernels/cvt_bf16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_CVT_F16_F32, isa, {.cvt_f16_f32 = name}, {.cvt_f16_f32 = ref}},
#include "kernels/cvt_f16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_CVT_E4M3_F32, isa, {.cvt_e4m3_f32 = name}, {.cvt_e4m3_f32 = ref}},
#include "kernels/cvt_e4m3_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_CVT_MXFP4_F32, isa, {.cvt_mxfp4_f32 = name}, {.cvt_mxfp4_f32 = ref}},
#include "kernels/cvt_mxfp4_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name,                                                                                        \
     MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS,                                                           \
     isa,                                                                                          \
     {.route_logit_keys = name},                                                                   \
     {.route_logit_keys = ref}},
#include "kernels/route_logit_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name,                                                                                        \
     MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS,                                                         \
     isa,                                                                                          \
     {.route_sigmoid_keys = name},                                                                 \
     {.route_sigmoid_keys = ref}},
#include "kernels/route_sigmoid_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name,                                                                                        \
     MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS,                                                    \
     isa,                                                                                          \
     {.route_sqrtsoftplus_keys = name},                                                            \
     {.route_sqrtsoftplus_keys = ref}},
#include "kernels/route_sqrtsoftplus_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_ROUTE_TOPK, isa, {.route_topk = name}, {.route_topk = ref}},
#include "kernels/route_topk.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_ROUTE_EXPSUM, isa, {.route_expsum = name}, {.route_expsum = ref}},
#include "kernels/route_expsum.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XF32_WF32, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xf32_wf32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XF32_WBF16, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xf32_wbf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XF32_WF16, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xf32_wf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XBF16_WF32, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xbf16_wf32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XBF16_WBF16, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xbf16_wbf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_GATE_XBF16_WF16, isa, {.gate = name}, {.gate = ref}},
#include "kernels/gate_xbf16_wf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_BF16_F32, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_bf16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_BF16_BF16, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_bf16_bf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_FP8_F32, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_fp8_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_FP8_BF16, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_fp8_bf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name,                                                                                        \
     MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC,                                                             \
     isa,                                                                                          \
     {.route_noaux_tc = name},                                                                     \
     {.route_noaux_tc = ref}},
#include "kernels/route_noaux_tc.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_mxfp4_q8.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_F32_F32, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_f32_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_BF16_TILE, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_bf16_tile.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_FP8_TILE, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_fp8_tile.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_mxfp4_tile.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_INT4_Q8, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_int4_q8.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, MOE_KERNEL_FAMILY_EXPERT_INT4_TILE, isa, {.expert_set = &name}, {.expert_set = &ref}},
#include "kernels/expert_int4_tile.inc"
#undef MOE_KERNEL
};

static const char *const family_names[MOE_KERNEL_FAMILY_COUNT_] = {
    [MOE_KERNEL_FAMILY_CVT_BF16_F32] = "cvt_bf16_f32",
    [MOE_KERNEL_FAMILY_CVT_F16_F32] = "cvt_f16_f32",
    [MOE_KERNEL_FAMILY_CVT_E4M3_F32] = "cvt_e4m3_f32",
    [MOE_KERNEL_FAMILY_CVT_MXFP4_F32] = "cvt_mxfp4_f32",
    [MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS] = "route_logit_keys",
    [MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS] = "route_sigmoid_keys",
    [MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS] = "route_sqrtsoftplus_keys",
    [MOE_KERNEL_FAMILY_ROUTE_TOPK] = "route_topk",
    [MOE_KERNEL_FAMILY_ROUTE_EXPSUM] = "route_expsum",
    [MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC] = "route_noaux_tc",
    [MOE_KERNEL_FAMILY_GATE_XF32_WF32] = "gate_xf32_wf32",
    [MOE_KERNEL_FAMILY_GATE_XF32_WBF16] = "gate_xf32_wbf16",
    [MOE_KERNEL_FAMILY_GATE_XF32_WF16] = "gate_xf32_wf16",
    [MOE_KERNEL_FAMILY_GATE_XBF16_WF32] = "gate_xbf16_wf32",
    [MOE_KERNEL_FAMILY_GATE_XBF16_WBF16] = "gate_xbf16_wbf16",
    [MOE_KERNEL_FAMILY_GATE_XBF16_WF16] = "gate_xbf16_wf16",
    [MOE_KERNEL_FAMILY_EXPERT_BF16_F32] = "expert_bf16_f32",
    [MOE_KERNEL_FAMILY_EXPERT_BF16_BF16] = "expert_bf16_bf16",
    [MOE_KERNEL_FAMILY_EXPERT_FP8_F32] = "expert_fp8_f32",
    [MOE_KERNEL_FAMILY_EXPERT_FP8_BF16] = "expert_fp8_bf16",
    [MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8] = "expert_mxfp4_q8",
    [MOE_KERNEL_FAMILY_EXPERT_F32_F32] = "expert_f32_f32",
    [MOE_KERNEL_FAMILY_EXPERT_BF16_TILE] = "expert_bf16_tile",
    [MOE_KERNEL_FAMILY_EXPERT_FP8_TILE] = "expert_fp8_tile",
    [MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE] = "expert_mxfp4_tile",
    [MOE_KERNEL_FAMILY_EXPERT_INT4_Q8] = "expert_int4_q8",
    [MOE_KERNEL_FAMILY_EXPERT_INT4_TILE] = "expert_int4_tile",
};

const char *moe_kernel_family_name(moe_kernel_family family)
{
    if ((unsigned)family >= MOE_KERNEL_FAMILY_COUNT_) return "invalid";
    return family_names[family];
}

const char *moe_kernel_isa_token(uint32_t isa)
{
    switch (isa) {
    case MOE_REQ_SCALAR: return "ref";
    case MOE_REQ_AVX2: return "avx2";
    case MOE_REQ_AVXVNNI: return "avxvnni";
    case MOE_REQ_AVX512: return "avx512";
    case MOE_REQ_AVX512BF16: return "avx512bf16";
    case MOE_REQ_AVX512VNNI: return "avx512vnni";
    case MOE_REQ_AVX512VBMI: return "avx512vbmi";
    case MOE_REQ_AVX512AMX: return "avx512amx";
    case MOE_REQ_AVX512AMXBF16: return "avx512amxbf16";
    }
    return NULL;
}

const moe_kernel *moe_kernel_registry(size_t *count)
{
    *count = sizeof registry / sizeof registry[0];
    return registry;
}

const moe_kernel *moe_kernel_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i].name, name) == 0) return &registry[i];
    return NULL;
}
