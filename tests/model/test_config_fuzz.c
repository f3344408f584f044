/* test_config_fuzz.c — truncated, retyped and bit-flipped configs never crash the parser. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "model/model.h"

#include <jansson.h>

static const char *const fixtures[] = {
    "deepseek-v3.json",   "deepseek-r1.json",       "kimi-k2.json",
    "deepseek-v2.json",   "deepseek-v2-lite.json",  "deepseek-v4-flash.json",
    "qwen3-30b-a3b.json", "qwen3-30b-a3b-fp8.json", "mixtral-8x7b.json",
    "gpt-oss-20b.json",   "gpt-oss-120b.json",
    "qwen3-next-80b-a3b.json", "qwen3.5-35b-a3b.json", "ernie-4.5-21b-a3b.json",
    "llama-4-maverick.json",
};

/* Values that stand in for any field: every JSON type and the edges of the integer ranges. */
static const char *const values[] = {
    "null", "true",       "\"x\"", "-1",
    "0",    "1",          "3",     "32",
    "2.5",  "1e308",      "-0.0",  "9223372036854775807",
    "[]",   "[128, 128]", "{}",    "{\"quant_method\": \"fp8\"}",
};

static long parsed_ok, parsed_err;

static bool mlp_ok(const moe_mlp_desc *m)
{
    if (m->hidden < 1 || m->intermediate < 1) return false;
    if (m->format == MOE_WFMT_MXFP4 && (m->hidden % 32 || m->intermediate % 32)) return false;
    return true;
}

/* What every successful parse guarantees, whatever the input. */
static void check_invariants(const moe_model_desc *d, const char *what)
{
    CHECKF(d->n_layers >= 1 && d->n_layers <= 4096 && d->layers, "%s: layers", what);
    CHECKF(d->hidden >= 1 && d->hidden <= (1 << 20), "%s: hidden", what);
    for (int i = 0; i < d->n_layers && d->layers; i++) {
        const moe_layer_desc *l = &d->layers[i];
        if (l->kind == MOE_LAYER_DENSE) {
            CHECKF(mlp_ok(&l->dense), "%s: layer %d dense", what, i);
            continue;
        }
        const moe_routing_desc *r = &l->routing;
        CHECKF(r->top_k >= 1 && r->top_k <= r->n_experts, "%s: layer %d top_k", what, i);
        CHECKF(r->n_group >= 1 && r->n_experts % r->n_group == 0, "%s: layer %d n_group", what, i);
        CHECKF(r->topk_group >= 1 && r->topk_group <= r->n_group, "%s: layer %d topk_group", what,
               i);
        CHECKF(r->routed_scaling_factor > 0, "%s: layer %d rsf", what, i);
        CHECKF(mlp_ok(&l->experts), "%s: layer %d experts", what, i);
        if (l->n_shared) CHECKF(mlp_ok(&l->shared), "%s: layer %d shared", what, i);
        if (l->kind == MOE_LAYER_HASH) CHECKF(d->vocab_size >= 1, "%s: hash without vocab", what);
    }
}

static void try_parse(const char *text, size_t len, const char *what)
{
    moe_model_desc d;
    moe_status st = moe_model_desc_parse(text, len, "fuzz.json", &d);
    if (st == MOE_OK) {
        parsed_ok++;
        check_invariants(&d, what);
        moe_model_desc_free(&d);
        return;
    }
    parsed_err++;
    CHECKF(moe_last_error()[0] != '\0', "%s: status %d without a message", what, (int)st);
    CHECKF(st == MOE_EJSON || st == MOE_EMISSING || st == MOE_ECONFIG || st == MOE_EUNSUPPORTED ||
               st == MOE_EDUPLICATE,
           "%s: unexpected status %d", what, (int)st);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    static char buf[1 << 16];
    *len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[*len] = '\0';
    return buf;
}

/* Every prefix of the file: the parser must reject all but (at most) the whole. */
static void truncations(const char *text, size_t len, const char *file)
{
    char what[128];
    for (size_t n = 0; n < len; n += 3) {
        snprintf(what, sizeof what, "%s truncated to %zu", file, n);
        try_parse(text, n, what);
    }
}

/* Each top-level (and quantization_config) field replaced by each value in turn. */
static void retyped(const char *text, size_t len, const char *file)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    REQUIRE(root != NULL);
    const char *key;
    json_t *val;
    char what[256];
    void *tmp;
    json_object_foreach_safe(root, tmp, key, val)
    {
        json_t *saved = json_incref(val);
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            json_t *nv = json_loads(values[v], JSON_DECODE_ANY, &err);
            REQUIRE(nv != NULL);
            json_object_set_new(root, key, nv);
            char *s = json_dumps(root, JSON_COMPACT);
            REQUIRE(s != NULL);
            snprintf(what, sizeof what, "%s with %s = %s", file, key, values[v]);
            try_parse(s, strlen(s), what);
            free(s);
        }
        json_object_set_new(root, key, saved);
    }
    json_decref(root);
}

/* Deterministic byte flips (xorshift), a few hundred per file. */
static void flips(const char *text, size_t len, const char *file)
{
    static char buf[1 << 16];
    uint32_t x = 2463534242u;
    char what[128];
    for (int i = 0; i < 300; i++) {
        memcpy(buf, text, len);
        for (int k = 0; k < 1 + i % 3; k++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            buf[x % len] = (char)(x >> 8);
        }
        snprintf(what, sizeof what, "%s flip round %d", file, i);
        try_parse(buf, len, what);
    }
}

int main(void)
{
    const char *dir = getenv("MOE_TEST_DATA");
    if (!dir) dir = "tests/data";
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        char path[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/configs/%s", dir, fixtures[i]);
        const char *text = read_all(path, &len);
        long before = parsed_err;
        try_parse(text, len, fixtures[i]);
        CHECKF(parsed_err == before, "%s does not parse: %s", fixtures[i], moe_last_error());
        truncations(text, len, fixtures[i]);
        retyped(text, len, fixtures[i]);
        flips(text, len, fixtures[i]);
    }
    /* Both outcomes must have happened, or the mutations were not reaching the parser. */
    CHECK(parsed_ok > 100 && parsed_err > 1000);
    fprintf(stderr, "%ld parsed, %ld rejected\n", parsed_ok, parsed_err);
    return TEST_END();
}
