/* bench_json.c — the time to read the JSON of real-shaped inputs: a 163-shard DeepSeek-V3 index and
 * a 1 MB safetensors header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

#define REPEATS 15

typedef struct text {
    char *p;
    size_t len, cap;
    size_t count, json; /* tensors, and the JSON's bytes */
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->p = realloc(t->p, t->cap);
        if (!t->p) exit(1);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
}

static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};

/* Every routed-expert tensor name of DeepSeek-V3's 61 layers (256 experts, FP8 weights with
 * their scales), each mapped to one of 163 shards in order. */
static text v3_index(void)
{
    text t = {0};
    char e[256];
    const char *head = "{\"metadata\":{\"total_size\":688586727753},\"weight_map\":{";
    put(&t, head, strlen(head));
    size_t n = 0, total = 61 * 256 * 6;
    for (int l = 0; l < 61; l++)
        for (int x = 0; x < 256; x++)
            for (int p = 0; p < 3; p++)
                for (int s = 0; s < 2; s++, n++)
                    put(&t, e,
                        (size_t)snprintf(e, sizeof e,
                                         "%s\"model.layers.%d.mlp.experts.%d.%s.weight%s\":"
                                         "\"model-%05d-of-000163.safetensors\"",
                                         n ? "," : "", l, x, proj[p], s ? "_scale_inv" : "",
                                         1 + (int)(n * 163 / total)));
    put(&t, "}}", 2);
    t.count = n;
    t.json = t.len;
    return t;
}

/* A safetensors image whose header is about 1 MB of expert tensors named as in V3, each one
 * byte (FP8 [1, 1]) so the image stays small: the header is what is timed. */
static text header_1mb(void)
{
    text t = {0};
    char e[256];
    put(&t, "\0\0\0\0\0\0\0\0{", 9);
    size_t n = 0;
    for (int x = 0; t.len < (1u << 20); x++)
        for (int p = 0; p < 3; p++)
            for (int s = 0; s < 2; s++, n++)
                put(&t, e,
                    (size_t)snprintf(e, sizeof e,
                                     "%s\"model.layers.%d.mlp.experts.%d.%s.weight%s\":{\"dtype\":"
                                     "\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[%zu,%zu]}",
                                     n ? "," : "", 3 + x / 256, x % 256, proj[p],
                                     s ? "_scale_inv" : "", n, n + 1));
    put(&t, "}", 1);
    const uint64_t hl = t.len - 8;
    for (size_t i = 0; i < n; i++)
        put(&t, "", 1);
    t.count = n;
    t.json = hl;
    for (int i = 0; i < 8; i++)
        t.p[i] = (char)(hl >> (8 * i));
    return t;
}

int main(void)
{
    text idx = v3_index(), hdr = header_1mb();
    double ti[REPEATS], th[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        if (moe_ckpt_check_index(idx.p, idx.len, "index") != MOE_OK) {
            fprintf(stderr, "bench_json: %s\n", moe_last_error());
            return 1;
        }
        double t1 = bench_now_ns();
        moe_st_file *f = NULL;
        if (moe_st_open_memory(hdr.p, hdr.len, "header", &f) != MOE_OK) {
            fprintf(stderr, "bench_json: %s\n", moe_last_error());
            return 1;
        }
        moe_st_close(f);
        double t2 = bench_now_ns();
        ti[r] = t1 - t0;
        th[r] = t2 - t1;
    }
    printf("V3 index (163 shards, %zu tensors, %zu bytes): median %.1f ms, min %.1f ms\n",
           idx.count, idx.json, bench_median(ti, REPEATS) / 1e6, bench_min(ti, REPEATS) / 1e6);
    printf("1 MB header (%zu tensors, %zu bytes): median %.2f ms, min %.2f ms\n", hdr.count,
           hdr.json, bench_median(th, REPEATS) / 1e6, bench_min(th, REPEATS) / 1e6);
    free(idx.p);
    free(hdr.p);
    return 0;
}
