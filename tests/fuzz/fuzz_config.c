/* fuzz_config.c — libFuzzer target: config.json text; an accepted description lists consistent
 * tensors for its layers, and its routers route a few tokens to distinct, in-range experts. */
#include "fuzz_util.h"

#include "core/alloc.h"
#include "model/model.h"

/* Layers looked at per input: the first few and the last (a config may declare thousands). */
#define LAYERS_FIRST 4
/* Routers larger than this are not built (the table and bias are sized by the config). */
#define MAX_TABLE_ENTRIES (1 << 16)
#define TOKENS 3

static void check_tensors(const moe_model_desc *d, int layer)
{
    moe_tensor_spec *v = NULL;
    size_t n = 0;
    const moe_status st = moe_model_layer_tensors(d, layer, &v, &n);
    FUZZ_REQUIRE_MESSAGE(st);
    if (st != MOE_OK) return;
    for (size_t i = 0; i < n; i++) {
        FUZZ_REQUIRE(v[i].layer == layer && v[i].name[0] != '\0');
        FUZZ_REQUIRE(memchr(v[i].name, '\0', sizeof v[i].name) != NULL);
        FUZZ_REQUIRE(v[i].ndim >= 0 && v[i].ndim <= 4);
        for (int k = 0; k < v[i].ndim; k++)
            FUZZ_REQUIRE(v[i].shape[k] >= 0);
        FUZZ_REQUIRE(v[i].dtype_mask & (1u << (unsigned)v[i].dtype));
    }
    moe_free(v);
}

/* Builds layer LAYER's router with a zero correction bias and a valid hash table where it
 * needs them, routes TOKENS rows of logits, and checks the contract's ids. */
static void check_router(const moe_model_desc *d, int layer)
{
    const moe_layer_desc *ld = &d->layers[layer];
    if (ld->kind == MOE_LAYER_DENSE) return;
    moe_router_params p = moe_router_params_of(d, &ld->routing);
    const int e = p.n_experts, k = p.top_k;
    if (e < 1 || k < 1 || k > e || e > MAX_TABLE_ENTRIES) return;
    float *bias = NULL;
    int32_t *table = NULL;
    if (p.method == MOE_ROUTE_NOAUX_TC) {
        bias = calloc((size_t)e, sizeof *bias);
        p.correction_bias = bias;
        p.correction_bias_dtype = MOE_DTYPE_F32;
    }
    if (p.method == MOE_ROUTE_HASH) {
        if (p.vocab_size < 1 || p.vocab_size > MAX_TABLE_ENTRIES / k) return;
        table = malloc((size_t)p.vocab_size * (size_t)k * sizeof *table);
        for (int64_t r = 0; r < p.vocab_size; r++)
            for (int j = 0; j < k; j++)
                table[r * k + j] = (int32_t)((r + j) % e);
        p.tid2eid = table;
        p.tid2eid_dtype = MOE_DTYPE_I32;
    }
    moe_router *r = NULL;
    const moe_status st = moe_router_create(&p, &r);
    FUZZ_REQUIRE_MESSAGE(st);
    if (st == MOE_OK) {
        float *logits = malloc((size_t)TOKENS * (size_t)e * sizeof *logits);
        int32_t ids[TOKENS * 64], tokens[TOKENS] = {0, 1, 2};
        float w[TOKENS * 64];
        for (int i = 0; i < TOKENS * e; i++)
            logits[i] = (float)((i * 37) % 11) - 5.0f; /* ties included */
        if (k <= 64 && (p.method != MOE_ROUTE_HASH || p.vocab_size >= TOKENS)) {
            FUZZ_REQUIRE(moe_router_forward(r, TOKENS, logits, tokens, MOE_DTYPE_I32, ids, w) ==
                         MOE_OK);
            for (int t = 0; t < TOKENS; t++)
                for (int a = 0; a < k; a++) {
                    FUZZ_REQUIRE(ids[t * k + a] >= 0 && ids[t * k + a] < e);
                    for (int b = 0; b < a; b++)
                        FUZZ_REQUIRE(ids[t * k + a] != ids[t * k + b]);
                }
        }
        free(logits);
        moe_router_destroy(r);
    }
    free(bias);
    free(table);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moe_model_desc d, before;
    memset(&d, 0xA5, sizeof d);
    before = d;
    const moe_status st = moe_model_desc_parse((const char *)data, size, "fuzz config.json", &d);
    FUZZ_REQUIRE_MESSAGE(st);
    if (st != MOE_OK) {
        FUZZ_REQUIRE(memcmp(&d, &before, sizeof d) == 0);
        return 0;
    }
    FUZZ_REQUIRE(d.n_layers >= 1 && d.layers != NULL && d.hidden >= 1);
    for (int l = 0; l < d.n_layers; l++) {
        if (l >= LAYERS_FIRST && l != d.n_layers - 1) continue;
        check_tensors(&d, l);
        check_router(&d, l);
    }
    moe_model_desc_free(&d);
    return 0;
}
