/* bench_util.h — shared by the bench programs: clock, medians, cache size, the machine's floors. */
#ifndef MOE_BENCH_UTIL_H
#define MOE_BENCH_UTIL_H

/*
 * Header-only (every bench_*.c is its own program), so everything here is static inline.
 *
 * The floors a benchmark quotes beside its figures, measured in the same run:
 *  - a STREAM-like read: the bandwidth of plain wide loads over a buffer twice the
 *    last-level cache, split between THREADS threads, four streams each;
 *  - the peak of one instruction (fp32 FMA on ymm or zmm, vdpbf16ps, the int8 dot products
 *    of the Q8 recipe: vpdpbusd zmm and ymm (AVX-VNNI), vpmaddubsw ymm and zmm, and AMX's
 *    tdpbssd at the recipe's 32-K block): register-only loops with enough independent
 *    accumulators to cover the latency on every port. Each chain starts from its own value:
 *    chains that start equal compute the same thing, and the compiler merges them into one,
 *    so the loop runs fewer instructions than it counts (a peak once came out 1.6x too high
 *    that way).
 * These are the only places outside kernels/<isa>/ with intrinsics: a bench measures the
 * machine, not libmoe, and each function carries its own target attribute, so the program
 * still compiles for baseline x86-64 and runs a loop only when the CPU has it.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "moe.h" /* moe_cpu_query: whether the OS granted the tile state AMX needs */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define BENCH_X86 1
#else
#define BENCH_X86 0
#endif

static inline double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of N samples (sorts them in place). */
static inline double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return t[n / 2];
}

/* The smallest of N samples: a ceiling (read bandwidth, an instruction's peak) is the best
 * the machine did, as STREAM reports it; on a shared machine the median of a few runs of the
 * floor sometimes caught the other core busy, and cases then came out above 1.0 of it. */
static inline double bench_min(const double *t, int n)
{
    double m = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < m) m = t[i];
    return m;
}

/* The largest cache level's size from sysfs, or 32 MiB when it cannot be read. */
static inline size_t bench_llc_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long v = 0;
        char unit = 0;
        if (fscanf(f, "%lu%c", &v, &unit) >= 1) {
            size_t bytes = v * (unit == 'K' ? 1024ul : unit == 'M' ? 1024ul * 1024 : 1ul);
            if (bytes > best) best = bytes;
        }
        fclose(f);
    }
    return best ? best : (size_t)32 << 20;
}

/* xorshift64: fast, seedable, good enough to spread inputs. */
static inline uint64_t bench_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Uniform in [0, 1). */
static inline double bench_unit(uint64_t *s) { return (double)(bench_rand(s) >> 11) * 0x1p-53; }

/* Roughly N(0, 1): the sum of 4 uniforms, centred and scaled (variance 4/12). */
static inline double bench_gauss(uint64_t *s)
{
    double u = bench_unit(s) + bench_unit(s) + bench_unit(s) + bench_unit(s);
    return (u - 2.0) * 1.7320508075688772;
}

/* ---- Read bandwidth ------------------------------------------------------------------ */

static volatile uint64_t bench_sink;

#if BENCH_X86
/* All 512 bits folded into 64 with xor: a sink for every lane of a chain without the signed
 * additions of _mm512_reduce_add_* (which overflow, undefined behaviour, on these values). */
__attribute__((target("avx512f"))) static inline uint64_t bench_fold512(__m512i v)
{
    const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    const __m128i q = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return (uint64_t)_mm_extract_epi64(q, 0) ^ (uint64_t)_mm_extract_epi64(q, 1);
}

/* 64-byte loads, four independent xor chains so the loop is bound by the loads. */
__attribute__((target("avx512f"))) static inline uint64_t bench_read_avx512(const void *p,
                                                                            size_t bytes)
{
    const __m512i *v = p;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= bytes / 64; i += 4) {
        a = _mm512_xor_si512(a, _mm512_load_si512(v + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(v + i + 1));
        c = _mm512_xor_si512(c, _mm512_load_si512(v + i + 2));
        d = _mm512_xor_si512(d, _mm512_load_si512(v + i + 3));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    return bench_fold512(a);
}

__attribute__((target("avx2"))) static inline uint64_t bench_read_avx2(const void *p, size_t bytes)
{
    const __m256i *v = p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= bytes / 32; i += 4) {
        a = _mm256_xor_si256(a, _mm256_load_si256(v + i));
        b = _mm256_xor_si256(b, _mm256_load_si256(v + i + 1));
        c = _mm256_xor_si256(c, _mm256_load_si256(v + i + 2));
        d = _mm256_xor_si256(d, _mm256_load_si256(v + i + 3));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

/* The widest plain read this CPU has over [p, p + bytes); p 64-byte aligned. */
static inline uint64_t bench_read(const void *p, size_t bytes)
{
#if BENCH_X86
    if (__builtin_cpu_supports("avx512f")) return bench_read_avx512(p, bytes);
    if (__builtin_cpu_supports("avx2")) return bench_read_avx2(p, bytes);
#endif
    const uint64_t *q = p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= bytes / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

#if BENCH_X86
/* S side-by-side streams (the S parts of the range, S ≤ 4, each a multiple of 64 bytes) read
 * with 64-byte loads; prefetch 1: `prefetcht1` 8 KB ahead in every stream, 2: `prefetcht0`
 * 2 KB ahead as well (as the AVX-512 expert kernels prefetch), two lines per 128 bytes. */
#define BENCH_PF_AHEAD 8192
#define BENCH_PF_L1_AHEAD 2048

__attribute__((target("avx512f"))) static inline uint64_t
bench_read_streams_avx512(const void *p, size_t bytes, int streams, int prefetch)
{
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                      _mm512_setzero_si512()};
    const size_t q = bytes / (size_t)streams;
    for (size_t i = 0; i < q; i += 64)
        for (int s = 0; s < streams; s++) {
            const char *x = (const char *)p + (size_t)s * q + i;
            if (prefetch && (i & 127) == 0) {
                _mm_prefetch(x + BENCH_PF_AHEAD, _MM_HINT_T1);
                _mm_prefetch(x + BENCH_PF_AHEAD + 64, _MM_HINT_T1);
                if (prefetch == 2) {
                    _mm_prefetch(x + BENCH_PF_L1_AHEAD, _MM_HINT_T0);
                    _mm_prefetch(x + BENCH_PF_L1_AHEAD + 64, _MM_HINT_T0);
                }
            }
            acc[s] = _mm512_xor_si512(acc[s], _mm512_load_si512((const void *)x));
        }
    const __m512i a =
        _mm512_xor_si512(_mm512_xor_si512(acc[0], acc[1]), _mm512_xor_si512(acc[2], acc[3]));
    return bench_fold512(a);
}
#endif

/* bench_read in four side-by-side streams; BYTES a multiple of 256. */
static inline uint64_t bench_read4(const void *p, size_t bytes)
{
    const size_t q = bytes / 4;
    const char *c = p;
    return bench_read(c, q) ^ bench_read(c + q, q) ^ bench_read(c + 2 * q, q) ^
           bench_read(c + 3 * q, q);
}

/* The read patterns a floor tries, {streams, prefetch} as bench_read_streams_avx512 takes
 * them, and keeps the fastest of: which one is depends on the host. On one development host
 * four streams with the kernels' prefetch were the fastest (a plain read came 4-5 % below
 * what the expert kernels stream); on another two plain streams read 15 % faster than that,
 * and every prefetch slowed the read (bench/NOTES.md, v4). Pattern 0 is the kernels' own. */
#define BENCH_READ_PATTERNS 4

/* What read pattern PATTERN is, for a benchmark's header. */
static inline const char *bench_read_pattern_name(int pattern)
{
    static const char *const names[BENCH_READ_PATTERNS] = {"4 streams, kernels' prefetch",
                                                           "4 streams", "2 streams", "1 stream"};
    return pattern >= 0 && pattern < BENCH_READ_PATTERNS ? names[pattern] : "?";
}

/* One read of [p, p + bytes) in read pattern PATTERN; BYTES a multiple of 256. Without
 * AVX-512 the prefetch is left out and 2 streams read as 4. */
static inline uint64_t bench_read_pattern(const void *p, size_t bytes, int pattern)
{
    static const int patterns[BENCH_READ_PATTERNS][2] = {{4, 2}, {4, 0}, {2, 0}, {1, 0}};
    const int *pt = patterns[pattern];
#if BENCH_X86
    if (__builtin_cpu_supports("avx512f")) return bench_read_streams_avx512(p, bytes, pt[0], pt[1]);
#endif
    return pt[0] == 1 ? bench_read(p, bytes) : bench_read4(p, bytes);
}

/* A buffer for bench_stream_read and bench_flush: twice the last-level cache, at least
 * 256 MiB, in 2 MiB huge pages where the system gives them (as libmoe's packed weights, so
 * the floor and the forward pay the same TLB costs; a program defines _DEFAULT_SOURCE for
 * MADV_HUGEPAGE), every page written once (so no read hits the zero page). */
typedef struct bench_buffer {
    void *p;
    size_t bytes;
} bench_buffer;

/* bytes (rounded up to 2 MiB) at a 2 MiB boundary; with huge, 2 MiB pages asked for where the
 * system gives them (MADV_HUGEPAGE, as libmoe's moe_malloc_huge), else left to the system
 * (4 KiB pages under THP "madvise" or "never"). Freed with free(). */
static inline void *bench_alloc_pages(size_t bytes, int huge)
{
    const size_t two_mib = (size_t)2 << 20;
    bytes = (bytes + two_mib - 1) & ~(two_mib - 1);
    void *p = aligned_alloc(two_mib, bytes);
#ifdef MADV_HUGEPAGE
    if (p && huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
#else
    (void)huge;
#endif
    return p;
}

static inline int bench_buffer_init(bench_buffer *b)
{
    const size_t huge = (size_t)2 << 20;
    size_t bytes = 2 * bench_llc_bytes();
    if (bytes < ((size_t)256 << 20)) bytes = (size_t)256 << 20;
    bytes = (bytes + huge - 1) & ~(huge - 1);
    b->p = bench_alloc_pages(bytes, 1);
    if (!b->p) return -1;
    memset(b->p, 0x5A, bytes);
    b->bytes = bytes;
    return 0;
}

static inline void bench_buffer_free(bench_buffer *b)
{
    free(b->p);
    b->p = NULL;
}

/* The bytes one bench_read_shares pass reads: THREADS equal shares of 256-byte lines. */
static inline size_t bench_shares_bytes(const bench_buffer *b, int threads)
{
    return ((b->bytes / (size_t)threads) & ~(size_t)255) * (size_t)threads;
}

/* Each of THREADS threads reads its contiguous share once, in read pattern PATTERN. */
static inline void bench_read_shares(const bench_buffer *b, int threads, int pattern)
{
    const size_t share = (b->bytes / (size_t)threads) & ~(size_t)255;
    uint64_t s = 0;
#pragma omp parallel for num_threads(threads) reduction(^ : s) schedule(static, 1)
    for (int t = 0; t < threads; t++)
        s ^= bench_read_pattern((const char *)b->p + (size_t)t * share, share, pattern);
    bench_sink = s;
}

/* Evicts the caches: what a forward reads next comes from memory, as in a real model whose
 * layers' weights are far larger than the last-level cache. THREADS readers: the OpenMP
 * threads a layer of that many threads uses are then awake, as in a model where the team
 * was just busy with the previous layer, instead of paying a wake-up inside the forward. */
static inline void bench_flush(const bench_buffer *b, int threads)
{
    bench_read_shares(b, threads, 0);
}

/* GB/s of a read of the whole buffer by THREADS threads: the fastest of REPEATS passes in
 * each read pattern; *pattern_out (if not NULL) is the pattern that read it. */
static inline double bench_stream_read_pattern(const bench_buffer *b, int threads, int repeats,
                                               int *pattern_out)
{
    double t[32], best = 0;
    int best_pattern = 0;
    if (repeats > 32) repeats = 32;
    bench_read_shares(b, threads, 0); /* warm the page tables */
    for (int pattern = 0; pattern < BENCH_READ_PATTERNS; pattern++) {
        for (int r = 0; r < repeats; r++) {
            double t0 = bench_now_ns();
            bench_read_shares(b, threads, pattern);
            t[r] = bench_now_ns() - t0;
        }
        const double gbs = (double)bench_shares_bytes(b, threads) / bench_min(t, repeats);
        if (gbs > best) {
            best = gbs;
            best_pattern = pattern;
        }
    }
    if (pattern_out) *pattern_out = best_pattern;
    return best;
}

static inline double bench_stream_read(const bench_buffer *b, int threads, int repeats)
{
    return bench_stream_read_pattern(b, threads, repeats, NULL);
}

/* ---- Instruction peaks --------------------------------------------------------------- */

/* The instructions whose peak a benchmark may quote. The integer ones count 2 operations per
 * multiply-add, as a GEMM's 2·M·N·K does ("GFLOP/s" below means GOP/s for them). */
typedef enum bench_insn {
    BENCH_FMA_YMM = 0, /* vfmadd231ps ymm: 16 flops */
    BENCH_FMA_ZMM,     /* vfmadd231ps zmm: 32 flops */
    BENCH_DPBF16_ZMM,  /* vdpbf16ps zmm: 32 bf16 products summed in pairs into 16 fp32: 64 flops */
    BENCH_DPBUSD_ZMM,  /* vpdpbusd zmm: 64 u8 x s8 multiply-adds into 16 int32: 128 ops */
    BENCH_MADDUBS_YMM, /* vpmaddubsw ymm (+ the vpaddw that accumulates it): 32 multiply-adds */
    BENCH_MADDUBS_ZMM, /* vpmaddubsw zmm (+ vpaddw): 64 multiply-adds: 128 ops */
    BENCH_DPBUSD_YMM,  /* the VEX vpdpbusd ymm (AVX-VNNI): 32 multiply-adds into 8 int32 */
    BENCH_TDPBSSD_K32, /* tdpbssd on 16x32 and 8x64 tiles (the Q8 recipe's 32-K block): 16·16·32
                        * s8 x s8 multiply-adds into 16x16 int32: 16384 ops */
    BENCH_TDPBF16PS,   /* tdpbf16ps on 16x32 bf16 A and 16 pair rows of B (the tile recipe's
                        * 32-K chunk): 16·16·32 bf16 products into 16x16 fp32: 16384 flops */
    BENCH_INSN_COUNT_
} bench_insn;

static inline const char *bench_insn_name(bench_insn i)
{
    static const char *names[] = {"vfmadd231ps ymm", "vfmadd231ps zmm", "vdpbf16ps zmm",
                                  "vpdpbusd zmm",    "vpmaddubsw ymm",  "vpmaddubsw zmm",
                                  "vpdpbusd ymm",    "tdpbssd k32",     "tdpbf16ps"};
    return (unsigned)i < BENCH_INSN_COUNT_ ? names[i] : "?";
}

static inline double bench_insn_flops(bench_insn i)
{
    static const double flops[] = {16, 32, 64, 128, 64, 128, 64, 16384, 16384};
    return (unsigned)i < BENCH_INSN_COUNT_ ? flops[i] : 0;
}

#if BENCH_X86
/* AVX-VNNI is CPUID.(7,1):EAX bit 4 (clang 14's __builtin_cpu_supports has no name for it);
 * its registers are AVX2's. */
static inline int bench_has_avx_vnni(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
           ((a >> 4) & 1);
}
#endif

static inline int bench_insn_supported(bench_insn i)
{
#if BENCH_X86
    switch (i) {
    case BENCH_FMA_YMM: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case BENCH_FMA_ZMM: return __builtin_cpu_supports("avx512f");
    case BENCH_DPBF16_ZMM: return __builtin_cpu_supports("avx512bf16");
    case BENCH_DPBUSD_ZMM: return __builtin_cpu_supports("avx512vnni");
    case BENCH_MADDUBS_YMM: return __builtin_cpu_supports("avx2");
    case BENCH_MADDUBS_ZMM: return __builtin_cpu_supports("avx512bw");
    case BENCH_DPBUSD_YMM: return bench_has_avx_vnni();
    case BENCH_TDPBSSD_K32: {
        /* Detection also asks the OS for the tile state, which the loop needs. */
        moe_cpu_info ci;
        return moe_cpu_query(&ci) == MOE_OK && ci.detected.amx_int8;
    }
    case BENCH_TDPBF16PS: {
        moe_cpu_info ci;
        return moe_cpu_query(&ci) == MOE_OK && ci.detected.amx_bf16;
    }
    default: return 0;
    }
#else
    (void)i;
    return 0;
#endif
}

#if BENCH_X86
/* The 12 chains' sum through ADD (keeps every chain live; the value is not used). */
#define BENCH_SUM12(ADD)                                                                           \
    ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),                         \
        ADD(ADD(a8, a9), ADD(a10, a11)))

/* 12 independent chains: FMA latency 4 × 2 ports needs 8 in flight; 12 leaves headroom.
 * acc·0.999 + 0.001 stays near 1, so no denormal or overflow slows the loop. BENCH_START12
 * gives chain c the start value INIT(c), so no two chains are the same computation. */
#define BENCH_START12(T, INIT)                                                                     \
    T a0 = INIT(0), a1 = INIT(1), a2 = INIT(2), a3 = INIT(3), a4 = INIT(4), a5 = INIT(5),          \
      a6 = INIT(6), a7 = INIT(7), a8 = INIT(8), a9 = INIT(9), a10 = INIT(10), a11 = INIT(11)
#define BENCH_CHAINS12(OP)                                                                         \
    do {                                                                                           \
        a0 = OP(a0);                                                                               \
        a1 = OP(a1);                                                                               \
        a2 = OP(a2);                                                                               \
        a3 = OP(a3);                                                                               \
        a4 = OP(a4);                                                                               \
        a5 = OP(a5);                                                                               \
        a6 = OP(a6);                                                                               \
        a7 = OP(a7);                                                                               \
        a8 = OP(a8);                                                                               \
        a9 = OP(a9);                                                                               \
        a10 = OP(a10);                                                                             \
        a11 = OP(a11);                                                                             \
    } while (0)

__attribute__((target("avx2,fma"))) static inline float bench_fma_ymm(uint64_t iters)
{
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
#define BENCH_INIT(c) _mm256_set1_ps(1.0f + (float)(c)*0x1p-10f)
    BENCH_START12(__m256, BENCH_INIT);
#undef BENCH_INIT
#define BENCH_OP(a) _mm256_fmadd_ps(a, x, y)
    for (uint64_t i = 0; i < iters; i++)
        BENCH_CHAINS12(BENCH_OP);
#undef BENCH_OP
    __m256 s = BENCH_SUM12(_mm256_add_ps);
    return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) static inline float bench_fma_zmm(uint64_t iters)
{
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
#define BENCH_INIT(c) _mm512_set1_ps(1.0f + (float)(c)*0x1p-10f)
    BENCH_START12(__m512, BENCH_INIT);
#undef BENCH_INIT
#define BENCH_OP(a) _mm512_fmadd_ps(a, x, y)
    for (uint64_t i = 0; i < iters; i++)
        BENCH_CHAINS12(BENCH_OP);
#undef BENCH_OP
    __m512 s = BENCH_SUM12(_mm512_add_ps);
    return _mm512_reduce_add_ps(s);
}

/* acc += Σ pairs of (2^-10 · 2^-10): tiny increments, so 10^8 iterations stay finite. */
__attribute__((target("avx512f,avx512bf16"))) static inline float bench_dpbf16_zmm(uint64_t iters)
{
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80); /* bf16 2^-10 */
#define BENCH_INIT(c) _mm512_set1_ps((float)(c))
    BENCH_START12(__m512, BENCH_INIT);
#undef BENCH_INIT
#define BENCH_OP(a) _mm512_dpbf16_ps(a, x, x)
    for (uint64_t i = 0; i < iters; i++)
        BENCH_CHAINS12(BENCH_OP);
#undef BENCH_OP
    __m512 s = BENCH_SUM12(_mm512_add_ps);
    return _mm512_reduce_add_ps(s);
}

/* The int8 dot products, one asm statement per chain step: GCC allocates the tied
 * accumulator of vpdpbusd (and the vpmaddubsw + vpaddw pair) with two register copies per
 * step, which the front end must then carry, and the loop measures the copies rather than the
 * instruction. Integer chains wrap around harmlessly, at full speed. */
#define BENCH_EACH12(S)                                                                            \
    do {                                                                                           \
        S(a0);                                                                                     \
        S(a1);                                                                                     \
        S(a2);                                                                                     \
        S(a3);                                                                                     \
        S(a4);                                                                                     \
        S(a5);                                                                                     \
        S(a6);                                                                                     \
        S(a7);                                                                                     \
        S(a8);                                                                                     \
        S(a9);                                                                                     \
        S(a10);                                                                                    \
        S(a11);                                                                                    \
    } while (0)

__attribute__((target("avx512f,avx512vnni"))) static inline float bench_dpbusd_zmm(uint64_t iters)
{
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
#define BENCH_INIT(c) _mm512_set1_epi32(c)
    BENCH_START12(__m512i, BENCH_INIT);
#undef BENCH_INIT
    /* a += Σ4 x·y per dword: x the unsigned operand, y the signed one. */
#define BENCH_STEP(a) __asm__("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(x), "v"(y))
    for (uint64_t i = 0; i < iters; i++)
        BENCH_EACH12(BENCH_STEP);
#undef BENCH_STEP
    __m512i s = BENCH_SUM12(_mm512_add_epi32);
    return (float)bench_fold512(s);
}

/* The VEX encoding ({vex}, braces escaped from GCC's dialect syntax) on ymm0-15 ("x"). */
__attribute__((target("avx2,avxvnni"))) static inline float bench_dpbusd_ymm(uint64_t iters)
{
    const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
#define BENCH_INIT(c) _mm256_set1_epi32(c)
    BENCH_START12(__m256i, BENCH_INIT);
#undef BENCH_INIT
#define BENCH_STEP(a) __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(a) : "x"(x), "x"(y))
    for (uint64_t i = 0; i < iters; i++)
        BENCH_EACH12(BENCH_STEP);
#undef BENCH_STEP
    __m256i s = BENCH_SUM12(_mm256_add_epi32);
    return (float)_mm256_extract_epi32(s, 0);
}

/* vpmaddubsw has no accumulator: each step adds the product of the chain's value (as the
 * unsigned operand; a constant one would let the product be hoisted) and y back with vpaddw.
 * The chain is 6 cycles long; 12 chains cover two per cycle. */
#define BENCH_MADDUBS_STEP(a)                                                                      \
    do {                                                                                           \
        __typeof__(a) t_;                                                                          \
        __asm__("vpmaddubsw %2, %0, %1\n\tvpaddw %1, %0, %0" : "+v"(a), "=&v"(t_) : "v"(y));       \
    } while (0)

__attribute__((target("avx2"))) static inline float bench_maddubs_ymm(uint64_t iters)
{
    const __m256i y = _mm256_set1_epi8(-2);
#define BENCH_INIT(c) _mm256_set1_epi16((short)(c))
    BENCH_START12(__m256i, BENCH_INIT);
#undef BENCH_INIT
    for (uint64_t i = 0; i < iters; i++)
        BENCH_EACH12(BENCH_MADDUBS_STEP);
    __m256i s = BENCH_SUM12(_mm256_add_epi16);
    return (float)(short)_mm256_extract_epi16(s, 0);
}

__attribute__((target("avx512f,avx512bw"))) static inline float bench_maddubs_zmm(uint64_t iters)
{
    const __m512i y = _mm512_set1_epi8(-2);
#define BENCH_INIT(c) _mm512_set1_epi16((short)(c))
    BENCH_START12(__m512i, BENCH_INIT);
#undef BENCH_INIT
    for (uint64_t i = 0; i < iters; i++)
        BENCH_EACH12(BENCH_MADDUBS_STEP);
    __m512i s = BENCH_SUM12(_mm512_add_epi16);
    return (float)bench_fold512(s);
}
#undef BENCH_MADDUBS_STEP

/* The palette-1 tile configuration, as LDTILECFG reads it (Intel SDM): 64 bytes. */
typedef struct __attribute__((aligned(64))) bench_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} bench_tilecfg;

/* 12 tdpbssd per iteration into 4 sum tiles (3 each: the unit keeps several in flight), A 16
 * rows of 32 bytes and B 8 rows of 64, the kernels' shapes; tile state released after. */
__attribute__((target("amx-tile,amx-int8"))) static inline float bench_tdpbssd_k32(uint64_t iters)
{
    bench_tilecfg cfg = {.palette = 1};
    for (int t = 0; t < 4; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    cfg.colsb[4] = 32, cfg.rows[4] = 16;
    cfg.colsb[5] = 64, cfg.rows[5] = 8;
    static const int8_t ab[16 * 64] __attribute__((aligned(64))) = {1, -2, 3};
    int32_t c[16][16] __attribute__((aligned(64)));
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 32);
    _tile_loadd(5, ab, 64);
    for (uint64_t i = 0; i < iters; i++)
        for (int r = 0; r < 3; r++) {
            _tile_dpbssd(0, 4, 5);
            _tile_dpbssd(1, 4, 5);
            _tile_dpbssd(2, 4, 5);
            _tile_dpbssd(3, 4, 5);
        }
    _tile_stored(0, c, 64);
    _tile_release();
    return (float)c[0][0];
}
/* The same for tdpbf16ps: 12 per iteration into 4 fp32 tiles, A and B 16 rows of 64 bytes
 * (bf16 values of 1 and small: the sums stay finite and normal). */
__attribute__((target("amx-tile,amx-bf16"))) static inline float bench_tdpbf16ps(uint64_t iters)
{
    bench_tilecfg cfg = {.palette = 1};
    for (int t = 0; t < 6; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static const uint16_t ab[16 * 32] __attribute__((aligned(64))) = {0x3F80, 0x3400, 0x3F80};
    float c[16][16] __attribute__((aligned(64)));
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    for (uint64_t i = 0; i < iters; i++)
        for (int r = 0; r < 3; r++) {
            _tile_dpbf16ps(0, 4, 5);
            _tile_dpbf16ps(1, 4, 5);
            _tile_dpbf16ps(2, 4, 5);
            _tile_dpbf16ps(3, 4, 5);
        }
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0][0];
}
#undef BENCH_EACH12
#undef BENCH_CHAINS12
#undef BENCH_START12
#endif

static volatile float bench_fsink;

static inline void bench_insn_loop(bench_insn insn, uint64_t iters)
{
#if BENCH_X86
    switch (insn) {
    case BENCH_FMA_YMM: bench_fsink = bench_fma_ymm(iters); break;
    case BENCH_FMA_ZMM: bench_fsink = bench_fma_zmm(iters); break;
    case BENCH_DPBF16_ZMM: bench_fsink = bench_dpbf16_zmm(iters); break;
    case BENCH_DPBUSD_ZMM: bench_fsink = bench_dpbusd_zmm(iters); break;
    case BENCH_MADDUBS_YMM: bench_fsink = bench_maddubs_ymm(iters); break;
    case BENCH_MADDUBS_ZMM: bench_fsink = bench_maddubs_zmm(iters); break;
    case BENCH_DPBUSD_YMM: bench_fsink = bench_dpbusd_ymm(iters); break;
    case BENCH_TDPBSSD_K32: bench_fsink = bench_tdpbssd_k32(iters); break;
    case BENCH_TDPBF16PS: bench_fsink = bench_tdpbf16ps(iters); break;
    default: break;
    }
#else
    (void)insn;
    (void)iters;
#endif
}

/* GFLOP/s of INSN on THREADS threads (each runs the loop; wall time of the slowest): the
 * fastest of REPEATS runs of about 50 ms each. 0 when the CPU lacks the instruction. */
static inline double bench_peak_gflops(bench_insn insn, int threads, int repeats)
{
    if (!bench_insn_supported(insn)) return 0;
    if (repeats > 32) repeats = 32;
    /* Calibrate on one thread to about 50 ms. */
    uint64_t iters = 1u << 16;
    for (;;) {
        double t0 = bench_now_ns();
        bench_insn_loop(insn, iters);
        double dt = bench_now_ns() - t0;
        if (dt > 5e6) {
            iters = (uint64_t)((double)iters * 5e7 / dt) + 1;
            break;
        }
        iters *= 4;
    }
    double t[32];
    for (int r = 0; r < repeats; r++) {
        double t0 = bench_now_ns();
#pragma omp parallel num_threads(threads)
        bench_insn_loop(insn, iters);
        t[r] = bench_now_ns() - t0;
    }
    /* 12 instructions per iteration on each thread. */
    return 12.0 * bench_insn_flops(insn) * (double)iters * threads / bench_min(t, repeats);
}

#endif
