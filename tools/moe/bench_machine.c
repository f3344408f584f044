/* bench_machine.c — floors measured in the same run (bench/bench_util.h) and memory probes. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE for the flush buffer (bench/bench_util.h) */
#include "bench_machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "cpu/cpu.h"

double bench_clock_ns(void) { return bench_now_ns(); }

bool bench_floors_measure(bench_floors *f, int threads)
{
    memset(f, 0, sizeof *f);
    f->threads = threads < 1 ? 1 : threads;
    bench_buffer *b = malloc(sizeof *b);
    if (!b || bench_buffer_init(b)) {
        free(b);
        return false;
    }
    f->flush = b;
    f->llc_bytes = (double)bench_llc_bytes();
    if (moe_cpu_query(&f->cpu) != MOE_OK) memset(&f->cpu, 0, sizeof f->cpu);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    f->cores = cores > 0 ? (int)cores : 0;
    f->l2_bytes = moe_cpu_l2_bytes();
    const int slots = f->threads > 1 ? 2 : 1; /* slot 1 = slot 0 on one thread */
    for (int s = 0; s < slots; s++)
        f->read_gbs[s] = bench_stream_read(b, s ? f->threads : 1, 7);
    f->read_gbs[1] = f->read_gbs[slots - 1];
    for (int i = 0; i < BENCH_INSN_COUNT_ && f->n_insns < BENCH_MAX_INSNS; i++) {
        if (!bench_insn_supported((bench_insn)i)) continue;
        const int k = f->n_insns++;
        f->insn[k] = bench_insn_name((bench_insn)i);
        f->insn_id[k] = i;
        for (int s = 0; s < slots; s++)
            f->peak_gflops[k][s] = bench_peak_gflops((bench_insn)i, s ? f->threads : 1, 5);
        f->peak_gflops[k][1] = f->peak_gflops[k][slots - 1];
    }
    return true;
}

/* Raises V[slot of THREADS] to X, and V[1] with it when one thread is all the run has (slot 1
 * then mirrors slot 0); nothing for a thread count the floors were not measured at. */
static void raise_ceiling(const bench_floors *f, int threads, double v[2], double x)
{
    const int slot = bench_floors_slot(f, threads);
    if (threads != (slot ? f->threads : 1)) return;
    for (int s = slot; s <= (f->threads > 1 ? slot : 1); s++)
        if (x > v[s]) v[s] = x;
}

void bench_floors_refresh(bench_floors *f, int threads)
{
    raise_ceiling(f, threads, f->read_gbs, bench_stream_read(f->flush, threads, 1));
    for (int k = 0; k < f->n_insns; k++)
        raise_ceiling(f, threads, f->peak_gflops[k],
                      bench_peak_gflops((bench_insn)f->insn_id[k], threads, 3));
}

void bench_floors_free(bench_floors *f)
{
    if (f->flush) bench_buffer_free(f->flush);
    free(f->flush);
    f->flush = NULL;
}

/* The physical cores: the logical CPUs online over the SMT siblings of cpu0 (its
 * thread_siblings_list, "0-1" or "0,8"); the logical count when that is unknown. */
static int physical_cores(int logical)
{
    FILE *fp = fopen("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "r");
    if (!fp) return logical;
    char text[64] = "";
    const bool ok = fgets(text, sizeof text, fp) != NULL;
    fclose(fp);
    int siblings = 1, a = 0, b = 0;
    if (ok && sscanf(text, "%d-%d", &a, &b) == 2 && b > a)
        siblings = b - a + 1;
    else if (ok)
        for (const char *c = text; *c; c++)
            siblings += *c == ',';
    return logical / siblings > 0 ? logical / siblings : 1;
}

bool bench_floors_busy(const bench_floors *f, char *msg, size_t size)
{
    if (f->threads < 2 || f->threads > physical_cores(f->cores)) return false;
    for (int k = 0; k < f->n_insns; k++) {
        const double one = f->peak_gflops[k][0], all = f->peak_gflops[k][1];
        if (one > 0 && all < 1.3 * one) {
            snprintf(msg, size,
                     "the machine looks busy: %s peaks at %.1f GFLOP/s on %d threads, %.2fx its "
                     "1-thread %.1f (register-only loops scale with idle cores); floors and "
                     "efficiencies may be off: rerun on an idle machine%s",
                     f->insn[k], all, f->threads, all / one, one,
                     getenv("OMP_WAIT_POLICY") ? ""
                                               : ", or with OMP_WAIT_POLICY=passive (OpenMP's "
                                                 "spinning waits at a forward's barriers slow "
                                                 "the cases on more than one thread most)");
            return true;
        }
    }
    return false;
}

int bench_floors_insn(const bench_floors *f, const char *insn)
{
    for (int i = 0; i < f->n_insns; i++)
        if (!strcmp(f->insn[i], insn)) return i;
    return -1;
}

void bench_evict(bench_floors *f, int threads)
{
    const double t0 = bench_now_ns();
    bench_flush(f->flush, threads);
    raise_ceiling(f, threads, f->read_gbs,
                  (double)bench_shares_bytes(f->flush, threads) / (bench_now_ns() - t0));
}

/* The number after KEY in FILE (a "Key:   123 kB" line), times 1024; 0 if absent. */
static uint64_t kb_field(const char *file, const char *key)
{
    FILE *fp = fopen(file, "r");
    if (!fp) return 0;
    char line[256];
    uint64_t v = 0;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = strtoull(line + n + 1, NULL, 10) * 1024;
            break;
        }
    fclose(fp);
    return v;
}

uint64_t bench_mem_available(void) { return kb_field("/proc/meminfo", "MemAvailable"); }
uint64_t bench_rss_now(void) { return kb_field("/proc/self/status", "VmRSS"); }
uint64_t bench_rss_peak(void) { return kb_field("/proc/self/status", "VmHWM"); }

void bench_rss_peak_reset(void)
{
    /* "5" resets the peak resident set size (Linux 4.0+; proc(5), clear_refs). */
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    if (!fp) return;
    fputs("5", fp);
    fclose(fp);
}
