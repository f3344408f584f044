/* bench_layer.c — the MoE layer at real shapes vs read bandwidth and instruction peak. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE for the flush buffer (bench/bench_util.h) */
#include <inttypes.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moe.h"
#include "bench_util.h"
#include "layer/layer_internal.h"
#include "model/model.h"
#include "model/model_handle.h"

/*
 * Usage: bench_layer [--dir DIR] [--only SUBSTRING] [--tokens LIST] [--threads LIST]
 *                    [--recipe f32|bf16|f32,bf16] [--quick]
 *
 * Each case is one MoE layer written by `moe gen` (the binary next to this one) into DIR
 * (default: a temporary folder, removed at the end; with --dir the checkpoints stay and are
 * reused by the next run). Real shapes, scaled resident expert counts:
 *
 *   deepseek-v3 bf16   hidden 7168, expert I 2048, top-8, 8 groups keep 4, 1 shared expert,
 *                      32 resident experts: 32 × 88 MB = 2.8 GB (the real layer has 256)
 *   deepseek-v3 fp8    the same with FP8 E4M3 + 128×128 f32 scales, 64 resident: 2.8 GB
 *   qwen3-30b-a3b bf16 hidden 2048, expert I 768, 128 experts (all of them), top-8: 1.2 GB
 *   qwen3-30b-a3b fp8  the same in FP8: 0.6 GB
 *
 * Fewer resident experts than the real model means more of them are hit at T = 4 and 16
 * than the real model's 256 would be, which changes the bytes a forward reads but not the
 * bytes per second this measures. Hidden states are N(0, 1), so tokens spread over experts.
 *
 * Per case, expert recipe (f32, the default, and bf16) and thread count (1, 2): create the
 * layer (timed: packing), then for T in {1, 4, 16, 128, 512}: one warm-up forward, then timed
 * forwards (at least 3, more while under about 2 s), each after reading a buffer twice the
 * last-level cache with the layer's thread count, so the weights
 * come from memory as in a real model whose other layers evict them. Reported: the median
 * ms per forward; the experts hit (unique ids); the weight bytes read = experts hit × packed
 * bytes per expert + shared expert + gate; GB/s and the fraction of the STREAM-like read
 * floor at the same thread count (the decode target: ≥ 0.7); GFLOP/s (2 per multiply-add
 * of the gate and every expert row) and the fraction of the peak of the instruction the
 * routed experts' recipe uses (the prefill target: ≥ 0.5); and the trace of the median
 * forward.
 */

#define MAX_TOKENS 512
#define MAX_REPEATS 15
#define BUDGET_NS 2e9

typedef struct bench_case {
    const char *name;
    const char *family, *dtype;
    int hidden, inter, experts, topk, groups, topk_group, shared;
} bench_case;

static const bench_case cases[] = {
    {"deepseek-v3-bf16", "deepseek_v3", "bf16", 7168, 2048, 32, 8, 8, 4, 1},
    {"deepseek-v3-fp8", "deepseek_v3", "fp8", 7168, 2048, 64, 8, 8, 4, 1},
    {"qwen3-30b-a3b-bf16", "qwen3_moe", "bf16", 2048, 768, 128, 8, 0, 0, 0},
    {"qwen3-30b-a3b-fp8", "qwen3_moe", "fp8", 2048, 768, 128, 8, 0, 0, 0},
};

typedef struct options {
    const char *dir, *only;
    size_t tokens[8];
    int n_tokens;
    int threads[4];
    int n_threads;
    int recipes[2]; /* moe_expert_recipe values */
    int n_recipes;
} options;

typedef struct floors {
    double read[3];                    /* GB/s at 1 and 2 threads */
    double peak[BENCH_INSN_COUNT_][3]; /* GFLOP/s at 1 and 2 threads */
} floors;

static void die(const char *what)
{
    fprintf(stderr, "bench_layer: %s\n", what);
    exit(1);
}

/* ---- Options ------------------------------------------------------------------------- */

static int parse_list(const char *s, size_t *out, int cap, size_t max)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > max || (*end && *end != ',')) return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static void parse_options(int argc, char **argv, options *o)
{
    static const size_t tokens[] = {1, 4, 16, 128, 512};
    memset(o, 0, sizeof *o);
    o->n_tokens = 5;
    memcpy(o->tokens, tokens, sizeof tokens);
    o->threads[0] = 1;
    o->threads[1] = 2;
    o->n_threads = 2;
    o->recipes[0] = MOE_RECIPE_F32; /* the default */
    o->recipes[1] = MOE_RECIPE_BF16;
    o->n_recipes = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t list[8];
        if (!strcmp(a, "--quick")) {
            o->n_tokens = 3;
            o->tokens[0] = 1, o->tokens[1] = 16, o->tokens[2] = 128;
            continue;
        }
        if (!v)
            die("usage: bench_layer [--dir DIR] [--only SUBSTRING] [--tokens LIST] "
                "[--threads LIST] [--recipe LIST] [--quick]");
        i++;
        if (!strcmp(a, "--dir")) {
            o->dir = v;
        } else if (!strcmp(a, "--only")) {
            o->only = v;
        } else if (!strcmp(a, "--tokens")) {
            o->n_tokens = parse_list(v, o->tokens, 8, MAX_TOKENS);
            if (o->n_tokens < 1) die("--tokens: a list of 1..512, e.g. 1,4,16");
        } else if (!strcmp(a, "--threads")) {
            int n = parse_list(v, list, 4, 2);
            if (n < 1) die("--threads: a list of 1 and 2, e.g. 1,2");
            for (int j = 0; j < n; j++)
                o->threads[j] = (int)list[j];
            o->n_threads = n;
        } else if (!strcmp(a, "--recipe")) {
            o->n_recipes = 0;
            if (strstr(v, "f32")) o->recipes[o->n_recipes++] = MOE_RECIPE_F32;
            if (strstr(v, "bf16")) o->recipes[o->n_recipes++] = MOE_RECIPE_BF16;
            if (!o->n_recipes) die("--recipe: f32, bf16 or f32,bf16");
        } else {
            die("unknown option (bench_layer --dir DIR --only NAME --tokens LIST --threads "
                "LIST --recipe LIST --quick)");
        }
    }
}

/* ---- Checkpoints --------------------------------------------------------------------- */

extern char **environ;

/* The moe binary next to this program. */
static void moe_path(const char *argv0, char *buf, size_t cap)
{
    const char *slash = strrchr(argv0, '/');
    int n = slash ? (int)(slash - argv0) : 1;
    snprintf(buf, cap, "%.*s/moe", n, slash ? argv0 : ".");
}

/* Writes case C's checkpoint into DIR/C->name unless a complete one is there already. */
static void ensure_checkpoint(const char *moe, const char *root, const bench_case *c, char *dir,
                              size_t cap)
{
    snprintf(dir, cap, "%s/%s", root, c->name);
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat sb;
    if (stat(cfg, &sb) == 0) return;
    char hidden[16], inter[16], experts[16], topk[16], groups[16], tg[16], shared[16];
    snprintf(hidden, sizeof hidden, "%d", c->hidden);
    snprintf(inter, sizeof inter, "%d", c->inter);
    snprintf(experts, sizeof experts, "%d", c->experts);
    snprintf(topk, sizeof topk, "%d", c->topk);
    snprintf(groups, sizeof groups, "%d", c->groups);
    snprintf(tg, sizeof tg, "%d", c->topk_group);
    snprintf(shared, sizeof shared, "%d", c->shared);
    char *args[32] = {(char *)moe,      "gen",
                      "--family",       (char *)c->family,
                      "--dtype",        (char *)c->dtype,
                      "--layers",       "1",
                      "--hidden",       hidden,
                      "--intermediate", inter,
                      "--experts",      experts,
                      "--topk",         topk,
                      "--seed",         "1",
                      "--out",          dir};
    int n = 20;
    if (c->groups) {
        args[n++] = "--groups", args[n++] = groups;
        args[n++] = "--topk-group", args[n++] = tg;
        args[n++] = "--shared", args[n++] = shared;
    }
    args[n] = NULL;
    printf("generating %s (%s gen ... --out %s)\n", c->name, moe, dir);
    fflush(stdout);
    const double t0 = bench_now_ns();
    pid_t pid;
    int status = 0;
    const int rc = posix_spawn(&pid, moe, NULL, NULL, args, environ);
    if (rc != 0) {
        fprintf(stderr, "bench_layer: cannot start %s: %s\n", moe, strerror(rc));
        exit(1);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_layer: %s gen failed for %s\n", moe, c->name);
        exit(1);
    }
    printf("  in %.1f s\n", (bench_now_ns() - t0) / 1e9);
}

/* ---- What a forward reads and computes ------------------------------------------------- */

/* The instruction the routed experts' recipe runs on this kernel set. */
static bench_insn recipe_insn(const moe_layer_group_plan *g, bool *known)
{
    const char *isa = moe_kernel_isa_token(g->ks->isa);
    *known = true;
    if (g->recipe == MOE_RECIPE_BF16 && isa && !strncmp(isa, "avx512bf16", 10))
        return BENCH_DPBF16_ZMM;
    if (isa && !strncmp(isa, "avx512", 6)) return BENCH_FMA_ZMM;
    if (isa && !strcmp(isa, "avx2")) return BENCH_FMA_YMM;
    *known = false; /* the scalar reference: no instruction peak to compare with */
    return BENCH_FMA_YMM;
}

typedef struct work {
    int hit;      /* unique routed experts */
    double bytes; /* weight bytes read */
    double flops; /* 2 per multiply-add */
} work;

static work forward_work(const moe_layer *layer, const int32_t *ids, size_t t)
{
    const moe_layer_plan *p = &layer->plan;
    const moe_layer_group_plan *routed = &p->groups[MOE_LG_ROUTED];
    const moe_layer_group_plan *shared = &p->groups[MOE_LG_SHARED];
    const int e = routed->group.n_experts, k = p->ld->routing.top_k;
    bool seen[4096] = {false};
    work w = {0, (double)p->gate_bytes, 0};
    for (size_t i = 0; i < t * (size_t)k; i++)
        if (ids[i] >= 0 && ids[i] < e && ids[i] < 4096 && !seen[ids[i]]) {
            seen[ids[i]] = true;
            w.hit++;
        }
    const double h = (double)routed->group.hidden, in = (double)routed->group.inter;
    w.bytes += (double)w.hit * (double)routed->group.expert_stride;
    w.flops = 2.0 * (double)t * ((double)e * h + (double)k * 3.0 * h * in);
    if (shared->present) {
        w.bytes += (double)shared->group.packed_bytes;
        w.flops +=
            2.0 * (double)t * 3.0 * (double)shared->group.hidden * (double)shared->group.inter;
    }
    return w;
}

/* ---- One case ------------------------------------------------------------------------ */

typedef struct run_buffers {
    float *x, *out, *logits, *weights;
    int32_t *ids;
    void *ws_raw, *ws;
    size_t ws_size;
} run_buffers;

static void buffers_alloc(const moe_layer *layer, size_t h, size_t e, size_t k, run_buffers *b)
{
    memset(b, 0, sizeof *b);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    b->x = malloc(MAX_TOKENS * h * sizeof *b->x);
    b->out = malloc(MAX_TOKENS * h * sizeof *b->out);
    b->logits = malloc(MAX_TOKENS * e * sizeof *b->logits);
    b->weights = malloc(MAX_TOKENS * k * sizeof *b->weights);
    b->ids = malloc(MAX_TOKENS * k * sizeof *b->ids);
    b->ws_size = moe_layer_workspace_size(layer, MAX_TOKENS);
    b->ws_raw = malloc(b->ws_size + 64);
    if (!b->x || !b->out || !b->logits || !b->weights || !b->ids || !b->ws_raw || !b->ws_size)
        die("out of memory for the inputs, outputs and workspace");
    b->ws = (void *)(((uintptr_t)b->ws_raw + 63) & ~(uintptr_t)63);
    memset(b->ws, 0, b->ws_size); /* no page faults inside a timed forward */
    for (size_t i = 0; i < MAX_TOKENS * h; i++)
        b->x[i] = (float)bench_gauss(&seed);
}

static void buffers_free(run_buffers *b)
{
    free(b->x);
    free(b->out);
    free(b->logits);
    free(b->weights);
    free(b->ids);
    free(b->ws_raw);
}

static double forward(const moe_layer *layer, const run_buffers *b, size_t t, size_t h,
                      moe_trace *trace)
{
    moe_forward_args a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.n_tokens = t;
    a.hidden_size = h;
    a.hidden = b->x;
    a.hidden_dtype = MOE_DTYPE_F32;
    a.out = b->out;
    a.logits_out = b->logits;
    a.ids_out = b->ids;
    a.weights_out = b->weights;
    a.workspace = b->ws;
    a.workspace_size = b->ws_size;
    a.trace = trace;
    const double t0 = bench_now_ns();
    if (moe_layer_forward(layer, &a) != MOE_OK) die(moe_last_error());
    return bench_now_ns() - t0;
}

static void print_trace(const moe_trace *tr)
{
    for (size_t i = 0; i < tr->count && i < MOE_TRACE_MAX_STEPS; i++) {
        const moe_trace_step *s = &tr->steps[i];
        const double bytes = (double)(s->bytes_read + s->bytes_written);
        printf("        %-18.32s %-50.64s %9.3f ms %8.1f MB %7.2f GB/s\n", s->name, s->kernel,
               (double)s->ns / 1e6, bytes / 1e6, s->ns ? bytes / (double)s->ns : 0.0);
    }
}

/* Times T tokens on LAYER: the median of the repeats, each after a cache flush. */
static void run_tokens(const moe_layer *layer, const run_buffers *b, const bench_buffer *flush,
                       size_t t, size_t h, int threads, const floors *f)
{
    static moe_trace traces[MAX_REPEATS];
    double ns[MAX_REPEATS], sorted[MAX_REPEATS];
    forward(layer, b, t, h, NULL); /* warm-up: code, page tables, the OpenMP team */
    int n = 0;
    double total = 0;
    while (n < MAX_REPEATS && (n < 3 || total < BUDGET_NS)) {
        bench_flush(flush, threads);
        ns[n] = forward(layer, b, t, h, &traces[n]);
        total += ns[n++];
    }
    memcpy(sorted, ns, (size_t)n * sizeof *ns);
    const double med = bench_median(sorted, n);
    int mid = 0;
    while (mid < n - 1 && ns[mid] != med)
        mid++;
    const moe_layer_group_plan *routed = &layer->plan.groups[MOE_LG_ROUTED];
    bool known;
    const bench_insn insn = recipe_insn(routed, &known);
    const work w = forward_work(layer, b->ids, t);
    const double gbs = w.bytes / med, gflops = w.flops / med;
    printf("    %4zu %9.3f %6d %10.1f %7.2f %6.2f %9.1f ", t, med / 1e6, w.hit, w.bytes / 1e6, gbs,
           gbs / f->read[threads], gflops);
    if (known && f->peak[insn][threads] > 0)
        printf("%6.2f", gflops / f->peak[insn][threads]);
    else
        printf("%6s", "-");
    printf(" %7.0f %4d\n", (double)t * 1e9 / med, n);
    print_trace(&traces[mid]);
    fflush(stdout);
}

/* Creates layer 0 of MODEL with THREADS and RECIPE, and runs every T on it. */
static void run_layer(const bench_case *c, const moe_model *model, const options *o,
                      const floors *f, const bench_buffer *flush, int threads, int recipe,
                      bool explain)
{
    const moe_model_desc *d = moe_model_desc_of(model);
    moe_layer_options lo = {.size = sizeof lo,
                            .threads = threads,
                            .experts_recipe = recipe == MOE_RECIPE_BF16 ? MOE_EXPERTS_RECIPE_BF16
                                                                        : MOE_EXPERTS_RECIPE_F32,
                            .fixed_threads = true};
    moe_layer *layer = NULL;
    const double t0 = bench_now_ns();
    if (moe_layer_create(model, 0, &lo, &layer) != MOE_OK) die(moe_last_error());
    const double create_ns = bench_now_ns() - t0;
    const moe_layer_group_plan *routed = &layer->plan.groups[MOE_LG_ROUTED];
    bool known;
    const bench_insn insn = recipe_insn(routed, &known);
    if (explain) printf("%s\n", moe_layer_explain(layer));
    printf("  %s recipe, %d thread%s: %s; created in %.2f s (%.2f GB packed, %.1f MB per "
           "routed expert); read floor %.2f GB/s, %s peak %.1f GFLOP/s\n",
           routed->recipe == MOE_RECIPE_BF16 ? "bf16" : "f32", threads, threads == 1 ? "" : "s",
           routed->ks->name, create_ns / 1e9, (double)routed->group.packed_bytes / 1e9,
           (double)routed->group.expert_stride / 1e6, f->read[threads],
           known ? bench_insn_name(insn) : "(scalar reference: no)",
           known ? f->peak[insn][threads] : 0.0);
    printf("    %4s %9s %6s %10s %7s %6s %9s %6s %7s %4s\n", "T", "ms", "hit", "weights MB", "GB/s",
           "/read", "GFLOP/s", "/peak", "tok/s", "reps");
    run_buffers b;
    buffers_alloc(layer, (size_t)d->hidden, (size_t)c->experts, (size_t)c->topk, &b);
    for (int j = 0; j < o->n_tokens; j++)
        run_tokens(layer, &b, flush, o->tokens[j], (size_t)d->hidden, threads, f);
    buffers_free(&b);
    moe_layer_destroy(layer);
}

static void run_case(const bench_case *c, const char *dir, const options *o, const floors *f,
                     const bench_buffer *flush)
{
    moe_model *model = NULL;
    if (moe_model_open(dir, NULL, &model) != MOE_OK) die(moe_last_error());
    printf("\n== %s: hidden %d, expert intermediate %d, %d resident experts, top-%d", c->name,
           c->hidden, c->inter, c->experts, c->topk);
    if (c->groups) printf(", %d groups keep %d, %d shared", c->groups, c->topk_group, c->shared);
    printf("\n");
    for (int r = 0; r < o->n_recipes; r++)
        for (int i = 0; i < o->n_threads; i++)
            run_layer(c, model, o, f, flush, o->threads[i], o->recipes[r], r == 0 && i == 0);
    moe_model_close(model);
}

/* ---- Main ---------------------------------------------------------------------------- */

static void measure_floors(const bench_buffer *buf, floors *f)
{
    memset(f, 0, sizeof *f);
    for (int t = 1; t <= 2; t++) {
        f->read[t] = bench_stream_read(buf, t, 7);
        for (int i = 0; i < BENCH_INSN_COUNT_; i++)
            f->peak[i][t] = bench_peak_gflops((bench_insn)i, t, 5);
    }
    printf("floors (median of 7 / 5):\n  read      1 thread %6.2f GB/s   2 threads %6.2f GB/s\n",
           f->read[1], f->read[2]);
    for (int i = 0; i < BENCH_INSN_COUNT_; i++)
        printf("  %-16s 1 thread %6.1f GFLOP/s  2 threads %6.1f GFLOP/s\n",
               bench_insn_name((bench_insn)i), f->peak[i][1], f->peak[i][2]);
}

/* Removes the checkpoints a temporary run wrote: DIR/<case>/ files, then the folders. */
static void remove_tree(const char *root)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096];
        static const char *files[] = {"config.json", "model.safetensors"};
        for (size_t j = 0; j < 2; j++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, cases[i].name, files[j]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/%s", root, cases[i].name);
        rmdir(path);
    }
    rmdir(root);
}

int main(int argc, char **argv)
{
    options o;
    parse_options(argc, argv, &o);
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) die(moe_last_error());
    char moe[4096], tmpl[] = "/tmp/bench_layer.XXXXXX";
    moe_path(argv[0], moe, sizeof moe);
    const char *root = o.dir;
    if (!root && !(root = mkdtemp(tmpl))) die("cannot create a temporary folder");
    if (o.dir) mkdir(o.dir, 0777);
    bench_buffer flush;
    if (bench_buffer_init(&flush)) die("out of memory for the flush buffer");
    printf("bench_layer: %s; libmoe allowed %s%s; LLC %zu MiB\n", info.brand,
           moe_isa_level_name(info.cap), info.cap_from_env ? " (MOE_ISA)" : "",
           bench_llc_bytes() >> 20);
    floors f;
    measure_floors(&flush, &f);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (o.only && !strstr(cases[i].name, o.only)) continue;
        char dir[4096];
        ensure_checkpoint(moe, root, &cases[i], dir, sizeof dir);
        run_case(&cases[i], dir, &o, &f, &flush);
    }
    printf("\nms: median per forward; hit: routed experts with at least one token; weights MB: "
           "hit × packed bytes per expert + shared + gate; /read: GB/s over the read floor at "
           "the same thread count (decode target 0.7); /peak: GFLOP/s over the recipe "
           "instruction's peak (prefill target 0.5). Lines below each row: the trace of the "
           "median forward.\n");
    bench_buffer_free(&flush);
    if (!o.dir) remove_tree(root);
    return 0;
}
