/* test_checkpoint.c — model folders: the index corpus, sharded fixtures, the shard cap. */
#include <stdint.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/st_writer.h"
#include "io_test_util.h"
#include "test.h"

static moe_ckpt *const SENTINEL = (moe_ckpt *)&test_checks_;

static void test_manifest(void)
{
    size_t n;
    io_case *cases = load_manifest("corpus/index/", &n);
    CHECKF(n >= 20, "only %zu index cases in the manifest", n);
    for (size_t i = 0; i < n; i++) {
        const io_case *c = &cases[i];
        for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
            moe_st_options opt = {.no_mmap = no_mmap};
            moe_ckpt *k = SENTINEL;
            moe_status st = moe_ckpt_open(c->path, &opt, &k);
            if (check_case_open(c, no_mmap, st, k == SENTINEL, "folder") && k != SENTINEL)
                moe_ckpt_close(k);
        }
    }
    free(cases);
}

static float f32_at(const moe_tensor *t, size_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)t->data + 4 * i, 4);
    return v;
}

static void test_valid_corpus(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/corpus/index/valid_two_shards", test_data_dir());
    moe_ckpt *k = NULL;
    CHECK_STATUS(moe_ckpt_open(dir, NULL, &k), MOE_OK);
    REQUIRE(k);
    CHECK(moe_ckpt_count(k) == 3 && moe_ckpt_shard_count(k) == 2);
    const char *names[3] = {"a", "b", "c"};
    const char *shard[3] = {"model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < 3; i++) {
        const moe_tensor *t = moe_ckpt_tensor(k, i);
        REQUIRE(t);
        CHECK(strcmp(t->name, names[i]) == 0);
        CHECK(moe_ckpt_find(k, names[i]) == t);
        size_t fl = strlen(t->file), sl = strlen(shard[i]);
        CHECKF(fl >= sl && strcmp(t->file + fl - sl, shard[i]) == 0, "%s in %s", t->name, t->file);
    }
    /* The generator's values: a and b hold [1, 2], c holds [3, 4, 5]. */
    const moe_tensor *c = moe_ckpt_find(k, "c");
    CHECK(c->count == 3 && f32_at(c, 0) == 3.0f && f32_at(c, 2) == 5.0f);
    CHECK(f32_at(moe_ckpt_find(k, "b"), 1) == 2.0f);
    CHECK(moe_ckpt_tensor(k, 3) == NULL);
    CHECK(moe_ckpt_find(k, "") == NULL && moe_ckpt_find(k, "d") == NULL &&
          moe_ckpt_find(k, "0") == NULL);
    moe_ckpt_close(k);

    snprintf(dir, sizeof dir, "%s/corpus/index/valid_single_file", test_data_dir());
    k = NULL;
    CHECK_STATUS(moe_ckpt_open(dir, NULL, &k), MOE_OK);
    REQUIRE(k);
    CHECK(moe_ckpt_count(k) == 2 && moe_ckpt_shard_count(k) == 1);
    CHECK(moe_ckpt_find(k, "a") && moe_ckpt_find(k, "c"));
    moe_ckpt_close(k);

    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    k = NULL;
    CHECK_STATUS(moe_ckpt_open_file(path, NULL, &k), MOE_OK);
    REQUIRE(k);
    CHECK(moe_ckpt_count(k) == 2 && strcmp(moe_ckpt_tensor(k, 1)->name, "c") == 0);
    moe_ckpt_close(k);
}

/* ---- a sharded fixture made at test time -------------------------------------------- */

#define LAYERS 6
#define EXPERTS 40
#define SHARDS 3

/* Byte J of tensor (layer, expert): a function of both, so a misplaced byte shows. */
static unsigned char pattern(int layer, int expert, uint64_t j)
{
    return (unsigned char)(layer * 131 + expert * 7 + j * 13);
}

static void tensor_name(char *buf, size_t cap, int layer, int expert)
{
    snprintf(buf, cap, "model.layers.%d.mlp.experts.%d.down_proj.weight", layer, expert);
}

typedef struct shard_ctx {
    int layers[LAYERS * EXPERTS];
    int experts[LAYERS * EXPERTS];
} shard_ctx;

static moe_status fill_shard(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    shard_ctx *c = ctx;
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        b[i] = pattern(c->layers[index], c->experts[index], offset + i);
    return MOE_OK;
}

/* Layers 2s and 2s+1 go to shard s; the index is written by hand, laid out as HF writes it. */
static void write_shards(const char *dir)
{
    char path[600], name[128], shard[64];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *index = fopen(path, "w");
    REQUIRE(index);
    fprintf(index, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n");
    int first = 1;
    for (int s = 0; s < SHARDS; s++) {
        snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", s + 1, SHARDS);
        moe_st_writer *w = NULL;
        REQUIRE(moe_st_writer_create(&w) == MOE_OK);
        shard_ctx *ctx = calloc(1, sizeof *ctx);
        REQUIRE(ctx);
        size_t k = 0;
        for (int layer = 2 * s; layer < 2 * s + 2; layer++)
            for (int e = 0; e < EXPERTS; e++) {
                tensor_name(name, sizeof name, layer, e);
                int64_t shape[2] = {3, 1 + e % 5};
                REQUIRE(moe_st_writer_add(w, name, MOE_DTYPE_BF16, 2, shape) == MOE_OK);
                ctx->layers[k] = layer;
                ctx->experts[k] = e;
                k++;
                fprintf(index, "%s    \"%s\": \"%s\"", first ? "" : ",\n", name, shard);
                first = 0;
            }
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        CHECK_STATUS(moe_st_writer_write(w, path, fill_shard, ctx), MOE_OK);
        moe_st_writer_destroy(w);
        free(ctx);
    }
    fprintf(index, "\n  }\n}\n");
    REQUIRE(fclose(index) == 0);
}

static void test_sharded_fixture(void)
{
    char dir[256], name[128];
    make_tmpdir(dir, sizeof dir);
    write_shards(dir);
    for (int no_mmap = 0; no_mmap <= 1; no_mmap++) {
        moe_st_options opt = {.no_mmap = no_mmap};
        moe_ckpt *k = NULL;
        CHECK_STATUS(moe_ckpt_open(dir, &opt, &k), MOE_OK);
        REQUIRE(k);
        CHECK(moe_ckpt_shard_count(k) == SHARDS);
        CHECK(moe_ckpt_count(k) == LAYERS * EXPERTS);
        for (size_t i = 0; i + 1 < moe_ckpt_count(k); i++)
            CHECK(strcmp(moe_ckpt_tensor(k, i)->name, moe_ckpt_tensor(k, i + 1)->name) < 0);
        for (int layer = 0; layer < LAYERS; layer++)
            for (int e = 0; e < EXPERTS; e++) {
                tensor_name(name, sizeof name, layer, e);
                const moe_tensor *t = moe_ckpt_find(k, name);
                CHECKF(t != NULL, "%s not found", name);
                if (!t) continue;
                CHECK(t->dtype == MOE_DTYPE_BF16 && t->ndim == 2 && t->shape[1] == 1 + e % 5);
                char shard[64];
                snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", layer / 2 + 1,
                         SHARDS);
                CHECKF(strstr(t->file, shard) != NULL, "%s is in %s", name, t->file);
                int bad = 0;
                for (uint64_t j = 0; j < t->nbytes; j++)
                    bad += ((const unsigned char *)t->data)[j] != pattern(layer, e, j);
                CHECKF(bad == 0, "%s: %d bytes differ", name, bad);
            }
        tensor_name(name, sizeof name, LAYERS, 0);
        CHECK(moe_ckpt_find(k, name) == NULL);
        moe_ckpt_close(k);
    }
    remove_tmpdir(dir);
}

/* More distinct shard names than the cap: refused before any shard is opened. */
static void test_shard_cap(void)
{
    char dir[256], path[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "{\"weight_map\": {");
    for (int i = 0; i <= 100000; i++)
        fprintf(f, "%s\"t%d\": \"s%d.safetensors\"", i ? "," : "", i, i);
    fprintf(f, "}}");
    REQUIRE(fclose(f) == 0);
    moe_ckpt *k = SENTINEL;
    CHECK_STATUS(moe_ckpt_open(dir, NULL, &k), MOE_EOVERFLOW);
    CHECK(strstr(moe_last_error(), "100001 shards exceed the limit of 100000") != NULL);
    CHECK(k == SENTINEL);
    remove_tmpdir(dir);
}

static void test_check_index(void)
{
    static const struct {
        const char *json;
        moe_status want;
        const char *needle;
    } cases[] = {
        {"{\"weight_map\": {\"a\": \"x.safetensors\"}}", MOE_OK, ""},
        {"  {\"metadata\": null, \"weight_map\": {\"a\": \"x.safetensors\"}, \"extra\": 1}\n",
         MOE_OK, ""},
        {"{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}", MOE_EDUPLICATE,
         "duplicate key \"a\""},
        {"{\"weight_map\": {\"\": \"x.safetensors\"}}", MOE_EJSON, "empty tensor name"},
        {"{\"weight_map\": {\"a\": null}}", MOE_EJSON, "weight_map['a'] is null"},
        {"{\"weight_map\": {\"a\": \"x/../../y.safetensors\"}}", MOE_EPATH, "contains '..'"},
        {"{\"weight_map\": {\"a\": \"ab:c.safetensors\"}}", MOE_EPATH, "contains ':'"},
        {"{\"weight_map\": {\"a\": \".safetensors\"}}", MOE_EPATH, "starts with '.'"},
        {"{\"weight_map\": \"x.safetensors\"}", MOE_EJSON, "'weight_map' is a string"},
        {"[]", MOE_EJSON, "not a JSON object"},
        {"", MOE_EJSON, "not valid JSON"},
        {"{\"weight_map\": {\"a\": \"x.safetensors\"}} {}", MOE_EJSON, "not valid JSON"},
        {"{\"weight_map\": {\"a\": \"x\\u0000.safetensors\"}}", MOE_EJSON, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        moe_status st = moe_ckpt_check_index(cases[i].json, strlen(cases[i].json), "idx.json");
        CHECKF(st == cases[i].want, "case %zu: got %s: %s", i, moe_status_string(st),
               moe_last_error());
        if (st != MOE_OK)
            CHECKF(strstr(moe_last_error(), cases[i].needle) &&
                       strstr(moe_last_error(), "idx.json"),
                   "case %zu: '%s' lacks '%s'", i, moe_last_error(), cases[i].needle);
    }
    /* A 300-byte shard name is not a file name any file system takes. */
    char json[512];
    char longname[301];
    memset(longname, 'a', 288);
    memcpy(longname + 288, ".safetensors", 13);
    snprintf(json, sizeof json, "{\"weight_map\": {\"a\": \"%s\"}}", longname);
    CHECK_STATUS(moe_ckpt_check_index(json, strlen(json), NULL), MOE_EPATH);
    CHECK(strstr(moe_last_error(), "longer than 255 bytes") != NULL);
}

static void test_arguments(void)
{
    moe_ckpt *k = SENTINEL;
    CHECK_STATUS(moe_ckpt_open(NULL, NULL, &k), MOE_EINVAL);
    CHECK_STATUS(moe_ckpt_open("/nonexistent/folder", NULL, &k), MOE_EMISSING);
    CHECK(strstr(moe_last_error(), "/nonexistent/folder") != NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/corpus/io_manifest.tsv", test_data_dir());
    CHECK_STATUS(moe_ckpt_open(path, NULL, &k), MOE_EIO);
    CHECK(strstr(moe_last_error(), "not a folder") != NULL);
    CHECK_STATUS(moe_ckpt_open_file("/nonexistent.safetensors", NULL, &k), MOE_EMISSING);
    CHECK(k == SENTINEL);
    CHECK(moe_ckpt_count(NULL) == 0 && moe_ckpt_shard_count(NULL) == 0);
    CHECK(moe_ckpt_tensor(NULL, 0) == NULL && moe_ckpt_find(NULL, "a") == NULL);
    moe_ckpt_close(NULL);
}

int main(void)
{
    test_manifest();
    test_valid_corpus();
    test_sharded_fixture();
    test_shard_cap();
    test_check_index();
    test_arguments();
    return TEST_END();
}
