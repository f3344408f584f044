/* dtype_names.c — the dtype table: canonical names, bit widths and safetensors spellings. */
#include <string.h>

#include "dtype/dtype.h"

typedef struct dtype_row {
    const char *name; /* canonical, lower case */
    unsigned bits;
    const char *safetensors; /* NULL when safetensors has no name for it */
} dtype_row;

static const dtype_row dtype_table[MOE_DTYPE_COUNT_] = {
    [MOE_DTYPE_INVALID] = {"invalid", 0, NULL},
    [MOE_DTYPE_F32] = {"f32", 32, "F32"},
    [MOE_DTYPE_F16] = {"f16", 16, "F16"},
    [MOE_DTYPE_BF16] = {"bf16", 16, "BF16"},
    [MOE_DTYPE_F64] = {"f64", 64, "F64"},
    [MOE_DTYPE_F8_E4M3] = {"f8_e4m3", 8, "F8_E4M3"},
    [MOE_DTYPE_F8_E5M2] = {"f8_e5m2", 8, "F8_E5M2"},
    [MOE_DTYPE_F8_E8M0] = {"f8_e8m0", 8, "F8_E8M0"},
    [MOE_DTYPE_F4_E2M1] = {"f4_e2m1", 4, "F4"},
    [MOE_DTYPE_BOOL] = {"bool", 8, "BOOL"},
    [MOE_DTYPE_U8] = {"u8", 8, "U8"},
    [MOE_DTYPE_I8] = {"i8", 8, "I8"},
    [MOE_DTYPE_U16] = {"u16", 16, "U16"},
    [MOE_DTYPE_I16] = {"i16", 16, "I16"},
    [MOE_DTYPE_U32] = {"u32", 32, "U32"},
    [MOE_DTYPE_I32] = {"i32", 32, "I32"},
    [MOE_DTYPE_U64] = {"u64", 64, "U64"},
    [MOE_DTYPE_I64] = {"i64", 64, "I64"},
    [MOE_DTYPE_INT4] = {"int4", 4, NULL},
    [MOE_DTYPE_UINT4] = {"uint4", 4, NULL},
};

static const dtype_row *row_of(moe_dtype dtype)
{
    if ((unsigned)dtype >= (unsigned)MOE_DTYPE_COUNT_) return &dtype_table[MOE_DTYPE_INVALID];
    return &dtype_table[dtype];
}

const char *moe_dtype_name(moe_dtype dtype) { return row_of(dtype)->name; }

unsigned moe_dtype_bits(moe_dtype dtype) { return row_of(dtype)->bits; }

const char *moe_dtype_safetensors_name(moe_dtype dtype) { return row_of(dtype)->safetensors; }

moe_dtype moe_dtype_from_safetensors(const char *name)
{
    if (!name) return MOE_DTYPE_INVALID;
    for (int d = 1; d < MOE_DTYPE_COUNT_; d++) {
        const char *st = dtype_table[d].safetensors;
        if (st && strcmp(st, name) == 0) return (moe_dtype)d;
    }
    return MOE_DTYPE_INVALID;
}
