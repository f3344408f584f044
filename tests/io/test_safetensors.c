/* test_safetensors.c — the reader on the corpus, valid files, truncations and mutations. */
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"
#include "io_test_util.h"
#include "test.h"

static moe_st_file *const SENTINEL = (moe_st_file *)&test_checks_;
/* Keeps the mutation test's reads of every tensor byte from being optimised away. */
static volatile unsigned sink;

static const char *corpus(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/corpus/safetensors/%s", test_data_dir(), name);
    return buf;
}

/* Every manifest case through the file reader (mapped and read) and the memory reader: the
 * status, a message that names the file and holds the manifest's text, and an untouched
 * output on failure. */
static void test_manifest(void)
{
    size_t n;
    io_case *cases = load_manifest("corpus/safetensors/", &n);
    CHECKF(n >= 40, "only %zu safetensors cases in the manifest", n);
    for (size_t i = 0; i < n; i++) {
        const io_case *c = &cases[i];
        for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
            moe_st_options opt = {.no_mmap = no_mmap};
            moe_st_file *f = SENTINEL;
            moe_status st = moe_st_open(c->path, &opt, &f);
            if (check_case_open(c, no_mmap, st, f == SENTINEL, "file")) {
                CHECKF(f != SENTINEL && f != NULL, "%s: no handle", c->rel);
                if (f != SENTINEL) moe_st_close(f);
            }
        }
        size_t len;
        unsigned char *buf = read_whole(c->path, &len);
        REQUIRE(buf);
        moe_st_file *f = SENTINEL;
        moe_status st = moe_st_open_memory(buf, len, "image.safetensors", &f);
        const char *msg = moe_last_error();
        CHECKF(st == c->status, "%s (memory): got %s, want %s: %s", c->rel, moe_status_string(st),
               moe_status_string(c->status), msg);
        if (st != MOE_OK) {
            CHECKF(strstr(msg, c->needle) != NULL, "%s (memory): '%s' lacks '%s'", c->rel, msg,
                   c->needle);
            CHECKF(strstr(msg, "image.safetensors") != NULL, "%s (memory): '%s' has no name",
                   c->rel, msg);
            CHECK(f == SENTINEL);
        } else if (f != SENTINEL) {
            moe_st_close(f);
        }
        free(buf);
    }
    free(cases);
}

static float f32_at(const moe_tensor *t, size_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)t->data + 4 * i, 4); /* data need not be aligned */
    return v;
}

static moe_st_file *open_valid(const char *name, bool no_mmap)
{
    char path[512];
    moe_st_options opt = {.no_mmap = no_mmap};
    moe_st_file *f = NULL;
    CHECK_STATUS(moe_st_open(corpus(name, path, sizeof path), &opt, &f), MOE_OK);
    REQUIRE(f);
    return f;
}

static void test_basic(bool no_mmap)
{
    moe_st_file *f = open_valid("valid_basic.safetensors", no_mmap);
    REQUIRE(moe_st_count(f) == 2);
    /* Offset order, whatever the JSON order was. */
    const moe_tensor *w = moe_st_tensor(f, 0), *b = moe_st_tensor(f, 1);
    CHECK(strcmp(w->name, "a_weight") == 0);
    CHECK(strcmp(b->name, "z_bias") == 0);
    CHECK(moe_st_tensor(f, 2) == NULL);
    CHECK(moe_st_find(f, "a_weight") == w);
    CHECK(moe_st_find(f, "z_bias") == b);
    CHECK(moe_st_find(f, "b") == NULL);
    CHECK(moe_st_find(f, "") == NULL);
    CHECK(moe_st_find(f, "__metadata__") == NULL);
    CHECK(w->dtype == MOE_DTYPE_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3);
    CHECK(w->count == 6 && w->begin == 0 && w->nbytes == 24);
    CHECK(b->dtype == MOE_DTYPE_I32 && b->ndim == 1 && b->shape[0] == 3 && b->count == 3);
    CHECK(b->begin == 24 && b->nbytes == 12);
    CHECK((const unsigned char *)b->data == (const unsigned char *)w->data + 24);
    CHECK(strstr(w->file, "valid_basic.safetensors") != NULL);
    const float want[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 100.0f};
    for (size_t i = 0; i < 6; i++)
        CHECKF(f32_at(w, i) == want[i], "a_weight[%zu]", i);
    const int32_t wb[3] = {7, -8, INT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        int32_t v;
        memcpy(&v, (const unsigned char *)b->data + 4 * i, 4);
        CHECKF(v == wb[i], "z_bias[%zu] = %d", i, v);
    }
    CHECK(moe_st_metadata(f, "format") && strcmp(moe_st_metadata(f, "format"), "pt") == 0);
    CHECK(moe_st_metadata(f, "note") &&
          strcmp(moe_st_metadata(f, "note"), "\xc3\xbc"
                                             "n"
                                             "\xc3\xaf"
                                             "code \xe2\x9c\x93") == 0);
    CHECK(moe_st_metadata(f, "missing") == NULL);
    moe_st_close(f);
}

static void test_edges(void)
{
    moe_st_file *f = open_valid("valid_zero_size.safetensors", false);
    REQUIRE(moe_st_count(f) == 3);
    const char *order[3] = {"empty", "x", "empty2"};
    for (size_t i = 0; i < 3; i++)
        CHECK(strcmp(moe_st_tensor(f, i)->name, order[i]) == 0);
    const moe_tensor *e = moe_st_find(f, "empty"), *e2 = moe_st_find(f, "empty2");
    CHECK(e && e->count == 0 && e->nbytes == 0 && e->ndim == 2 && e->shape[0] == 0 &&
          e->shape[1] == 4);
    CHECK(e2 && e2->count == 0 && e2->begin == 3 && e2->dtype == MOE_DTYPE_F16);
    const moe_tensor *x = moe_st_find(f, "x");
    CHECK(x && x->dtype == MOE_DTYPE_U8 && memcmp(x->data, "\x01\x02\x03", 3) == 0);
    moe_st_close(f);

    f = open_valid("valid_scalar.safetensors", true);
    const moe_tensor *s = moe_st_find(f, "s"), *t = moe_st_find(f, "t");
    REQUIRE(s && t);
    CHECK(s->ndim == 0 && s->count == 1 && s->nbytes == 8 && s->dtype == MOE_DTYPE_F64);
    double d;
    memcpy(&d, s->data, 8);
    CHECK(d == 3.25);
    CHECK(t->ndim == 0 && t->count == 1 && t->dtype == MOE_DTYPE_I8 &&
          *(const int8_t *)t->data == -5);
    moe_st_close(f);

    f = open_valid("valid_whitespace.safetensors", false);
    const moe_tensor *w = moe_st_find(f, "w");
    REQUIRE(w);
    CHECK(f32_at(w, 0) == 1.0f && f32_at(w, 1) == -2.0f && f32_at(w, 2) == 0.5f &&
          f32_at(w, 3) == 8.0f);
    moe_st_close(f);

    f = open_valid("valid_empty_metadata.safetensors", false);
    CHECK(moe_st_count(f) == 1 && moe_st_metadata(f, "format") == NULL);
    moe_st_close(f);

    f = open_valid("valid_no_tensors.safetensors", false);
    CHECK(moe_st_count(f) == 0 && moe_st_tensor(f, 0) == NULL && moe_st_find(f, "w") == NULL);
    moe_st_close(f);
}

/* Every safetensors dtype name maps to its libmoe dtype, listed here by hand. */
static void test_all_dtypes(void)
{
    static const struct {
        const char *name;
        moe_dtype dtype;
        unsigned bytes; /* for 2 elements */
    } table[] = {
        {"BOOL", MOE_DTYPE_BOOL, 2},       {"U8", MOE_DTYPE_U8, 2},
        {"I8", MOE_DTYPE_I8, 2},           {"I16", MOE_DTYPE_I16, 4},
        {"U16", MOE_DTYPE_U16, 4},         {"I32", MOE_DTYPE_I32, 8},
        {"U32", MOE_DTYPE_U32, 8},         {"I64", MOE_DTYPE_I64, 16},
        {"U64", MOE_DTYPE_U64, 16},        {"F16", MOE_DTYPE_F16, 4},
        {"BF16", MOE_DTYPE_BF16, 4},       {"F32", MOE_DTYPE_F32, 8},
        {"F64", MOE_DTYPE_F64, 16},        {"F8_E4M3", MOE_DTYPE_F8_E4M3, 2},
        {"F8_E5M2", MOE_DTYPE_F8_E5M2, 2}, {"F8_E8M0", MOE_DTYPE_F8_E8M0, 2},
        {"F4", MOE_DTYPE_F4_E2M1, 1},
    };
    moe_st_file *f = open_valid("valid_all_dtypes.safetensors", false);
    CHECK(moe_st_count(f) == sizeof table / sizeof *table);
    uint64_t off = 0;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        char name[32];
        snprintf(name, sizeof name, "t_%s", table[i].name);
        const moe_tensor *t = moe_st_find(f, name);
        CHECKF(t != NULL, "%s missing", name);
        if (!t) continue;
        CHECKF(t->dtype == table[i].dtype, "%s: dtype %d", name, (int)t->dtype);
        CHECKF(t->nbytes == table[i].bytes && t->begin == off, "%s: [%llu +%llu]", name,
               (unsigned long long)t->begin, (unsigned long long)t->nbytes);
        /* The data area holds bytes 0, 1, 2, ...: each tensor starts with its offset. */
        CHECKF(*(const unsigned char *)t->data == (unsigned char)off, "%s: data", name);
        off += table[i].bytes;
    }
    moe_st_close(f);
}

/* Every proper prefix of a valid file must fail cleanly, through memory and through a file. */
static void test_truncations(void)
{
    char path[512], dir[256], tmp[512];
    size_t len;
    unsigned char *buf = read_whole(corpus("valid_basic.safetensors", path, sizeof path), &len);
    REQUIRE(buf);
    make_tmpdir(dir, sizeof dir);
    snprintf(tmp, sizeof tmp, "%s/cut.safetensors", dir);
    for (size_t cut = 0; cut < len; cut++) {
        moe_st_file *f = SENTINEL;
        moe_status st = moe_st_open_memory(buf, cut, "cut", &f);
        CHECKF(st != MOE_OK && f == SENTINEL, "prefix of %zu bytes: %s", cut,
               moe_status_string(st));
        write_whole(tmp, buf, cut);
        f = SENTINEL;
        st = moe_st_open(tmp, NULL, &f);
        CHECKF(st != MOE_OK && f == SENTINEL, "file prefix of %zu bytes", cut);
        /* Cut inside the data area: the size check must say so, before any mapping. */
        if (cut >= len - 36) CHECKF(st == MOE_ETRUNCATED, "cut %zu: %s", cut, moe_last_error());
    }
    remove_tmpdir(dir);
    free(buf);
}

/* Random byte changes: whatever the reader accepts must tile the data area exactly, and
 * reading every byte must stay inside the buffer (ASan watches). */
static void test_mutations(void)
{
    char path[512];
    size_t len;
    unsigned char *orig = read_whole(corpus("valid_basic.safetensors", path, sizeof path), &len);
    REQUIRE(orig);
    unsigned char *buf = malloc(len);
    REQUIRE(buf);
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int accepted = 0;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, orig, len);
        int flips = 1 + (int)(test_rng_next(&seed) % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(test_rng_next(&seed) % len);
            /* Bias towards the header, where the interesting bytes are. */
            if (k == 0) at = 8 + (size_t)(test_rng_next(&seed) % (len - 8 - 36));
            buf[at] = (unsigned char)test_rng_next(&seed);
        }
        moe_st_file *f = SENTINEL;
        moe_status st = moe_st_open_memory(buf, len, "mutant", &f);
        if (st != MOE_OK) {
            CHECK(f == SENTINEL);
            CHECK(moe_last_error()[0] != '\0');
            continue;
        }
        accepted++;
        uint64_t end = 0;
        unsigned sum = 0;
        for (size_t i = 0; i < moe_st_count(f); i++) {
            const moe_tensor *t = moe_st_tensor(f, i);
            CHECK(t->begin == end);
            end = t->begin + t->nbytes;
            for (uint64_t b = 0; b < t->nbytes; b++)
                sum += ((const unsigned char *)t->data)[b];
        }
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | buf[i];
        CHECK(end == len - 8 - n);
        sink += sum;
        moe_st_close(f);
    }
    CHECK(accepted > 0); /* flips inside the data area must be accepted */
    free(buf);
    free(orig);
}

static void test_arguments(void)
{
    moe_st_file *f = SENTINEL;
    CHECK_STATUS(moe_st_open(NULL, NULL, &f), MOE_EINVAL);
    CHECK_STATUS(moe_st_open("x", NULL, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_st_open("/nonexistent/model.safetensors", NULL, &f), MOE_EMISSING);
    CHECK(strstr(moe_last_error(), "/nonexistent/model.safetensors") != NULL);
    CHECK_STATUS(moe_st_open(test_data_dir(), NULL, &f), MOE_EIO);
    CHECK(strstr(moe_last_error(), "not a regular file") != NULL);
    CHECK_STATUS(moe_st_open_memory(NULL, 8, "x", &f), MOE_EINVAL);
    CHECK(f == SENTINEL);
    CHECK(moe_st_count(NULL) == 0 && moe_st_tensor(NULL, 0) == NULL);
    CHECK(moe_st_find(NULL, "a") == NULL && moe_st_metadata(NULL, "a") == NULL);
    moe_st_close(NULL);
}

int main(void)
{
    test_manifest();
    test_basic(false);
    test_basic(true);
    test_edges();
    test_all_dtypes();
    test_truncations();
    test_mutations();
    test_arguments();
    return TEST_END();
}
