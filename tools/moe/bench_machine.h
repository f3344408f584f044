/* bench_machine.h — the machine's floors for `moe bench`: read bandwidth, instruction peaks,
 * memory. */
#ifndef MOE_TOOLS_BENCH_MACHINE_H
#define MOE_TOOLS_BENCH_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe.h"

#define BENCH_MAX_INSNS 9

/* Floors measured in this run, at 1 thread and at `threads` (all cores). */
typedef struct bench_floors {
    int threads;
    double read_gbs[2];                /* [0]: 1 thread, [1]: all threads */
    int n_insns;                       /* the instructions this CPU has */
    const char *insn[BENCH_MAX_INSNS]; /* e.g. "vfmadd231ps zmm" */
    int insn_id[BENCH_MAX_INSNS];      /* its bench_insn (bench/bench_util.h) */
    double peak_gflops[BENCH_MAX_INSNS][2];
    void *flush;      /* the eviction buffer (bench_util.h) */
    double llc_bytes; /* the last-level cache, as the eviction sizes it */
    /* What the figures belong to: the CPU (brand, features, the MOE_ISA cap: moe_cpu_query;
     * all zero when that failed), the cores online and the per-core L2 (0 when unknown). */
    moe_cpu_info cpu;
    int cores;
    size_t l2_bytes;
} bench_floors;

/* Measures every floor (a few seconds; each the fastest of a few passes); false when out of
 * memory. */
bool bench_floors_measure(bench_floors *f, int threads);
void bench_floors_free(bench_floors *f);
/* Measures the read floor and every peak at THREADS (1 or f->threads) again, keeping the
 * faster of each (about a second): run before each layer's cases, so a start that caught the
 * other core busy does not set the ceilings of the whole run. */
void bench_floors_refresh(bench_floors *f, int threads);

/* Whether the floors measured at the start look like a busy machine: an instruction's peak at
 * f->threads threads below 1.3 x its 1-thread peak, where those threads fit the idle physical
 * cores (register-only loops then scale with the threads). On true, one line in MSG saying
 * which figures, and where OMP_WAIT_POLICY is unset that passive waits help. */
bool bench_floors_busy(const bench_floors *f, char *msg, size_t size);

/* Index of INSN in f->insn, or -1 when this CPU lacks it. */
int bench_floors_insn(const bench_floors *f, const char *insn);
/* The floor for THREADS (1 or f->threads): slot 0 or 1. */
static inline int bench_floors_slot(const bench_floors *f, int threads)
{
    return threads > 1 && f->threads > 1;
}

/* Reads a buffer twice the last-level cache with THREADS threads, so the next forward's
 * weights come from memory, as in a model whose other layers evicted them. The pass is the
 * read floor's own measurement, so it is timed too: a faster pass at 1 or f->threads threads
 * raises that read ceiling (on a shared machine the floors measured at the start can catch
 * the other core busy, and a case would then come out above 1.0 of its floor). */
void bench_evict(bench_floors *f, int threads);

/* Nanoseconds of a monotonic clock. */
double bench_clock_ns(void);

/* /proc/meminfo MemAvailable in bytes (0 if unknown). */
uint64_t bench_mem_available(void);
/* This process's resident bytes now (VmRSS), and the peak since the last
 * bench_rss_peak_reset (VmHWM); 0 if unknown. */
uint64_t bench_rss_now(void);
uint64_t bench_rss_peak(void);
void bench_rss_peak_reset(void);

#endif
