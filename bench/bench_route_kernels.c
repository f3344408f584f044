/* bench_route_kernels.c — ns per call of each routing primitive, ref and SIMD, E = 256 / 384. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe.h"
#include "kernels/route.h"
#include "select/kernel.h"

typedef struct bench_kernel {
    const char *name;
    uint32_t isa;
    moe_kernel_family family;
    moe_kernel_fn fn;
} bench_kernel;

static const bench_kernel kernels[] = {
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS, {.route_logit_keys = name}},
#include "kernels/route_logit_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS, {.route_sigmoid_keys = name}},
#include "kernels/route_sigmoid_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS, {.route_sqrtsoftplus_keys = name}},
#include "kernels/route_sqrtsoftplus_keys.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, MOE_KERNEL_FAMILY_ROUTE_TOPK, {.route_topk = name}},
#include "kernels/route_topk.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_ROUTE_EXPSUM, {.route_expsum = name}},
#include "kernels/route_expsum.inc"
#undef MOE_KERNEL
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define ROWS 64 /* distinct logit rows cycled through, as consecutive tokens would be */
#define MAX_E 384

static float logits[ROWS][MAX_E], bias[MAX_E], scores[MAX_E];
static uint32_t keys[ROWS][MAX_E], work[MAX_E], top[MAX_E];
static int32_t ids[MAX_E];
static volatile float sink;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* CPU time of this thread: time the machine gave to other work is not counted. */
static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One call of kernel k on row r of width e (top-k: k_top picks from a fresh copy of the
 * row's keys; the copy is timed separately and subtracted). */
static void call(const bench_kernel *k, size_t r, size_t e, size_t k_top)
{
    switch (k->family) {
    case MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS: k->fn.route_logit_keys(e, logits[r], work); break;
    case MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS:
        k->fn.route_sigmoid_keys(e, logits[r], bias, scores, work);
        break;
    case MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS:
        k->fn.route_sqrtsoftplus_keys(e, logits[r], bias, scores, work);
        break;
    case MOE_KERNEL_FAMILY_ROUTE_TOPK:
        memcpy(work, keys[r], e * sizeof work[0]);
        k->fn.route_topk(e, work, k_top, ids, top);
        break;
    case MOE_KERNEL_FAMILY_ROUTE_EXPSUM: sink = k->fn.route_expsum(e, logits[r], 8.0f); break;
    default: break;
    }
}

/* The best of 7 timings of `iters` calls, in ns per call. */
static double time_kernel(const bench_kernel *k, size_t e, size_t k_top, long iters)
{
    double best = INFINITY;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++)
            call(k, (size_t)i % ROWS, e, k_top);
        double t = (now_ns() - t0) / (double)iters;
        if (t < best) best = t;
    }
    return best;
}

static double time_copy(size_t e, long iters)
{
    double best = INFINITY;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            memcpy(work, keys[(size_t)i % ROWS], e * sizeof work[0]);
            __asm__ volatile("" ::: "memory");
        }
        double t = (now_ns() - t0) / (double)iters;
        if (t < best) best = t;
    }
    return best;
}

/* DeepSeek-V3 noaux_tc from the primitives alone: sigmoid keys of 256, per group (8 of 32) a
 * top-2 (src/route finds the two largest codes with plain integer code instead), the 4 best
 * group sums, the other groups EXCLUDED, the top-8 of what is left. Selection only; the
 * weights are a few flops more. A yardstick for the kernels, not the router's figure. */
static void v3_route(const bench_kernel *sig, const bench_kernel *tk, size_t r)
{
    uint32_t gkeys[8], gtop[8], t2[2];
    int32_t gids[8], i2[2];
    sig->fn.route_sigmoid_keys(256, logits[r], bias, scores, work);
    for (int g = 0; g < 8; g++) {
        uint32_t tmp[32];
        memcpy(tmp, work + 32 * g, sizeof tmp);
        tk->fn.route_topk(32, tmp, 2, i2, t2);
        gkeys[g] = moe_route_key_encode(moe_route_key_decode(t2[0]) + moe_route_key_decode(t2[1]));
    }
    tk->fn.route_topk(8, gkeys, 4, gids, gtop);
    for (int g = 0; g < 8; g++)
        if (gkeys[g] != MOE_ROUTE_KEY_TAKEN)
            for (int i = 0; i < 32; i++)
                work[32 * g + i] = MOE_ROUTE_KEY_EXCLUDED;
    tk->fn.route_topk(256, work, 8, ids, top);
}

static double time_v3(const bench_kernel *sig, const bench_kernel *tk, long iters)
{
    double best = INFINITY;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++)
            v3_route(sig, tk, (size_t)i % ROWS);
        double t = (now_ns() - t0) / (double)iters;
        if (t < best) best = t;
    }
    return best;
}

static bool allowed(const bench_kernel *k, uint32_t mask) { return (k->isa & ~mask) == 0; }

/* ---- Whole DeepSeek-V3 rows through the noaux_tc kernels -------------------------------- */

static const bench_kernel noaux_kernels[] = {
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC, {.route_noaux_tc = name}},
#include "kernels/route_noaux_tc.inc"
#undef MOE_KERNEL
};

#define NOAUX_ROWS 4096
#define NOAUX_SAMPLES 15

/* ns per row of routing T rows per call, over NOAUX_ROWS rows of logits: the median and the
 * least of NOAUX_SAMPLES samples of thread CPU time, and the median wall time. */
static void time_noaux(const bench_kernel *k, const moe_route_noaux_tc_args *a, size_t t,
                       const float *z, int32_t *out_ids, float *w, moe_route_scratch *row_work)
{
    const size_t passes = k->isa == 0 ? 1 : 4;
    const size_t rows = k->isa == 0 ? 256 : NOAUX_ROWS; /* the reference is slow */
    double cpu[NOAUX_SAMPLES], wall[NOAUX_SAMPLES];
    for (int s = 0; s < NOAUX_SAMPLES; s++) {
        double c0 = cpu_ns(), w0 = now_ns();
        for (size_t p = 0; p < passes; p++)
            for (size_t r = 0; r + t <= rows; r += t)
                k->fn.route_noaux_tc(a, t, z + r * 256, out_ids + r * 8, w + r * 8, row_work);
        const double n = (double)passes * (double)(rows / t * t);
        cpu[s] = (cpu_ns() - c0) / n;
        wall[s] = (now_ns() - w0) / n;
    }
    qsort(cpu, NOAUX_SAMPLES, sizeof cpu[0], cmp_double);
    qsort(wall, NOAUX_SAMPLES, sizeof wall[0], cmp_double);
    printf("  %-30s T=%-5zu cpu median %7.1f  min %7.1f | wall median %7.1f ns per row\n", k->name,
           t, cpu[NOAUX_SAMPLES / 2], cpu[0], wall[NOAUX_SAMPLES / 2]);
}

static void bench_noaux(uint32_t mask)
{
    float *z = malloc((size_t)NOAUX_ROWS * 256 * sizeof *z);
    int32_t *out_ids = malloc((size_t)NOAUX_ROWS * 8 * sizeof *out_ids);
    float *w = malloc((size_t)NOAUX_ROWS * 8 * sizeof *w);
    moe_route_scratch *row_work = malloc(sizeof *row_work);
    if (!z || !out_ids || !w || !row_work) {
        fprintf(stderr, "bench_route_kernels: out of memory\n");
        exit(1);
    }
    uint64_t s = 0x2545F4914F6CDD1Du;
    for (size_t i = 0; i < (size_t)NOAUX_ROWS * 256; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        z[i] = (float)((double)(s >> 11) * 0x1p-53 * 8.0 - 4.0);
    }
    float b[256];
    for (size_t i = 0; i < 256; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    const moe_route_noaux_tc_args a = {b, 256, 8, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f};
    printf("\nDeepSeek-V3 rows through the noaux_tc kernels (logits in [-4, 4], bias in [-1, 1], "
           "%d rows cycled)\n",
           NOAUX_ROWS);
    static const size_t ts[] = {1, 8, 64, 4096};
    for (size_t i = 0; i < COUNT(noaux_kernels); i++) {
        if (!allowed(&noaux_kernels[i], mask)) continue;
        for (size_t j = 0; j < COUNT(ts); j++)
            if (noaux_kernels[i].isa != 0 || ts[j] <= 256)
                time_noaux(&noaux_kernels[i], &a, ts[j], z, out_ids, w, row_work);
    }
    free(z);
    free(out_ids);
    free(w);
    free(row_work);
}

/* Usage: bench_route_kernels [noaux]: with "noaux", only the noaux_tc rows. */
int main(int argc, char **argv)
{
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, "moe_cpu_query: %s\n", moe_last_error());
        return 1;
    }
    uint32_t mask = moe_cpu_caps_mask(&info.allowed);
    if (argc > 1 && strcmp(argv[1], "noaux") == 0) {
        bench_noaux(mask);
        return 0;
    }
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (size_t r = 0; r < ROWS; r++) {
        for (size_t i = 0; i < MAX_E; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            logits[r][i] = (float)((double)(s >> 11) * 0x1p-53 * 8.0 - 4.0);
        }
        moe_route_logit_keys__ref(MAX_E, logits[r], keys[r]);
    }
    for (size_t i = 0; i < MAX_E; i++)
        bias[i] = 0.01f * (float)(i % 7) - 0.03f;

    printf("cpu: %s\nns per call (best of 7), rows cycled through %d distinct logit rows\n",
           info.brand, ROWS);
    static const size_t widths[] = {256, 384};
    for (size_t w = 0; w < COUNT(widths); w++) {
        size_t e = widths[w];
        double copy = time_copy(e, 200000);
        printf("\nE = %zu (top-k: k = 8, copy of the keys subtracted: %.1f ns)\n", e, copy);
        for (size_t i = 0; i < COUNT(kernels); i++) {
            const bench_kernel *k = &kernels[i];
            if (!allowed(k, mask)) {
                printf("  %-40s skipped (not allowed here)\n", k->name);
                continue;
            }
            long iters = strstr(k->name, "__ref") ? 20000 : 200000;
            double t = time_kernel(k, e, 8, iters);
            if (k->family == MOE_KERNEL_FAMILY_ROUTE_TOPK) t -= copy;
            printf("  %-40s %8.1f ns  %6.2f ns/expert\n", k->name, t, t / (double)e);
        }
    }

    printf("\ntop-k at the shapes routers use (ns per call, copy subtracted)\n");
    static const size_t shapes[][2] = {{8, 2},   {8, 4},   {20, 1},  {32, 2},  {64, 8}, {128, 4},
                                       {128, 8}, {160, 6}, {256, 6}, {256, 8}, {384, 8}};
    printf("  %-32s", "n, k");
    for (size_t j = 0; j < COUNT(shapes); j++)
        printf(" %6zu,%-2zu", shapes[j][0], shapes[j][1]);
    printf("\n");
    for (size_t i = 0; i < COUNT(kernels); i++) {
        const bench_kernel *k = &kernels[i];
        if (k->family != MOE_KERNEL_FAMILY_ROUTE_TOPK || !allowed(k, mask)) continue;
        printf("  %-32s", k->name);
        for (size_t j = 0; j < COUNT(shapes); j++) {
            long iters = k->isa == 0 ? 20000 : 200000;
            double t = time_kernel(k, shapes[j][0], shapes[j][1], iters);
            printf(" %9.1f", t - time_copy(shapes[j][0], iters));
        }
        printf("\n");
    }

    bench_noaux(mask);

    printf("\nDeepSeek-V3 selection from the primitives (E = 256, 8 groups keep 4, k = 8)\n");
    for (size_t i = 0; i < COUNT(kernels); i++) {
        const bench_kernel *sig = &kernels[i];
        if (sig->family != MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS || !allowed(sig, mask)) continue;
        for (size_t j = 0; j < COUNT(kernels); j++) {
            const bench_kernel *tk = &kernels[j];
            if (tk->family != MOE_KERNEL_FAMILY_ROUTE_TOPK || tk->isa != sig->isa) continue;
            long iters = sig->isa == 0 ? 20000 : 200000;
            printf("  %-40s %8.1f ns per token\n", tk->name, time_v3(sig, tk, iters));
        }
    }
    return 0;
}
