/* create_stats.c — moe_layer_create timed, with its packed bytes and peak resident memory. */
#include "create_stats.h"

#include <string.h>

#include "bench_machine.h"
#include "layer/layer_internal.h"

moe_status create_measured(const moe_model *model, int layer, const moe_layer_options *options,
                           moe_layer **out, create_stats *s)
{
    memset(s, 0, sizeof *s);
    bench_rss_peak_reset();
    const double base = (double)bench_rss_now(), t0 = bench_clock_ns();
    const moe_status st = moe_layer_create(model, layer, options, out);
    const double ns = bench_clock_ns() - t0, peak = (double)bench_rss_peak();
    if (st) return st;
    const moe_layer_plan *p = &(*out)->plan;
    double packed = (double)p->gate_bytes;
    for (int g = 0; g < MOE_LG_COUNT_; g++)
        if (p->groups[g].present) packed += (double)p->groups[g].group.packed_bytes;
    s->ms = ns / 1e6;
    s->packed_bytes = packed;
    s->pack_gbs = ns > 0 ? packed / ns : 0;
    s->rss_growth = peak > base ? peak - base : 0;
    s->rss_limit = 1.15 * packed + 64e6;
    return MOE_OK;
}
