/* bench_memory.c — what one core's reads and fresh pages cost: read streams with and without prefetch, first-touch faults by page size. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE, MAP_ANONYMOUS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "bench_util.h"

/*
 * One thread, three rounds (the machine is shared: compare within a round).
 *
 * Reads: a 1 GiB buffer in 2 MiB pages, written once, read with 64-byte loads as S side by
 * side streams (S = 1, 2, 4; each stream one S-th of the buffer): without prefetch ("-"),
 * with `prefetcht1` 8 KB ahead in every stream ("L2"), and with `prefetcht0` 2 KB ahead as
 * well ("L2+L1", as the AVX-512 expert kernels prefetch); two lines per 128 bytes. GB/s, the
 * best of three passes. A decode kernel reads one tile after another: one stream with prefetch.
 *
 * Faults: 2000 MiB of fresh anonymous memory touched once per 4 KiB, in 4 KiB pages and with
 * MADV_HUGEPAGE, then memset: GB/s of the first touch (what creating a layer pays for the
 * packed bytes' pages), the user and system CPU milliseconds it took (where the process
 * accounting puts the page clearing), and GB/s of writing memory already faulted in.
 */

#define READ_BYTES ((size_t)1 << 30)
#define FAULT_BYTES ((size_t)2000 << 20)
static void reads(void)
{
#if BENCH_X86
    if (!__builtin_cpu_supports("avx512f")) {
        printf("reads: needs AVX-512 (skipped)\n");
        return;
    }
    char *p = bench_alloc_pages(READ_BYTES, 1);
    if (!p) {
        printf("reads: out of memory\n");
        return;
    }
    memset(p, 1, READ_BYTES);
    for (int round = 0; round < 3; round++) {
        printf("round %d reads:", round + 1);
        for (int streams = 1; streams <= 4; streams *= 2)
            for (int pf = 0; pf < 3; pf++) {
                double best = 1e30;
                for (int r = 0; r < 3; r++) {
                    const double t0 = bench_now_ns();
                    bench_sink = bench_read_streams_avx512(p, READ_BYTES, streams, pf);
                    const double dt = bench_now_ns() - t0;
                    if (dt < best) best = dt;
                }
                static const char *const pf_name[] = {"-", "L2", "L2+L1"};
                printf("  %d stream%s %s %.2f", streams, streams > 1 ? "s" : "", pf_name[pf],
                       (double)READ_BYTES / best);
            }
        printf(" GB/s\n");
    }
    free(p);
#else
    printf("reads: x86-64 only (skipped)\n");
#endif
}

static double ms_between(const struct timeval *a, const struct timeval *b)
{
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_usec - a->tv_usec) / 1e3;
}

static void faults(void)
{
    for (int round = 0; round < 3; round++) {
        printf("round %d faults:", round + 1);
        for (int huge = 0; huge < 2; huge++) {
            char *p = mmap(NULL, FAULT_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            if (p == MAP_FAILED) {
                printf(" out of memory");
                break;
            }
            if (huge) (void)madvise(p, FAULT_BYTES, MADV_HUGEPAGE);
            struct rusage u0, u1;
            getrusage(RUSAGE_SELF, &u0);
            const double t0 = bench_now_ns();
            for (size_t i = 0; i < FAULT_BYTES; i += 4096)
                p[i] = 1;
            const double t1 = bench_now_ns();
            getrusage(RUSAGE_SELF, &u1);
            memset(p, 2, FAULT_BYTES);
            const double t2 = bench_now_ns();
            printf("  %s pages: first touch %.2f (user %.0f ms, system %.0f ms), memset after %.2f",
                   huge ? "2 MiB" : "4 KiB", (double)FAULT_BYTES / (t1 - t0),
                   ms_between(&u0.ru_utime, &u1.ru_utime), ms_between(&u0.ru_stime, &u1.ru_stime),
                   (double)FAULT_BYTES / (t2 - t1));
            munmap(p, FAULT_BYTES);
        }
        printf(" GB/s\n");
    }
}

int main(void)
{
    printf("# one thread; reads of %zu MiB (best of 3 passes), faults of %zu MiB\n",
           READ_BYTES >> 20, FAULT_BYTES >> 20);
    reads();
    faults();
    return 0;
}
