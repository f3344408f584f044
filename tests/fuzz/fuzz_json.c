/* fuzz_json.c — libFuzzer target: JSON text; jansson never allocates more than json_cost's bound
 * says it will, and the bounded parse agrees with jansson on what parses. */
#include <jansson.h>

#include "fuzz_util.h"

#include "core/alloc.h"
#include "io/json_cost.h"
#include "io/json_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* jansson's allocations through the library's accounting, so its peak is counted. */
    json_set_alloc_funcs(moe_malloc, moe_free);
    moe_json_shape shape;
    moe_json_shape_count(data, size, &shape);
    const uint64_t bound = moe_json_shape_bytes(&shape);
    moe_alloc_peak_reset();
    json_error_t err;
    json_t *any =
        json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    const int64_t peak = moe_alloc_peak_bytes();
    if ((uint64_t)peak > bound) {
        fprintf(stderr, "jansson took %lld bytes, over the bound of %llu\n", (long long)peak,
                (unsigned long long)bound);
        FUZZ_REQUIRE((uint64_t)peak <= bound);
    }
    json_decref(any);
    json_t *root = NULL;
    const moe_status st = moe_json_parse(data, size, "fuzz.json", "text", &root);
    FUZZ_REQUIRE_MESSAGE(st);
    /* Accepted only within the budget, and then exactly what jansson accepts (an object or an
     * array at the top). */
    if (st == MOE_OK) {
        FUZZ_REQUIRE(bound <= moe_json_budget(size));
        FUZZ_REQUIRE(json_is_object(root) || json_is_array(root));
    }
    FUZZ_REQUIRE(st != MOE_EOVERFLOW || bound > moe_json_budget(size) ||
                 strstr(moe_last_error(), "out of range"));
    json_decref(root);
    return 0;
}
