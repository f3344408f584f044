/* run_model.c — a libmoe user: describe a model folder and run each MoE layer on random tokens. */
/*
 * usage: run_model MODEL_DIR [T]
 *
 * Opens MODEL_DIR (a Hugging Face folder: config.json and safetensors), prints what
 * moe_model_get_info says of it, then for every MoE (or hash-routed) layer creates the layer,
 * runs one forward over T random hidden states (default 4) and prints the layer's description
 * and a checksum of its output. It includes only <moe.h>.
 */
#include <moe.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: the same random inputs on every run, so two builds can be compared. */
static uint64_t random_state = 0x9E3779B97F4A7C15u;
static uint64_t random_next(void)
{
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * 0x2545F4914F6CDD1Du;
}

/* Uniform in [-1, 1): the top 24 bits over 2^23, minus one. */
static float random_unit(void) { return (float)(random_next() >> 40) / 8388608.0f - 1.0f; }

static int fail(const char *what)
{
    fprintf(stderr, "run_model: %s failed: %s\n", what, moe_last_error());
    return 1;
}

/* Creates layer INDEX, runs it on HIDDEN [T, H] with TOKEN_IDS [T], prints its line. */
static int run_layer(const moe_model *model, int index, size_t n_tokens, size_t hidden_size,
                     const float *hidden, const int32_t *token_ids)
{
    moe_layer *layer = NULL;
    if (moe_layer_create(model, index, NULL, &layer) != MOE_OK) return fail("moe_layer_create");

    int rc = 1;
    moe_layer_info info = {.size = sizeof info};
    float *out = malloc(n_tokens * hidden_size * sizeof *out);
    /* The workspace must be 64-byte aligned; aligned_alloc wants a multiple of 64. */
    size_t ws_size = moe_layer_workspace_size(layer, n_tokens);
    void *workspace = ws_size ? aligned_alloc(64, (ws_size + 63) / 64 * 64) : NULL;
    if (moe_layer_get_info(layer, &info) != MOE_OK) {
        fail("moe_layer_get_info");
        goto done;
    }
    if (!out || !workspace) {
        fprintf(stderr, "run_model: layer %d: out of memory (workspace %zu bytes)\n", index,
                ws_size);
        goto done;
    }
    moe_forward_args args = {
        .size = sizeof args,
        .n_tokens = n_tokens,
        .hidden_size = hidden_size,
        .hidden = hidden,
        .hidden_dtype = MOE_DTYPE_F32,
        .token_ids = token_ids,
        .token_id_dtype = MOE_DTYPE_I32,
        .out = out,
        .workspace = workspace,
        .workspace_size = ws_size,
    };
    if (moe_layer_forward(layer, &args) != MOE_OK) {
        fail("moe_layer_forward");
        goto done;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n_tokens * hidden_size; i++)
        sum += out[i];
    printf("layer %d: %s, %d experts, top %d, %s/%s, experts %s, %d shared: checksum %.9g\n",
           info.index, moe_layer_kind_name(info.kind), info.n_experts, info.top_k,
           moe_route_method_name(info.route_method), moe_score_func_name(info.score_func),
           moe_weight_format_name(info.expert_format), info.n_shared_experts, sum);
    rc = 0;
done:
    free(workspace);
    free(out);
    moe_layer_destroy(layer);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: run_model MODEL_DIR [T]\n");
        return 2;
    }
    long t = argc == 3 ? strtol(argv[2], NULL, 10) : 4;
    if (t < 1 || t > 65536) {
        fprintf(stderr, "run_model: T must be 1..65536, not %s\n", argv[2]);
        return 2;
    }
    size_t n_tokens = (size_t)t;

    moe_model *model = NULL;
    if (moe_model_open(argv[1], NULL, &model) != MOE_OK) return fail("moe_model_open");
    moe_model_info info = {.size = sizeof info};
    if (moe_model_get_info(model, &info) != MOE_OK) {
        moe_model_close(model);
        return fail("moe_model_get_info");
    }
    printf("libmoe %s: %s, %d layers (%d MoE), hidden %lld, vocab %lld, %d experts, top %d\n",
           moe_version_string(), info.family, info.n_layers, info.n_moe_layers,
           (long long)info.hidden_size, (long long)info.vocab_size, info.n_experts, info.top_k);

    size_t hidden_size = (size_t)info.hidden_size;
    float *hidden = malloc(n_tokens * hidden_size * sizeof *hidden);
    int32_t *token_ids = malloc(n_tokens * sizeof *token_ids);
    int rc = 1;
    if (!hidden || !token_ids) {
        fprintf(stderr, "run_model: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n_tokens * hidden_size; i++)
        hidden[i] = random_unit();
    /* Token ids matter to hash-routed layers only, whose tables have vocab_size rows. */
    uint64_t vocab = info.vocab_size > 0 ? (uint64_t)info.vocab_size : 1;
    for (size_t i = 0; i < n_tokens; i++)
        token_ids[i] = (int32_t)(random_next() % vocab);

    rc = 0;
    for (int l = 0; l < info.n_layers && rc == 0; l++) {
        moe_layer_info layer = {.size = sizeof layer};
        if (moe_model_get_layer_info(model, l, &layer) != MOE_OK) {
            rc = fail("moe_model_get_layer_info");
            break;
        }
        if (layer.kind == MOE_LAYER_DENSE) continue;
        rc = run_layer(model, l, n_tokens, hidden_size, hidden, token_ids);
    }
done:
    free(token_ids);
    free(hidden);
    moe_model_close(model);
    return rc;
}
