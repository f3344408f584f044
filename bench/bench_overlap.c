/* bench_overlap.c — what one core reaches when it streams weights and computes on them at once: an ideal kernel's fraction of the roofline floor at each arithmetic intensity. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE (bench/bench_util.h) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

/*
 * THREADS threads (default 1), each streaming its share of the buffer. The floor `moe bench`
 * divides by is max(bytes / read, ops / peak): it assumes a core can stream at its plain read rate
 * and run the recipe's instruction at its register-only peak at the same time. This measures how
 * far an ideal kernel gets towards that: a 1 GiB buffer (2 MiB pages, every byte 0x3F, so as f32
 * each lane is 0.747) read once per pass, 128 bytes per step as the expert kernels read a k-pair of
 * a tile (the kernels' prefetch, `prefetcht1` 8 KB and `prefetcht0` 2 KB ahead, or none), and F
 * instructions per step on 16 accumulators, each taking one of the step's two loaded vectors as an
 * operand (so, as in a kernel, the arithmetic waits on the stream): vfmadd231ps zmm (a = a·w + c,
 * which stays near 1) or vpdpbusd zmm (a += Σ4 w·y, wrapping harmlessly). No decode, no
 * activations, no stores: no kernel does less per byte, so a kernel's efficiency at the same ops
 * per byte and the same number of streams is at most what this prints, and where this falls below
 * a target, no such kernel on this host meets it.
 *
 * Per F: ops per byte, GB/s of the stream, G(FL)OP/s, and the efficiency: the floor (from the
 * plain read, the fastest of bench_util.h's read patterns, and the instruction's peak, both
 * measured in the same round) over the pass's time, the best of three passes. The ridge,
 * where both floors meet, is where the ideal kernel falls furthest below 1.
 * With --streams S each thread reads its share as S equal parts side by side, one step of
 * each in turn (as a kernel reading S tiles, or S parts of one, at once): the same bytes and
 * operations per step, only the number of streams a core keeps open changes.
 * Usage: bench_overlap [--rounds N] (default 2) [--threads N] (default 1) [--streams S]
 * (1..8, default 1).
 */

#define BYTES ((size_t)1 << 30)
#define CHAINS 16
#define MAX_STREAMS 8

/* The bytes each pass reads: every thread's share cut into `streams` parts of whole steps. */
static size_t part_bytes(int threads, int streams)
{
    return BYTES / (size_t)threads / (size_t)streams & ~(size_t)127;
}

/* The start of each of `streams` parts of `part` bytes from p. */
static void parts_of(const char *p, size_t part, int streams, const char **at)
{
    for (int j = 0; j < streams; j++)
        at[j] = p + (size_t)j * part;
}

/* The next 128-byte step: part s's, which then moves on, and s the next part. */
static inline __attribute__((always_inline)) const char *next_step(const char **at, size_t *s,
                                                                   int streams)
{
    const char *x = at[*s];
    at[*s] += 128;
    *s = *s + 1 == (size_t)streams ? 0 : *s + 1;
    return x;
}

#if BENCH_X86
#define PREFETCH_STEP(x)                                                                           \
    do {                                                                                           \
        _mm_prefetch((x) + BENCH_PF_AHEAD, _MM_HINT_T1);                                           \
        _mm_prefetch((x) + BENCH_PF_AHEAD + 64, _MM_HINT_T1);                                      \
        _mm_prefetch((x) + BENCH_PF_L1_AHEAD, _MM_HINT_T0);                                        \
        _mm_prefetch((x) + BENCH_PF_L1_AHEAD + 64, _MM_HINT_T0);                                   \
    } while (0)

/* F FMAs per 128 bytes; the even ones take the step's first vector, the odd ones its second. */
#define FMA_PASS(F)                                                                                \
    __attribute__((target("avx512f"))) static float fma_pass_##F(const char *p, size_t part,       \
                                                                 int streams, int pf)              \
    {                                                                                              \
        __m512 a[CHAINS];                                                                          \
        for (int c = 0; c < CHAINS; c++)                                                           \
            a[c] = _mm512_set1_ps(1.0f + (float)c * 0x1p-10f);                                     \
        const __m512 c0 = _mm512_set1_ps(0.25f);                                                   \
        __m512i any = _mm512_setzero_si512();                                                      \
        const char *at[MAX_STREAMS];                                                               \
        parts_of(p, part, streams, at);                                                            \
        for (size_t i = 0, s = 0; i < part * (size_t)streams; i += 128) {                          \
            const char *x = next_step(at, &s, streams);                                            \
            if (pf) PREFETCH_STEP(x);                                                              \
            const __m512 w0 = _mm512_load_ps(x), w1 = _mm512_load_ps(x + 64);                      \
            if (F == 0)                                                                            \
                any = _mm512_xor_si512(                                                            \
                    any, _mm512_xor_si512(_mm512_castps_si512(w0), _mm512_castps_si512(w1)));      \
            _Pragma("GCC unroll 128") for (int f = 0; f < F; f++) a[f % CHAINS] =                  \
                _mm512_fmadd_ps(a[f % CHAINS], f & 1 ? w1 : w0, c0);                               \
        }                                                                                          \
        __m512 s = _mm512_castsi512_ps(any);                                                       \
        for (int c = 0; c < CHAINS; c++)                                                           \
            s = _mm512_add_ps(s, a[c]);                                                            \
        return _mm512_reduce_add_ps(s);                                                            \
    }

/* F vpdpbusd per 128 bytes, the loaded vector as the unsigned operand; one asm statement per
 * step, as bench_util.h's peak loop (GCC otherwise copies the tied accumulator). */
#define DPBUSD_PASS(F)                                                                             \
    __attribute__((target("avx512f,avx512vnni"))) static float dpbusd_pass_##F(                    \
        const char *p, size_t part, int streams, int pf)                                           \
    {                                                                                              \
        __m512i a[CHAINS];                                                                         \
        for (int c = 0; c < CHAINS; c++)                                                           \
            a[c] = _mm512_set1_epi32(c);                                                           \
        const __m512i y = _mm512_set1_epi8(-2);                                                    \
        const char *at[MAX_STREAMS];                                                               \
        parts_of(p, part, streams, at);                                                            \
        for (size_t i = 0, s = 0; i < part * (size_t)streams; i += 128) {                          \
            const char *x = next_step(at, &s, streams);                                            \
            if (pf) PREFETCH_STEP(x);                                                              \
            const __m512i w0 = _mm512_load_si512(x), w1 = _mm512_load_si512(x + 64);               \
            _Pragma("GCC unroll 128") for (int f = 0; f < F; f++) __asm__(                         \
                "vpdpbusd %2, %1, %0" : "+v"(a[f % CHAINS]) : "v"(f & 1 ? w1 : w0), "v"(y));       \
        }                                                                                          \
        __m512i s = _mm512_setzero_si512();                                                        \
        for (int c = 0; c < CHAINS; c++)                                                           \
            s = _mm512_add_epi32(s, a[c]);                                                         \
        return (float)bench_fold512(s);                                                            \
    }

FMA_PASS(0)
FMA_PASS(4)
FMA_PASS(8)
FMA_PASS(16)
FMA_PASS(32)
FMA_PASS(48)
FMA_PASS(64)
FMA_PASS(96)
FMA_PASS(128)
DPBUSD_PASS(4)
DPBUSD_PASS(8)
DPBUSD_PASS(16)
DPBUSD_PASS(32)
DPBUSD_PASS(48)
DPBUSD_PASS(64)
DPBUSD_PASS(96)
DPBUSD_PASS(128)

typedef float pass_fn(const char *p, size_t part, int streams, int pf);

typedef struct step {
    int f;
    pass_fn *fma, *dpbusd;
} step;

static const step steps[] = {
    {0, fma_pass_0, NULL},
    {4, fma_pass_4, dpbusd_pass_4},
    {8, fma_pass_8, dpbusd_pass_8},
    {16, fma_pass_16, dpbusd_pass_16},
    {32, fma_pass_32, dpbusd_pass_32},
    {48, fma_pass_48, dpbusd_pass_48},
    {64, fma_pass_64, dpbusd_pass_64},
    {96, fma_pass_96, dpbusd_pass_96},
    {128, fma_pass_128, dpbusd_pass_128},
};

/* The best of three passes of FN, wall ns: each of THREADS threads streams its share in
 * STREAMS parts. */
static double best_pass(pass_fn *fn, const char *p, int threads, int streams, int pf)
{
    const size_t share = BYTES / (size_t)threads, part = part_bytes(threads, streams);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        float s = 0;
        const double t0 = bench_now_ns();
#pragma omp parallel for num_threads(threads) reduction(+ : s) schedule(static, 1)
        for (int t = 0; t < threads; t++)
            s += fn(p + (size_t)t * share, part, streams, pf);
        const double dt = bench_now_ns() - t0;
        bench_fsink = s;
        if (dt < best) best = dt;
    }
    return best;
}

static void round_of(int round, const char *p, int threads, int streams,
                     const bench_buffer *floor_buf)
{
    const double bytes = (double)(part_bytes(threads, streams) * (size_t)(threads * streams));
    const double read = bench_stream_read(floor_buf, threads, 3);
    for (int k = 0; k < 2; k++) {
        const bench_insn insn = k == 0 ? BENCH_FMA_ZMM : BENCH_DPBUSD_ZMM;
        if (!bench_insn_supported(insn)) {
            printf("round %d %s: not on this CPU (skipped)\n", round, bench_insn_name(insn));
            continue;
        }
        const double peak = bench_peak_gflops(insn, threads, 3), per = bench_insn_flops(insn);
        printf("round %d, %s: read %.2f GB/s, peak %.1f G/s, ridge %.1f per byte\n", round,
               bench_insn_name(insn), read, peak, peak / read);
        printf("  %5s %9s  %-26s %-26s\n", "F", "per byte", "kernels' prefetch", "no prefetch");
        for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
            pass_fn *fn = k == 0 ? steps[s].fma : steps[s].dpbusd;
            if (!fn) continue;
            const double ops = (double)steps[s].f * per * bytes / 128;
            const double floor_ns = ops / peak > bytes / read ? ops / peak : bytes / read;
            printf("  %5d %9.2f", steps[s].f, ops / bytes);
            for (int pf = 1; pf >= 0; pf--) {
                const double ns = best_pass(fn, p, threads, streams, pf);
                printf("  %5.2f GB/s %6.1f G/s %4.2f", bytes / ns, ops / ns, floor_ns / ns);
            }
            printf("\n");
        }
    }
}
#endif

int main(int argc, char **argv)
{
    int rounds = 2, threads = 1, streams = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--streams") && i + 1 < argc) {
            streams = atoi(argv[++i]);
        } else {
            rounds = 0;
            break;
        }
    }
    if (rounds < 1 || threads < 1 || threads > 64 || streams < 1 || streams > MAX_STREAMS) {
        fprintf(stderr, "usage: bench_overlap [--rounds N] [--threads 1..64] [--streams 1..8]\n");
        return 2;
    }
#if BENCH_X86
    if (!__builtin_cpu_supports("avx512f")) {
        printf("bench_overlap: needs AVX-512 (skipped)\n");
        return 0;
    }
    char *p = bench_alloc_pages(BYTES, 1);
    bench_buffer floor_buf;
    if (!p || bench_buffer_init(&floor_buf)) {
        printf("bench_overlap: out of memory\n");
        return 1;
    }
    memset(p, 0x3F, BYTES);
    printf("# %d thread(s), each streaming its share of %zu MiB in %d stream(s), F instructions "
           "per 128 bytes; each cell: GB/s, G(FL)OP/s, fraction of max(bytes / read, ops / peak) "
           "(best of 3 passes)\n",
           threads, BYTES >> 20, streams);
    for (int r = 1; r <= rounds; r++)
        round_of(r, p, threads, streams, &floor_buf);
    bench_buffer_free(&floor_buf);
    free(p);
#else
    (void)rounds;
    (void)threads;
    (void)streams;
    printf("bench_overlap: x86-64 only (skipped)\n");
#endif
    return 0;
}
