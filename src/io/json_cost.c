/* json_cost.c — a counting pass over JSON text that bounds what jansson's tree of it will take. */
#include "io/json_cost.h"

#include <string.h>

#include "core/error.h"

/* Bytes per value, malloc's header and rounding included, measured on jansson 2.14 (x86-64
 * glibc) as the growth of the live heap per value in long arrays and objects of each kind,
 * then rounded up: an object 232 (its hash table of 8 buckets), an array 136, an integer or
 * real 40, a string 72 + its length, a member 88 + its key's length, true/false/null 8 (a
 * shared singleton; only the parent's slot). A ',' pays for a slot in the parent (8, doubled
 * by growth). The lexer's buffer holds one token at a time and grows by doubling. */
enum {
    COST_OBJECT = 240,
    COST_ARRAY = 144,
    COST_NUMBER = 48,
    COST_STRING = 80,
    COST_MEMBER = 96,
    COST_LITERAL = 16,
    COST_COMMA = 16,
};

#define BUDGET_CONSTANT ((uint64_t)48 << 20)

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void moe_json_shape_count(const void *buf, size_t len, moe_json_shape *out)
{
    const unsigned char *p = buf, *end = p + len;
    moe_json_shape s;
    memset(&s, 0, sizeof s);
    while (p < end) {
        const unsigned char c = *p;
        if (c == '"') {
            const unsigned char *q = p + 1;
            for (;;) { /* to the closing quote, stepping over escapes */
                const unsigned char *hit = memchr(q, '"', (size_t)(end - q));
                if (!hit) {
                    q = end;
                    break;
                }
                size_t backslashes = 0;
                while (hit - backslashes > q && hit[-1 - (ptrdiff_t)backslashes] == '\\')
                    backslashes++;
                q = hit + 1;
                if (backslashes % 2 == 0) break;
            }
            const uint64_t n = (uint64_t)(q - p);
            s.string_bytes += n;
            if (n > s.longest) s.longest = n;
            p = q;
            const unsigned char *r = p;
            while (r < end && is_space(*r))
                r++;
            if (r < end && *r == ':')
                s.members++;
            else
                s.strings++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            const unsigned char *q = p;
            while (q < end && (*q == '-' || *q == '+' || *q == '.' || *q == 'e' || *q == 'E' ||
                               (*q >= '0' && *q <= '9')))
                q++;
            s.numbers++;
            if ((uint64_t)(q - p) > s.longest) s.longest = (uint64_t)(q - p);
            p = q;
            continue;
        }
        if (c >= 'a' && c <= 'z') {
            while (p < end && *p >= 'a' && *p <= 'z')
                p++;
            s.literals++;
            continue;
        }
        s.objects += c == '{';
        s.arrays += c == '[';
        s.commas += c == ',';
        p++;
    }
    *out = s;
}

uint64_t moe_json_shape_bytes(const moe_json_shape *s)
{
    /* Each count is at most the text's length (< 2^48 here), so no sum can overflow. The
     * longest token four times: jansson's lexer buffer doubles up to twice it, beside the
     * decoded copy (fuzz_json: 3.3 times a 102 KB unterminated string). */
    return COST_OBJECT * s->objects + COST_ARRAY * s->arrays + COST_MEMBER * s->members +
           COST_STRING * s->strings + COST_NUMBER * s->numbers + COST_LITERAL * s->literals +
           COST_COMMA * s->commas + s->string_bytes + 4 * s->longest + 64;
}

uint64_t moe_json_budget(size_t len) { return 2 * (uint64_t)len + BUDGET_CONSTANT; }

moe_status moe_json_check_cost(const void *buf, size_t len, const char *file, const char *what)
{
    moe_json_shape s;
    moe_json_shape_count(buf, len, &s);
    const uint64_t need = moe_json_shape_bytes(&s), budget = moe_json_budget(len);
    if (need <= budget) return MOE_OK;
    const double mib = 1024.0 * 1024.0;
    return moe_error(MOE_EOVERFLOW,
                     "%s: %s's shape (%llu objects, %llu arrays, %llu members, %llu other "
                     "values) would take about %.0f MiB to parse, over the limit of %.0f MiB "
                     "for its %zu bytes (2 x its size + 48 MiB)",
                     file, what, (unsigned long long)s.objects, (unsigned long long)s.arrays,
                     (unsigned long long)s.members,
                     (unsigned long long)(s.strings + s.numbers + s.literals), (double)need / mib,
                     (double)budget / mib, len);
}
