/* test_dtype_names.c — the dtype table: names, bit widths and safetensors spellings. */
#include <string.h>

#include "dtype/dtype.h"
#include "test.h"

static void test_safetensors_round_trip(void)
{
    /* Every dtype with a safetensors name parses back to itself; names are distinct. */
    for (int d = 1; d < MOE_DTYPE_COUNT_; d++) {
        const char *st = moe_dtype_safetensors_name((moe_dtype)d);
        CHECKF(moe_dtype_name((moe_dtype)d) && *moe_dtype_name((moe_dtype)d), "dtype %d name", d);
        CHECKF(moe_dtype_bits((moe_dtype)d) > 0, "dtype %d bits", d);
        if (!st) continue;
        CHECKF(moe_dtype_from_safetensors(st) == (moe_dtype)d, "dtype %d via '%s'", d, st);
    }
}

static void test_known_names(void)
{
    static const struct {
        const char *st;
        moe_dtype dtype;
        unsigned bits;
    } rows[] = {
        {"BF16", MOE_DTYPE_BF16, 16},      {"F16", MOE_DTYPE_F16, 16},
        {"F32", MOE_DTYPE_F32, 32},        {"F8_E4M3", MOE_DTYPE_F8_E4M3, 8},
        {"F8_E5M2", MOE_DTYPE_F8_E5M2, 8}, {"F8_E8M0", MOE_DTYPE_F8_E8M0, 8},
        {"F4", MOE_DTYPE_F4_E2M1, 4},      {"U8", MOE_DTYPE_U8, 8},
        {"I32", MOE_DTYPE_I32, 32},        {"I64", MOE_DTYPE_I64, 64},
        {"BOOL", MOE_DTYPE_BOOL, 8},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        CHECKF(moe_dtype_from_safetensors(rows[i].st) == rows[i].dtype, "'%s'", rows[i].st);
        CHECKF(moe_dtype_bits(rows[i].dtype) == rows[i].bits, "'%s' bits", rows[i].st);
    }
    CHECK(moe_dtype_bits(MOE_DTYPE_INT4) == 4 && moe_dtype_bits(MOE_DTYPE_UINT4) == 4);
    CHECK(moe_dtype_safetensors_name(MOE_DTYPE_INT4) == NULL);
    CHECK(moe_dtype_safetensors_name(MOE_DTYPE_UINT4) == NULL);
}

static void test_unknown_names(void)
{
    static const char *bad[] = {"", "bf16", "F8_E4M3FN", "F8", "FP4", "F6_E2M3", " BF16", "BF16 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(moe_dtype_from_safetensors(bad[i]) == MOE_DTYPE_INVALID, "'%s'", bad[i]);
    CHECK(moe_dtype_from_safetensors(NULL) == MOE_DTYPE_INVALID);
    CHECK(strcmp(moe_dtype_name((moe_dtype)999), "invalid") == 0);
    CHECK(moe_dtype_bits((moe_dtype)-1) == 0);
    CHECK(moe_dtype_safetensors_name((moe_dtype)999) == NULL);
}

int main(void)
{
    test_safetensors_round_trip();
    test_known_names();
    test_unknown_names();
    return TEST_END();
}
