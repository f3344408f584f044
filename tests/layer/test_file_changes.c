/* test_file_changes.c — checkpoint files that lie about their size or change after open. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include "layer_fixture.h"

/*
 * A shard shorter than its header says fails at open, before anything is mapped or read. A
 * file truncated after a mapped open fails at create with MOE_ETRUNCATED (a read past the
 * new end would be SIGBUS, which nothing can catch); with no_mmap the bytes were read at open,
 * so create succeeds with the original values. A file replaced (renamed over) or grown after
 * open does not change what the handle reads. Every layer that is created must compute the
 * same bits as one created from an untouched checkpoint.
 */

static const fam_case *const FC = &fam_cases[2]; /* deepseek_v3 FP8: layer 1 is MoE */
enum { LAYER = 1, TOKENS = 5 };

static char root[] = "/tmp/moe_file_changes_XXXXXX";

static bool has(const char *s) { return strstr(moe_last_error(), s) != NULL; }

static void model_path(char *buf, size_t cap, const char *dir)
{
    snprintf(buf, cap, "%s/model.safetensors", dir);
}

static off_t file_size(const char *path)
{
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    return sb.st_size;
}

/* TOKENS rows of fixed hidden states through L (created from M); the output, malloc'd. */
static float *forward_layer(const moe_model *m, const moe_layer *l)
{
    const size_t h = (size_t)moe_model_desc_of(m)->hidden;
    float *x = malloc(TOKENS * h * sizeof *x), *y = malloc(TOKENS * h * sizeof *y);
    REQUIRE(x && y);
    fx_hidden(9, TOKENS * h, x);
    size_t ws_size;
    void *ws = fx_workspace(l, TOKENS, &ws_size);
    const moe_forward_args a = fx_args(TOKENS, h, x, y, ws, ws_size);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    free(x);
    free(ws);
    return y;
}

/* The forward output of layer LAYER of M for fixed hidden states (threads = 1), or NULL with
 * *ST set when create fails (*ST = MOE_OK otherwise). */
static float *forward_of(const moe_model *m, moe_status *st)
{
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *l = SENTINEL;
    *st = moe_layer_create(m, LAYER, &o, &l);
    if (*st != MOE_OK) {
        CHECKF(l == SENTINEL, "a failed create wrote *out");
        return NULL;
    }
    float *y = forward_layer(m, l);
    moe_layer_destroy(l);
    return y;
}

static bool same(const float *a, const float *b, const moe_model *m)
{
    return a && b && !memcmp(a, b, TOKENS * (size_t)moe_model_desc_of(m)->hidden * sizeof *a);
}

/* A fresh copy of the checkpoint in ROOT/NAME. */
static const char *fresh(char *dir, size_t cap, const char *name)
{
    snprintf(dir, cap, "%s/%s", root, name);
    REQUIRE(mkdir(dir, 0700) == 0);
    fx_write_model(dir, FC->config, 41);
    return dir;
}

static void cleanup(const char *dir)
{
    fx_remove_model(dir);
    CHECK(rmdir(dir) == 0);
}

static moe_status zero_fill(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    (void)ctx;
    (void)index;
    (void)offset;
    memset(buf, 0, len);
    return MOE_OK;
}

/* Two shards and an index; the second shard holds 100 of the data bytes its header names. */
static void test_short_shard(void)
{
    char dir[256], p[300];
    snprintf(dir, sizeof dir, "%s/sharded", root);
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "wb");
    REQUIRE(f && fputs(FC->config, f) >= 0 && fclose(f) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    f = fopen(p, "wb");
    REQUIRE(f);
    fputs("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}", f);
    REQUIRE(fclose(f) == 0);
    /* b claims 1 MiB (so a mapped read past the real end would fault), the file holds 100. */
    static const int64_t shape_a[1] = {4}, shape_b[1] = {262144};
    const char *names[2] = {"a", "b"};
    const int64_t *shapes[2] = {shape_a, shape_b};
    for (int s = 0; s < 2; s++) {
        moe_st_writer *w = NULL;
        REQUIRE(moe_st_writer_create(&w) == MOE_OK);
        REQUIRE(moe_st_writer_add(w, names[s], MOE_DTYPE_F32, 1, shapes[s]) == MOE_OK);
        snprintf(p, sizeof p, "%s/s%d.safetensors", dir, s + 1);
        REQUIRE(moe_st_writer_write(w, p, zero_fill, NULL) == MOE_OK);
        moe_st_writer_destroy(w);
    }
    REQUIRE(truncate(p, file_size(p) - 4 * 262144 + 100) == 0);
    const int fds = fx_fd_count(), maps = fx_map_count(root);
    for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
        const moe_open_options o = {sizeof o, no_mmap};
        moe_model *m = SENTINEL;
        CHECK_STATUS(moe_model_open(dir, &o, &m), MOE_ETRUNCATED);
        CHECK(m == SENTINEL);
        CHECKF(has("s2.safetensors") && has("tensor 'b' ends at byte 1048576") &&
                   has("holds only 100 data bytes"),
               "%s", moe_last_error());
        CHECK(fx_fd_count() == fds && fx_map_count(root) == maps);
    }
    for (int s = 1; s <= 2; s++) {
        snprintf(p, sizeof p, "%s/s%d.safetensors", dir, s);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    unlink(p);
    fx_remove_model(dir);
    CHECK(rmdir(dir) == 0);
}

/* The reference output: a layer of an untouched checkpoint. */
static float *reference(void)
{
    char dir[256];
    fresh(dir, sizeof dir, "reference");
    moe_model *m = fx_open(dir, false);
    moe_status st;
    float *y = forward_of(m, &st);
    REQUIRE(st == MOE_OK);
    moe_model_close(m);
    cleanup(dir);
    return y;
}

/* Truncated after open, at several places: inside the layer's tensors and just one byte. */
static void test_truncated_after_open(const float *ref)
{
    char dir[256], path[300];
    const off_t cuts[] = {1, 4096, 100000};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
            fresh(dir, sizeof dir, "truncated");
            model_path(path, sizeof path, dir);
            moe_model *m = fx_open(dir, no_mmap);
            const off_t size = file_size(path);
            REQUIRE(size > cuts[c] && truncate(path, size - cuts[c]) == 0);
            moe_status st;
            float *y = forward_of(m, &st);
            if (no_mmap) {
                CHECKF(st == MOE_OK, "no_mmap, cut %lld: %s", (long long)cuts[c], moe_last_error());
                CHECKF(same(y, ref, m), "no_mmap, cut %lld: not the untouched model's output",
                       (long long)cuts[c]);
            } else {
                CHECKF(st == MOE_ETRUNCATED, "cut %lld: status %d: %s", (long long)cuts[c], st,
                       moe_last_error());
                CHECKF(has(path) && has("changed after open"), "%s", moe_last_error());
                moe_router *r = SENTINEL;
                CHECK_STATUS(moe_router_create_from_model(m, LAYER, &r), MOE_ETRUNCATED);
                CHECK(r == SENTINEL);
            }
            free(y);
            moe_model_close(m);
            cleanup(dir);
        }
    }
}

/* Truncated after create: the layer holds its own packed copy and never reads the file. */
static void test_truncated_after_create(const float *ref)
{
    char dir[256], path[300];
    fresh(dir, sizeof dir, "after_create");
    model_path(path, sizeof path, dir);
    moe_model *m = fx_open(dir, false);
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *l = NULL;
    CHECK_STATUS(moe_layer_create(m, LAYER, &o, &l), MOE_OK);
    REQUIRE(l && truncate(path, 0) == 0);
    float *y = forward_layer(m, l);
    CHECK(same(y, ref, m));
    moe_layer_destroy(l);
    free(y);
    moe_model_close(m);
    cleanup(dir);
}

/* Replaced by a different, shorter file under the same name, or grown: the handle still reads
 * the file it opened, to its end and no further. */
static void test_replaced_or_grown(const float *ref)
{
    char dir[256], path[300], other[300];
    for (int grow = 0; grow < 2; grow++) {
        fresh(dir, sizeof dir, "replaced");
        model_path(path, sizeof path, dir);
        moe_model *m = fx_open(dir, false);
        if (grow) {
            FILE *f = fopen(path, "ab");
            REQUIRE(f && fwrite("more bytes", 1, 10, f) == 10 && fclose(f) == 0);
        } else {
            snprintf(other, sizeof other, "%s/other.safetensors", dir);
            FILE *f = fopen(other, "wb");
            REQUIRE(f && fwrite("\x02\0\0\0\0\0\0\0{}", 1, 10, f) == 10 && fclose(f) == 0);
            REQUIRE(rename(other, path) == 0);
        }
        moe_status st;
        float *y = forward_of(m, &st);
        CHECKF(st == MOE_OK, "%s: %s", grow ? "grown" : "replaced", moe_last_error());
        CHECKF(same(y, ref, m), "%s: not the untouched model's output",
               grow ? "grown" : "replaced");
        free(y);
        moe_model_close(m);
        cleanup(dir);
    }
}

int main(void)
{
    REQUIRE(mkdtemp(root));
    test_short_shard();
    float *ref = reference();
    test_truncated_after_open(ref);
    test_truncated_after_create(ref);
    test_replaced_or_grown(ref);
    free(ref);
    CHECK(rmdir(root) == 0);
    return TEST_END();
}
