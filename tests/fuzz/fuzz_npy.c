/* fuzz_npy.c — libFuzzer target: .npy images; an accepted array is consistent with its header and
 * survives a write and a read back unchanged. */
#include "fuzz_util.h"

#include "io/npy.h"

static size_t elem_bytes(moe_dtype dt)
{
    return dt == MOE_DTYPE_I64 || dt == MOE_DTYPE_F64 ? 8 : dt == MOE_DTYPE_F16 ? 2 : 4;
}

static void round_trip(const moe_npy *a)
{
    const char *dir = fuzz_dir();
    char path[600];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    FUZZ_REQUIRE(moe_npy_write(path, a->dtype, a->ndim, a->shape, a->data) == MOE_OK);
    moe_npy b;
    FUZZ_REQUIRE(moe_npy_read(path, &b) == MOE_OK);
    FUZZ_REQUIRE(b.dtype == a->dtype && b.ndim == a->ndim && b.count == a->count);
    FUZZ_REQUIRE(memcmp(b.shape, a->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0);
    FUZZ_REQUIRE(b.nbytes == a->nbytes && memcmp(b.data, a->data, a->nbytes) == 0);
    moe_npy_free(&b);
}

/* The file reader parses the prefix and header from a few bytes read ahead, not from the
 * whole image: it must still reach the parser's verdict. */
static void same_as_file(const uint8_t *data, size_t size, moe_status want)
{
    const char *dir = fuzz_dir();
    char path[600];
    snprintf(path, sizeof path, "%s/in.npy", dir);
    FUZZ_REQUIRE(fuzz_write(dir, "in.npy", data, size));
    moe_npy b;
    const moe_status st = moe_npy_read(path, &b);
    FUZZ_REQUIRE(st == want);
    if (st == MOE_OK) moe_npy_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moe_npy a, before;
    memset(&a, 0xA5, sizeof a);
    before = a;
    const moe_status st = moe_npy_parse(data, size, &a);
    FUZZ_REQUIRE_MESSAGE(st);
    same_as_file(data, size, st);
    if (st != MOE_OK) {
        FUZZ_REQUIRE(memcmp(&a, &before, sizeof a) == 0);
        return 0;
    }
    FUZZ_REQUIRE(a.dtype == MOE_DTYPE_F32 || a.dtype == MOE_DTYPE_F64 || a.dtype == MOE_DTYPE_F16 ||
                 a.dtype == MOE_DTYPE_I32 || a.dtype == MOE_DTYPE_I64);
    FUZZ_REQUIRE(a.ndim >= 0 && a.ndim <= MOE_NPY_MAX_DIMS);
    size_t count = 1;
    for (int d = 0; d < a.ndim; d++) {
        FUZZ_REQUIRE(a.shape[d] >= 0);
        count *= (size_t)a.shape[d];
    }
    FUZZ_REQUIRE(count == a.count && a.nbytes == count * elem_bytes(a.dtype));
    FUZZ_REQUIRE(a.nbytes <= size && memcmp(a.data, data + size - a.nbytes, a.nbytes) == 0);
    round_trip(&a);
    moe_npy_free(&a);
    return 0;
}
