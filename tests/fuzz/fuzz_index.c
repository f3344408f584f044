/* fuzz_index.c — libFuzzer target: a sharded index alone (moe_ckpt_check_index), or a whole model
 * folder written from the input (index and shards, see fuzz_util.h) and opened, mapped and read. */
#include "fuzz_util.h"

#include "io/checkpoint.h"

/* An accepted folder: names sorted and unique, each found by name, every byte readable. */
static void check_accepted(const moe_ckpt *c)
{
    const size_t n = moe_ckpt_count(c);
    unsigned sum = 0;
    FUZZ_REQUIRE(moe_ckpt_shard_count(c) >= 1);
    for (size_t i = 0; i < n; i++) {
        const moe_tensor *t = moe_ckpt_tensor(c, i);
        FUZZ_REQUIRE(t && t->name && t->file);
        if (i > 0) FUZZ_REQUIRE(strcmp(moe_ckpt_tensor(c, i - 1)->name, t->name) < 0);
        FUZZ_REQUIRE(moe_ckpt_find(c, t->name) == t);
        FUZZ_REQUIRE(moe_ckpt_check_files(c, &t, 1) == MOE_OK);
        const uint8_t *p = t->data;
        for (uint64_t b = 0; b < t->nbytes; b++)
            sum += p[b];
    }
    (void)sum;
}

static void open_folder(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_write_folder(data, size);
    moe_status first = MOE_OK;
    for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
        moe_st_options opt = {.no_mmap = no_mmap};
        moe_ckpt *sentinel = (moe_ckpt *)&sentinel, *c = sentinel;
        const moe_status st = moe_ckpt_open(dir, &opt, &c);
        FUZZ_REQUIRE_MESSAGE(st);
        /* Mapping or reading is no part of the verdict. */
        if (no_mmap) FUZZ_REQUIRE(st == first);
        first = st;
        if (st != MOE_OK) {
            FUZZ_REQUIRE(c == sentinel);
            continue;
        }
        check_accepted(c);
        moe_ckpt_close(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_find(data, size, FUZZ_SEP)) {
        open_folder(data, size);
        return 0;
    }
    const moe_status st = moe_ckpt_check_index(data, size, "fuzz index.json");
    FUZZ_REQUIRE_MESSAGE(st);
    return 0;
}
