/* json_util.c — jansson errors mapped to libmoe statuses with file, line and column. */
#include "io/json_util.h"

#include <string.h>

#include "core/error.h"
#include "io/json_cost.h"

/* jansson reports a duplicate as "duplicate object key near '"KEY"'"; the quoted token is
 * the useful part, so it is cut out of the text. */
static const char *duplicate_token(const char *text, char *buf, size_t cap)
{
    const char *p = strstr(text, "near '");
    if (!p) return text;
    p += strlen("near '");
    size_t n = strlen(p);
    if (n > 0 && p[n - 1] == '\'') n--;
    if (n >= cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

moe_status moe_json_parse(const void *buf, size_t len, const char *file, const char *what,
                          json_t **out)
{
    /* Checked first: jansson's tree of a text of empty objects is about 80 times its size. */
    moe_status st = moe_json_check_cost(buf, len, file, what);
    if (st != MOE_OK) return st;
    json_error_t err;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    if (root) {
        *out = root;
        return MOE_OK;
    }
    /* jansson writes a message for every problem it finds in the text; a failure with none
     * is one of its own allocations failing (it reports some of those as syntax errors, so an
     * allocation failure can still surface as MOE_EJSON). */
    if (err.text[0] == '\0')
        return moe_error(MOE_ENOMEM, "%s: %s: out of memory while parsing the JSON", file, what);
    char token[JSON_ERROR_TEXT_LENGTH];
    switch (json_error_code(&err)) {
    case json_error_duplicate_key:
        return moe_error(MOE_EDUPLICATE, "%s: %s: duplicate key %s (line %d, column %d)", file,
                         what, duplicate_token(err.text, token, sizeof token), err.line,
                         err.column);
    case json_error_numeric_overflow:
        return moe_error(MOE_EOVERFLOW, "%s: %s: integer out of range: %s (line %d, column %d)",
                         file, what, err.text, err.line, err.column);
    case json_error_invalid_utf8:
        return moe_error(MOE_EJSON, "%s: %s is not valid UTF-8: %s (line %d, column %d)", file,
                         what, err.text, err.line, err.column);
    default:
        return moe_error(MOE_EJSON, "%s: %s is not valid JSON: %s (line %d, column %d)", file, what,
                         err.text, err.line, err.column);
    }
}

const char *moe_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}
