/* json_util.h — internal: strict JSON loading through jansson, with libmoe statuses. */
#ifndef MOE_IO_JSON_UTIL_H
#define MOE_IO_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "moe.h"

/* The largest integer the safetensors schema allows for offsets and shape entries (a
 * "48-bit size_t"); the same bound keeps every later product of two of them in 96 bits. */
#define MOE_JSON_MAX_INT ((UINT64_C(1) << 48) - 1)

/* Parses LEN bytes as one JSON object or array (leading and trailing JSON whitespace allowed,
 * anything else after it rejected) with duplicate keys rejected, once moe_json_check_cost
 * found that its tree fits the memory bound (else MOE_EOVERFLOW before anything is built,
 * naming the shape). Messages start with
 * "FILE: WHAT: ". Statuses: a duplicate key is MOE_EDUPLICATE naming the key; an integer
 * beyond 64 bits MOE_EOVERFLOW; anything else that does not parse (including text that is
 * not UTF-8) MOE_EJSON, with jansson's line and column; a failure jansson gives no message for
 * (its allocation failed) MOE_ENOMEM. *out must be json_decref'd. */
moe_status moe_json_parse(const void *buf, size_t len, const char *file, const char *what,
                          json_t **out);

/* "an object", "an array", "a string", "an integer", "a real number", "true", "false" or
 * "null", to write "is an array, not an object". */
const char *moe_json_type_name(const json_t *v);

#endif
