/* test_st_writer.c — the streaming writer: round trips, layout, header JSON, cleanup. */
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/st_writer.h"
#include "io_test_util.h"
#include "test.h"

#define MIB ((size_t)1 << 20)

static unsigned char pattern(size_t index, uint64_t byte)
{
    return (unsigned char)(index * 31 + byte * 7 + (byte >> 11));
}

/* Checks what the writer promises about its calls, and fills the pattern. */
typedef struct fill_log {
    size_t calls;
    size_t last_index;
    uint64_t next_offset; /* where the current tensor's next chunk must start */
    size_t max_len;
    size_t fail_index; /* SIZE_MAX: never fail */
    int bad_order;
} fill_log;

static moe_status fill(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    fill_log *log = ctx;
    if (log->calls == 0 || index != log->last_index) {
        if (offset != 0) log->bad_order++;
    } else if (offset != log->next_offset) {
        log->bad_order++;
    }
    log->calls++;
    log->last_index = index;
    log->next_offset = offset + len;
    if (len > log->max_len) log->max_len = len;
    if (index == log->fail_index && offset > 0)
        return moe_error(MOE_EVALUE, "made-up failure in tensor %zu", index);
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(index, offset + i);
    return MOE_OK;
}

typedef struct decl {
    const char *name;
    moe_dtype dtype;
    int ndim;
    int64_t shape[3];
    uint64_t nbytes; /* worked out by hand */
    unsigned align;  /* element size in bytes, 1 for sub-byte */
} decl;

/* Declared out of file order on purpose; a.big is 1.5 MiB, so it takes two chunks. */
static const decl DECLS[] = {
    {"b.small", MOE_DTYPE_U8, 1, {3}, 3, 1},
    {"a.big", MOE_DTYPE_F32, 2, {3, 131072}, 1572864, 4},
    {"c.half", MOE_DTYPE_BF16, 2, {2, 3}, 12, 2},
    {"d.f64", MOE_DTYPE_F64, 1, {5}, 40, 8},
    {"e.empty", MOE_DTYPE_F32, 2, {0, 7}, 0, 4},
    {"f.scalar", MOE_DTYPE_I64, 0, {0}, 8, 8},
    {"g.fp4", MOE_DTYPE_F4_E2M1, 1, {4}, 2, 1},
    {"h.e8m0", MOE_DTYPE_F8_E8M0, 1, {3}, 3, 1},
    {"i.e4m3", MOE_DTYPE_F8_E4M3, 2, {2, 2}, 4, 1},
};
#define NDECLS (sizeof DECLS / sizeof *DECLS)

/* Descending element size, then name: the expected order, written out by hand. */
static const char *const FILE_ORDER[NDECLS] = {"d.f64",   "f.scalar", "a.big",  "e.empty", "c.half",
                                               "b.small", "g.fp4",    "h.e8m0", "i.e4m3"};

static moe_st_writer *make_writer(void)
{
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK && w);
    for (size_t i = 0; i < NDECLS; i++)
        CHECK_STATUS(
            moe_st_writer_add(w, DECLS[i].name, DECLS[i].dtype, DECLS[i].ndim, DECLS[i].shape),
            MOE_OK);
    CHECK_STATUS(moe_st_writer_metadata(w, "format", "pt"), MOE_OK);
    CHECK_STATUS(moe_st_writer_metadata(w, "note", "caf\xc3\xa9"), MOE_OK);
    return w;
}

/* The header must be exactly the format's JSON: an object of tensor entries with the three
 * fields and nothing else, string metadata, and only spaces as padding. */
static void check_header_json(const unsigned char *buf, size_t len)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    REQUIRE(8 + n <= len);
    CHECKF((8 + n) % 8 == 0, "data starts at %llu", (unsigned long long)(8 + n));
    CHECK(buf[8] == '{');
    size_t end = 8 + (size_t)n;
    while (end > 8 && buf[end - 1] == ' ')
        end--;
    CHECK(buf[end - 1] == '}');
    CHECK(8 + n - end < 8); /* no more padding than alignment needs */
    json_error_t err;
    json_t *root = json_loadb((const char *)buf + 8, end - 8, JSON_REJECT_DUPLICATES, &err);
    REQUIRE(root && json_is_object(root));
    CHECK(json_object_size(root) == NDECLS + 1);
    json_t *meta = json_object_get(root, "__metadata__");
    CHECK(json_is_object(meta) && json_object_size(meta) == 2);
    CHECK(json_is_string(json_object_get(meta, "format")) &&
          strcmp(json_string_value(json_object_get(meta, "format")), "pt") == 0);
    static const char *const st_names[NDECLS] = {"U8",  "F32", "BF16",    "F64",    "F32",
                                                 "I64", "F4",  "F8_E8M0", "F8_E4M3"};
    for (size_t i = 0; i < NDECLS; i++) {
        json_t *e = json_object_get(root, DECLS[i].name);
        CHECKF(json_is_object(e) && json_object_size(e) == 3, "%s", DECLS[i].name);
        json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
               *off = json_object_get(e, "data_offsets");
        CHECK(json_is_string(dt) && strcmp(json_string_value(dt), st_names[i]) == 0);
        CHECK(json_is_array(sh) && json_array_size(sh) == (size_t)DECLS[i].ndim);
        for (int d = 0; d < DECLS[i].ndim; d++)
            CHECK(json_is_integer(json_array_get(sh, d)) &&
                  json_integer_value(json_array_get(sh, d)) == DECLS[i].shape[d]);
        CHECK(json_is_array(off) && json_array_size(off) == 2);
        json_int_t b = json_integer_value(json_array_get(off, 0));
        json_int_t e2 = json_integer_value(json_array_get(off, 1));
        CHECK(json_is_integer(json_array_get(off, 0)) && (uint64_t)(e2 - b) == DECLS[i].nbytes);
    }
    json_decref(root);
}

static void test_round_trip(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moe_st_writer *w = make_writer();
    fill_log log = {.fail_index = SIZE_MAX};
    CHECK_STATUS(moe_st_writer_write(w, path, fill, &log), MOE_OK);
    CHECK(log.bad_order == 0);
    CHECK(log.max_len == MIB);
    CHECK(count_entries(dir) == 1);

    size_t len;
    unsigned char *buf = read_whole(path, &len);
    REQUIRE(buf);
    check_header_json(buf, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    free(buf);

    for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
        moe_st_options opt = {.no_mmap = no_mmap};
        moe_st_file *f = NULL;
        CHECK_STATUS(moe_st_open(path, &opt, &f), MOE_OK);
        REQUIRE(f);
        CHECK(moe_st_count(f) == NDECLS);
        for (size_t i = 0; i < NDECLS; i++) {
            const moe_tensor *t = moe_st_tensor(f, i);
            CHECKF(t && strcmp(t->name, FILE_ORDER[i]) == 0, "file position %zu: %s", i,
                   t ? t->name : "(none)");
        }
        for (size_t i = 0; i < NDECLS; i++) {
            const decl *d = &DECLS[i];
            const moe_tensor *t = moe_st_find(f, d->name);
            REQUIRE(t);
            CHECK(t->dtype == d->dtype && t->ndim == d->ndim && t->nbytes == d->nbytes);
            for (int k = 0; k < d->ndim; k++)
                CHECK(t->shape[k] == d->shape[k]);
            /* Natural alignment in the file, hence in a page-aligned mapping. */
            CHECKF((8 + n + t->begin) % d->align == 0, "%s at %llu", d->name,
                   (unsigned long long)t->begin);
            if (!no_mmap) CHECK((uintptr_t)t->data % d->align == 0);
            size_t bad = 0;
            for (uint64_t b = 0; b < t->nbytes; b++)
                bad += ((const unsigned char *)t->data)[b] != pattern(i, b);
            CHECKF(bad == 0, "%s: %zu bytes differ", d->name, bad);
        }
        CHECK(moe_st_metadata(f, "note") && strcmp(moe_st_metadata(f, "note"), "caf\xc3\xa9") == 0);
        moe_st_close(f);
    }
    /* The same writer can write again, to another name; the bytes are identical. */
    char path2[600];
    snprintf(path2, sizeof path2, "%s/again.safetensors", dir);
    log = (fill_log){.fail_index = SIZE_MAX};
    CHECK_STATUS(moe_st_writer_write(w, path2, fill, &log), MOE_OK);
    size_t l1, l2;
    unsigned char *b1 = read_whole(path, &l1), *b2 = read_whole(path2, &l2);
    CHECK(b1 && b2 && l1 == l2 && memcmp(b1, b2, l1) == 0);
    free(b1);
    free(b2);
    moe_st_writer_destroy(w);
    unlink(path);
    unlink(path2);
}

/* A failing fill stops the write, names the tensor, and leaves no file and no temp file; an
 * existing file at the path is left as it was. */
static void test_fill_failure(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    moe_st_writer *w = make_writer();
    fill_log log = {.fail_index = 1}; /* a.big, in its second chunk */
    moe_status st = moe_st_writer_write(w, path, fill, &log);
    CHECK(st == MOE_EVALUE);
    CHECK(strstr(moe_last_error(), "tensor 'a.big' at byte 1048576") != NULL);
    CHECK(strstr(moe_last_error(), "made-up failure") != NULL);
    CHECK(count_entries(dir) == 0);

    write_whole(path, "old", 3);
    log = (fill_log){.fail_index = 1};
    CHECK_STATUS(moe_st_writer_write(w, path, fill, &log), MOE_EVALUE);
    size_t len;
    unsigned char *buf = read_whole(path, &len);
    CHECK(buf && len == 3 && memcmp(buf, "old", 3) == 0);
    free(buf);
    CHECK(count_entries(dir) == 1);
    unlink(path);

    snprintf(path, sizeof path, "%s/no/such/folder.safetensors", dir);
    CHECK_STATUS(moe_st_writer_write(w, path, fill, &log), MOE_EIO);
    CHECK_STATUS(moe_st_writer_write(w, path, NULL, NULL), MOE_EINVAL);
    CHECK(count_entries(dir) == 0);
    moe_st_writer_destroy(w);
}

static void test_declaration_errors(void)
{
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    int64_t s2[2] = {2, 3}, neg[1] = {-1}, big[1] = {(int64_t)1 << 48}, odd[1] = {3};
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_STATUS(moe_st_writer_add(w, "x", MOE_DTYPE_F32, 2, s2), MOE_OK);
    CHECK_STATUS(moe_st_writer_add(w, "x", MOE_DTYPE_F16, 1, s2), MOE_EDUPLICATE);
    CHECK(strstr(moe_last_error(), "'x'") != NULL);
    CHECK_STATUS(moe_st_writer_add(w, "__metadata__", MOE_DTYPE_F32, 1, s2), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, "", MOE_DTYPE_F32, 1, s2), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, NULL, MOE_DTYPE_F32, 1, s2), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, "bad\xff", MOE_DTYPE_F32, 1, s2), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, "i4", MOE_DTYPE_INT4, 1, s2), MOE_EDTYPE);
    CHECK_STATUS(moe_st_writer_add(w, "inv", MOE_DTYPE_INVALID, 1, s2), MOE_EDTYPE);
    CHECK_STATUS(moe_st_writer_add(w, "r9", MOE_DTYPE_F32, 9, s9), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, "ns", MOE_DTYPE_F32, 1, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_add(w, "neg", MOE_DTYPE_F32, 1, neg), MOE_ESHAPE);
    CHECK_STATUS(moe_st_writer_add(w, "big", MOE_DTYPE_U8, 1, big), MOE_ESHAPE);
    CHECK_STATUS(moe_st_writer_add(w, "odd", MOE_DTYPE_F4_E2M1, 1, odd), MOE_ESHAPE);
    int64_t wide[2] = {(int64_t)1 << 47, 8};
    CHECK_STATUS(moe_st_writer_add(w, "wide", MOE_DTYPE_F32, 2, wide), MOE_EOVERFLOW);
    CHECK_STATUS(moe_st_writer_add(NULL, "y", MOE_DTYPE_F32, 1, s2), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_metadata(w, "k", "v"), MOE_OK);
    CHECK_STATUS(moe_st_writer_metadata(w, "k", "w"), MOE_EDUPLICATE);
    CHECK_STATUS(moe_st_writer_metadata(w, "k2", "\xc3"), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_metadata(w, NULL, "v"), MOE_EINVAL);
    CHECK_STATUS(moe_st_writer_create(NULL), MOE_EINVAL);
    moe_st_writer_destroy(w);
    moe_st_writer_destroy(NULL);
}

/* Thousands of names (the duplicate check must scale) and a file with no tensors. */
static void test_many_and_none(const char *dir)
{
    char path[600], name[64];
    snprintf(path, sizeof path, "%s/many.safetensors", dir);
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    const int count = 5000;
    for (int i = 0; i < count; i++) {
        snprintf(name, sizeof name, "layers.%d.experts.%d.w", i / 100, i % 100);
        int64_t shape[1] = {1 + i % 3};
        REQUIRE(moe_st_writer_add(w, name, MOE_DTYPE_U16, 1, shape) == MOE_OK);
    }
    CHECK_STATUS(moe_st_writer_add(w, "layers.7.experts.42.w", MOE_DTYPE_U16, 0, NULL),
                 MOE_EDUPLICATE);
    fill_log log = {.fail_index = SIZE_MAX};
    CHECK_STATUS(moe_st_writer_write(w, path, fill, &log), MOE_OK);
    moe_st_writer_destroy(w);
    moe_st_file *f = NULL;
    CHECK_STATUS(moe_st_open(path, NULL, &f), MOE_OK);
    CHECK(moe_st_count(f) == (size_t)count);
    int missing = 0;
    for (int i = 0; i < count; i++) {
        snprintf(name, sizeof name, "layers.%d.experts.%d.w", i / 100, i % 100);
        const moe_tensor *t = moe_st_find(f, name);
        missing += !t || t->nbytes != (uint64_t)(2 * (1 + i % 3)) ||
                   ((const unsigned char *)t->data)[0] != pattern((size_t)i, 0);
    }
    CHECK(missing == 0);
    moe_st_close(f);
    unlink(path);

    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    CHECK_STATUS(moe_st_writer_write(w, path, NULL, NULL), MOE_OK);
    moe_st_writer_destroy(w);
    size_t len;
    unsigned char *buf = read_whole(path, &len);
    CHECK(buf && len == 16 && memcmp(buf, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
    free(buf);
    f = NULL;
    CHECK_STATUS(moe_st_open(path, NULL, &f), MOE_OK);
    CHECK(moe_st_count(f) == 0);
    moe_st_close(f);
    unlink(path);
}

/* Zeros in the middle and at the end: the chunks of zeros become holes, yet the file has its
 * full size and reads back byte for byte (a missing size fix at commit leaves it short). */
static moe_status fill_zero_runs(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    (void)ctx;
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++) /* tensor 1 ("b.zero") all zeros, 2 ("c.tail") from 1 MiB */
        b[i] = index == 1 || (index == 2 && offset + i >= MIB) ? 0 : pattern(index, offset + i);
    return MOE_OK;
}

static void test_holes(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/holes.safetensors", dir);
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    const char *names[3] = {"a.head", "b.zero", "c.tail"};
    const int64_t sizes[3] = {1000, 3 * (int64_t)MIB, 3 * (int64_t)MIB};
    for (int i = 0; i < 3; i++)
        REQUIRE(moe_st_writer_add(w, names[i], MOE_DTYPE_U8, 1, &sizes[i]) == MOE_OK);
    CHECK_STATUS(moe_st_writer_write(w, path, fill_zero_runs, NULL), MOE_OK);
    moe_st_writer_destroy(w);
    moe_st_file *f = NULL;
    CHECK_STATUS(moe_st_open(path, NULL, &f), MOE_OK);
    REQUIRE(f);
    for (size_t i = 0; i < 3; i++) {
        const moe_tensor *t = moe_st_find(f, names[i]);
        REQUIRE(t && t->nbytes == (uint64_t)sizes[i]);
        size_t bad = 0;
        for (uint64_t b = 0; b < t->nbytes; b++) {
            const unsigned char want = i == 1 || (i == 2 && b >= MIB) ? 0 : pattern(i, b);
            bad += ((const unsigned char *)t->data)[b] != want;
        }
        CHECKF(bad == 0, "%s: %zu bytes differ", names[i], bad);
    }
    moe_st_close(f);
    unlink(path);
}

int main(void)
{
    char dir[256];
    make_tmpdir(dir, sizeof dir);
    test_round_trip(dir);
    test_fill_failure(dir);
    test_declaration_errors();
    test_many_and_none(dir);
    test_holes(dir);
    CHECK(count_entries(dir) == 0);
    remove_tmpdir(dir);
    return TEST_END();
}
