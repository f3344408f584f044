/* cmd_route.c — `moe route`: route router logits from .npy files with a config's routing. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "cli_npy.h"
#include "cli_util.h"
#include "core/alloc.h"
#include "core/shape_text.h"
#include "io/npy.h"
#include "model/model.h"

#define PROG "moe route"

static void help(void)
{
    printf("usage: moe route --config CONFIG.json --logits L.npy [--bias B.npy] [--tid2eid T.npy]\n"
           "                 [--input-ids I.npy] [--layer N] --ids-out IDS.npy\n"
           "                 --weights-out W.npy [--explain]\n"
           "\n"
           "Routes router logits the way a layer of the model routes them: the method and every\n"
           "parameter (scoring function, top-k, groups, norm_topk_prob, routed_scaling_factor)\n"
           "come from the Hugging Face config.json, read exactly as when a checkpoint is loaded.\n"
           "\n"
           "options:\n"
           "  --config CONFIG.json  the model's config.json (required)\n"
           "  --logits L.npy        router logits, f32 [T, E], E = the config's routed experts\n"
           "                        (required; T = 0 is allowed)\n"
           "  --bias B.npy          the correction bias e_score_correction_bias, f32 [E]:\n"
           "                        required by layers that have one (DeepSeek-V3/R1, Kimi-K2,\n"
           "                        DeepSeek-V4 score layers), an error for any other layer\n"
           "  --tid2eid T.npy       DeepSeek-V4 hash layers: the expert table, i32 or i64\n"
           "                        [vocab_size, K] (vocab_size from the config, K its top-k);\n"
           "                        required by hash layers, an error for any other layer\n"
           "  --input-ids I.npy     DeepSeek-V4 hash layers: the token id of each row, i32 or\n"
           "                        i64 [T], used in its own width; required by hash layers,\n"
           "                        an error for any other layer\n"
           "  --layer N             the decoder layer whose routing to use (default: the first\n"
           "                        routed layer, MoE or hash); a dense layer is an error\n"
           "  --ids-out IDS.npy     expert ids, i32 [T, K] (required)\n"
           "  --weights-out W.npy   combine weights, f32 [T, K] (required)\n"
           "  --explain             print the router's method, parameters and kernels on stdout\n"
           "  --help                this text\n"
           "\n"
           "Both outputs are written only after routing succeeded, each atomically; on any\n"
           "error neither exists afterwards (an earlier file at either path is left alone\n"
           "unless the error is in writing the outputs).\n"
           "\n"
           "Exit status: 0 success; 1 a bad config, array or option for this layer (one line\n"
           "on stderr naming the option, file or field); 2 usage error.\n");
}

typedef struct route_args {
    const char *config, *logits, *bias, *tid2eid, *input_ids, *ids_out, *weights_out;
    int64_t layer; /* -1: the first routed layer */
    bool explain;
} route_args;

static int check_required(cli_args *a, const route_args *o)
{
    const struct {
        const char *name, *value;
    } req[] = {{"--config", o->config},
               {"--logits", o->logits},
               {"--ids-out", o->ids_out},
               {"--weights-out", o->weights_out}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!req[i].value)
            return cli_usage_error(a, "option %s is required (moe route --help)", req[i].name);
    if (!strcmp(o->ids_out, o->weights_out))
        return cli_usage_error(a, "--ids-out and --weights-out are the same file '%s'", o->ids_out);
    return 0;
}

/* Returns 0 to go on, 2 on a usage error, -1 after --help. */
static int parse_args(route_args *o, int argc, char **argv)
{
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    memset(o, 0, sizeof *o);
    o->layer = -1;
    const char *layer = NULL;
    const cli_value_option values[] = {
        {"--config", &o->config},   {"--logits", &o->logits},           {"--bias", &o->bias},
        {"--tid2eid", &o->tid2eid}, {"--input-ids", &o->input_ids},     {"--layer", &layer},
        {"--ids-out", &o->ids_out}, {"--weights-out", &o->weights_out},
    };
    const cli_flag_option flags[] = {{"--explain", &o->explain}};
    int rc = cli_take_options(&a, flags, sizeof flags / sizeof flags[0], values,
                              sizeof values / sizeof values[0]);
    if (rc) return rc;
    if (layer && !cli_int(&a, "--layer", layer, 0, INT32_MAX, &o->layer)) return 2;
    return check_required(&a, o);
}

/* ---- The layer and the options it takes ---------------------------------------------- */

/* The config.json field that holds the routed expert count, for messages. */
static const char *experts_field(moe_family family)
{
    switch (family) {
    case MOE_FAMILY_QWEN3_MOE:
    case MOE_FAMILY_QWEN3_NEXT:
    case MOE_FAMILY_QWEN3_5_MOE: return "num_experts";
    case MOE_FAMILY_ERNIE4_5_MOE: return "moe_num_experts";
    case MOE_FAMILY_LLAMA4: return "num_local_experts";
    case MOE_FAMILY_MIXTRAL:
    case MOE_FAMILY_GPT_OSS:
    case MOE_FAMILY_MINIMAX_M2: return "num_local_experts";
    case MOE_FAMILY_KIMI_K25: return "text_config.n_routed_experts";
    default: return "n_routed_experts";
    }
}

static int first_routed_layer(const moe_model_desc *d)
{
    for (int i = 0; i < d->n_layers; i++)
        if (d->layers[i].kind != MOE_LAYER_DENSE) return i;
    return -1;
}

static int pick_layer(const route_args *o, const moe_model_desc *d, const char *cfg, int *out)
{
    const int first = first_routed_layer(d);
    if (first < 0)
        return cli_fail(PROG, 1,
                        "%s: every one of the %d layers of this %s config is dense; "
                        "there is no router to run",
                        cfg, d->n_layers, d->model_type);
    if (o->layer < 0) {
        *out = first;
        return 0;
    }
    if (o->layer >= d->n_layers)
        return cli_fail(PROG, 1, "--layer %" PRId64 " is out of range: %s has %d layers (0..%d)",
                        o->layer, cfg, d->n_layers, d->n_layers - 1);
    if (d->layers[o->layer].kind == MOE_LAYER_DENSE)
        return cli_fail(PROG, 1,
                        "--layer %" PRId64 " is a dense layer of this %s config and has no "
                        "router (the first routed layer is %d)",
                        o->layer, d->model_type, first);
    *out = (int)o->layer;
    return 0;
}

/* An option the layer needs, or one it does not use: both are errors, never ignored. */
static int check_options(const route_args *o, const moe_model_desc *d, int layer)
{
    const moe_layer_desc *l = &d->layers[layer];
    const char *method = moe_route_method_name(l->routing.method);
    if (l->kind == MOE_LAYER_HASH) {
        if (!o->tid2eid)
            return cli_fail(PROG, 1,
                            "layer %d is hash-routed (num_hash_layers = %d): --tid2eid is "
                            "required (the [vocab_size, K] table of expert ids)",
                            layer, d->num_hash_layers);
        if (!o->input_ids)
            return cli_fail(PROG, 1,
                            "layer %d is hash-routed (num_hash_layers = %d): --input-ids is "
                            "required (the token id of each logits row)",
                            layer, d->num_hash_layers);
    } else if (o->tid2eid || o->input_ids) {
        return cli_fail(PROG, 1,
                        "%s is for hash-routed layers only; layer %d of this %s config routes "
                        "by %s",
                        o->tid2eid ? "--tid2eid" : "--input-ids", layer, d->model_type, method);
    }
    if (l->routing.has_correction_bias && !o->bias)
        return cli_fail(PROG, 1,
                        "layer %d (%s) selects with a correction bias (e_score_correction_bias): "
                        "--bias is required",
                        layer, method);
    if (!l->routing.has_correction_bias && o->bias)
        return cli_fail(PROG, 1, "--bias: layer %d of this %s config (%s) has no correction bias%s",
                        layer, d->model_type, method,
                        l->routing.has_router_bias
                            ? " (the gpt-oss router bias belongs in the logits already)"
                            : "");
    return 0;
}

/* ---- Input arrays -------------------------------------------------------------------- */

/* Fails unless dimension DIM of OPT's array is WANT; WHAT says where WANT comes from. */
static int check_dim(const char *opt, const char *path, const moe_npy *a, int dim, int64_t want,
                     const char *what)
{
    if (a->shape[dim] == want) return 0;
    char shape[128];
    return cli_fail(PROG, 1, "%s %s: shape %s: dimension %d is %" PRId64 ", but %s is %" PRId64,
                    opt, path, moe_shape_text(a->shape, a->ndim, shape, sizeof shape), dim,
                    a->shape[dim], what, want);
}

typedef struct route_inputs {
    moe_npy logits, bias, tid2eid, ids;
    bool has_bias, has_tid2eid, has_ids;
} route_inputs;

static void inputs_free(route_inputs *in)
{
    moe_npy_free(&in->logits);
    if (in->has_bias) moe_npy_free(&in->bias);
    if (in->has_tid2eid) moe_npy_free(&in->tid2eid);
    if (in->has_ids) moe_npy_free(&in->ids);
}

static int read_logits(const route_args *o, const moe_model_desc *d, int layer, moe_npy *out)
{
    const moe_routing_desc *r = &d->layers[layer].routing;
    if (cli_read_npy(PROG, "--logits", o->logits, MOE_DTYPE_F32, MOE_DTYPE_INVALID, 2,
                     "[tokens, experts]", out))
        return 1;
    char what[96];
    snprintf(what, sizeof what, "the config's expert count (%s)", experts_field(d->family));
    if (check_dim("--logits", o->logits, out, 1, r->n_experts, what)) {
        moe_npy_free(out);
        return 1;
    }
    return 0;
}

static int read_bias(const route_args *o, const moe_model_desc *d, int layer, route_inputs *in)
{
    if (!o->bias) return 0;
    if (cli_read_npy(PROG, "--bias", o->bias, MOE_DTYPE_F32, MOE_DTYPE_INVALID, 1, "[experts]",
                     &in->bias))
        return 1;
    in->has_bias = true;
    char what[96];
    snprintf(what, sizeof what, "the config's expert count (%s)", experts_field(d->family));
    return check_dim("--bias", o->bias, &in->bias, 0, d->layers[layer].routing.n_experts, what);
}

/* The table must have the config's vocab_size rows, as the checkpoint tensor must: the
 * config parser requires vocab_size whenever there are hash layers. */
static int read_hash_inputs(const route_args *o, const moe_model_desc *d, int layer,
                            route_inputs *in)
{
    if (!o->tid2eid) return 0;
    if (cli_read_npy(PROG, "--tid2eid", o->tid2eid, MOE_DTYPE_I32, MOE_DTYPE_I64, 2,
                     "[vocab_size, K]", &in->tid2eid))
        return 1;
    in->has_tid2eid = true;
    if (check_dim("--tid2eid", o->tid2eid, &in->tid2eid, 0, d->vocab_size,
                  "the config's vocab_size") ||
        check_dim("--tid2eid", o->tid2eid, &in->tid2eid, 1, d->layers[layer].routing.top_k,
                  "the config's top-k (num_experts_per_tok)"))
        return 1;
    if (cli_read_npy(PROG, "--input-ids", o->input_ids, MOE_DTYPE_I32, MOE_DTYPE_I64, 1, "[tokens]",
                     &in->ids))
        return 1;
    in->has_ids = true;
    char what[128];
    snprintf(what, sizeof what, "the number of logits rows in %s", o->logits);
    return check_dim("--input-ids", o->input_ids, &in->ids, 0, in->logits.shape[0], what);
}

static int read_inputs(const route_args *o, const moe_model_desc *d, int layer, route_inputs *in)
{
    memset(in, 0, sizeof *in);
    if (read_logits(o, d, layer, &in->logits)) return 1;
    if (read_bias(o, d, layer, in) || read_hash_inputs(o, d, layer, in)) {
        inputs_free(in);
        return 1;
    }
    return 0;
}

/* ---- Routing and the outputs --------------------------------------------------------- */

static moe_router_params router_params(const moe_model_desc *d, const moe_routing_desc *r,
                                       const route_inputs *in)
{
    moe_router_params p = moe_router_params_of(d, r);
    if (in->has_bias) {
        p.correction_bias = in->bias.data;
        p.correction_bias_dtype = in->bias.dtype;
    }
    if (in->has_tid2eid) {
        p.tid2eid = in->tid2eid.data;
        p.tid2eid_dtype = in->tid2eid.dtype;
        p.vocab_size = in->tid2eid.shape[0];
    }
    return p;
}

/* Writes both outputs; if the second fails, the first is removed so that no half result
 * is left behind. */
static int write_outputs(const route_args *o, size_t n_tokens, int top_k, const int32_t *ids,
                         const float *weights)
{
    const int64_t shape[2] = {(int64_t)n_tokens, top_k};
    if (moe_npy_write(o->ids_out, MOE_DTYPE_I32, 2, shape, ids) != MOE_OK)
        return cli_fail(PROG, 1, "--ids-out: %s", moe_last_error());
    if (moe_npy_write(o->weights_out, MOE_DTYPE_F32, 2, shape, weights) != MOE_OK) {
        cli_fail(PROG, 1, "--weights-out: %s", moe_last_error());
        unlink(o->ids_out);
        return 1;
    }
    return 0;
}

/* Reports a router failure, naming the layer and the file the failing input came from:
 * creation sees only the bias or the table (a layer never has both), forward only the
 * logits and the token ids. */
static int router_fail(const char *opt, const char *path, int layer, moe_route_method method)
{
    return cli_fail(PROG, 1, "layer %d (%s), %s %s: %s", layer, moe_route_method_name(method), opt,
                    path, moe_last_error());
}

static int route(const route_args *o, const moe_model_desc *d, int layer, const route_inputs *in)
{
    const moe_routing_desc *r = &d->layers[layer].routing;
    const moe_router_params p = router_params(d, r, in);
    const size_t n_tokens = (size_t)in->logits.shape[0];
    moe_router *router = NULL;
    int32_t *ids = NULL;
    float *weights = NULL;
    int rc = 1;
    if (moe_router_create(&p, &router) != MOE_OK) {
        if (o->tid2eid)
            router_fail("--tid2eid", o->tid2eid, layer, r->method);
        else if (o->bias)
            router_fail("--bias", o->bias, layer, r->method);
        else
            router_fail("--config", o->config, layer, r->method);
        goto done;
    }
    if (o->explain) printf("%s\n", moe_router_explain(router));
    /* moe_calloc checks the product for overflow; top_k * 4 bytes is small. */
    ids = moe_calloc(n_tokens, (size_t)r->top_k * sizeof *ids);
    weights = moe_calloc(n_tokens, (size_t)r->top_k * sizeof *weights);
    if (!ids || !weights) {
        cli_fail(PROG, 1, "out of memory for the outputs of %zu tokens", n_tokens);
        goto done;
    }
    if (moe_router_forward(router, n_tokens, in->logits.data, in->has_ids ? in->ids.data : NULL,
                           in->has_ids ? in->ids.dtype : MOE_DTYPE_INVALID, ids,
                           weights) != MOE_OK) {
        if (in->has_ids)
            router_fail("--input-ids", o->input_ids, layer, r->method);
        else
            router_fail("--logits", o->logits, layer, r->method);
        goto done;
    }
    if (write_outputs(o, n_tokens, r->top_k, ids, weights)) goto done;
    printf("routed %zu token%s through layer %d (%s, %s, top-%d of %d): %s, %s\n", n_tokens,
           n_tokens == 1 ? "" : "s", layer, moe_route_method_name(r->method),
           moe_score_func_name(r->score), r->top_k, r->n_experts, o->ids_out, o->weights_out);
    rc = 0;
done:
    moe_free(ids);
    moe_free(weights);
    moe_router_destroy(router);
    return rc;
}

int moe_cmd_route(int argc, char **argv)
{
    route_args o;
    int rc = parse_args(&o, argc, argv);
    if (rc == -1) {
        help();
        return 0;
    }
    if (rc) return rc;
    moe_model_desc desc;
    if (moe_model_desc_load(o.config, &desc) != MOE_OK)
        return cli_fail(PROG, 1, "--config: %s", moe_last_error());
    int layer = -1;
    route_inputs in;
    rc = pick_layer(&o, &desc, o.config, &layer);
    if (!rc) rc = check_options(&o, &desc, layer);
    if (!rc) rc = read_inputs(&o, &desc, layer, &in);
    if (!rc) {
        rc = route(&o, &desc, layer, &in);
        inputs_free(&in);
    }
    moe_model_desc_free(&desc);
    return rc;
}
