/* cpu_query.c — moe_cpu_query: detected ∩ compiled ∩ MOE_ISA, and what this build compiled.
 *
 * It lives with the kernels, not in src/cpu, because "compiled" is a property of this
 * module: CMake defines MOE_COMPILED_<ISA> on it for each kernels/<isa>/ folder it builds. */
#include <stdlib.h>

#include "core/error.h"
#include "cpu/cpu.h"
#include "select/kernel.h"

moe_cpu_caps moe_kernels_compiled(void)
{
    moe_cpu_caps caps = {0};
#ifdef MOE_COMPILED_AVX2
    caps.avx2 = true;
#endif
#ifdef MOE_COMPILED_AVX512
    caps.avx512 = true;
#endif
#ifdef MOE_COMPILED_AVX512BF16
    caps.avx512_bf16 = true;
#endif
#ifdef MOE_COMPILED_AVX512VNNI
    caps.avx512_vnni = true;
#endif
#ifdef MOE_COMPILED_AVX512VBMI
    caps.avx512_vbmi = true;
#endif
#ifdef MOE_COMPILED_AVXVNNI
    caps.avx_vnni = true;
#endif
#ifdef MOE_COMPILED_AVX512AMX
    caps.amx_int8 = true;
#endif
#ifdef MOE_COMPILED_AVX512AMXBF16
    caps.amx_bf16 = true;
#endif
    /* No kernels/avx512fp16/ folder exists, so avx512_fp16 is never compiled. */
    return moe_cpu_caps_normalize(caps);
}

moe_status moe_cpu_query(moe_cpu_info *info)
{
    if (!info) return moe_error(MOE_EINVAL, "moe_cpu_query: argument 'info' is NULL");
    moe_cpu_info r = {0};
    moe_cpu_detect(&r.detected, r.brand);
    r.compiled = moe_kernels_compiled();
    moe_cpu_caps usable = moe_cpu_caps_intersect(&r.detected, &r.compiled);
    /* The only place libmoe reads MOE_ISA. */
    const char *isa = getenv("MOE_ISA");
    moe_status st = moe_cpu_caps_apply_isa(&usable, isa, &r.allowed, &r.cap);
    if (st != MOE_OK) return st;
    r.cap_from_env = isa != NULL && isa[0] != '\0';
    *info = r;
    return MOE_OK;
}
