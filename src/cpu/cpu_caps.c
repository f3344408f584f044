/* cpu_caps.c — pure functions on capability sets: masks, names, and the MOE_ISA cap. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu.h"

static const struct {
    uint32_t bit;
    const char *name;
} feature_names[] = {
    {MOE_FEAT_AVX2, "avx2"},
    {MOE_FEAT_AVX512, "avx512"},
    {MOE_FEAT_AVX512_BF16, "avx512_bf16"},
    {MOE_FEAT_AVX512_VNNI, "avx512_vnni"},
    {MOE_FEAT_AVX512_FP16, "avx512_fp16"},
    {MOE_FEAT_AVX512_VBMI, "avx512_vbmi"},
    {MOE_FEAT_AVX_VNNI, "avx_vnni"},
    {MOE_FEAT_AMX_INT8, "amx_int8"},
    {MOE_FEAT_AMX_BF16, "amx_bf16"},
};

static const char *const level_names[] = {
    [MOE_ISA_SCALAR] = "scalar",
    [MOE_ISA_AVX2] = "avx2",
    [MOE_ISA_AVX512] = "avx512",
    [MOE_ISA_AVX512BF16] = "avx512bf16",
};
#define LEVEL_COUNT (sizeof level_names / sizeof level_names[0])

uint32_t moe_cpu_caps_mask(const moe_cpu_caps *caps)
{
    uint32_t m = 0;
    if (caps->avx2) m |= MOE_FEAT_AVX2;
    if (caps->avx512) m |= MOE_FEAT_AVX512;
    if (caps->avx512_bf16) m |= MOE_FEAT_AVX512_BF16;
    if (caps->avx512_vnni) m |= MOE_FEAT_AVX512_VNNI;
    if (caps->avx512_fp16) m |= MOE_FEAT_AVX512_FP16;
    if (caps->avx512_vbmi) m |= MOE_FEAT_AVX512_VBMI;
    if (caps->avx_vnni) m |= MOE_FEAT_AVX_VNNI;
    if (caps->amx_int8) m |= MOE_FEAT_AMX_INT8;
    if (caps->amx_bf16) m |= MOE_FEAT_AMX_BF16;
    return m;
}

moe_cpu_caps moe_cpu_caps_from_mask(uint32_t mask)
{
    moe_cpu_caps caps = {
        .avx2 = (mask & MOE_FEAT_AVX2) != 0,
        .avx512 = (mask & MOE_FEAT_AVX512) != 0,
        .avx512_bf16 = (mask & MOE_FEAT_AVX512_BF16) != 0,
        .avx512_vnni = (mask & MOE_FEAT_AVX512_VNNI) != 0,
        .avx512_fp16 = (mask & MOE_FEAT_AVX512_FP16) != 0,
        .avx512_vbmi = (mask & MOE_FEAT_AVX512_VBMI) != 0,
        .avx_vnni = (mask & MOE_FEAT_AVX_VNNI) != 0,
        .amx_int8 = (mask & MOE_FEAT_AMX_INT8) != 0,
        .amx_bf16 = (mask & MOE_FEAT_AMX_BF16) != 0,
    };
    return caps;
}

const char *moe_cpu_feature_name(uint32_t feature)
{
    for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++)
        if (feature_names[i].bit == feature) return feature_names[i].name;
    return "?";
}

void moe_cpu_mask_format(uint32_t mask, char *buf, size_t size)
{
    if (size == 0) return;
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) {
        if (!(mask & feature_names[i].bit)) continue;
        int n = snprintf(buf + used, size - used, "%s%s", used ? " " : "", feature_names[i].name);
        if (n < 0 || (size_t)n >= size - used) return; /* truncated, still terminated */
        used += (size_t)n;
    }
    if (used == 0) snprintf(buf, size, "none");
}

moe_cpu_caps moe_cpu_caps_normalize(moe_cpu_caps caps)
{
    caps.avx512 = caps.avx512 && caps.avx2;
    caps.avx512_bf16 = caps.avx512_bf16 && caps.avx512;
    caps.avx512_vnni = caps.avx512_vnni && caps.avx512;
    caps.avx512_fp16 = caps.avx512_fp16 && caps.avx512;
    caps.avx512_vbmi = caps.avx512_vbmi && caps.avx512;
    caps.avx_vnni = caps.avx_vnni && caps.avx2;
    caps.amx_int8 = caps.amx_int8 && caps.avx512;
    caps.amx_bf16 = caps.amx_bf16 && caps.avx512;
    return caps;
}

moe_cpu_caps moe_cpu_caps_intersect(const moe_cpu_caps *a, const moe_cpu_caps *b)
{
    return moe_cpu_caps_normalize(
        moe_cpu_caps_from_mask(moe_cpu_caps_mask(a) & moe_cpu_caps_mask(b)));
}

const char *moe_isa_level_name(moe_isa_level level)
{
    if ((unsigned)level >= LEVEL_COUNT) return "invalid";
    return level_names[level];
}

moe_status moe_isa_level_parse(const char *name, moe_isa_level *level)
{
    if (!name) return moe_error(MOE_EINVAL, "ISA level name is NULL");
    for (size_t i = 0; i < LEVEL_COUNT; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (moe_isa_level)i;
            return MOE_OK;
        }
    }
    return moe_error(MOE_EINVAL,
                     "MOE_ISA='%s' is not an ISA level (expected scalar, avx2, avx512 or "
                     "avx512bf16)",
                     name);
}

uint32_t moe_isa_level_mask(moe_isa_level level)
{
    switch (level) {
    case MOE_ISA_SCALAR: return 0;
    /* AVX-VNNI rides with avx2, VNNI and VBMI with avx512: integer dot products and byte
     * tables, not a new register width. */
    case MOE_ISA_AVX2: return MOE_FEAT_AVX2 | MOE_FEAT_AVX_VNNI;
    case MOE_ISA_AVX512:
        return MOE_FEAT_AVX2 | MOE_FEAT_AVX_VNNI | MOE_FEAT_AVX512 | MOE_FEAT_AVX512_VNNI |
               MOE_FEAT_AVX512_VBMI;
    case MOE_ISA_AVX512BF16: return MOE_FEAT_ALL_;
    }
    return 0;
}

moe_status moe_cpu_caps_apply_isa(const moe_cpu_caps *in, const char *isa, moe_cpu_caps *out,
                                  moe_isa_level *level)
{
    if (!in || !out) return moe_error(MOE_EINVAL, "moe_cpu_caps_apply_isa: caps argument is NULL");
    moe_isa_level lv = MOE_ISA_AVX512BF16;
    if (isa && isa[0] != '\0') {
        moe_status st = moe_isa_level_parse(isa, &lv);
        if (st != MOE_OK) return st;
    }
    *out = moe_cpu_caps_normalize(
        moe_cpu_caps_from_mask(moe_cpu_caps_mask(in) & moe_isa_level_mask(lv)));
    if (level) *level = lv;
    return MOE_OK;
}
