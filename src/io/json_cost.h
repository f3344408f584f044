/* json_cost.h — internal: an upper estimate of the memory jansson takes to parse a JSON text,
 * checked before it does. */
#ifndef MOE_IO_JSON_COST_H
#define MOE_IO_JSON_COST_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"

/* What one lenient pass over a JSON text counts: every '{', '[', member (a string followed by
 * ':'), other string, number, literal and ',' it holds, the bytes of its strings, and its
 * longest token. It does not validate: on text jansson rejects the counts still bound what
 * jansson builds before it stops. */
typedef struct moe_json_shape {
    uint64_t objects, arrays, members, strings, numbers, literals, commas;
    uint64_t string_bytes; /* keys and string values, as written (escapes decode shorter) */
    uint64_t longest;      /* the longest string or number token, in bytes */
} moe_json_shape;

void moe_json_shape_count(const void *buf, size_t len, moe_json_shape *out);

/* An upper bound on the bytes jansson 2.x allocates to parse a text of SHAPE (its tree plus
 * the lexer's buffer), malloc's own overhead included: the per-value costs are those measured
 * on jansson 2.14 (docs/errors.md, "Memory"), rounded up. */
uint64_t moe_json_shape_bytes(const moe_json_shape *shape);

/* The most a LEN-byte text may take to parse: 2 x LEN + 48 MiB. With the text itself and what
 * the readers build from the tree, reading a JSON file stays within 4 x its size + 64 MiB. */
uint64_t moe_json_budget(size_t len);

/* MOE_OK when the text's estimate is within its budget; else MOE_EOVERFLOW, "FILE: WHAT's
 * shape (N objects, ...) would take about X MiB to parse, over the limit of Y MiB for its
 * LEN bytes". */
moe_status moe_json_check_cost(const void *buf, size_t len, const char *file, const char *what);

#endif
