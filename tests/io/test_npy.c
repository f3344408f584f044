/* test_npy.c — .npy: the corpus, valid variants, truncations, atomic-writer round trips. */
#include <stdint.h>
#include <string.h>

#include "io/npy.h"
#include "io_test_util.h"
#include "test.h"

/* An output that must come back byte for byte unchanged from a failing call. */
static void poison(moe_npy *a) { memset(a, 0xA5, sizeof *a); }

static int poisoned(const moe_npy *a)
{
    moe_npy p;
    poison(&p);
    return memcmp(a, &p, sizeof p) == 0;
}

static void test_manifest(void)
{
    size_t n;
    io_case *cases = load_manifest("corpus/npy/", &n);
    CHECKF(n >= 20, "only %zu npy cases in the manifest", n);
    for (size_t i = 0; i < n; i++) {
        const io_case *c = &cases[i];
        moe_npy a;
        poison(&a);
        moe_status st = moe_npy_read(c->path, &a);
        const char *msg = moe_last_error();
        CHECKF(st == c->status, "%s: got %s, want %s: %s", c->rel, moe_status_string(st),
               moe_status_string(c->status), msg);
        if (st != MOE_OK) {
            CHECKF(strstr(msg, c->needle) != NULL, "%s: '%s' lacks '%s'", c->rel, msg, c->needle);
            CHECKF(strstr(msg, c->path) != NULL, "%s: '%s' does not name the file", c->rel, msg);
            CHECKF(poisoned(&a), "%s: output changed on failure", c->rel);
        } else {
            moe_npy_free(&a);
        }
        size_t len;
        unsigned char *buf = read_whole(c->path, &len);
        REQUIRE(buf);
        poison(&a);
        st = moe_npy_parse(buf, len, &a);
        CHECKF(st == c->status, "%s (memory): got %s: %s", c->rel, moe_status_string(st),
               moe_last_error());
        if (st != MOE_OK)
            CHECKF(strstr(moe_last_error(), c->needle) != NULL && poisoned(&a), "%s (memory): %s",
                   c->rel, moe_last_error());
        else
            moe_npy_free(&a);
        free(buf);
    }
    free(cases);
}

static void read_corpus(const char *name, moe_npy *a)
{
    char path[512];
    snprintf(path, sizeof path, "%s/corpus/npy/%s", test_data_dir(), name);
    CHECK_STATUS(moe_npy_read(path, a), MOE_OK);
}

static void test_valid_corpus(void)
{
    static const char *const f3[] = {"valid_v1.npy", "valid_v2.npy", "valid_v3.npy",
                                     "valid_python2_long.npy", "valid_double_quotes.npy"};
    for (size_t i = 0; i < sizeof f3 / sizeof *f3; i++) {
        moe_npy a = {0};
        read_corpus(f3[i], &a);
        CHECKF(a.dtype == MOE_DTYPE_F32 && a.ndim == 1 && a.shape[0] == 3 && a.count == 3 &&
                   a.nbytes == 12,
               "%s", f3[i]);
        if (a.data) {
            const float *v = a.data;
            CHECKF(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f, "%s values", f3[i]);
        }
        moe_npy_free(&a);
        CHECK(a.data == NULL);
    }
    moe_npy a = {0};
    read_corpus("valid_i64_2d.npy", &a);
    CHECK(a.dtype == MOE_DTYPE_I64 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 2);
    if (a.data) {
        const int64_t *v = a.data;
        CHECK(v[0] == -1 && v[1] == (int64_t)1 << 40 && v[2] == 0 && v[3] == 7);
    }
    moe_npy_free(&a);
    read_corpus("valid_scalar_i32.npy", &a);
    CHECK(a.dtype == MOE_DTYPE_I32 && a.ndim == 0 && a.count == 1 && a.nbytes == 4);
    CHECK(a.data && *(const int32_t *)a.data == -42);
    moe_npy_free(&a);
    read_corpus("valid_empty.npy", &a);
    CHECK(a.dtype == MOE_DTYPE_F32 && a.ndim == 2 && a.shape[0] == 0 && a.shape[1] == 5);
    CHECK(a.count == 0 && a.nbytes == 0 && a.data != NULL);
    moe_npy_free(&a);
    moe_npy_free(NULL);
}

/* The header text numpy itself writes for these arrays (format.py's dict repr). */
static void check_header(const char *path, const char *want_dict)
{
    size_t len;
    unsigned char *buf = read_whole(path, &len);
    REQUIRE(buf && len >= 10);
    CHECK(memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hlen = buf[8] | (size_t)buf[9] << 8;
    CHECKF((10 + hlen) % 64 == 0, "%s: data starts at %zu", path, 10 + hlen);
    CHECK(10 + hlen <= len && buf[10 + hlen - 1] == '\n');
    CHECKF(hlen >= strlen(want_dict) && memcmp(buf + 10, want_dict, strlen(want_dict)) == 0,
           "%s: header '%.*s', want '%s'", path, (int)hlen, (const char *)buf + 10, want_dict);
    for (size_t i = 10 + strlen(want_dict); i + 1 < 10 + hlen; i++)
        CHECK(buf[i] == ' ');
    free(buf);
}

static void test_round_trips(const char *dir)
{
    static const struct {
        int ndim;
        int64_t shape[8];
        const char *shape_text;
    } shapes[] = {
        {0, {0}, "()"},
        {1, {0}, "(0,)"},
        {1, {5}, "(5,)"},
        {2, {2, 3}, "(2, 3)"},
        {3, {3, 0, 2}, "(3, 0, 2)"},
        {8, {1, 2, 1, 1, 3, 1, 1, 2}, "(1, 2, 1, 1, 3, 1, 1, 2)"},
        /* Empty, though the dims before the 0 times 8 bytes pass SIZE_MAX: the reader counted
         * elements, the writer multiplied bytes and refused what it had read (a fuzz find). */
        {4, {1, 42949679, 264294967296, 0}, "(1, 42949679, 264294967296, 0)"},
    };
    static const struct {
        moe_dtype dtype;
        const char *descr;
        size_t size;
    } types[] = {{MOE_DTYPE_F32, "<f4", 4}, {MOE_DTYPE_F64, "<f8", 8}, {MOE_DTYPE_F16, "<f2", 2},
                 {MOE_DTYPE_I32, "<i4", 4}, {MOE_DTYPE_I64, "<i8", 8}};
    char path[600], dict[200];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            size_t count = 1;
            for (int i = 0; i < shapes[s].ndim; i++)
                count *= (size_t)shapes[s].shape[i];
            size_t nbytes = count * types[t].size;
            unsigned char *data = malloc(nbytes + 1);
            REQUIRE(data);
            for (size_t i = 0; i < nbytes; i++)
                data[i] = (unsigned char)(i * 37 + t + s);
            CHECK_STATUS(moe_npy_write(path, types[t].dtype, shapes[s].ndim, shapes[s].shape, data),
                         MOE_OK);
            snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     types[t].descr, shapes[s].shape_text);
            check_header(path, dict);
            moe_npy a = {0};
            CHECK_STATUS(moe_npy_read(path, &a), MOE_OK);
            CHECKF(a.dtype == types[t].dtype && a.ndim == shapes[s].ndim && a.count == count &&
                       a.nbytes == nbytes,
                   "%s %s", types[t].descr, shapes[s].shape_text);
            for (int i = 0; i < a.ndim && i < 8; i++)
                CHECK(a.shape[i] == shapes[s].shape[i]);
            CHECK(a.data && memcmp(a.data, data, nbytes) == 0);
            moe_npy_free(&a);
            free(data);
        }
    CHECK(count_entries(dir) == 1); /* no temporary file left behind */
}

/* Every proper prefix of a written file is an error. */
static void test_truncations(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    int64_t shape[2] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 2, shape, v), MOE_OK);
    size_t len;
    unsigned char *buf = read_whole(path, &len);
    REQUIRE(buf);
    for (size_t cut = 0; cut < len; cut++) {
        moe_npy a;
        poison(&a);
        moe_status st = moe_npy_parse(buf, cut, &a);
        CHECKF(st != MOE_OK && poisoned(&a), "prefix of %zu bytes", cut);
        if (cut >= 10) CHECKF(st == MOE_ETRUNCATED, "cut %zu: %s", cut, moe_last_error());
    }
    free(buf);
}

static void test_write_errors(const char *dir)
{
    char path[600];
    int64_t shape[9] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    float v[4] = {0};
    CHECK_STATUS(moe_npy_write("/nonexistent-folder/x.npy", MOE_DTYPE_F32, 1, shape, v), MOE_EIO);
    CHECK(strstr(moe_last_error(), "/nonexistent-folder/x.npy") != NULL);
    snprintf(path, sizeof path, "%s/missing/x.npy", dir);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 1, shape, v), MOE_EIO);
    CHECK(count_entries(dir) == 0);

    snprintf(path, sizeof path, "%s/b.npy", dir);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_BF16, 1, shape, v), MOE_EDTYPE);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 9, shape, v), MOE_EINVAL);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, -1, shape, v), MOE_EINVAL);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 1, NULL, v), MOE_EINVAL);
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 1, shape, NULL), MOE_EINVAL);
    int64_t neg[2] = {2, -1};
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 2, neg, v), MOE_EINVAL);
    int64_t huge[2] = {INT64_MAX, INT64_MAX};
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_F32, 2, huge, v), MOE_EOVERFLOW);
    CHECK(count_entries(dir) == 0);
    /* An empty array needs no data pointer. */
    int64_t empty[1] = {0};
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_I64, 1, empty, NULL), MOE_OK);
    /* Replacing a file is atomic: the old contents stay until the new ones are complete. */
    CHECK_STATUS(moe_npy_write(path, MOE_DTYPE_BF16, 1, shape, v), MOE_EDTYPE);
    moe_npy a = {0};
    CHECK_STATUS(moe_npy_read(path, &a), MOE_OK);
    CHECK(a.dtype == MOE_DTYPE_I64 && a.count == 0);
    moe_npy_free(&a);
    CHECK(count_entries(dir) == 1);
    unlink(path);

    CHECK_STATUS(moe_npy_read(NULL, &a), MOE_EINVAL);
    CHECK_STATUS(moe_npy_read("/nonexistent.npy", &a), MOE_EMISSING);
    CHECK_STATUS(moe_npy_read(dir, &a), MOE_EIO);
    CHECK_STATUS(moe_npy_parse(NULL, 4, &a), MOE_EINVAL);
}

int main(void)
{
    char dir[256];
    make_tmpdir(dir, sizeof dir);
    test_manifest();
    test_valid_corpus();
    test_round_trips(dir);
    test_truncations(dir);
    remove_tmpdir(dir);
    make_tmpdir(dir, sizeof dir);
    test_write_errors(dir);
    remove_tmpdir(dir);
    return TEST_END();
}
