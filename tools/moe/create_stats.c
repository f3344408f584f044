/* create_stats.c — moe_layer_create timed, with its packed bytes and peak resident memory. */
#include "create_stats.h"

#include <string.h>
#include <sys/resource.h>

#include "bench_machine.h"
#include "layer/layer_internal.h"

/* User and system CPU milliseconds of the whole process so far. */
static void cpu_ms(double *user, double *sys)
{
    struct rusage ru;
    *user = *sys = 0;
    if (getrusage(RUSAGE_SELF, &ru)) return;
    *user = (double)ru.ru_utime.tv_sec * 1e3 + (double)ru.ru_utime.tv_usec / 1e3;
    *sys = (double)ru.ru_stime.tv_sec * 1e3 + (double)ru.ru_stime.tv_usec / 1e3;
}

moe_status create_measured(const moe_model *model, int layer, const moe_layer_options *options,
                           const moe_layer_tuning *tuning, moe_layer **out, create_stats *s)
{
    memset(s, 0, sizeof *s);
    bench_rss_peak_reset();
    double u0, s0, u1, s1;
    cpu_ms(&u0, &s0);
    const double base = (double)bench_rss_now(), t0 = bench_clock_ns();
    const moe_status st = moe_layer_create_tuned(model, layer, options, tuning, out);
    const double ns = bench_clock_ns() - t0, peak = (double)bench_rss_peak();
    cpu_ms(&u1, &s1);
    if (st) return st;
    const moe_layer_plan *p = &(*out)->plan;
    double packed = (double)p->gate_bytes;
    for (int g = 0; g < MOE_LG_COUNT_; g++)
        if (p->groups[g].present) packed += (double)p->groups[g].group.packed_bytes;
    s->ms = ns / 1e6;
    s->user_ms = u1 - u0;
    s->sys_ms = s1 - s0;
    s->packed_bytes = packed;
    s->pack_gbs = ns > 0 ? packed / ns : 0;
    s->pack_gbs_cpu = s->user_ms > 0 ? packed / (s->user_ms * 1e6) : 0;
    s->rss_growth = peak > base ? peak - base : 0;
    s->rss_limit = 1.15 * packed + 64e6;
    return MOE_OK;
}

void create_stats_print(FILE *out, const create_stats *s)
{
    fprintf(out,
            "%.1f MB packed in %.0f ms, %.2f GB/s (CPU: user %.0f ms, %.2f GB/s per thread; "
            "system %.0f ms); peak resident growth %.1f MB (limit 1.15 x packed + 64 MB = %.1f "
            "MB: %s)",
            s->packed_bytes / 1e6, s->ms, s->pack_gbs, s->user_ms, s->pack_gbs_cpu, s->sys_ms,
            s->rss_growth / 1e6, s->rss_limit / 1e6, s->rss_growth <= s->rss_limit ? "within" : "OVER");
}
