/* bench_convert.c — throughput of every conversion kernel this CPU may run, beside the
 * machine's read, copy and fill bandwidth measured in the same run. Not a test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe.h"
#include "kernels/cvt.h"
#include "bench_util.h"

typedef struct bench_kernel {
    const char *name;
    uint32_t isa;
    moe_kernel_family family;
    moe_kernel_fn fn;
} bench_kernel;

/* Generated from the enumerators, like the registry and the tests. */
static const bench_kernel kernels[] = {
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_CVT_BF16_F32, {.cvt_bf16_f32 = name}},
#include "kernels/cvt_bf16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_CVT_F16_F32, {.cvt_f16_f32 = name}},
#include "kernels/cvt_f16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_CVT_E4M3_F32, {.cvt_e4m3_f32 = name}},
#include "kernels/cvt_e4m3_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref)                                                                 \
    {#name, isa, MOE_KERNEL_FAMILY_CVT_MXFP4_F32, {.cvt_mxfp4_f32 = name}},
#include "kernels/cvt_mxfp4_f32.inc"
#undef MOE_KERNEL
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])
#define REPEATS 7

typedef struct buffers {
    uint8_t *in;     /* codes: in_cap bytes */
    uint8_t *scales; /* MXFP4 scales */
    float *out;
    size_t out_bytes;
} buffers;

/* Elements (blocks for MXFP4) that fill the output buffer, and the bytes read and written. */
static size_t problem_size(const bench_kernel *k, const buffers *b, double *in_b, double *out_b)
{
    size_t n;
    switch (k->family) {
    case MOE_KERNEL_FAMILY_CVT_MXFP4_F32:
        n = b->out_bytes / 128;
        *in_b = 17.0 * (double)n;
        *out_b = 128.0 * (double)n;
        return n;
    case MOE_KERNEL_FAMILY_CVT_E4M3_F32:
        n = b->out_bytes / 4;
        *in_b = (double)n;
        break;
    default:
        n = b->out_bytes / 4;
        *in_b = 2.0 * (double)n;
        break;
    }
    *out_b = 4.0 * (double)n;
    return n;
}

static void run_kernel(const bench_kernel *k, const buffers *b, size_t n)
{
    switch (k->family) {
    case MOE_KERNEL_FAMILY_CVT_BF16_F32:
        k->fn.cvt_bf16_f32(n, (const uint16_t *)b->in, b->out);
        break;
    case MOE_KERNEL_FAMILY_CVT_F16_F32:
        k->fn.cvt_f16_f32(n, (const uint16_t *)b->in, b->out);
        break;
    case MOE_KERNEL_FAMILY_CVT_E4M3_F32: k->fn.cvt_e4m3_f32(n, b->in, b->out); break;
    case MOE_KERNEL_FAMILY_CVT_MXFP4_F32: k->fn.cvt_mxfp4_f32(n, b->in, b->scales, b->out); break;
    default: break; /* only conversion families are listed here */
    }
}

/* A plain read of the output buffer: 4 independent sums so the adds do not serialise. */
static volatile uint64_t sink;

static void read_all(const buffers *b)
{
    const uint64_t *p = (const uint64_t *)b->out;
    size_t n = b->out_bytes / 8;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    sink = s0 + s1 + s2 + s3;
}

typedef struct floors {
    double read, copy, fill; /* GB/s, bytes moved in both directions for copy */
} floors;

static floors measure_floors(const buffers *b, uint8_t *copy_src)
{
    double tr[REPEATS], tc[REPEATS], tf[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        read_all(b);
        double t1 = bench_now_ns();
        memcpy(b->out, copy_src, b->out_bytes);
        double t2 = bench_now_ns();
        memset(b->out, r, b->out_bytes);
        double t3 = bench_now_ns();
        tr[r] = (t1 - t0) * 1e-9; /* seconds */
        tc[r] = (t2 - t1) * 1e-9;
        tf[r] = (t3 - t2) * 1e-9;
    }
    double bytes = (double)b->out_bytes;
    floors f = {bytes / bench_median(tr, REPEATS) / 1e9,
                2 * bytes / bench_median(tc, REPEATS) / 1e9,
                bytes / bench_median(tf, REPEATS) / 1e9};
    return f;
}

static uint64_t rng = 0x2545F4914F6CDD1Du;

static uint8_t rand_byte(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)(rng >> 24);
}

int main(void)
{
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, "bench_convert: %s\n", moe_last_error());
        return 1;
    }
    size_t llc = bench_llc_bytes();
    buffers b = {0};
    /* Twice the last-level cache, so every pass streams from memory. */
    b.out_bytes = 2 * llc < ((size_t)64 << 20) ? (size_t)64 << 20 : 2 * llc;
    b.out_bytes &= ~(size_t)4095;
    size_t in_bytes = b.out_bytes / 2; /* bf16 and f16 read half of what they write */
    b.in = malloc(in_bytes);
    b.scales = malloc(b.out_bytes / 128);
    b.out = malloc(b.out_bytes);
    uint8_t *copy_src = malloc(b.out_bytes);
    if (!b.in || !b.scales || !b.out || !copy_src) {
        fprintf(stderr, "bench_convert: out of memory for %zu-byte buffers\n", b.out_bytes);
        return 1;
    }
    /* Finite codes: E4M3 NaNs are avoided by clearing the top exponent bit; MXFP4 scales stay
     * near 2^0 (no denormal results, which cost microcode assists on some CPUs). */
    for (size_t i = 0; i < in_bytes; i++)
        b.in[i] = rand_byte() & 0xBF;
    for (size_t i = 0; i < b.out_bytes / 128; i++)
        b.scales[i] = (uint8_t)(120 + rand_byte() % 16);
    memset(copy_src, 1, b.out_bytes);
    memset(b.out, 0, b.out_bytes);

    printf("bench_convert: %s; allowed %s%s; LLC %zu MiB; output %zu MiB per pass; median of %d; "
           "1 thread\n",
           info.brand, moe_isa_level_name(info.cap), info.cap_from_env ? " (MOE_ISA)" : "",
           llc >> 20, b.out_bytes >> 20, REPEATS);
    floors f = measure_floors(&b, copy_src);
    printf("floors: read %.1f GB/s, memcpy %.1f GB/s (read + write), memset %.1f GB/s\n\n", f.read,
           f.copy, f.fill);
    printf("%-28s %8s %8s %10s %8s %9s\n", "kernel", "ms", "GB/s", "elem/ns", "/memcpy", "/read");
    for (size_t i = 0; i < NKERNELS; i++) {
        const bench_kernel *k = &kernels[i];
        if (k->isa & ~moe_cpu_caps_mask(&info.allowed)) {
            printf("%-28s skipped: not allowed on this CPU/build/cap\n", k->name);
            continue;
        }
        double in_b, out_b, t[REPEATS];
        size_t n = problem_size(k, &b, &in_b, &out_b);
        run_kernel(k, &b, n); /* warm the page tables and the code */
        for (int r = 0; r < REPEATS; r++) {
            double t0 = bench_now_ns();
            run_kernel(k, &b, n);
            t[r] = (bench_now_ns() - t0) * 1e-9; /* seconds */
        }
        double tm = bench_median(t, REPEATS);
        double gbs = (in_b + out_b) / tm / 1e9;
        double elems = k->family == MOE_KERNEL_FAMILY_CVT_MXFP4_F32 ? 32.0 * (double)n : (double)n;
        printf("%-28s %8.1f %8.1f %10.2f %8.2f %9.2f\n", k->name, 1e3 * tm, gbs, elems / tm / 1e9,
               gbs / f.copy, gbs / f.read);
    }
    printf(
        "\nGB/s counts bytes read plus bytes written; /memcpy and /read divide by the floors.\n");
    free(b.in);
    free(b.scales);
    free(b.out);
    free(copy_src);
    return 0;
}
