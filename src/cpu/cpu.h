/* cpu.h — internal: CPU feature detection, feature bits, and the pure MOE_ISA cap. */
#ifndef MOE_CPU_CPU_H
#define MOE_CPU_CPU_H

#include <stdint.h>

#include "moe.h"

/*
 * The same features as moe_cpu_caps, as bits, so a kernel can state what it needs as one
 * mask. The order matches the fields of moe_cpu_caps.
 */
enum {
    MOE_FEAT_AVX2 = 1u << 0,        /* AVX2 + FMA + F16C, YMM state */
    MOE_FEAT_AVX512 = 1u << 1,      /* AVX-512 F/BW/DQ/VL, opmask and ZMM state */
    MOE_FEAT_AVX512_BF16 = 1u << 2, /* vdpbf16ps, vcvtne2ps2bf16 */
    MOE_FEAT_AVX512_VNNI = 1u << 3, /* vpdpbusd */
    MOE_FEAT_AVX512_FP16 = 1u << 4, /* native half-precision arithmetic */
    MOE_FEAT_AVX512_VBMI = 1u << 5, /* vpermt2b: 128-entry byte tables */
    MOE_FEAT_AVX_VNNI = 1u << 6,    /* VEX vpdpbusd on ymm (AVX-VNNI) */
    MOE_FEAT_AMX_INT8 = 1u << 7,    /* tdpbssd on tiles (AMX-TILE + AMX-INT8) */
    MOE_FEAT_AMX_BF16 = 1u << 8,    /* tdpbf16ps on tiles (AMX-TILE + AMX-BF16) */
    MOE_FEAT_ALL_ = (1u << 9) - 1
};

/* The caps as a feature mask, and back. Bits outside MOE_FEAT_ALL_ are ignored. */
uint32_t moe_cpu_caps_mask(const moe_cpu_caps *caps);
moe_cpu_caps moe_cpu_caps_from_mask(uint32_t mask);

/* The name of one feature bit ("avx2", "avx512", "avx512_bf16", ...), "?" for anything else. */
const char *moe_cpu_feature_name(uint32_t feature);

/* Writes the names of the features in mask, space-separated, or "none" (always terminated). */
void moe_cpu_mask_format(uint32_t mask, char *buf, size_t size);

/*
 * Makes a caps struct consistent with the level order of moe.h: avx512 and avx_vnni need
 * avx2, and bf16, vnni, fp16, vbmi, amx_int8 and amx_bf16 each need avx512; a flag whose
 * prerequisite is missing is cleared. Detection already yields consistent caps; this matters for
 * caps built by hand or masks.
 */
moe_cpu_caps moe_cpu_caps_normalize(moe_cpu_caps caps);

/* The features of a and b together (normalized). */
moe_cpu_caps moe_cpu_caps_intersect(const moe_cpu_caps *a, const moe_cpu_caps *b);

/*
 * What this machine has (CPUID + XGETBV; for AMX also the OS's grant of the tile data to
 * this process, which detection asks for once: arch_prctl ARCH_REQ_XCOMP_PERM on Linux).
 * Detection runs once per process, on the first call, under pthread_once; every later call
 * copies the stored result, so it is cheap and safe from any thread. brand receives the CPU
 * brand string ("" if the CPU has none); it may be NULL. On a non-x86 build every flag is
 * false.
 */
void moe_cpu_detect(moe_cpu_caps *caps, char brand[64]);

/* The per-core L2 cache of this machine in bytes (CPUID's cache parameters, detected with the
 * caps), or 0 where the CPU does not say (and on non-x86 builds). */
size_t moe_cpu_l2_bytes(void);

/* Parses a MOE_ISA value: "scalar", "avx2", "avx512" or "avx512bf16" (exact, lower case).
 * Anything else is MOE_EINVAL naming the value; *level is then untouched. */
moe_status moe_isa_level_parse(const char *name, moe_isa_level *level);

/*
 * The features a level permits, as a mask: scalar none; avx2 AVX2; avx512 adds AVX-512,
 * VNNI and VBMI; avx512bf16 adds BF16, FP16, AMX-INT8 and AMX-BF16 (everything). An out-of-range
 * level permits nothing.
 */
uint32_t moe_isa_level_mask(moe_isa_level level);

/*
 * The MOE_ISA cap as a pure function, so tests can call it with made-up caps and strings:
 * *out = normalize(*in ∩ the features `isa` permits), *level = the parsed level. isa NULL
 * or "" means no cap (level MOE_ISA_AVX512BF16, the highest). An unknown isa is MOE_EINVAL
 * naming the value, and *out and *level are left untouched. level may be NULL.
 */
moe_status moe_cpu_caps_apply_isa(const moe_cpu_caps *in, const char *isa, moe_cpu_caps *out,
                                  moe_isa_level *level);

#endif
