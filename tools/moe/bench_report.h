/* bench_report.h — `moe bench` results: the table, the JSON and the roofline SVG. */
#ifndef MOE_TOOLS_BENCH_REPORT_H
#define MOE_TOOLS_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_machine.h"
#include "create_stats.h"
#include "moe.h"

/* One layer as created for a run of cases. */
typedef struct bench_layer_info {
    char preset[64], format[16], recipe[16], kernel[96], insn[32];
    /* The shared experts' set and instruction when they run another recipe (DeepSeek-V4's
     * FP8 shared expert beside MXFP4 routed ones); empty otherwise. */
    char shared_kernel[96], shared_insn[32];
    int64_t hidden, inter, experts, resident, topk;
    int threads;
    create_stats create;
} bench_layer_info;

/* One (layer, tokens) case. */
typedef struct bench_result {
    const bench_layer_info *layer;
    size_t tokens;
    int repeats;
    double hit; /* routed experts with a token in the median forward (cmd_bench.c) */
    double ms, weight_bytes, flops; /* the median forward's ms and bytes */
    double shared_flops; /* the part of flops the shared experts run (in flops) */
    /* floor = max(bytes / read, Σ flops / peak of the instruction each part runs on) */
    double floor_ms, efficiency;
    bool compute_bound;
    moe_trace *trace; /* --trace: the median forward's steps (heap; NULL without) */
    double trace_ns;  /* and that forward's wall time */
} bench_result;

void bench_report_floors(FILE *out, const bench_floors *f);
/* The layer's creation figures and the read ceiling its cases were measured against. */
void bench_report_layer(FILE *out, const bench_layer_info *l, const bench_floors *f);
void bench_report_header(FILE *out);
void bench_report_row(FILE *out, const bench_result *r);
/* The case's trace under a line naming the case; nothing without one. */
void bench_report_trace(FILE *out, const bench_result *r);
/* The whole run as one JSON document; false when out of memory or on a write error. */
bool bench_report_json(FILE *out, const bench_floors *f, const bench_result *r, size_t n);
/* The roofline: both ceilings per thread count, each case a point. False on an I/O error. */
bool bench_report_svg(const char *path, const bench_floors *f, const bench_result *r, size_t n);

#endif
