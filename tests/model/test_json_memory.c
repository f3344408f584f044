/* test_json_memory.c — the memory bound on JSON inputs: the peak heap of reading each worst-shaped
 * file, counted. */
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "test.h"

#define MIB ((int64_t)1 << 20)
/* The bound docs/errors.md gives for any JSON input of LEN bytes. */
#define BOUND(len) (4 * (int64_t)(len) + 64 * MIB)

/* A growing text. */
typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->p = realloc(t->p, t->cap);
        REQUIRE(t->p != NULL);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

/* "{},{},..." up to N bytes (N odd lengths end without a trailing comma). */
static void empty_objects(text *t, size_t n)
{
    const size_t end = t->len + n;
    puts_(t, "{}");
    while (t->len + 3 <= end)
        puts_(t, ",{}");
}

static void write_file(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(a, 1, na, f) == na && (nb == 0 || fwrite(b, 1, nb, f) == nb));
    REQUIRE(fclose(f) == 0);
}

/* A safetensors file with header T (and DATA bytes of zeros after it). */
static void write_safetensors(const char *path, const text *t, size_t data)
{
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)t->len >> (8 * i));
    char *zeros = calloc(data ? data : 1, 1);
    REQUIRE(zeros != NULL);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(len8, 1, 8, f) == 8 && fwrite(t->p, 1, t->len, f) == t->len);
    REQUIRE(data == 0 || fwrite(zeros, 1, data, f) == data);
    REQUIRE(fclose(f) == 0);
    free(zeros);
}

/* Checks one refused case: the status, a message naming the file and the shape, and a peak
 * of the file's bytes plus little (no tree was built). */
static void check_refused(const char *what, moe_status st, const char *file, size_t len)
{
    const int64_t peak = moe_alloc_peak_bytes();
    const char *msg = moe_last_error();
    CHECKF(st == MOE_EOVERFLOW, "%s: %s: %s", what, moe_status_string(st), msg);
    CHECKF(strstr(msg, file) && strstr(msg, "would take about") && strstr(msg, "MiB to parse"),
           "%s: message '%s' lacks the file or the estimate", what, msg);
    CHECKF(peak <= BOUND(len), "%s: peak %lld bytes over the bound for %zu", what, (long long)peak,
           len);
    CHECKF(peak <= (int64_t)len + MIB, "%s: peak %lld bytes for a %zu-byte file: a tree was built",
           what, (long long)peak, len);
    fprintf(stderr, "%-46s %10zu bytes: peak %7.1f MiB, %s\n", what, len, (double)peak / MIB,
            moe_status_string(st));
}

static void check_accepted(const char *what, moe_status st, size_t len)
{
    const int64_t peak = moe_alloc_peak_bytes();
    CHECKF(st == MOE_OK, "%s: %s: %s", what, moe_status_string(st), moe_last_error());
    CHECKF(peak <= BOUND(len), "%s: peak %lld bytes over the bound for %zu", what, (long long)peak,
           len);
    fprintf(stderr, "%-46s %10zu bytes: peak %7.1f MiB, %s\n", what, len, (double)peak / MIB,
            moe_status_string(st));
}

/* The table: a 100 MB header {"a":[{},{},...]}. */
static void header_of_empty_objects(const char *dir)
{
    text t = {0};
    puts_(&t, "{\"a\":[");
    empty_objects(&t, MOE_ST_MAX_HEADER - 16);
    puts_(&t, "]}");
    REQUIRE(t.len <= MOE_ST_MAX_HEADER);
    char path[600];
    snprintf(path, sizeof path, "%s/objects.safetensors", dir);
    write_safetensors(path, &t, 0);
    moe_st_file *f = NULL;
    moe_alloc_peak_reset();
    moe_status st = moe_st_open(path, NULL, &f);
    check_refused("100 MB header of {}", st, path, t.len);
    CHECK(f == NULL);
    moe_st_close(f);
    unlink(path);
    free(t.p);
}

/* The same under an ignored key of the index, and a weight_map naming a shard. */
static void index_of_empty_objects(const char *dir)
{
    text t = {0};
    puts_(&t, "{\"metadata\":{\"ignored\":[");
    empty_objects(&t, MOE_ST_MAX_HEADER - 128);
    puts_(&t, "]},\"weight_map\":{\"w\":\"model-00001-of-00001.safetensors\"}}");
    REQUIRE(t.len <= MOE_ST_MAX_HEADER);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_file(path, t.p, t.len, NULL, 0);
    moe_ckpt *ck = NULL;
    moe_alloc_peak_reset();
    moe_status st = moe_ckpt_open(dir, NULL, &ck);
    check_refused("100 MB index, {} under an ignored key", st, path, t.len);
    CHECK(ck == NULL);
    unlink(path);
    free(t.p);
}

/* A 16 MB config.json padded with {}. */
static void config_of_empty_objects(const char *dir)
{
    text t = {0};
    puts_(&t, "{\"model_type\":\"deepseek_v3\",\"pad\":[");
    empty_objects(&t, ((size_t)16 << 20) - 64);
    puts_(&t, "]}");
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, t.p, t.len, NULL, 0);
    moe_model_desc d;
    moe_alloc_peak_reset();
    moe_status st = moe_model_desc_load(path, &d);
    check_refused("16 MB config.json of {}", st, path, t.len);
    if (st == MOE_OK) moe_model_desc_free(&d);
    unlink(path);
    free(t.p);
}

/* A valid header of N one-byte tensors (and their N bytes). */
static void one_byte_tensors(const char *dir, size_t n, bool refused)
{
    text t = {0};
    char entry[128];
    puts_(&t, "{");
    for (size_t i = 0; i < n; i++) {
        int k = snprintf(entry, sizeof entry,
                         "%s\"t%07zu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                         i ? "," : "", i, i, i + 1);
        put(&t, entry, (size_t)k);
    }
    puts_(&t, "}");
    char path[600], what[80];
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    snprintf(what, sizeof what, "valid header of %zu one-byte tensors", n);
    write_safetensors(path, &t, n);
    moe_st_file *f = NULL;
    moe_alloc_peak_reset();
    moe_status st = moe_st_open(path, NULL, &f);
    if (refused)
        check_refused(what, st, path, t.len);
    else
        check_accepted(what, st, t.len);
    CHECK(refused ? f == NULL : moe_st_count(f) == n);
    moe_st_close(f);
    unlink(path);
    free(t.p);
}

/* The index of a real 163-shard DeepSeek-V3 checkpoint, in shape: every tensor name of its 61
 * layers (256 routed experts, FP8 with scales) mapped to its shard. Checked in memory. */
static void v3_index(void)
{
    text t = {0};
    char entry[256];
    puts_(&t, "{\"metadata\":{\"total_size\":688586727753},\"weight_map\":{");
    size_t n = 0;
    const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    for (int layer = 0; layer < 61; layer++)
        for (int e = 0; e < 256; e++)
            for (int p = 0; p < 3; p++)
                for (int scale = 0; scale < 2; scale++) {
                    int k = snprintf(entry, sizeof entry,
                                     "%s\"model.layers.%d.mlp.experts.%d.%s.weight%s\":"
                                     "\"model-%05d-of-000163.safetensors\"",
                                     n ? "," : "", layer, e, proj[p], scale ? "_scale_inv" : "",
                                     1 + (int)(n * 163 / (61 * 256 * 6)));
                    put(&t, entry, (size_t)k);
                    n++;
                }
    puts_(&t, "}}");
    moe_alloc_peak_reset();
    moe_status st = moe_ckpt_check_index(t.p, t.len, "v3.index.json");
    check_accepted("DeepSeek-V3-shaped index (163 shards)", st, t.len);
    CHECK(moe_alloc_peak_bytes() <= 3 * (int64_t)t.len + MIB);
    free(t.p);
}

int main(void)
{
    /* jansson's allocations through the library's, so the peak counts its tree. */
    json_set_alloc_funcs(moe_malloc, moe_free);
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/moe-json-memory-XXXXXX", base && *base ? base : "/tmp");
    REQUIRE(mkdtemp(buf) != NULL);
    header_of_empty_objects(buf);
    index_of_empty_objects(buf);
    config_of_empty_objects(buf);
    one_byte_tensors(buf, 1000000, true);
    one_byte_tensors(buf, 20000, false);
    v3_index();
    rmdir(buf);
    return TEST_END();
}
