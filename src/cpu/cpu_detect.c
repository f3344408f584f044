/* cpu_detect.c — CPUID + XGETBV into moe_cpu_caps and the L2 size, once per process. */
#define _DEFAULT_SOURCE /* syscall (the AMX tile-data request) */
#include <pthread.h>
#include <string.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0 bits (Intel SDM vol. 1, 13.1): the OS saves and restores these register states. */
#define XCR0_SSE (1u << 1)
#define XCR0_AVX (1u << 2)       /* upper halves of YMM0-15 */
#define XCR0_OPMASK (1u << 5)    /* k0-k7 */
#define XCR0_ZMM_HI256 (1u << 6) /* upper halves of ZMM0-15 */
#define XCR0_HI16_ZMM (1u << 7)  /* ZMM16-31 */
#define XCR0_YMM_STATE (XCR0_SSE | XCR0_AVX)
#define XCR0_ZMM_STATE (XCR0_YMM_STATE | XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM)
#define XCR0_XTILECFG (1u << 17)
#define XCR0_XTILEDATA (1u << 18)

/* CPUID.1:ECX */
#define C1_FMA (1u << 12)
#define C1_OSXSAVE (1u << 27)
#define C1_AVX (1u << 28)
#define C1_F16C (1u << 29)
/* CPUID.(7,0):EBX */
#define C7_AVX2 (1u << 5)
#define C7_AVX512F (1u << 16)
#define C7_AVX512DQ (1u << 17)
#define C7_AVX512BW (1u << 30)
#define C7_AVX512VL (1u << 31)
/* CPUID.(7,0):ECX and EDX, CPUID.(7,1):EAX */
#define C7_ECX_AVX512VBMI (1u << 1)
#define C7_ECX_AVX512VNNI (1u << 11)
#define C7_EDX_AMX_BF16 (1u << 22)
#define C7_EDX_AVX512FP16 (1u << 23)
#define C7_EDX_AMX_TILE (1u << 24)
#define C7_EDX_AMX_INT8 (1u << 25)
#define C71_EAX_AVX_VNNI (1u << 4)
#define C71_EAX_AVX512BF16 (1u << 5)

/* XGETBV is only defined when CPUID reports OSXSAVE; the caller checks that first. The
 * mnemonic is spelled out so no -mxsave flag is needed for this baseline file. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool all_set(uint32_t word, uint32_t bits) { return (word & bits) == bits; }

/* Linux enables the 8 KB of tile data per process, on request (arch_prctl
 * ARCH_REQ_XCOMP_PERM for state component 18, kernel 5.16 and later); until then the first
 * tile instruction faults. Granted once for the whole process, so detection asks once. Other
 * systems: no AMX. */
static bool request_tile_data(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return false;
#endif
}

static void read_brand(char brand[64])
{
    uint32_t regs[12];
    unsigned max_ext = __get_cpuid_max(0x80000000u, NULL);
    brand[0] = '\0';
    if (max_ext < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2],
                    &regs[4 * i + 3]);
    char raw[49];
    memcpy(raw, regs, 48);
    raw[48] = '\0';
    /* Vendors pad the brand with leading spaces. */
    const char *start = raw;
    while (*start == ' ')
        start++;
    size_t len = strlen(start);
    while (len > 0 && start[len - 1] == ' ')
        len--;
    memcpy(brand, start, len);
    brand[len] = '\0';
}

static moe_cpu_caps read_caps(void)
{
    moe_cpu_caps caps = {0};
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return caps;
    uint32_t ecx1 = c;
    if (!all_set(ecx1, C1_OSXSAVE | C1_AVX)) return caps;
    uint64_t xcr0 = read_xcr0();
    if (!all_set((uint32_t)xcr0, XCR0_YMM_STATE)) return caps;
    uint32_t max_sub, ebx7, ecx7, edx7;
    if (!__get_cpuid_count(7, 0, &max_sub, &ebx7, &ecx7, &edx7)) return caps;
    caps.avx2 = all_set(ecx1, C1_FMA | C1_F16C) && all_set(ebx7, C7_AVX2);
    uint32_t eax71 = 0;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) eax71 = a;
    caps.avx_vnni = caps.avx2 && all_set(eax71, C71_EAX_AVX_VNNI);
    bool zmm_os = all_set((uint32_t)xcr0, XCR0_ZMM_STATE);
    caps.avx512 =
        caps.avx2 && zmm_os && all_set(ebx7, C7_AVX512F | C7_AVX512DQ | C7_AVX512BW | C7_AVX512VL);
    if (!caps.avx512) return caps;

    caps.avx512_vnni = all_set(ecx7, C7_ECX_AVX512VNNI);
    caps.avx512_vbmi = all_set(ecx7, C7_ECX_AVX512VBMI);
    caps.avx512_fp16 = all_set(edx7, C7_EDX_AVX512FP16);
    caps.avx512_bf16 = all_set(eax71, C71_EAX_AVX512BF16);
    /* AMX-TILE with the tile state enabled in XCR0 and the tile data granted (asked once for
     * both instruction sets); then each set by its own CPUID bit. */
    const bool tiles = all_set(edx7, C7_EDX_AMX_TILE) &&
                       all_set((uint32_t)xcr0, XCR0_XTILECFG | XCR0_XTILEDATA) &&
                       request_tile_data();
    caps.amx_int8 = tiles && all_set(edx7, C7_EDX_AMX_INT8);
    caps.amx_bf16 = tiles && all_set(edx7, C7_EDX_AMX_BF16);
    return caps;
}

/* The per-core L2 from the deterministic cache parameters: CPUID leaf 4 (Intel) or 0x8000001D
 * (AMD, with topology extensions), the same layout: EAX[4:0] type (0 = no more caches, 1
 * data, 3 unified), EAX[7:5] level, EBX ways - 1 [31:22], partitions - 1 [21:12], line size
 * - 1 [11:0], ECX sets - 1. 0 when neither leaf describes an L2. */
static size_t read_l2_bytes(void)
{
    const unsigned leaves[] = {4u, 0x8000001Du};
    for (int l = 0; l < 2; l++) {
        const unsigned leaf = leaves[l];
        if ((unsigned)__get_cpuid_max(leaf & 0x80000000u, NULL) < leaf) continue;
        for (unsigned sub = 0; sub < 16; sub++) {
            uint32_t a, b, c, d;
            __cpuid_count(leaf, sub, a, b, c, d);
            const unsigned type = a & 0x1Fu, level = (a >> 5) & 0x7u;
            if (type == 0) break;
            if (level == 2 && (type == 1 || type == 3))
                return (size_t)((b >> 22) + 1) * (((b >> 12) & 0x3FFu) + 1) * ((b & 0xFFFu) + 1) *
                       ((size_t)c + 1);
        }
    }
    return 0;
}

#else /* not x86: nothing to detect, every kernel is the portable one */

static moe_cpu_caps read_caps(void)
{
    moe_cpu_caps caps = {0};
    return caps;
}

static void read_brand(char brand[64]) { brand[0] = '\0'; }

static size_t read_l2_bytes(void) { return 0; }

#endif

/* Written once under pthread_once, read-only afterwards. */
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static moe_cpu_caps detected_caps;
static char detected_brand[64];
static size_t detected_l2;

static void detect_run(void)
{
    detected_caps = moe_cpu_caps_normalize(read_caps());
    read_brand(detected_brand);
    detected_l2 = read_l2_bytes();
}

void moe_cpu_detect(moe_cpu_caps *caps, char brand[64])
{
    pthread_once(&detect_once, detect_run);
    if (caps) *caps = detected_caps;
    if (brand) memcpy(brand, detected_brand, sizeof detected_brand);
}

size_t moe_cpu_l2_bytes(void)
{
    pthread_once(&detect_once, detect_run);
    return detected_l2;
}
