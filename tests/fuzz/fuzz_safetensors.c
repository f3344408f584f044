/* fuzz_safetensors.c — libFuzzer target: one .safetensors file, from memory and from a file
 * (mapped and read), which must agree; an accepted file's tensors must tile its data area. */
#include "fuzz_util.h"

#include "dtype/dtype.h"
#include "io/safetensors.h"

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Everything an accepted file promises, checked against the input bytes themselves. */
static void check_accepted(const moe_st_file *f, const uint8_t *data, size_t size, bool in_place)
{
    const uint64_t n = le64(data);
    const uint8_t *base = data + 8 + n;
    const size_t count = moe_st_count(f);
    uint64_t end = 0;
    unsigned sum = 0;
    for (size_t i = 0; i < count; i++) {
        const moe_tensor *t = moe_st_tensor(f, i);
        FUZZ_REQUIRE(t && t->begin == end);
        FUZZ_REQUIRE(t->ndim >= 0 && t->ndim <= MOE_MAX_DIMS);
        uint64_t elems = 1;
        for (int d = 0; d < t->ndim; d++)
            elems *= (uint64_t)t->shape[d]; /* accepted: known not to overflow */
        FUZZ_REQUIRE(elems == t->count);
        FUZZ_REQUIRE(t->count * moe_dtype_bits(t->dtype) == t->nbytes * 8);
        FUZZ_REQUIRE(moe_st_find(f, t->name) == t);
        if (in_place) FUZZ_REQUIRE(t->data == base + t->begin);
        FUZZ_REQUIRE(memcmp(t->data, base + t->begin, t->nbytes) == 0);
        const uint8_t *p = t->data;
        for (uint64_t b = 0; b < t->nbytes; b++) /* every byte readable (ASan) */
            sum += p[b];
        end = t->begin + t->nbytes;
    }
    FUZZ_REQUIRE(8 + n + end == size);
    (void)moe_st_metadata(f, "format");
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moe_st_file *sentinel = (moe_st_file *)&sentinel, *f = sentinel;
    const moe_status st = moe_st_open_memory(data, size, "fuzz.safetensors", &f);
    FUZZ_REQUIRE_MESSAGE(st);
    if (st != MOE_OK) FUZZ_REQUIRE(f == sentinel);
    if (st == MOE_OK) {
        check_accepted(f, data, size, true);
        moe_st_close(f);
    }
    /* The file reader must reach the same verdict, mapped or read. */
    const char *dir = fuzz_dir();
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FUZZ_REQUIRE(fuzz_write(dir, "model.safetensors", data, size));
    for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
        moe_st_options opt = {.no_mmap = no_mmap};
        moe_st_file *g = sentinel;
        const moe_status sf = moe_st_open(path, &opt, &g);
        FUZZ_REQUIRE(sf == st);
        if (sf != MOE_OK) {
            FUZZ_REQUIRE(g == sentinel);
            continue;
        }
        check_accepted(g, data, size, false);
        FUZZ_REQUIRE(moe_st_check_size(g) == MOE_OK);
        moe_st_close(g);
    }
    return 0;
}
