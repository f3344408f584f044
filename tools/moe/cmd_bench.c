/* cmd_bench.c — `moe bench`: one MoE layer at real shapes against the machine's own floors. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_machine.h"
#include "bench_presets.h"
#include "bench_report.h"
#include "cli_util.h"
#include "commands.h"
#include "create_stats.h"
#include "layer/layer_internal.h"
#include "model/model.h"
#include "model/model_handle.h"

#define PROG "moe bench"
#define MAX_LIST 16
#define MAX_TOKENS 65536
#define MAX_RESULTS 512
#define MAX_RECIPES 3

static void help(void)
{
    printf("usage: moe bench --preset NAME [--format F] [options]\n"
           "       moe bench --model DIR [--layer N] [options]\n"
           "       moe bench --list\n"
           "       mpirun -np N moe bench --ep --model DIR [...]  (moe bench --ep --help)\n"
           "\n"
           "Measures one MoE layer (router gate, routing, routed and shared experts, combine)\n"
           "on this machine, and each result against the machine's own floor, measured in the\n"
           "same run: floor = max(weight bytes read / read bandwidth, flops / peak of the\n"
           "instruction the experts' recipe runs on, shared experts of another recipe at\n"
           "their own); efficiency = floor / measured time.\n"
           "Before each timed forward a buffer twice the last-level cache is read, so the\n"
           "weights come from memory as in a model whose other layers evicted them.\n"
           "\n"
           "options:\n"
           "  --preset NAME      a released model's MoE layer with synthetic weights in its\n"
           "                     own format (--list shows them); the number of resident\n"
           "                     experts R is scaled down to fit memory, and printed: the\n"
           "                     router still chooses among all of the model's experts, and\n"
           "                     a forward's i-th expert runs on resident copy i mod R\n"
           "  --format F         bf16, fp8, mxfp4 or int4 where the preset has it (default: the\n"
           "                     format the model ships in)\n"
           "  --model DIR        a checkpoint instead of a preset\n"
           "  --layer N          with --model: the layer (default: the first MoE layer)\n"
           "  --recipe LIST      f32, bf16 or tile: how bf16 and FP8 experts meet the\n"
           "                     activations (default: the library's, f32; MXFP4 experts\n"
           "                     run q8 unless tile is asked); a list such\n"
           "                     as f32,tile runs every case with each, side by side\n"
           "                     against the same floors\n"
           "  --tokens LIST      tokens per forward (default 1,2,4,8,16,32,64,128,512,2048)\n"
           "  --threads LIST     thread counts (default: 1 and the number of cores)\n"
           "  --memory-gb X      the most weights to keep resident, GB (fractions allowed;\n"
           "                     presets: default a quarter of MemAvailable, at most 4;\n"
           "                     --model: default all of the layer's experts; fewer run as\n"
           "                     a preset's do)\n"
           "  --time-ms MS       timed forwards per case run until MS have passed (at least\n"
           "                     3; default 1000)\n"
           "  --dir DIR          keep generated checkpoints in DIR and reuse them (default: a\n"
           "                     temporary folder, removed at the end)\n"
           "  --json             print the results as JSON on stdout instead of the table\n"
           "  --plot FILE.svg    draw the roofline (SVG only: FILE must end in .svg): the\n"
           "                     ceilings the cases ran against and every case as a point\n"
           "  --trace            each case's median forward step by step (moe run --trace's\n"
           "                     table) after the layer's table, or as \"trace\" in the JSON\n"
           "  --help             this text\n"
           "\n"
           "A progress bar goes to stderr while weights are generated and packed (only on a\n"
           "terminal). Exit status: 0 done, 1 failed (one line on stderr), 2 usage error.\n");
}

typedef struct bench_args {
    const char *preset, *format, *model, *dir, *plot;
    int64_t layer;
    size_t tokens[MAX_LIST];
    int n_tokens;
    int threads[MAX_LIST];
    int n_threads;
    double memory_gb, time_ms;
    moe_experts_recipe recipes[MAX_RECIPES]; /* --recipe's list, run one after another */
    int n_recipes;
    bool json, list, trace;
} bench_args;

/* ---- Options ------------------------------------------------------------------------- */

static bool parse_list(cli_args *a, const char *opt, const char *text, int64_t max, int64_t *out,
                       int *n)
{
    *n = 0;
    for (const char *p = text;; p++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[32];
        if (*n == MAX_LIST)
            return cli_usage_error(a, "%s: at most %d values", opt, MAX_LIST), false;
        if (len == 0 || len >= sizeof item)
            return cli_usage_error(a, "%s: '%s' is not a comma-separated list of numbers", opt,
                                   text),
                   false;
        memcpy(item, p, len);
        item[len] = 0;
        if (!cli_int(a, opt, item, 1, max, &out[(*n)++])) return false;
        if (!end) return true;
        p = end;
    }
}

/* --recipe f32,tile: each a recipe cli_recipe knows, at most MAX_RECIPES, none twice. */
static bool parse_recipes(cli_args *a, const char *text, bench_args *o)
{
    o->n_recipes = 0;
    for (const char *p = text;; p++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[16];
        if (o->n_recipes == MAX_RECIPES)
            return cli_usage_error(a, "--recipe: at most %d recipes", MAX_RECIPES), false;
        if (len == 0 || len >= sizeof item)
            return cli_usage_error(a, "--recipe '%s' is not a comma-separated list of recipes",
                                   text),
                   false;
        memcpy(item, p, len);
        item[len] = 0;
        moe_experts_recipe r;
        if (!cli_recipe(a, item, &r)) return false;
        for (int i = 0; i < o->n_recipes; i++)
            if (o->recipes[i] == r)
                return cli_usage_error(a, "--recipe: '%s' is listed twice", item), false;
        o->recipes[o->n_recipes++] = r;
        if (!end) return true;
        p = end;
    }
}

static int parse_args(bench_args *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    static const size_t tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 512, 2048};
    memcpy(o->tokens, tokens, sizeof tokens);
    o->n_tokens = (int)(sizeof tokens / sizeof tokens[0]);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads[0] = 1;
    o->n_threads = 1;
    if (cores > 1) o->threads[o->n_threads++] = (int)cores;
    o->layer = -1;
    o->time_ms = 1000;
    o->recipes[0] = MOE_EXPERTS_RECIPE_DEFAULT;
    o->n_recipes = 1;
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    const char *v, *tok = NULL, *thr = NULL, *layer = NULL, *mem = NULL, *ms = NULL;
    while (cli_peek(&a) && !a.bad) {
        if (cli_flag(&a, "--help")) {
            help();
            return -1;
        } else if (cli_flag(&a, "--list")) {
            o->list = true;
        } else if (cli_flag(&a, "--json")) {
            o->json = true;
        } else if (cli_flag(&a, "--trace")) {
            o->trace = true;
        } else if (cli_option(&a, "--preset", &v)) {
            o->preset = v;
        } else if (cli_option(&a, "--format", &v)) {
            o->format = v;
        } else if (cli_option(&a, "--model", &v)) {
            o->model = v;
        } else if (cli_option(&a, "--layer", &v)) {
            layer = v;
        } else if (cli_option(&a, "--recipe", &v)) {
            if (v && !parse_recipes(&a, v, o)) return 2;
        } else if (cli_option(&a, "--tokens", &v)) {
            tok = v;
        } else if (cli_option(&a, "--threads", &v)) {
            thr = v;
        } else if (cli_option(&a, "--memory-gb", &v)) {
            mem = v;
        } else if (cli_option(&a, "--time-ms", &v)) {
            ms = v;
        } else if (cli_option(&a, "--dir", &v)) {
            o->dir = v;
        } else if (cli_option(&a, "--plot", &v)) {
            o->plot = v;
            const size_t n = v ? strlen(v) : 0;
            if (v && (n < 5 || strcmp(v + n - 4, ".svg")))
                return cli_usage_error(&a,
                                       "--plot %s: the roofline is written as SVG only: name the "
                                       "file *.svg",
                                       v);
        } else {
            return cli_usage_error(&a, "unknown option '%s' (moe bench --help lists them)",
                                   cli_peek(&a));
        }
    }
    if (a.bad) return 2;
    int64_t list[MAX_LIST], x;
    if (tok) {
        if (!parse_list(&a, "--tokens", tok, MAX_TOKENS, list, &o->n_tokens)) return 2;
        for (int i = 0; i < o->n_tokens; i++)
            o->tokens[i] = (size_t)list[i];
    }
    if (thr) {
        if (!parse_list(&a, "--threads", thr, 4096, list, &o->n_threads)) return 2;
        for (int i = 0; i < o->n_threads; i++)
            o->threads[i] = (int)list[i];
    }
    if (layer && !cli_int(&a, "--layer", layer, 0, 1 << 20, &o->layer)) return 2;
    if (mem) {
        char *end = NULL;
        errno = 0;
        o->memory_gb = strtod(mem, &end);
        if (errno || end == mem || *end || !(o->memory_gb > 0 && o->memory_gb <= 1 << 20))
            return cli_usage_error(&a, "--memory-gb '%s' is not a number of GB in (0, 1048576]",
                                   mem);
    }
    if (ms) {
        if (!cli_int(&a, "--time-ms", ms, 1, 3600000, &x)) return 2;
        o->time_ms = (double)x;
    }
    if (o->list) return 0;
    if (!o->preset == !o->model)
        return cli_usage_error(&a, "give exactly one of --preset NAME and --model DIR");
    if (o->model && (o->format || o->dir))
        return cli_usage_error(&a, "%s applies to --preset only", o->format ? "--format" : "--dir");
    if (o->preset && layer) return cli_usage_error(&a, "--layer applies to --model only");
    if (o->preset) {
        const bench_preset *p = bench_preset_find(o->preset);
        if (!p)
            return cli_usage_error(&a, "unknown preset '%s' (moe bench --list shows them)",
                                   o->preset);
        if (o->format && !bench_preset_has_format(p, o->format))
            return cli_usage_error(&a, "preset %s has no format '%s' (it has %s and %s)", p->name,
                                   o->format, p->formats[0], p->formats[1]);
    }
    return 0;
}

static void list_presets(void)
{
    printf("%-18s %-12s %-11s %7s %7s %8s %5s %7s\n", "preset", "family", "formats", "hidden",
           "inter", "experts", "top-k", "shared");
    for (size_t i = 0; bench_preset_at(i); i++) {
        const bench_preset *p = bench_preset_at(i);
        char formats[32];
        snprintf(formats, sizeof formats, "%s,%s", p->formats[0], p->formats[1]);
        printf("%-18s %-12s %-11s %7" PRId64 " %7" PRId64 " %8" PRId64 " %5" PRId64 " %7" PRId64
               "\n",
               p->name, p->family, formats, p->hidden, p->inter, p->experts, p->topk, p->shared);
    }
}

static void nap_100ms(void)
{
    const struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
}

/* ---- Progress on stderr (a terminal only) ------------------------------------------- */

static void progress(const char *what, double done, double total)
{
    if (!isatty(STDERR_FILENO)) return;
    const double f = total > 0 ? (done > total ? 1 : done / total) : 0;
    char bar[31];
    const int fill = (int)(f * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%-40.40s [%s] %3.0f%%", what, bar, f * 100);
}

static void progress_done(void)
{
    if (isatty(STDERR_FILENO)) fprintf(stderr, "\r%78s\r", "");
}

/* ---- Generating a preset's checkpoint ---------------------------------------------- */

extern char **environ;

/* Bytes of the regular files directly in DIR. */
static double dir_bytes(const char *dir)
{
    static const char *names[] = {"model.safetensors", "config.json"};
    double total = 0;
    for (size_t i = 0; i < 2; i++) {
        char path[8192];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &sb) == 0) total += (double)sb.st_size;
    }
    return total;
}

/* Runs `moe gen` (this binary) for preset P into DIR, its stdout discarded, with a progress
 * bar from the size of the file it writes. */
static int generate(const bench_preset *p, const char *format, int64_t resident, const char *dir)
{
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return cli_fail(PROG, 1, "cannot find the moe binary: %s", strerror(errno));
    self[n] = 0;
    char hidden[24], inter[24], experts[24], stored[24], topk[24], groups[24], tg[24], shared[24];
    snprintf(hidden, sizeof hidden, "%" PRId64, p->hidden);
    snprintf(inter, sizeof inter, "%" PRId64, p->inter);
    snprintf(experts, sizeof experts, "%" PRId64, p->experts);
    snprintf(stored, sizeof stored, "%" PRId64, resident);
    snprintf(topk, sizeof topk, "%" PRId64, p->topk);
    snprintf(groups, sizeof groups, "%" PRId64, p->groups);
    snprintf(tg, sizeof tg, "%" PRId64, p->topk_group);
    snprintf(shared, sizeof shared, "%" PRId64, p->shared);
    char *argv[40] = {self,
                      "gen",
                      "--family",
                      (char *)p->family,
                      "--dtype",
                      (char *)format,
                      "--layers",
                      "1",
                      "--hidden",
                      hidden,
                      "--intermediate",
                      inter,
                      "--experts",
                      experts,
                      "--topk",
                      topk,
                      "--seed",
                      "1",
                      "--out",
                      (char *)dir};
    int k = 20;
    if (p->groups) argv[k++] = "--groups", argv[k++] = groups;
    if (p->groups > 1 || !strcmp(p->family, "kimi_k2")) argv[k++] = "--topk-group", argv[k++] = tg;
    if (p->shared) argv[k++] = "--shared", argv[k++] = shared;
    if (resident < p->experts) argv[k++] = "--stored-experts", argv[k++] = stored;
    argv[k] = NULL;
    /* The file's size as it grows; the experts past the stored ones are holes, skipped. */
    const double expected =
        (double)(p->experts + p->shared) * (double)bench_expert_bytes(p, format);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    const int rc = posix_spawn(&pid, self, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return cli_fail(PROG, 1, "cannot start %s gen: %s", self, strerror(rc));
    int status = 0;
    char what[64];
    snprintf(what, sizeof what, "generating %s %s", p->name, format);
    for (;;) {
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR)
            return cli_fail(PROG, 1, "waiting for moe gen: %s", strerror(errno));
        progress(what, dir_bytes(dir), expected);
        nap_100ms();
    }
    progress_done();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cli_fail(PROG, 1, "moe gen failed for preset %s (%s)", p->name, format);
    return 0;
}

/* ---- Creating a layer, with the memory it takes ------------------------------------ */

typedef struct pack_watch {
    atomic_bool stop;
    double base, expected;
    const char *what;
} pack_watch;

static void *watch_packing(void *arg)
{
    pack_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        progress(w->what, (double)bench_rss_now() - w->base, w->expected);
        nap_100ms();
    }
    return NULL;
}

static const char *recipe_name(int recipe)
{
    switch (recipe) {
    case MOE_RECIPE_F32: return "f32";
    case MOE_RECIPE_BF16: return "bf16";
    case MOE_RECIPE_Q8: return "q8";
    case MOE_RECIPE_TILE: return "tile";
    default: return "?";
    }
}

/* The instruction whose peak bounds the routed experts' kernel set (bench/bench_util.h names). */
static const char *recipe_insn(const moe_layer_group_plan *g)
{
    const char *isa = moe_kernel_isa_token(g->ks->isa);
    if (!isa || !strcmp(isa, "ref")) return "";
    const bool zmm = !strncmp(isa, "avx512", 6);
    switch (g->recipe) {
    case MOE_RECIPE_BF16: /* below AVX512-BF16 two FMAs per pair step (the emulation) */
        if (!strcmp(isa, "avx512bf16")) return "vdpbf16ps zmm";
        return zmm ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
    case MOE_RECIPE_TILE: /* below AMX-BF16 two FMA chains per 32-K chunk */
        if (!strcmp(isa, "avx512amxbf16")) return "tdpbf16ps";
        return zmm ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
    case MOE_RECIPE_Q8:
        if (!strcmp(isa, "avx512amx")) return "tdpbssd k32";
        if (!strcmp(isa, "avx512vnni")) return "vpdpbusd zmm";
        if (!strcmp(isa, "avxvnni")) return "vpdpbusd ymm";
        return zmm ? "vpmaddubsw zmm" : "vpmaddubsw ymm";
    default: return zmm ? "vfmadd231ps zmm" : "vfmadd231ps ymm";
    }
}

static int create_layer(const moe_model *model, int index, moe_experts_recipe recipe, int threads,
                        double expected, bench_layer_info *info, moe_layer **out)
{
    moe_layer_options lo = {
        .size = sizeof lo, .threads = threads, .experts_recipe = recipe, .fixed_threads = true};
    /* Experts past the resident ones run on the copies (resident = experts: all packed). */
    const moe_layer_tuning tuning = {.allowed = NULL, .resident_experts = (int)info->resident};
    pack_watch w = {.base = (double)bench_rss_now(), .expected = expected, .what = "packing"};
    atomic_init(&w.stop, false);
    pthread_t th;
    const bool watching =
        isatty(STDERR_FILENO) && pthread_create(&th, NULL, watch_packing, &w) == 0;
    create_stats cs;
    const moe_status st = create_measured(model, index, &lo, &tuning, out, &cs);
    if (watching) {
        atomic_store(&w.stop, true);
        pthread_join(th, NULL);
        progress_done();
    }
    if (st) return cli_fail(PROG, 1, "%s", moe_last_error());
    const moe_layer_group_plan *routed = &(*out)->plan.groups[MOE_LG_ROUTED];
    info->threads = threads;
    info->create = cs;
    snprintf(info->recipe, sizeof info->recipe, "%s", recipe_name(routed->recipe));
    snprintf(info->kernel, sizeof info->kernel, "%s", routed->ks->name);
    snprintf(info->insn, sizeof info->insn, "%s", recipe_insn(routed));
    const moe_layer_group_plan *shared = &(*out)->plan.groups[MOE_LG_SHARED];
    info->shared_kernel[0] = info->shared_insn[0] = 0;
    if (shared->present && strcmp(recipe_insn(shared), info->insn)) {
        snprintf(info->shared_kernel, sizeof info->shared_kernel, "%s", shared->ks->name);
        snprintf(info->shared_insn, sizeof info->shared_insn, "%s", recipe_insn(shared));
    }
    return 0;
}

/* ---- Timing forwards ---------------------------------------------------------------- */

typedef struct buffers {
    float *x, *out;
    int32_t *ids, *token_ids;
    void *ws_raw, *ws;
    size_t ws_size, max_t;
} buffers;

static void buffers_free(buffers *b)
{
    free(b->x);
    free(b->out);
    free(b->ids);
    free(b->token_ids);
    free(b->ws_raw);
    memset(b, 0, sizeof *b);
}

/* Forward i of a case of T tokens takes hidden states rows (i·T) mod WINDOWS .. + T - 1, so
 * consecutive forwards route different tokens, as consecutive decode steps do. With the same
 * tokens every time, each forward would read the experts the last one read, and a last-level
 * cache that keeps lines read again and again (adaptive replacement) could serve part of them
 * despite the eviction pass: one run read Qwen3-30B-A3B T = 1 at 1.06 of the read floor. */
#define WINDOWS 257

static int buffers_alloc(const moe_layer *layer, size_t max_t, size_t h, size_t k, int64_t vocab,
                         buffers *b)
{
    memset(b, 0, sizeof *b);
    b->max_t = max_t;
    const size_t rows = max_t + WINDOWS - 1; /* every window's rows */
    b->x = malloc(rows * h * sizeof *b->x);
    b->out = malloc(max_t * h * sizeof *b->out);
    b->ids = malloc(max_t * k * sizeof *b->ids);
    b->token_ids = malloc(rows * sizeof *b->token_ids);
    b->ws_size = moe_layer_workspace_size(layer, max_t);
    b->ws_raw = b->ws_size ? malloc(b->ws_size + 64) : NULL;
    if (!b->x || !b->out || !b->ids || !b->token_ids || !b->ws_raw) {
        buffers_free(b);
        return cli_fail(PROG, 1, "out of memory for %zu tokens of hidden size %zu", max_t, h);
    }
    b->ws = (void *)(((uintptr_t)b->ws_raw + 63) & ~(uintptr_t)63);
    memset(b->ws, 0, b->ws_size); /* no page faults inside a timed forward */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < rows * h; i += 2) { /* N(0, 1) by Box–Muller */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u1 = ((double)(s >> 11) + 1) * 0x1p-53;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u2 = (double)(s >> 11) * 0x1p-53, r = sqrt(-2 * log(u1));
        b->x[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < rows * h) b->x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
    for (size_t i = 0; i < rows; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b->token_ids[i] = vocab > 0 ? (int32_t)((s >> 33) % (uint64_t)vocab) : 0;
    }
    return 0;
}

/* Forward I of T tokens (WINDOWS above), its steps into TRACE when not NULL. */
static int forward(const moe_layer *layer, const buffers *b, size_t i, size_t t, size_t h,
                   moe_trace *trace, double *ns)
{
    const size_t first = i * t % WINDOWS;
    moe_forward_args a = {.size = sizeof a,
                          .n_tokens = t,
                          .hidden_size = h,
                          .hidden = b->x + first * h,
                          .hidden_dtype = MOE_DTYPE_F32,
                          .token_ids = b->token_ids + first,
                          .token_id_dtype = MOE_DTYPE_I32,
                          .out = b->out,
                          .ids_out = b->ids,
                          .workspace = b->ws,
                          .workspace_size = b->ws_size,
                          .trace = trace};
    const double t0 = bench_clock_ns();
    if (moe_layer_forward(layer, &a) != MOE_OK) return cli_fail(PROG, 1, "%s", moe_last_error());
    *ns = bench_clock_ns() - t0;
    return 0;
}

/* One timed forward: its time, the routed experts its ids hit, and its trace (--trace). */
typedef struct timed {
    double ns;
    int hit;
    moe_trace *trace;
} timed;

static int cmp_timed(const void *a, const void *b)
{
    const double x = ((const timed *)a)->ns, y = ((const timed *)b)->ns;
    return (x > y) - (x < y);
}

/* Distinct routed experts among a forward's T × top-k IDS. */
static int experts_hit(const moe_layer *layer, const int32_t *ids, size_t t)
{
    const int e = layer->plan.groups[MOE_LG_ROUTED].group.n_experts;
    const size_t k = (size_t)layer->plan.ld->routing.top_k;
    unsigned char seen[4096] = {0};
    int hit = 0;
    for (size_t i = 0; i < t * k; i++)
        if (ids[i] >= 0 && ids[i] < e && ids[i] < 4096 && !seen[ids[i]]) {
            seen[ids[i]] = 1;
            hit++;
        }
    return hit;
}

/* Weight bytes a forward of T tokens read with r->hit routed experts hit (their packed bytes,
 * the shared experts and the gate) and its flops (2 per multiply-add). */
static void forward_work(const moe_layer *layer, size_t t, bench_result *r)
{
    const moe_layer_plan *p = &layer->plan;
    const moe_layer_group_plan *routed = &p->groups[MOE_LG_ROUTED];
    const moe_layer_group_plan *shared = &p->groups[MOE_LG_SHARED];
    const int e = routed->group.n_experts, k = p->ld->routing.top_k;
    const double h = (double)routed->group.hidden, in = (double)routed->group.inter;
    r->weight_bytes = (double)p->gate_bytes + (double)r->hit * (double)routed->group.expert_stride;
    r->flops = 2.0 * (double)t * ((double)e * h + (double)k * 3.0 * h * in);
    r->shared_flops = 0;
    if (shared->present) {
        r->weight_bytes += (double)shared->group.packed_bytes;
        r->shared_flops =
            2.0 * (double)t * 3.0 * (double)shared->group.hidden * (double)shared->group.inter;
        r->flops += r->shared_flops;
    }
}

/* The case's figures are its median forward's (the mean of the two middle ones for an even
 * count): its time, and the experts its own ids hit, so its bytes are the ones that forward
 * read. (The mean hits beside the median time read Mixtral T = 2 at 0.75 rather than 0.86:
 * its forwards hit 2, 3 or 4 experts, and the median one hit 4 against a mean of 3.5.) */
static int run_tokens(const moe_layer *layer, const buffers *b, size_t t, size_t h,
                      const bench_args *o, bench_floors *f, const bench_layer_info *info,
                      bench_result *r)
{
    enum { MAX_FORWARDS = 64 };
    timed fw[MAX_FORWARDS];
    moe_trace *traces = NULL;
    if (o->trace && !(traces = calloc(MAX_FORWARDS, sizeof *traces)))
        return cli_fail(PROG, 1, "out of memory for the traces");
    double warm;
    int n = 0, rc = forward(layer, b, 0, t, h, NULL, &warm); /* code, page tables, the team */
    double total = 0;
    while (!rc && n < MAX_FORWARDS && (n < 3 || total < o->time_ms * 1e6)) {
        bench_evict(f, info->threads);
        fw[n].trace = traces ? &traces[n] : NULL;
        rc = forward(layer, b, (size_t)n + 1, t, h, fw[n].trace, &fw[n].ns);
        fw[n].hit = experts_hit(layer, b->ids, t);
        total += fw[n++].ns;
    }
    if (rc) {
        free(traces);
        return rc;
    }
    qsort(fw, (size_t)n, sizeof fw[0], cmp_timed);
    const timed *lo = &fw[(n - 1) / 2], *hi = &fw[n / 2];
    memset(r, 0, sizeof *r);
    r->layer = info;
    r->tokens = t;
    r->repeats = n;
    r->ms = (lo->ns + hi->ns) / 2 / 1e6;
    r->hit = (lo->hit + hi->hit) / 2.0;
    if (traces) { /* the lower middle forward's, as moe run --trace shows */
        r->trace = malloc(sizeof *r->trace);
        if (r->trace) *r->trace = *lo->trace;
        r->trace_ns = lo->ns;
        free(traces);
        if (!r->trace) return cli_fail(PROG, 1, "out of memory for the traces");
    }
    forward_work(layer, t, r);
    return 0;
}

/* Milliseconds FLOPS take at the peak of INSN (a bench_floors name) at SLOT; 0 for none (the
 * scalar reference kernels have no compute floor). */
static double flop_ms_at(const bench_floors *f, const char *insn, int slot, double flops)
{
    const int i = bench_floors_insn(f, insn);
    return i >= 0 ? flops / f->peak_gflops[i][slot] / 1e6 : 0;
}

/* The case's floor and efficiency against the floors as they stand (the read ceilings rise
 * when an eviction pass beats them, so this runs once a layer's cases are done, and for
 * every case again before the JSON and the plot). Shared experts of another recipe are
 * bounded by their own instruction's peak; the gate and the rest by the routed one's. */
static void set_floor(bench_result *r, const bench_floors *f)
{
    const bench_layer_info *info = r->layer;
    const int slot = bench_floors_slot(f, info->threads);
    const double mem_ms = r->weight_bytes / f->read_gbs[slot] / 1e6;
    const bool own = info->shared_insn[0] != 0;
    const double flop_ms =
        flop_ms_at(f, info->insn, slot, own ? r->flops - r->shared_flops : r->flops) +
        (own ? flop_ms_at(f, info->shared_insn, slot, r->shared_flops) : 0);
    r->compute_bound = flop_ms > mem_ms;
    r->floor_ms = r->compute_bound ? flop_ms : mem_ms;
    r->efficiency = r->floor_ms / r->ms;
}

/* ---- A layer: every thread count and token count ---------------------------------- */

/* One layer per (recipe, thread count). */
#define MAX_INFOS (MAX_RECIPES * MAX_LIST)

typedef struct results {
    bench_result r[MAX_RESULTS];
    bench_layer_info info[MAX_INFOS];
    size_t n, n_info;
} results;

static int bench_layer(const moe_model *model, int index, const bench_args *o, bench_floors *f,
                       const bench_layer_info *base, double expected, results *res)
{
    const moe_model_desc *d = moe_model_desc_of(model);
    const moe_layer_desc *ld = &d->layers[index];
    size_t max_t = 1;
    for (int i = 0; i < o->n_tokens; i++)
        if (o->tokens[i] > max_t) max_t = o->tokens[i];
    for (int c = 0; c < o->n_recipes * o->n_threads && res->n_info < MAX_INFOS; c++) {
        const int i = c % o->n_threads;
        bench_layer_info *info = &res->info[res->n_info++];
        *info = *base;
        moe_layer *layer = NULL;
        if (create_layer(model, index, o->recipes[c / o->n_threads], o->threads[i], expected, info,
                         &layer))
            return 1;
        buffers b;
        if (buffers_alloc(layer, max_t, (size_t)d->hidden, (size_t)ld->routing.top_k, d->vocab_size,
                          &b)) {
            moe_layer_destroy(layer);
            return 1;
        }
        int rc = 0;
        const size_t first = res->n;
        progress("measuring the floors again", 0, 1);
        bench_floors_refresh(f, o->threads[i]);
        for (int j = 0; j < o->n_tokens && !rc && res->n < MAX_RESULTS; j++) {
            char what[64];
            snprintf(what, sizeof what, "measuring %zu tokens, %d thread%s", o->tokens[j],
                     info->threads, info->threads == 1 ? "" : "s");
            progress(what, j, o->n_tokens);
            rc =
                run_tokens(layer, &b, o->tokens[j], (size_t)d->hidden, o, f, info, &res->r[res->n]);
            if (!rc) res->n++;
        }
        progress_done();
        for (size_t j = first; j < res->n; j++)
            set_floor(&res->r[j], f);
        if (!o->json) {
            bench_report_layer(stdout, info, f);
            bench_report_header(stdout);
            for (size_t j = first; j < res->n; j++)
                bench_report_row(stdout, &res->r[j]);
            for (size_t j = first; j < res->n; j++)
                bench_report_trace(stdout, &res->r[j]);
            fflush(stdout);
        }
        buffers_free(&b);
        moe_layer_destroy(layer);
        if (rc) return rc;
    }
    return 0;
}

static int first_routed_layer(const moe_model_desc *d)
{
    for (int i = 0; i < d->n_layers; i++)
        if (d->layers[i].kind == MOE_LAYER_MOE) return i;
    for (int i = 0; i < d->n_layers; i++)
        if (d->layers[i].kind == MOE_LAYER_HASH) return i;
    return -1;
}

/* Opens DIR and finds the layer to bench (o->layer, else the first routed one): before the
 * floors are measured, so a wrong folder or layer fails at once. */
static int open_model(const char *dir, const bench_args *o, moe_model **model, int *index)
{
    *model = NULL;
    if (moe_model_open(dir, NULL, model)) return cli_fail(PROG, 1, "%s", moe_last_error());
    const moe_model_desc *d = moe_model_desc_of(*model);
    *index = o->layer >= 0 ? (int)o->layer : first_routed_layer(d);
    if (*index < 0 || *index >= d->n_layers || d->layers[*index].kind == MOE_LAYER_DENSE) {
        const int rc =
            cli_fail(PROG, 1, "%s: layer %d is not a MoE layer (the model has %d layers)", dir,
                     *index, d->n_layers);
        moe_model_close(*model);
        *model = NULL;
        return rc;
    }
    return 0;
}

/* --model with --memory-gb: how many of layer INDEX's routed experts fit in BUDGET bytes
 * beside its gate and shared experts (their packed sizes, from the layer's plan) into
 * *resident; all when they fit. 1 (one line on stderr) when not even top-k do. */
static int model_resident(const moe_model *model, int index, double budget, int64_t *resident)
{
    moe_layer_plan p;
    if (moe_layer_plan_make(model, index, NULL, NULL, &p))
        return cli_fail(PROG, 1, "%s", moe_last_error());
    const moe_expert_group *g = &p.groups[MOE_LG_ROUTED].group;
    double fixed = (double)p.gate_bytes;
    if (p.groups[MOE_LG_SHARED].present)
        fixed += (double)p.groups[MOE_LG_SHARED].group.packed_bytes;
    const int64_t e = g->n_experts, k = p.ld->routing.top_k;
    const double stride = (double)g->expert_stride;
    const double fit = budget > fixed ? floor((budget - fixed) / stride) : 0;
    moe_layer_plan_free(&p);
    if (fit < (double)k)
        return cli_fail(PROG, 1,
                        "--memory-gb %.6g: not even top-%lld of layer %d's experts fit (%.2f MB "
                        "each, %.2f MB for the gate and shared experts)",
                        budget / 1e9, (long long)k, index, stride / 1e6, fixed / 1e6);
    *resident = fit >= (double)e ? e : (int64_t)fit;
    return 0;
}

/* Benches layer INDEX of MODEL (open_model's), then closes the model. BASE: a preset's, or
 * zeros but for the resident count model_resident gave (0: all). */
static int bench_model(moe_model *model, int index, const bench_args *o, bench_floors *f,
                       bench_layer_info *base, double expected, results *res)
{
    const moe_model_desc *d = moe_model_desc_of(model);
    const moe_layer_desc *ld = &d->layers[index];
    if (!base->preset[0]) {
        snprintf(base->preset, sizeof base->preset, "%s layer %d", d->model_type, index);
        snprintf(base->format, sizeof base->format, "%s",
                 moe_weight_format_name(ld->experts.format));
        base->experts = ld->routing.n_experts;
        if (!base->resident) base->resident = base->experts; /* else model_resident's */
    }
    base->hidden = d->hidden;
    base->inter = ld->experts.intermediate;
    base->topk = ld->routing.top_k;
    const int rc = bench_layer(model, index, o, f, base, expected, res);
    moe_model_close(model);
    return rc;
}

static void remove_generated(const char *dir)
{
    static const char *names[] = {"model.safetensors", "config.json"};
    char path[8192];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static int bench_preset_run(const bench_args *o, bench_floors *f, results *res)
{
    const bench_preset *p = bench_preset_find(o->preset); /* parse_args checked both */
    const char *format = o->format ? o->format : p->formats[0];
    double budget = o->memory_gb * 1e9;
    if (budget <= 0) {
        budget = (double)bench_mem_available() / 4;
        if (budget > 4e9) budget = 4e9;
    }
    const int64_t resident = bench_resident_experts(p, format, (uint64_t)budget);
    if (resident <= 0)
        return cli_fail(PROG, 1, "preset %s %s: not even top-%" PRId64 " experts fit in %.2f GB",
                        p->name, format, p->topk, budget / 1e9);
    const double expected = (double)(resident + p->shared) * (double)bench_expert_bytes(p, format);
    bench_layer_info base;
    memset(&base, 0, sizeof base);
    snprintf(base.preset, sizeof base.preset, "%s", p->name);
    snprintf(base.format, sizeof base.format, "%s", format);
    base.experts = p->experts;
    base.resident = resident;
    char dir[4096], tmpl[] = "/tmp/moe-bench.XXXXXX";
    const char *root = o->dir;
    if (root) {
        mkdir(root, 0777);
    } else {
        const char *tmp = getenv("TMPDIR");
        if (tmp && *tmp) {
            snprintf(dir, sizeof dir, "%s/moe-bench.XXXXXX", tmp);
            root = mkdtemp(dir);
        } else {
            root = mkdtemp(tmpl);
        }
        if (!root)
            return cli_fail(PROG, 1, "cannot create a temporary folder: %s", strerror(errno));
    }
    char where[4096 + 128];
    snprintf(where, sizeof where, "%s/%s-%s-%" PRId64 "-of-%" PRId64, root, p->name, format,
             resident, p->experts);
    char cfg[sizeof where + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", where);
    struct stat sb;
    int rc = 0;
    if (stat(cfg, &sb) != 0) rc = generate(p, format, resident, where);
    moe_model *model = NULL;
    int index = 0;
    if (!rc) rc = open_model(where, o, &model, &index);
    if (!rc) rc = bench_model(model, index, o, f, &base, expected, res);
    if (!o->dir) {
        remove_generated(where);
        rmdir(root);
    }
    return rc;
}

/* With several recipes: per thread count and token count, each recipe's median ms and its
 * ratio to the first recipe's (below 1: faster). */
static void print_side_by_side(const bench_args *o, const results *res)
{
    const char *first = res->n_info ? res->info[0].recipe : "?";
    printf("\nrecipes side by side: median ms, and its ratio to %s's\n%-8s %-7s", first, "threads",
           "tokens");
    for (int c = 0; c < o->n_recipes && (size_t)(c * o->n_threads) < res->n_info; c++)
        printf(" %10s %6s", res->info[c * o->n_threads].recipe, "ratio");
    putchar('\n');
    for (int i = 0; i < o->n_threads; i++)
        for (int j = 0; j < o->n_tokens; j++) {
            printf("%-8d %-7zu", o->threads[i], o->tokens[j]);
            double base = 0;
            for (int c = 0; c < o->n_recipes && (size_t)(c * o->n_threads + i) < res->n_info;
                 c++) {
                const bench_layer_info *info = &res->info[c * o->n_threads + i];
                const bench_result *r = NULL;
                for (size_t k = 0; k < res->n && !r; k++)
                    if (res->r[k].layer == info && res->r[k].tokens == o->tokens[j]) r = &res->r[k];
                if (!r) {
                    printf(" %10s %6s", "-", "-");
                    continue;
                }
                if (c == 0) base = r->ms;
                printf(" %10.3f %6.2f", r->ms, base > 0 ? r->ms / base : 0.0);
            }
            putchar('\n');
        }
}

int moe_cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--ep")) return moe_cmd_bench_ep(argc, argv);
    bench_args o;
    int rc = parse_args(&o, argc, argv);
    if (rc) return rc < 0 ? 0 : rc; /* -1: --help was printed */
    if (o.list) {
        list_presets();
        return 0;
    }
    if (o.plot && !cli_path_writable(o.plot))
        return cli_fail(PROG, 1, "--plot %s: cannot write there: %s", o.plot, strerror(errno));
    int max_threads = 1;
    for (int i = 0; i < o.n_threads; i++)
        if (o.threads[i] > max_threads) max_threads = o.threads[i];
    moe_model *model = NULL;
    int index = 0;
    if (o.model && open_model(o.model, &o, &model, &index)) return 1;
    int64_t resident = 0; /* --model with --memory-gb: the routed experts that fit */
    if (model && o.memory_gb > 0 && model_resident(model, index, o.memory_gb * 1e9, &resident)) {
        moe_model_close(model);
        return 1;
    }
    results *res = calloc(1, sizeof *res);
    bench_floors f;
    if (!res || !bench_floors_measure(&f, max_threads)) {
        free(res);
        moe_model_close(model);
        return cli_fail(PROG, 1, "out of memory for the bandwidth buffer");
    }
    char busy[512];
    if (bench_floors_busy(&f, busy, sizeof busy)) fprintf(stderr, "%s: warning: %s\n", PROG, busy);
    if (!o.json) bench_report_floors(stdout, &f);
    if (o.preset) {
        rc = bench_preset_run(&o, &f, res);
    } else {
        bench_layer_info base;
        memset(&base, 0, sizeof base);
        base.resident = resident;
        rc = bench_model(model, index, &o, &f, &base, 0, res);
    }
    for (size_t i = 0; i < res->n; i++)
        set_floor(&res->r[i], &f); /* against the final ceilings */
    if (!rc && o.json && !bench_report_json(stdout, &f, res->r, res->n))
        rc = cli_fail(PROG, 1, "cannot write the JSON report");
    if (!rc && o.plot && !bench_report_svg(o.plot, &f, res->r, res->n))
        rc = cli_fail(PROG, 1, "cannot write %s: %s", o.plot, strerror(errno));
    if (!rc && !o.json && o.n_recipes > 1) print_side_by_side(&o, res);
    if (!rc && !o.json)
        printf("\nfloor: max(weight bytes / read bandwidth, flops / instruction peak) at the "
               "same thread count; effic = floor / ms; bound: which term is the floor. hit: "
               "routed experts with at least one token (the median forward's); tok/hit: "
               "token rows per expert hit, the expert kernels' mean batch.\n");
    bench_floors_free(&f);
    for (size_t i = 0; i < res->n; i++)
        free(res->r[i].trace);
    free(res);
    return rc;
}
