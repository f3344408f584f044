/* trace_report.c — the steps of one traced forward as a table. */
#include "trace_report.h"

#include <inttypes.h>

void trace_report(FILE *out, const moe_trace *tr)
{
    fprintf(out, "  %-20s %-52s %14s %14s %12s %8s\n", "step", "kernel", "bytes read",
            "bytes written", "ns", "GB/s");
    uint64_t rd = 0, wr = 0, ns = 0;
    for (size_t i = 0; i < tr->count && i < MOE_TRACE_MAX_STEPS; i++) {
        const moe_trace_step *s = &tr->steps[i];
        const double gbs = s->ns ? (double)(s->bytes_read + s->bytes_written) / (double)s->ns : 0;
        fprintf(out, "  %-20.32s %-52.64s %14" PRIu64 " %14" PRIu64 " %12" PRIu64 " %8.2f\n",
                s->name, s->kernel, s->bytes_read, s->bytes_written, s->ns, gbs);
        rd += s->bytes_read;
        wr += s->bytes_written;
        ns += s->ns;
    }
    fprintf(out, "  %-20s %-52s %14" PRIu64 " %14" PRIu64 " %12" PRIu64 " %8.2f\n", "steps", "",
            rd, wr, ns, ns ? (double)(rd + wr) / (double)ns : 0);
}
