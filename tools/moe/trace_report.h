/* trace_report.h — the steps of one traced forward as a table (moe run and moe bench --trace). */
#ifndef MOE_TOOLS_TRACE_REPORT_H
#define MOE_TOOLS_TRACE_REPORT_H

#include <stdio.h>

#include "moe.h"

/* The column header, one line per step (name, kernel, bytes read and written, ns, GB/s) and
 * a last line with the steps' sums, each line indented by two spaces. */
void trace_report(FILE *out, const moe_trace *tr);

#endif
