/* fuzz_open_create.c — libFuzzer target: the whole path a user takes. The input is a model folder
 * (config.json, model.safetensors or an index and shards; framing in fuzz_util.h); it is opened,
 * each of its first layers is described, created and run forward on a few tokens. */
#include "fuzz_util.h"

#include "core/alloc.h"
#include "layer/layer_describe.h"
#include "model/model_handle.h"

#define MAX_LAYERS 4
#define TOKENS 2
/* A config may be consistent with a large hidden size only if the file holds that many bytes,
 * which the input size bounds; this keeps a forward's buffers small regardless. */
#define MAX_HIDDEN (1 << 16)

static void run_forward(const moe_layer *l, const moe_model_desc *d)
{
    const size_t h = (size_t)d->hidden;
    if (h > MAX_HIDDEN) return;
    const size_t ws_size = moe_layer_workspace_size(l, TOKENS);
    FUZZ_REQUIRE(ws_size > 0);
    float *x = malloc(TOKENS * h * sizeof *x), *out = malloc(TOKENS * h * sizeof *out);
    void *ws = aligned_alloc(64, (ws_size + 63) / 64 * 64);
    FUZZ_REQUIRE(x && out && ws);
    for (size_t i = 0; i < TOKENS * h; i++)
        x[i] = (float)((int)(i % 7) - 3) * 0.25f;
    const int32_t tokens[TOKENS] = {0, 1};
    moe_forward_args a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.n_tokens = TOKENS;
    a.hidden_size = h;
    a.hidden = x;
    a.hidden_dtype = MOE_DTYPE_F32;
    a.token_ids = tokens;
    a.token_id_dtype = MOE_DTYPE_I32;
    a.out = out;
    a.workspace = ws;
    a.workspace_size = ws_size;
    const moe_status st = moe_layer_forward(l, &a);
    FUZZ_NOTE(st, "  forward");
    FUZZ_REQUIRE_MESSAGE(st);
    /* Only a hash layer whose vocabulary is smaller than the token ids may refuse. */
    FUZZ_REQUIRE(st == MOE_OK || st == MOE_ERANGE);
    free(x);
    free(out);
    free(ws);
}

static void try_layer(const moe_model *m, int layer)
{
    char *text = NULL;
    const moe_status sd = moe_layer_describe(m, layer, NULL, &text);
    FUZZ_REQUIRE_MESSAGE(sd);
    moe_free(text);
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *sentinel = (moe_layer *)&sentinel, *l = sentinel;
    const moe_status st = moe_layer_create(m, layer, &o, &l);
    FUZZ_NOTE(st, "  layer %d: describe %s, create", layer, moe_status_string(sd));
    FUZZ_REQUIRE_MESSAGE(st);
    if (st != MOE_OK) {
        FUZZ_REQUIRE(l == sentinel);
        return;
    }
    FUZZ_REQUIRE(moe_layer_explain(l)[0] != '\0');
    run_forward(l, moe_model_desc_of(m));
    moe_layer_destroy(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_write_folder(data, size);
    /* The last byte picks mapping or reading, so both are fuzzed and each input is replayable. */
    const moe_open_options opt = {sizeof opt, size > 0 && (data[size - 1] & 1)};
    moe_model *sentinel = (moe_model *)&sentinel, *m = sentinel;
    const moe_status st = moe_model_open(dir, &opt, &m);
    FUZZ_NOTE(st, "open (%s)", opt.no_mmap ? "read" : "mapped");
    FUZZ_REQUIRE_MESSAGE(st);
    if (st != MOE_OK) {
        FUZZ_REQUIRE(m == sentinel);
        return 0;
    }
    const int n = moe_model_layer_count(m);
    FUZZ_REQUIRE(n >= 1);
    for (int layer = 0; layer < n && layer < MAX_LAYERS; layer++)
        try_layer(m, layer);
    moe_model_close(m);
    return 0;
}
