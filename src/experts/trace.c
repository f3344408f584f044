/* trace.c — the forward's step recorder: names, kernels, bytes, and monotonic-clock times. */
#include "experts/trace.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void moe_trace_start(moe_trace_rec *r, moe_trace *trace)
{
    r->trace = trace;
    r->last_ns = 0;
    if (!trace) return;
    trace->count = 0;
    r->last_ns = now_ns();
}

void moe_trace_mark(moe_trace_rec *r, const char *name, const char *kernel, uint64_t bytes_read,
                    uint64_t bytes_written)
{
    if (!r || !r->trace) return;
    const uint64_t t = now_ns();
    moe_trace *tr = r->trace;
    if (tr->count < MOE_TRACE_MAX_STEPS) {
        moe_trace_step *s = &tr->steps[tr->count++];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", name);
        snprintf(s->kernel, sizeof s->kernel, "%s", kernel);
        s->bytes_read = bytes_read;
        s->bytes_written = bytes_written;
        s->ns = t - r->last_ns;
    }
    r->last_ns = t;
}
