/* cmd_run.c — `moe run`: one layer's MoE block (or dense MLP) on hidden states from .npy. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "cli_npy.h"
#include "cli_util.h"
#include "core/alloc.h"
#include "core/shape_text.h"
#include "io/npy.h"
#include "model/model.h"
#include "model/model_handle.h"
#include "trace_report.h"

#define PROG "moe run"
#define MAX_THREADS 4096
#define MAX_REPEAT 1000

static void help(void)
{
    printf("usage: moe run --model DIR [--layer N] --hidden X.npy [--input-ids I.npy] --out Y.npy\n"
           "               [--logits-out L.npy] [--ids-out IDS.npy] [--weights-out W.npy]\n"
           "               [--ids IDS.npy --weights W.npy [--no-shared]]\n"
           "               [--threads N] [--logits-dtype f32|bf16] [--recipe f32|bf16|tile]\n"
           "               [--trace] [--explain] [--repeat N] [--no-mmap]\n"
           "       mpirun -np N moe run --ep --model DIR [--layer N] --hidden X.npy\n"
           "               [--input-ids I.npy] --out Y.npy [--ids-out ..] [--weights-out ..]\n"
           "\n"
           "Runs one layer's MoE block (router gate, routing, routed experts, shared experts,\n"
           "combine) or dense MLP on the hidden states entering it, the way libmoe runs it in a\n"
           "model: open the checkpoint, create the layer (choose kernels, pack the weights once),\n"
           "forward.\n"
           "\n"
           "options:\n"
           "  --model DIR          a Hugging Face model folder (config.json + safetensors)\n"
           "  --layer N            the decoder layer (default: the first MoE layer, else the\n"
           "                       first hash layer); a dense layer runs only when asked for\n"
           "  --hidden X.npy       hidden states [T, H], H = the model's hidden_size (T = 0 is\n"
           "                       allowed): f32, or f64 or f16 converted to f32 as read\n"
           "  --input-ids I.npy    the token id of each row, i32 or i64 [T], used in its own\n"
           "                       width: required by hash-routed layers; accepted on every\n"
           "                       layer of a family that has them (DeepSeek-V4: score-routed\n"
           "                       layers ignore them), an error for other families\n"
           "  --out Y.npy          the block output, f32 [T, H] (required)\n"
           "  --logits-out L.npy   router logits, f32 [T, E]\n"
           "  --ids-out IDS.npy    expert ids, i32 [T, K]\n"
           "  --weights-out W.npy  combine weights, f32 [T, K] (routed_scaling_factor applied)\n"
           "                       (the three router outputs are an error on a dense layer)\n"
           "  --ids IDS.npy        skip the router: expert ids [T, K] (i32 or i64, each in\n"
           "                       [0, E), distinct in a row), K = the layer's top-k; with\n"
           "  --weights W.npy      their combine weights, f32 [T, K], used as given (both or\n"
           "                       neither; e.g. the files --ids-out and --weights-out wrote)\n"
           "  --no-shared          with --ids: leave the shared experts out of --out\n"
           "  --threads N          worker threads, 1..%d (default: the number of cores)\n"
           "  --logits-dtype D     f32 (default) or bf16: the gate rounds its fp32 sums to bf16\n"
           "                       in its epilogue (parity with engines that do)\n"
           "  --recipe R           f32 (default), bf16 or tile: bf16 and FP8 experts take the\n"
           "                       hidden states (and h) rounded to bf16; bf16: vdpbf16ps's\n"
           "                       arithmetic (AVX2 and up; emulated, slowly, without); tile:\n"
           "                       the AMX tile unit's arithmetic (tdpbf16ps where AMX-BF16 is\n"
           "                       allowed, FMA chains below); MXFP4 experts run q8 unless\n"
           "                       tile is asked (then their weights widen to bf16 exactly)\n"
           "  --trace              print each step of the forward on stdout: name, kernel,\n"
           "                       bytes read and written, ns, GB/s\n"
           "  --explain            print the layer's kernels, reasons, recipe, packed bytes and\n"
           "                       resolved defaults on stdout\n"
           "  --repeat N           run the forward N times (1..%d) and report the median time;\n"
           "                       --trace shows the median run (default 1)\n"
           "  --no-mmap            read the checkpoint instead of mapping it\n"
           "  --ep                 expert parallelism over the ranks mpirun starts: each rank\n"
           "                       packs its share of the routed experts; rank 0 reads the\n"
           "                       inputs, spreads the rows, gathers and writes the outputs,\n"
           "                       the same files as without --ep (docs/parallel.md); takes\n"
           "                       --out, --ids-out, --weights-out, --threads (per rank),\n"
           "                       --recipe, --logits-dtype, --explain, --no-mmap\n"
           "  --help               this text\n"
           "\n"
           "Outputs are written only after the forward succeeded, each atomically; if one\n"
           "cannot be written, those already written by this run are removed, so an error\n"
           "never leaves a partial set. On success one line on stdout: tokens, layer, the\n"
           "median time per forward and tokens per second.\n"
           "\n"
           "Exit status: 0 success; 1 a bad checkpoint, array, layer or option for this layer\n"
           "(one line on stderr); 2 usage error.\n",
           MAX_THREADS, MAX_REPEAT);
}

typedef struct run_args {
    const char *model, *hidden, *input_ids, *out, *logits_out, *ids_out, *weights_out;
    const char *ids, *weights; /* the caller's routing: the experts-only forward */
    int64_t layer;             /* -1: the default layer */
    int64_t threads;           /* 0: the library's default, the number of cores */
    int64_t repeat;            /* forwards to time */
    moe_dtype logits_dtype;    /* INVALID: not given, the library resolves it (to f32) */
    moe_experts_recipe recipe; /* DEFAULT: not given */
    bool trace, explain, no_mmap, no_shared;
    bool ep; /* --ep: over MPI ranks */
} run_args;

/* ---- Arguments ----------------------------------------------------------------------- */

/* The output options and their paths (NULL where not given). */
typedef struct output_path {
    const char *name, *path;
} output_path;
#define N_OUTPUTS 4

static void outputs_of(const run_args *o, output_path outs[N_OUTPUTS])
{
    outs[0] = (output_path){"--out", o->out};
    outs[1] = (output_path){"--logits-out", o->logits_out};
    outs[2] = (output_path){"--ids-out", o->ids_out};
    outs[3] = (output_path){"--weights-out", o->weights_out};
}

/* Every output path is distinct: two outputs in one file would leave only the last. */
static int check_outputs(cli_args *a, const run_args *o)
{
    output_path outs[N_OUTPUTS];
    outputs_of(o, outs);
    for (size_t i = 0; i < N_OUTPUTS; i++)
        for (size_t j = i + 1; j < N_OUTPUTS; j++)
            if (outs[i].path && outs[j].path && !strcmp(outs[i].path, outs[j].path))
                return cli_usage_error(a, "%s and %s are the same file '%s'", outs[i].name,
                                       outs[j].name, outs[i].path);
    return 0;
}

/* Every output can be written: checked before the layer is built and run, not after. */
static int check_writable(const run_args *o)
{
    output_path outs[N_OUTPUTS];
    outputs_of(o, outs);
    for (size_t i = 0; i < N_OUTPUTS; i++)
        if (outs[i].path && !cli_path_writable(outs[i].path))
            return cli_fail(PROG, 1, "%s %s: cannot write there: %s", outs[i].name, outs[i].path,
                            strerror(errno));
    return 0;
}

static int check_required(cli_args *a, const run_args *o)
{
    const struct {
        const char *name, *value;
    } req[] = {{"--model", o->model}, {"--hidden", o->hidden}, {"--out", o->out}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!req[i].value)
            return cli_usage_error(a, "option %s is required (moe run --help)", req[i].name);
    if (!o->ids != !o->weights)
        return cli_usage_error(a, "%s needs %s: the caller's routing is ids and their weights",
                               o->ids ? "--ids" : "--weights", o->ids ? "--weights" : "--ids");
    if (o->ep) {
        const struct {
            const char *name;
            bool given;
        } not_ep[] = {{"--ids", o->ids != NULL},
                      {"--logits-out", o->logits_out != NULL},
                      {"--trace", o->trace},
                      {"--repeat", o->repeat != 1}};
        for (size_t i = 0; i < sizeof not_ep / sizeof not_ep[0]; i++)
            if (not_ep[i].given)
                return cli_usage_error(a, "%s is not taken with --ep (moe run --help)",
                                       not_ep[i].name);
    }
    if (o->no_shared && !o->ids)
        return cli_usage_error(a, "--no-shared needs --ids and --weights (the routed forward "
                                  "always adds the shared experts)");
    if (o->ids) {
        const struct {
            const char *name;
            bool given;
        } routing_opts[] = {{"--logits-out", o->logits_out != NULL},
                            {"--ids-out", o->ids_out != NULL},
                            {"--weights-out", o->weights_out != NULL},
                            {"--logits-dtype", o->logits_dtype != MOE_DTYPE_INVALID},
                            {"--input-ids", o->input_ids != NULL}};
        for (size_t i = 0; i < sizeof routing_opts / sizeof routing_opts[0]; i++)
            if (routing_opts[i].given)
                return cli_usage_error(a, "%s is for the router, which --ids replaces",
                                       routing_opts[i].name);
    }
    return check_outputs(a, o);
}

/* The numbers and the dtype, once every option is known. */
static int parse_values(cli_args *a, run_args *o, const char *layer, const char *threads,
                        const char *repeat, const char *dtype, const char *recipe)
{
    if (recipe && !cli_recipe(a, recipe, &o->recipe)) return 2;
    if (layer && !cli_int(a, "--layer", layer, 0, INT32_MAX, &o->layer)) return 2;
    if (threads && !cli_int(a, "--threads", threads, 1, MAX_THREADS, &o->threads)) return 2;
    if (repeat && !cli_int(a, "--repeat", repeat, 1, MAX_REPEAT, &o->repeat)) return 2;
    if (dtype) {
        if (!strcmp(dtype, "f32"))
            o->logits_dtype = MOE_DTYPE_F32;
        else if (!strcmp(dtype, "bf16"))
            o->logits_dtype = MOE_DTYPE_BF16;
        else
            return cli_usage_error(a, "--logits-dtype '%s' is not f32 or bf16", dtype);
    }
    return 0;
}

/* Returns 0 to go on, 2 on a usage error, -1 after --help. */
static int parse_args(run_args *o, int argc, char **argv)
{
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    memset(o, 0, sizeof *o);
    o->layer = -1;
    o->repeat = 1;
    const char *layer = NULL, *threads = NULL, *repeat = NULL, *dtype = NULL, *recipe = NULL;
    const cli_value_option values[] = {
        {"--model", &o->model},     {"--layer", &layer},
        {"--hidden", &o->hidden},   {"--input-ids", &o->input_ids},
        {"--out", &o->out},         {"--logits-out", &o->logits_out},
        {"--ids-out", &o->ids_out}, {"--weights-out", &o->weights_out},
        {"--threads", &threads},    {"--logits-dtype", &dtype},
        {"--repeat", &repeat},      {"--recipe", &recipe},
        {"--ids", &o->ids},         {"--weights", &o->weights},
    };
    const cli_flag_option flags[] = {{"--trace", &o->trace},
                                     {"--explain", &o->explain},
                                     {"--no-mmap", &o->no_mmap},
                                     {"--no-shared", &o->no_shared},
                                     {"--ep", &o->ep}};
    int rc = cli_take_options(&a, flags, sizeof flags / sizeof flags[0], values,
                              sizeof values / sizeof values[0]);
    if (rc) return rc;
    rc = parse_values(&a, o, layer, threads, repeat, dtype, recipe);
    return rc ? rc : check_required(&a, o);
}

/* ---- The layer and the options it takes ---------------------------------------------- */

/* The first layer of KIND, or -1. */
static int first_of_kind(const moe_model_desc *d, moe_layer_kind kind)
{
    for (int i = 0; i < d->n_layers; i++)
        if (d->layers[i].kind == kind) return i;
    return -1;
}

static int pick_layer(const run_args *o, const moe_model_desc *d, int *out)
{
    if (o->layer >= d->n_layers)
        return cli_fail(PROG, 1, "--layer %" PRId64 " is out of range: %s has %d layer%s (0..%d)",
                        o->layer, o->model, d->n_layers, d->n_layers == 1 ? "" : "s",
                        d->n_layers - 1);
    if (o->layer >= 0) {
        *out = (int)o->layer;
        return 0;
    }
    int layer = first_of_kind(d, MOE_LAYER_MOE);
    if (layer < 0) layer = first_of_kind(d, MOE_LAYER_HASH);
    if (layer < 0)
        return cli_fail(PROG, 1,
                        "every one of the %d layers of %s is dense; choose one with --layer to "
                        "run its MLP",
                        d->n_layers, o->model);
    *out = layer;
    return 0;
}

/* An input the layer needs, or an option it has no use for: both are errors, never
 * silently ignored. */
static int check_options(const run_args *o, const moe_model_desc *d, int layer)
{
    const moe_layer_desc *l = &d->layers[layer];
    if (l->kind == MOE_LAYER_DENSE) {
        const struct {
            const char *name;
            bool given;
        } router_opts[] = {{"--logits-out", o->logits_out != NULL},
                           {"--ids-out", o->ids_out != NULL},
                           {"--weights-out", o->weights_out != NULL},
                           {"--logits-dtype", o->logits_dtype != MOE_DTYPE_INVALID}};
        for (size_t i = 0; i < sizeof router_opts / sizeof router_opts[0]; i++)
            if (router_opts[i].given)
                return cli_fail(PROG, 1,
                                "%s: layer %d of %s is dense (one always-on MLP): it has no "
                                "router",
                                router_opts[i].name, layer, o->model);
        if (o->ids)
            return cli_fail(PROG, 1,
                            "--ids: layer %d of %s is dense (one always-on MLP): it has no "
                            "routed experts",
                            layer, o->model);
    }
    if (l->kind == MOE_LAYER_HASH && !o->input_ids && !o->ids)
        return cli_fail(PROG, 1,
                        "layer %d is hash-routed (num_hash_layers = %d): --input-ids is "
                        "required (the token id of each row of --hidden)",
                        layer, d->num_hash_layers);
    /* Token ids are an input of the whole model in a family with hash layers: a caller
     * running every layer passes them to each, and the score-routed ones ignore them. */
    if (o->input_ids && d->family != MOE_FAMILY_DEEPSEEK_V4)
        return cli_fail(PROG, 1,
                        "--input-ids: %s routes every layer by router scores (no family member "
                        "has hash layers), so no layer uses token ids",
                        d->model_type);
    return 0;
}

/* ---- Input arrays -------------------------------------------------------------------- */

typedef struct run_inputs {
    moe_npy hidden, ids;         /* ids: --input-ids, the token ids */
    moe_npy expert_ids, weights; /* --ids and --weights, the caller's routing */
    bool has_ids, has_routing;
} run_inputs;

static void inputs_free(run_inputs *in)
{
    moe_npy_free(&in->hidden);
    if (in->has_ids) moe_npy_free(&in->ids);
    if (in->has_routing) {
        moe_npy_free(&in->expert_ids);
        moe_npy_free(&in->weights);
    }
}

/* OPT's array is [T, K]: the rows of --hidden, the layer's top-k. */
static int check_routing_shape(const char *opt, const char *path, const moe_npy *a, int64_t t,
                               int64_t k, int layer)
{
    if (a->shape[0] == t && a->shape[1] == k) return 0;
    char shape[128];
    return cli_fail(PROG, 1,
                    "%s %s: shape %s, want [%" PRId64 ", %" PRId64 "]: a row per row of --hidden, "
                    "top-k = %" PRId64 " slots of layer %d",
                    opt, path, moe_shape_text(a->shape, a->ndim, shape, sizeof shape), t, k, k,
                    layer);
}

/* --ids and --weights: dtypes, rank and shape here; ids' range and repeats, and the weights'
 * finiteness, where the library validates them (moe_layer_forward_experts). */
static int read_routing(const run_args *o, const moe_layer_desc *l, int layer, run_inputs *in)
{
    const int64_t t = in->hidden.shape[0], k = l->routing.top_k;
    if (cli_read_npy(PROG, "--ids", o->ids, MOE_DTYPE_I32, MOE_DTYPE_I64, 2, "[tokens, top_k]",
                     &in->expert_ids))
        return 1;
    if (cli_read_npy(PROG, "--weights", o->weights, MOE_DTYPE_F32, MOE_DTYPE_INVALID, 2,
                     "[tokens, top_k]", &in->weights)) {
        moe_npy_free(&in->expert_ids);
        return 1;
    }
    in->has_routing = true;
    if (check_routing_shape("--ids", o->ids, &in->expert_ids, t, k, layer) ||
        check_routing_shape("--weights", o->weights, &in->weights, t, k, layer))
        return 1;
    return 0;
}

static int read_inputs(const run_args *o, const moe_model_desc *d, int layer, run_inputs *in)
{
    char shape[128];
    memset(in, 0, sizeof *in);
    if (cli_read_npy_f32(PROG, "--hidden", o->hidden, 2, "[tokens, hidden]", &in->hidden)) return 1;
    if (in->hidden.shape[1] != d->hidden) {
        cli_fail(PROG, 1,
                 "--hidden %s: shape %s: hidden size %" PRId64
                 ", but the model's hidden_size is %" PRId64,
                 o->hidden, moe_shape_text(in->hidden.shape, in->hidden.ndim, shape, sizeof shape),
                 in->hidden.shape[1], d->hidden);
        goto fail;
    }
    if (o->ids && read_routing(o, &d->layers[layer], layer, in)) goto fail;
    if (!o->input_ids) return 0;
    if (cli_read_npy(PROG, "--input-ids", o->input_ids, MOE_DTYPE_I32, MOE_DTYPE_I64, 1, "[tokens]",
                     &in->ids))
        goto fail;
    in->has_ids = true;
    if (in->ids.shape[0] != in->hidden.shape[0]) {
        cli_fail(PROG, 1,
                 "--input-ids %s: shape %s: %" PRId64 " ids, but --hidden %s has %" PRId64 " rows",
                 o->input_ids, moe_shape_text(in->ids.shape, in->ids.ndim, shape, sizeof shape),
                 in->ids.shape[0], o->hidden, in->hidden.shape[0]);
        goto fail;
    }
    return 0;
fail:
    inputs_free(in);
    return 1;
}

/* ---- Outputs ------------------------------------------------------------------------- */

typedef struct run_outputs {
    float *out, *logits, *weights;
    int32_t *ids;
    void *workspace_raw; /* moe_malloc'd; workspace is its first 64-byte aligned address */
    void *workspace;
    size_t workspace_size;
    moe_trace *traces; /* one per repeat with --trace */
    double *ns;        /* wall time of each repeat */
} run_outputs;

static void outputs_free(run_outputs *r)
{
    moe_free(r->out);
    moe_free(r->logits);
    moe_free(r->weights);
    moe_free(r->ids);
    moe_free(r->workspace_raw);
    moe_free(r->traces);
    moe_free(r->ns);
}

/* N elements of SIZE bytes; at least one, so T = 0 still gets a valid pointer. */
static void *alloc_array(size_t n, size_t size) { return moe_calloc(n ? n : 1, size); }

static int alloc_outputs(const run_args *o, const moe_layer *layer, const moe_layer_desc *l,
                         size_t t, size_t h, run_outputs *r)
{
    memset(r, 0, sizeof *r);
    const size_t e = l->kind == MOE_LAYER_DENSE ? 0 : (size_t)l->routing.n_experts;
    const size_t k = l->kind == MOE_LAYER_DENSE ? 0 : (size_t)l->routing.top_k;
    r->workspace_size = moe_layer_workspace_size(layer, t);
    if (r->workspace_size == 0 && t > 0)
        return cli_fail(PROG, 1, "the workspace for %zu tokens overflows: run fewer rows", t);
    /* moe_calloc checks each n * size; h, e and k come from a validated config. */
    r->out = alloc_array(t, h * sizeof *r->out);
    if (o->logits_out) r->logits = alloc_array(t, e * sizeof *r->logits);
    if (o->ids_out) r->ids = alloc_array(t, k * sizeof *r->ids);
    if (o->weights_out) r->weights = alloc_array(t, k * sizeof *r->weights);
    if (r->workspace_size <= SIZE_MAX - 64) r->workspace_raw = moe_malloc(r->workspace_size + 64);
    if (o->trace) r->traces = alloc_array((size_t)o->repeat, sizeof *r->traces);
    r->ns = alloc_array((size_t)o->repeat, sizeof *r->ns);
    if (!r->out || (o->logits_out && !r->logits) || (o->ids_out && !r->ids) ||
        (o->weights_out && !r->weights) || !r->workspace_raw || (o->trace && !r->traces) || !r->ns)
        return cli_fail(PROG, 1,
                        "out of memory for the outputs and the %zu-byte workspace of %zu tokens",
                        r->workspace_size, t);
    r->workspace = (void *)(((uintptr_t)r->workspace_raw + 63) & ~(uintptr_t)63);
    return 0;
}

typedef struct out_file {
    const char *opt, *path;
    moe_dtype dtype;
    int64_t shape[2];
    const void *data;
} out_file;

/* Writes every requested output; if one fails, removes the ones this run already wrote. */
static int write_outputs(const run_args *o, const moe_layer_desc *l, size_t t, size_t h,
                         const run_outputs *r)
{
    const int64_t e = l->kind == MOE_LAYER_DENSE ? 0 : l->routing.n_experts;
    const int64_t k = l->kind == MOE_LAYER_DENSE ? 0 : l->routing.top_k;
    const out_file files[] = {
        {"--out", o->out, MOE_DTYPE_F32, {(int64_t)t, (int64_t)h}, r->out},
        {"--logits-out", o->logits_out, MOE_DTYPE_F32, {(int64_t)t, e}, r->logits},
        {"--ids-out", o->ids_out, MOE_DTYPE_I32, {(int64_t)t, k}, r->ids},
        {"--weights-out", o->weights_out, MOE_DTYPE_F32, {(int64_t)t, k}, r->weights},
    };
    const size_t n = sizeof files / sizeof files[0];
    for (size_t i = 0; i < n; i++) {
        if (!files[i].path) continue;
        if (moe_npy_write(files[i].path, files[i].dtype, 2, files[i].shape, files[i].data) ==
            MOE_OK)
            continue;
        cli_fail(PROG, 1, "%s: %s", files[i].opt, moe_last_error());
        for (size_t j = 0; j < i; j++)
            if (files[j].path) unlink(files[j].path);
        return 1;
    }
    return 0;
}

/* ---- Forward, timing and the trace --------------------------------------------------- */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The index of the repeat with the median time (the lower middle for an even count). */
static size_t median_index(const double *ns, size_t n)
{
    double *sorted = moe_malloc(n * sizeof *sorted);
    if (!sorted) return 0; /* any run's trace will do */
    memcpy(sorted, ns, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    const double mid = sorted[(n - 1) / 2];
    moe_free(sorted);
    for (size_t i = 0; i < n; i++)
        if (ns[i] == mid) return i;
    return 0;
}

static void print_trace(const moe_trace *tr, int layer, size_t t, size_t repeat, double wall_ns)
{
    printf("trace: layer %d, %zu token%s (", layer, t, t == 1 ? "" : "s");
    if (repeat > 1)
        printf("the median of %zu forwards)\n", repeat);
    else
        printf("one forward)\n");
    trace_report(stdout, tr);
    printf("  %-20s %-52s %14s %14s %12.0f\n", "forward (wall)", "", "", "", wall_ns);
}

/* The input a failed forward's status points at: the library checks --hidden's size and dtype
 * (which the CLI checked first) and then the one input of each forward it reads values from:
 * the token ids (a hash layer), or the caller's ids and weights. */
static int forward_failed(const run_args *o, const run_inputs *in, int index, moe_status st)
{
    const char *opt = NULL, *path = NULL;
    if (in->has_routing && st == MOE_ERANGE)
        opt = "--ids", path = o->ids;
    else if (in->has_routing && st == MOE_EVALUE)
        opt = "--weights", path = o->weights;
    else if (in->has_ids && !in->has_routing && (st == MOE_ERANGE || st == MOE_EDTYPE))
        opt = "--input-ids", path = o->input_ids;
    if (opt) return cli_fail(PROG, 1, "%s %s: %s", opt, path, moe_last_error());
    return cli_fail(PROG, 1, "layer %d: %s", index, moe_last_error());
}

/* The experts-only forward on the caller's ids and weights; ARGS carries the rest. */
static moe_status forward_experts(const run_args *o, const moe_layer *layer,
                                  const moe_forward_args *args, const run_inputs *in)
{
    moe_experts_args x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    x.n_tokens = args->n_tokens;
    x.hidden_size = args->hidden_size;
    x.hidden = args->hidden;
    x.hidden_dtype = args->hidden_dtype;
    x.top_k = (size_t)in->expert_ids.shape[1];
    x.ids = in->expert_ids.data;
    x.ids_dtype = in->expert_ids.dtype;
    x.weights = in->weights.data;
    x.shared = !o->no_shared;
    x.out = args->out;
    x.workspace = args->workspace;
    x.workspace_size = args->workspace_size;
    x.trace = args->trace;
    return moe_layer_forward_experts(layer, &x);
}

static int forward(const run_args *o, const moe_layer *layer, int index, const run_inputs *in,
                   run_outputs *r)
{
    const size_t t = (size_t)in->hidden.shape[0];
    moe_forward_args args;
    memset(&args, 0, sizeof args);
    args.size = sizeof args;
    args.n_tokens = t;
    args.hidden_size = (size_t)in->hidden.shape[1];
    args.hidden = in->hidden.data;
    args.hidden_dtype = MOE_DTYPE_F32;
    args.token_ids = in->has_ids ? in->ids.data : NULL;
    args.token_id_dtype = in->has_ids ? in->ids.dtype : MOE_DTYPE_INVALID;
    args.out = r->out;
    args.logits_out = r->logits;
    args.ids_out = r->ids;
    args.weights_out = r->weights;
    args.workspace = r->workspace;
    args.workspace_size = r->workspace_size;
    for (size_t i = 0; i < (size_t)o->repeat; i++) {
        args.trace = r->traces ? &r->traces[i] : NULL;
        const double t0 = now_ns();
        const moe_status st = in->has_routing ? forward_experts(o, layer, &args, in)
                                              : moe_layer_forward(layer, &args);
        if (st != MOE_OK) return forward_failed(o, in, index, st);
        r->ns[i] = now_ns() - t0;
    }
    return 0;
}

/* "moe: noaux_tc, top-8 of 256" or "dense MLP". */
static void describe_kind(const moe_layer_desc *l, char *buf, size_t cap)
{
    if (l->kind == MOE_LAYER_DENSE)
        snprintf(buf, cap, "dense MLP");
    else
        snprintf(buf, cap, "%s: %s, top-%d of %d", moe_layer_kind_name(l->kind),
                 moe_route_method_name(l->routing.method), l->routing.top_k, l->routing.n_experts);
}

static void print_summary(const run_args *o, const moe_model_desc *d, int index, size_t t,
                          double ns)
{
    char kind[160];
    describe_kind(&d->layers[index], kind, sizeof kind);
    if (o->ids) {
        const size_t n = strlen(kind);
        snprintf(kind + n, sizeof kind - n, "; experts only, on --ids and --weights%s",
                 o->no_shared ? ", no shared experts" : "");
    }
    printf("ran %zu token%s through layer %d of %s (%s): %.3f ms per forward", t, t == 1 ? "" : "s",
           index, d->model_type, kind, ns / 1e6);
    if (o->repeat > 1) printf(" (median of %" PRId64 ")", o->repeat);
    if (t > 0 && ns > 0) printf(", %.1f tokens/s", (double)t * 1e9 / ns);
    printf(" -> %s", o->out);
    const char *more[] = {o->logits_out, o->ids_out, o->weights_out};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (more[i]) printf(", %s", more[i]);
    putchar('\n');
}

static int run_layer(const run_args *o, const moe_model *model, int index, const run_inputs *in)
{
    const moe_model_desc *d = moe_model_desc_of(model);
    const moe_layer_desc *l = &d->layers[index];
    const size_t t = (size_t)in->hidden.shape[0], h = (size_t)in->hidden.shape[1];
    moe_layer_options opt;
    memset(&opt, 0, sizeof opt);
    opt.size = sizeof opt;
    opt.threads = (int)o->threads;
    opt.logits_dtype = o->logits_dtype;
    opt.experts_recipe = o->recipe;
    moe_layer *layer = NULL;
    run_outputs r;
    memset(&r, 0, sizeof r);
    int rc = 1;
    if (moe_layer_create(model, index, &opt, &layer) != MOE_OK) {
        cli_fail(PROG, 1, "--model %s: %s", o->model, moe_last_error()); /* names the layer */
        goto done;
    }
    if (o->explain) printf("%s\n", moe_layer_explain(layer));
    if (alloc_outputs(o, layer, l, t, h, &r) || forward(o, layer, index, in, &r)) goto done;
    if (write_outputs(o, l, t, h, &r)) goto done;
    const size_t mid = median_index(r.ns, (size_t)o->repeat);
    if (o->trace) print_trace(&r.traces[mid], index, t, (size_t)o->repeat, r.ns[mid]);
    print_summary(o, d, index, t, r.ns[mid]);
    rc = 0;
done:
    outputs_free(&r);
    moe_layer_destroy(layer);
    return rc;
}

#ifdef MOE_HAVE_MPI
/* ---- --ep: the layer over MPI ranks (moe_mpi.h) --------------------------------------- */

#include <limits.h>

#include "moe_mpi.h"

/* One outcome on every rank: FAILED on this rank (its message MSG, or NULL when already
 * printed here) makes every rank fail; the others print which rank failed and why. */
static int ep_agree(int failed, const char *msg)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int mine = failed ? rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == INT_MAX) return 0;
    char text[1024] = "";
    if (rank == first) snprintf(text, sizeof text, "%s", msg ? msg : "see its message above");
    MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first, MPI_COMM_WORLD);
    if (rank != first || msg) fprintf(stderr, PROG ": rank %d: %s\n", first, text);
    return 1;
}

/* A library call's status, agreed; the message (moe_mpi's already names the rank) once per
 * rank. */
static int ep_status(moe_status st, const char *what)
{
    if (st == MOE_OK) return 0;
    fprintf(stderr, PROG ": %s: %s\n", what, moe_last_error());
    return 1;
}

static int ep_layer(const run_args *o, const moe_model *model, int index, int rank)
{
    const moe_model_desc *d = moe_model_desc_of(model);
    const moe_layer_desc *l = &d->layers[index];
    moe_layer_options opt;
    memset(&opt, 0, sizeof opt);
    opt.size = sizeof opt;
    opt.threads = (int)o->threads;
    opt.logits_dtype = o->logits_dtype;
    opt.experts_recipe = o->recipe;
    moe_layer *layer = NULL;
    char what[600];
    snprintf(what, sizeof what, "--model %s", o->model);
    if (ep_status(moe_mpi_layer_create(MPI_COMM_WORLD, model, MOE_OK, index, &opt, NULL, 0, &layer),
                  what))
        return 1;
    if (o->explain && rank == 0) printf("%s\n", moe_layer_explain(layer));
    /* Rank 0 reads the inputs and checks that it can write the outputs. */
    run_inputs in;
    run_outputs r;
    memset(&in, 0, sizeof in);
    memset(&r, 0, sizeof r);
    int rc = 0;
    size_t t = 0;
    const size_t h = (size_t)d->hidden;
    const size_t k = l->kind == MOE_LAYER_DENSE ? 0 : (size_t)l->routing.top_k;
    bool have_inputs = false;
    if (rank == 0) {
        rc = check_writable(o);
        if (!rc) rc = read_inputs(o, d, index, &in);
        have_inputs = rc == 0;
        if (!rc) {
            t = (size_t)in.hidden.shape[0];
            r.out = alloc_array(t, h * sizeof *r.out);
            if (o->ids_out) r.ids = alloc_array(t, k * sizeof *r.ids);
            if (o->weights_out) r.weights = alloc_array(t, k * sizeof *r.weights);
            if (!r.out || (o->ids_out && !r.ids) || (o->weights_out && !r.weights))
                rc = cli_fail(PROG, 1, "out of memory for the outputs of %zu tokens", t);
        }
    }
    rc = ep_agree(rc, NULL);
    moe_mpi_stats stats;
    memset(&stats, 0, sizeof stats);
    const double t0 = now_ns();
    if (!rc) {
        moe_mpi_forward_args a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.n_tokens = t;
        a.hidden_size = h;
        a.hidden = in.hidden.data;
        a.hidden_dtype = MOE_DTYPE_F32;
        a.token_ids = in.has_ids ? in.ids.data : NULL;
        a.token_id_dtype = in.has_ids ? in.ids.dtype : MOE_DTYPE_INVALID;
        a.out = r.out;
        a.ids_out = r.ids;
        a.weights_out = r.weights;
        snprintf(what, sizeof what, "layer %d", index);
        rc = ep_status(
            moe_mpi_forward_root(MPI_COMM_WORLD, 0, layer, rank == 0 ? &a : NULL, &stats), what);
    }
    const double ns = now_ns() - t0;
    if (!rc) rc = ep_agree(rank == 0 && write_outputs(o, l, t, h, &r), NULL);
    if (!rc && rank == 0) {
        int n = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        printf("over %d rank%s: ", n, n == 1 ? "" : "s");
        print_summary(o, d, index, t, ns);
    }
    if (have_inputs) inputs_free(&in);
    outputs_free(&r);
    moe_layer_destroy(layer);
    return rc;
}

/* `moe run --ep`: every rank opens the model and creates its part of the layer; rank 0 reads
 * the inputs, moe_mpi_forward_root spreads, runs and gathers, rank 0 writes. Every step is
 * agreed on, so an error on one rank ends every rank with a message, never a hang. */
static int run_ep(const run_args *o)
{
    int rank = 0;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    moe_open_options open_opt = {.size = sizeof open_opt, .no_mmap = o->no_mmap};
    moe_model *model = NULL;
    char msg[1024] = "";
    const moe_status st = moe_model_open(o->model, &open_opt, &model);
    if (st) snprintf(msg, sizeof msg, "--model %s: %s", o->model, moe_last_error());
    int rc = ep_agree(st != MOE_OK, msg);
    int layer = -1;
    if (!rc) {
        const moe_model_desc *d = moe_model_desc_of(model);
        int local = pick_layer(o, d, &layer);
        if (!local) local = check_options(o, d, layer);
        rc = ep_agree(local, NULL);
    }
    if (!rc) rc = ep_layer(o, model, layer, rank);
    moe_model_close(model);
    /* Every rank has printed its message: only now may one exit (mpirun ends the others as
     * soon as one exits with a failure). */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
#endif

int moe_cmd_run(int argc, char **argv)
{
    run_args o;
    int rc = parse_args(&o, argc, argv);
    if (rc == -1) {
        help();
        return 0;
    }
    if (rc) return rc;
#ifdef MOE_HAVE_MPI
    if (o.ep) return run_ep(&o);
#else
    if (o.ep)
        return cli_fail(PROG, 1,
                        "--ep: this moe was built without MPI (CMake found none; install "
                        "libopenmpi-dev and openmpi-bin, then build again)");
#endif
    rc = check_writable(&o);
    if (rc) return rc;
    moe_open_options open_opt = {.size = sizeof open_opt, .no_mmap = o.no_mmap};
    moe_model *model = NULL;
    if (moe_model_open(o.model, &open_opt, &model) != MOE_OK)
        return cli_fail(PROG, 1, "--model %s: %s", o.model, moe_last_error());
    const moe_model_desc *d = moe_model_desc_of(model);
    int layer = -1;
    run_inputs in;
    rc = pick_layer(&o, d, &layer);
    if (!rc) rc = check_options(&o, d, layer);
    if (!rc) rc = read_inputs(&o, d, layer, &in);
    if (!rc) {
        rc = run_layer(&o, model, layer, &in);
        inputs_free(&in);
    }
    moe_model_close(model);
    return rc;
}
