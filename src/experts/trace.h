/* trace.h — internal: record the steps of a forward into a moe_trace (one thread writes). */
#ifndef MOE_EXPERTS_TRACE_H
#define MOE_EXPERTS_TRACE_H

#include <stdint.h>

#include "moe.h"

/* The recorder of one forward. Only one thread (the team's master) marks steps; the time of a
 * step runs from the previous mark (or the start) to its own mark, which the caller places
 * right after the barrier that ends the step. */
typedef struct moe_trace_rec {
    moe_trace *trace; /* NULL: recording is off and marks do nothing */
    uint64_t last_ns;
} moe_trace_rec;

/* Starts recording into TRACE (may be NULL): count = 0, the clock starts. */
void moe_trace_start(moe_trace_rec *r, moe_trace *trace);

/* Appends one step: NAME and KERNEL (truncated to the fields), bytes read and written, and the
 * nanoseconds since the previous mark. Steps past MOE_TRACE_MAX_STEPS are dropped. */
void moe_trace_mark(moe_trace_rec *r, const char *name, const char *kernel, uint64_t bytes_read,
                    uint64_t bytes_written);

#endif
