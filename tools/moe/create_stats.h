/* create_stats.h — what creating a layer costs: time, packed bytes, packing speed, peak memory. */
#ifndef MOE_TOOLS_CREATE_STATS_H
#define MOE_TOOLS_CREATE_STATS_H

#include <stdio.h>

#include "moe.h"

typedef struct create_stats {
    double ms;           /* wall time of moe_layer_create */
    double user_ms;      /* CPU time of all threads in user mode: libmoe's own packing work */
    double sys_ms;       /* ... in the kernel: mostly faulting in (zeroing) the fresh pages the
                            packed bytes land in, and mapping the checkpoint's */
    double packed_bytes; /* the gate and every expert group, as packed */
    double pack_gbs;     /* packed_bytes per second of creation */
    double pack_gbs_cpu; /* packed_bytes per second of user CPU time: per thread */
    double rss_growth;   /* peak resident bytes during creation minus resident before */
    double rss_limit;    /* the target: 1.15 × packed + 64 MB */
} create_stats;

struct moe_layer_tuning;

/* moe_layer_create (with TUNING where not NULL: moe bench's resident experts), measured. Peak
 * memory comes from /proc/self/status VmHWM after a clear_refs reset; 0 where /proc does not
 * tell. */
moe_status create_measured(const moe_model *model, int layer, const moe_layer_options *options,
                           const struct moe_layer_tuning *tuning, moe_layer **out,
                           create_stats *stats);

/* "N MB packed in T ms, G GB/s (CPU: user U ms, P GB/s per thread; system S ms); peak
 * resident growth R MB (limit L MB: within|OVER)", no newline. */
void create_stats_print(FILE *out, const create_stats *s);

#endif
