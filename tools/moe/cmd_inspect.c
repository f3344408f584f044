/* cmd_inspect.c — `moe inspect`: a checkpoint's config, per-layer plan, tensors and kernels. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "commands.h"
#include "cli_util.h"
#include "create_stats.h"
#include "core/alloc.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/file.h"
#include "io/json_util.h"
#include "layer/layer_describe.h"
#include "model/model.h"
#include "model/model_handle.h"
#include "model/verify.h"
#include "select/select.h"

#define PROG "moe inspect"
/* Problems and warnings listed one by one; the grouped tensor view shows them all. */
#define MAX_PROBLEM_LINES 100

static void help(void)
{
    printf("usage: moe inspect [--tensors] [--pack [--threads N]] [--recipe R] [--ranks N]\n"
           "                   [--no-mmap] DIR\n"
           "       moe inspect [--no-mmap] FILE.safetensors\n"
           "\n"
           "DIR is a Hugging Face model folder: config.json and model.safetensors, or shards\n"
           "listed in model.safetensors.index.json. Prints the config summary, the per-layer\n"
           "plan (layer kind, routing method and every parameter, expert/shared/dense MLP\n"
           "shapes, formats and activations; identical consecutive layers are folded), the\n"
           "MoE tensors grouped per layer and role with dtype, shape and count, what\n"
           "moe_layer_create chooses for each layer on this machine (kernels and why, recipe,\n"
           "packed bytes, every resolved default; folded the same way), the conversion\n"
           "kernels libmoe selects for the formats present, and the problems found.\n"
           "A FILE lists its tensors and metadata only (--tensors, --pack and --recipe apply to\n"
           "a DIR: with a FILE they are usage errors).\n"
           "\n"
           "options:\n"
           "  --tensors   also list every tensor of the checkpoint, one per line\n"
           "  --pack      also create every layer, one at a time (default options), and print\n"
           "              what creation cost: time, packed bytes, packing GB/s and the peak\n"
           "              growth of resident memory against 1.15 x packed + 64 MB\n"
           "  --threads N packing threads for --pack (default: every core, as the library's\n"
           "              options->threads = 0; OMP_NUM_THREADS does not change it)\n"
           "  --recipe R  f32, bf16 or tile: the layers as created with options->experts_recipe\n"
           "              R (how bf16 and FP8 experts, and with tile MXFP4 ones, meet the\n"
           "              activations; default f32)\n"
           "  --ranks N   the layers as placed over N ranks (moe_layer_create_ep, contiguous\n"
           "              ranges: docs/parallel.md), shown as rank 0 creates its part: each\n"
           "              rank's experts and packed bytes\n"
           "  --no-mmap   read the files instead of mapping them\n"
           "  --help      this text\n"
           "\n"
           "Exit status: 0 the checkpoint matches its config; 1 a malformed file or config\n"
           "(one line on stderr), or missing tensors / wrong dtypes / wrong shapes (the whole\n"
           "report, then one summary line on stderr); 2 usage error. Tensors in a layer's MoE\n"
           "namespace that the config does not explain are warnings.\n");
}

typedef struct inspect_args {
    const char *path;
    bool tensors;
    bool pack;
    bool no_mmap;
    int64_t threads;           /* --pack's options->threads; 0: the library's default */
    moe_experts_recipe recipe; /* options->experts_recipe; DEFAULT when not given */
    int64_t ranks;             /* --ranks: placed over this many ranks; 0: not placed */
} inspect_args;

/* Returns 0 to go on, 2 on a usage error, -1 after --help. */
static int parse_args(inspect_args *o, int argc, char **argv)
{
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    memset(o, 0, sizeof *o);
    const char *threads = NULL, *recipe = NULL, *ranks = NULL;
    for (const char *arg; (arg = cli_peek(&a));) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) return -1;
        if (cli_option(&a, "--threads", &threads)) {
            if (!threads) return 2;
        } else if (cli_option(&a, "--ranks", &ranks)) {
            if (!ranks || !cli_int(&a, "--ranks", ranks, 1, 65536, &o->ranks)) return 2;
        } else if (cli_option(&a, "--recipe", &recipe)) {
            if (!recipe || !cli_recipe(&a, recipe, &o->recipe)) return 2;
        } else if (cli_flag(&a, "--tensors")) {
            o->tensors = true;
        } else if (cli_flag(&a, "--pack")) {
            o->pack = true;
        } else if (cli_flag(&a, "--no-mmap")) {
            o->no_mmap = true;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return cli_usage_error(&a, "unknown option '%s' (moe inspect --help)", arg);
        } else if (o->path) {
            return cli_usage_error(&a, "one DIR or FILE only ('%s' and '%s')", o->path, arg);
        } else {
            o->path = arg;
            a.i++;
        }
    }
    if (!o->path) return cli_usage_error(&a, "DIR or FILE is required (moe inspect --help)");
    if (threads && !o->pack) return cli_usage_error(&a, "--threads needs --pack");
    if (threads && !cli_int(&a, "--threads", threads, 1, 4096, &o->threads)) return 2;
    return 0;
}

/* ---- Small formatting helpers -------------------------------------------------------- */

static void print_shape(FILE *f, int ndim, const int64_t *shape)
{
    fputc('[', f);
    for (int d = 0; d < ndim; d++)
        fprintf(f, "%s%" PRId64, d ? ", " : "", shape[d]);
    fputc(']', f);
}

static void print_dtype_mask(FILE *f, uint32_t mask)
{
    bool first = true;
    for (int d = 1; d < MOE_DTYPE_COUNT_; d++)
        if (mask & (1u << d)) {
            fprintf(f, "%s%s", first ? "" : "|", moe_dtype_name((moe_dtype)d));
            first = false;
        }
}

static const char *yes_no(bool b) { return b ? "yes" : "no"; }

/* "layer 3" or "layers 3-60". */
static void print_layer_range(FILE *f, int lo, int hi)
{
    if (lo == hi)
        fprintf(f, "layer %d", lo);
    else
        fprintf(f, "layers %d-%d", lo, hi);
}

/* ---- Single file --------------------------------------------------------------------- */

/* The __metadata__ object of an already validated file, read again through the same bounded
 * JSON parse as the reader's: the safetensors reader looks metadata up by key only. */
static void print_file_metadata(const char *path)
{
    int fd;
    uint64_t size, n = 0;
    unsigned char len8[8];
    if (moe_file_open_read(path, &fd, &size) != MOE_OK) return;
    if (size >= 8 && moe_file_pread(fd, len8, 8, 0, path) == MOE_OK)
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len8[i];
    char *hdr = n > 0 && n <= MOE_ST_MAX_HEADER && n <= size - 8 ? moe_malloc((size_t)n) : NULL;
    json_t *root = NULL;
    if (hdr && moe_file_pread(fd, hdr, (size_t)n, 8, path) == MOE_OK)
        (void)moe_json_parse(hdr, (size_t)n, path, "header", &root);
    close(fd);
    moe_free(hdr);
    json_t *meta = json_object_get(root, "__metadata__");
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) printf("metadata     %s = %s\n", key, json_string_value(v));
    json_decref(root);
}

static void print_tensor_line(const moe_tensor *t, bool with_file)
{
    printf("  %-60s %-8s ", t->name, moe_dtype_name(t->dtype));
    print_shape(stdout, t->ndim, t->shape);
    if (with_file) {
        const char *base = strrchr(t->file, '/');
        printf("  %s", base ? base + 1 : t->file);
    }
    putchar('\n');
}

static uint64_t total_bytes(const moe_ckpt *ck)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < moe_ckpt_count(ck); i++)
        sum += moe_ckpt_tensor(ck, i)->nbytes;
    return sum;
}

/* A file that is plainly something else (JSON such as config.json, a .npy array, text), whose
 * first 8 bytes as a safetensors header length would claim more than the file holds: one line
 * saying what it looks like and what is wanted, rather than the reader's "header length of
 * 7e18 bytes". Anything else goes to the safetensors reader, which names what is wrong.
 * Returns 0 to go on. */
static int refuse_other_file(const char *path)
{
    unsigned char head[8] = {0};
    int fd;
    uint64_t size;
    if (moe_file_open_read(path, &fd, &size) != MOE_OK) return 0; /* the reader names the error */
    const size_t got = size < sizeof head ? (size_t)size : sizeof head;
    const bool read = moe_file_pread(fd, head, got, 0, path) == MOE_OK;
    close(fd);
    if (!read) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | head[i];
    if (got < 8 || n <= size - 8) return 0;
    size_t first = 0, text = 0;
    while (first < got && head[first] && strchr(" \t\r\n", head[first]))
        first++;
    for (size_t i = 0; i < got; i++)
        text += (head[i] >= 0x20 && head[i] < 0x7F) || (head[i] && strchr("\t\r\n", head[i]));
    const char *base = strrchr(path, '/');
    const int dir_len = base ? (int)(base - path) : 1;
    const char *dir = base ? path : ".";
    if (first < got && (head[first] == '{' || head[first] == '['))
        return cli_fail(PROG, 1,
                        "%s looks like JSON, not a safetensors file: give the model folder "
                        "(moe inspect %.*s) or one of its .safetensors files",
                        path, dir_len, dir);
    const char *what = !memcmp(head, "\x93NUMPY", 6) ? "is a NumPy .npy array"
                       : text == got                 ? "looks like text"
                                                     : NULL;
    if (!what) return 0;
    return cli_fail(PROG, 1,
                    "%s %s, not a safetensors file: give a model folder or a .safetensors file",
                    path, what);
}

static int inspect_file(const inspect_args *o)
{
    if (refuse_other_file(o->path)) return 1;
    moe_st_options opt = {.no_mmap = o->no_mmap};
    moe_ckpt *ck = NULL;
    if (moe_ckpt_open_file(o->path, &opt, &ck) != MOE_OK) {
        cli_print_error(PROG, moe_last_error());
        return 1;
    }
    printf("file         %s\n", o->path);
    printf("tensors      %zu, %" PRIu64 " bytes of data\n", moe_ckpt_count(ck), total_bytes(ck));
    print_file_metadata(o->path);
    putchar('\n');
    for (size_t i = 0; i < moe_ckpt_count(ck); i++)
        print_tensor_line(moe_ckpt_tensor(ck, i), false);
    moe_ckpt_close(ck);
    return 0;
}

/* ---- Config summary and plan --------------------------------------------------------- */

static const char *format_detail(const moe_mlp_desc *m)
{
    switch (m->format) {
    case MOE_WFMT_BF16: return "bf16";
    case MOE_WFMT_FP8_BLOCK:
        return m->scale_dtype == MOE_DTYPE_F8_E8M0 ? "f8_e4m3, f8_e8m0 scales"
                                                   : "f8_e4m3, f32 scales";
    case MOE_WFMT_MXFP4: return "e2m1 pairs, f8_e8m0 scales";
    case MOE_WFMT_F32: return "f32";
    case MOE_WFMT_F16: return "f16, widened to f32 at packing";
    case MOE_WFMT_INT4_GROUP: return "symmetric int4 in int32 words, bf16 scales";
    }
    return "?";
}

static void print_mlp(FILE *f, const moe_mlp_desc *m)
{
    fprintf(f, "hidden %" PRId64 ", intermediate %" PRId64 ", %s (%s", m->hidden, m->intermediate,
            moe_weight_format_name(m->format), format_detail(m));
    if (m->format == MOE_WFMT_FP8_BLOCK || m->format == MOE_WFMT_MXFP4 ||
        m->format == MOE_WFMT_INT4_GROUP)
        fprintf(f, " per %dx%d block", m->block_out, m->block_in);
    fprintf(f, "), %s", moe_activation_name(m->activation));
    if (m->activation == MOE_ACT_SILU_GLU_CLAMP) fprintf(f, " (limit %g)", m->swiglu_limit);
    if (m->activation == MOE_ACT_GPTOSS_GLU)
        fprintf(f, " (limit %g, alpha %g)", m->swiglu_limit, m->alpha);
    if (m->has_bias) fprintf(f, ", biases");
}

static void print_routing(FILE *f, const moe_model_desc *d, const moe_layer_desc *l)
{
    const moe_routing_desc *r = &l->routing;
    fprintf(f, "    routing   %s: scoring %s, top-%d of %d experts",
            moe_route_method_name(r->method), moe_score_func_name(r->score), r->top_k,
            r->n_experts);
    if (r->n_group > 1) fprintf(f, ", n_group %d, topk_group %d", r->n_group, r->topk_group);
    fprintf(f, ", correction bias %s, router bias %s, norm_topk_prob %s, routed_scaling_factor %g",
            yes_no(r->has_correction_bias), yes_no(r->has_router_bias),
            r->norm_topk_prob ? "true" : "false", (double)r->routed_scaling_factor);
    if (l->kind == MOE_LAYER_HASH)
        fprintf(f, ", hash table tid2eid [%" PRId64 ", %d]", d->vocab_size, r->top_k);
    fputc('\n', f);
}

/* One layer's plan without its "layer N:" head, so identical layers compare equal. */
static char *render_plan(const moe_model_desc *d, const moe_layer_desc *l)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, " %s\n", moe_layer_kind_name(l->kind));
    if (l->kind == MOE_LAYER_DENSE) {
        fprintf(f, "    mlp       ");
        print_mlp(f, &l->dense);
        fputc('\n', f);
    } else {
        print_routing(f, d, l);
        fprintf(f, "    experts   %d x ", l->routing.n_experts);
        print_mlp(f, &l->experts);
        fputc('\n', f);
        if (l->n_shared > 0) {
            fprintf(f, "    shared    %d expert%s as one MLP: ", l->n_shared,
                    l->n_shared > 1 ? "s" : "");
            print_mlp(f, &l->shared);
            fputc('\n', f);
        }
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Prints runs of consecutive layers with the same text once, as "layers A-B:". */
typedef struct folder {
    char *text;
    int lo, hi;
} folder;

static void fold_flush(folder *fo)
{
    if (!fo->text) return;
    fputs("  ", stdout);
    print_layer_range(stdout, fo->lo, fo->hi);
    fputc(':', stdout);
    fputs(fo->text, stdout);
    free(fo->text);
    fo->text = NULL;
}

/* Takes ownership of TEXT. */
static void fold_add(folder *fo, int layer, char *text)
{
    if (fo->text && text && !strcmp(fo->text, text) && fo->hi == layer - 1) {
        fo->hi = layer;
        free(text);
        return;
    }
    fold_flush(fo);
    fo->text = text;
    fo->lo = fo->hi = layer;
}

static int print_plan(const moe_model_desc *d)
{
    folder fo = {0};
    printf("\nplan\n");
    for (int i = 0; i < d->n_layers; i++) {
        char *t = render_plan(d, &d->layers[i]);
        if (!t) {
            fold_flush(&fo);
            moe_error(MOE_ENOMEM, "out of memory rendering layer %d", i);
            return 1;
        }
        fold_add(&fo, i, t);
    }
    fold_flush(&fo);
    return 0;
}

static void print_summary(const char *dir, const moe_ckpt *ck, const moe_model_desc *d)
{
    int kinds[3] = {0, 0, 0};
    const moe_layer_desc *moe = NULL, *dense = NULL;
    for (int i = 0; i < d->n_layers; i++) {
        const moe_layer_desc *l = &d->layers[i];
        if ((unsigned)l->kind < 3) kinds[l->kind]++;
        if (l->kind == MOE_LAYER_DENSE && !dense) dense = l;
        if (l->kind == MOE_LAYER_MOE && !moe) moe = l;
    }
    if (!moe)
        for (int i = 0; i < d->n_layers && !moe; i++)
            if (d->layers[i].kind != MOE_LAYER_DENSE) moe = &d->layers[i];
    size_t shards = moe_ckpt_shard_count(ck);
    printf("checkpoint   %s: %zu file%s, %zu tensors, %" PRIu64 " bytes of data\n", dir, shards,
           shards == 1 ? "" : "s", moe_ckpt_count(ck), total_bytes(ck));
    printf("family       %s\n", d->model_type);
    printf("layers       %d: %d dense, %d moe, %d hash\n", d->n_layers, kinds[MOE_LAYER_DENSE],
           kinds[MOE_LAYER_MOE], kinds[MOE_LAYER_HASH]);
    printf("hidden       %" PRId64 "\n", d->hidden);
    printf("vocab        %" PRId64 "\n", d->vocab_size);
    printf("router       %s\n", moe_dtype_name(d->router_dtype));
    if (moe) {
        const moe_routing_desc *r = &moe->routing;
        printf("experts      %d routed, top-%d, n_group %d, topk_group %d, %d shared\n",
               r->n_experts, r->top_k, r->n_group, r->topk_group, moe->n_shared);
    } else {
        printf("experts      none (every layer is dense)\n");
    }
    printf("formats     ");
    if (moe) printf(" routed %s", moe_weight_format_name(moe->experts.format));
    if (moe && moe->n_shared) printf(", shared %s", moe_weight_format_name(moe->shared.format));
    if (dense) printf("%s dense %s", moe ? "," : "", moe_weight_format_name(dense->dense.format));
    putchar('\n');
}

/* ---- Tensors, grouped per layer and role --------------------------------------------- */

/* Tensors of one layer that differ only in their expert number, and agree in what was
 * found (state, dtype, shape), print as one line with the expert ids as ranges. */
typedef struct tgroup {
    char key[200]; /* the name below "layers.L.", with "*" for the expert number */
    moe_verify_kind kind;
    moe_dtype dtype; /* found, or expected when missing */
    int ndim;
    int64_t shape[MOE_MAX_DIMS];
    uint32_t want_mask; /* for BAD_DTYPE */
    int want_ndim;      /* for BAD_SHAPE */
    int64_t want_shape[4];
    int *experts;
    size_t n, cap;
} tgroup;

typedef struct walk_ctx {
    int layer; /* the layer being collected, -1 before the first */
    tgroup *groups;
    size_t ngroups, capgroups;
    folder fold;
    char **problems; /* the first MAX_PROBLEM_LINES problem messages */
    size_t nproblems, capproblems;
    char **warnings; /* the first MAX_PROBLEM_LINES unexpected tensors */
    size_t nwarnings, capwarnings;
    bool failed; /* out of memory: stop */
} walk_ctx;

/* The part of NAME after "layers.<layer>.", so layers compare equal; the whole name if the
 * name has no such part. */
static const char *below_layer(const char *name, int layer)
{
    char pat[32];
    snprintf(pat, sizeof pat, "layers.%d.", layer);
    const char *p = strstr(name, pat);
    return p ? p + strlen(pat) : name;
}

/* Copies REL into KEY with the expert number in "experts.<n>." replaced by "*", and returns
 * that number (-1 when there is none). Unexpected tensors have no spec, so the number is
 * read from the name rather than from a spec. */
static int group_key(char *key, size_t cap, const char *rel)
{
    for (const char *p = strstr(rel, "experts."); p; p = strstr(p + 1, "experts.")) {
        const char *d = p + strlen("experts."), *e = d;
        long id = 0;
        while (*e >= '0' && *e <= '9' && e - d < 9)
            id = id * 10 + (*e++ - '0');
        if (e == d || *e != '.') continue;
        snprintf(key, cap, "%.*sexperts.*%s", (int)(p - rel), rel, e);
        return (int)id;
    }
    snprintf(key, cap, "%s", rel);
    return -1;
}

static bool same_group(const tgroup *g, const char *key, moe_verify_kind kind, moe_dtype dtype,
                       int ndim, const int64_t *shape)
{
    if (g->kind != kind || g->dtype != dtype || g->ndim != ndim || strcmp(g->key, key))
        return false;
    for (int d = 0; d < ndim; d++)
        if (g->shape[d] != shape[d]) return false;
    return true;
}

static tgroup *find_or_add_group(walk_ctx *c, const char *key, moe_verify_kind kind,
                                 moe_dtype dtype, int ndim, const int64_t *shape)
{
    for (size_t i = 0; i < c->ngroups; i++)
        if (same_group(&c->groups[i], key, kind, dtype, ndim, shape)) return &c->groups[i];
    if (c->ngroups == c->capgroups) {
        size_t cap = c->capgroups ? c->capgroups * 2 : 16;
        tgroup *g = moe_realloc(c->groups, cap * sizeof *g);
        if (!g) return NULL;
        c->groups = g;
        c->capgroups = cap;
    }
    tgroup *g = &c->groups[c->ngroups++];
    memset(g, 0, sizeof *g);
    snprintf(g->key, sizeof g->key, "%s", key);
    g->kind = kind;
    g->dtype = dtype;
    g->ndim = ndim > MOE_MAX_DIMS ? MOE_MAX_DIMS : ndim;
    memcpy(g->shape, shape, (size_t)g->ndim * sizeof *shape);
    return g;
}

static bool group_add_expert(tgroup *g, int expert)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        int *e = moe_realloc(g->experts, cap * sizeof *e);
        if (!e) return false;
        g->experts = e;
        g->cap = cap;
    }
    g->experts[g->n++] = expert;
    return true;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* "{0..255}", "{0..2,4..7}" or "5": the expert ids of a group as ranges. */
static void print_expert_ranges(FILE *f, tgroup *g)
{
    qsort(g->experts, g->n, sizeof *g->experts, cmp_int);
    if (g->n == 1) {
        fprintf(f, "%d", g->experts[0]);
        return;
    }
    fputc('{', f);
    for (size_t i = 0; i < g->n;) {
        size_t j = i;
        while (j + 1 < g->n && g->experts[j + 1] == g->experts[j] + 1)
            j++;
        fprintf(f, "%s%d", i ? "," : "", g->experts[i]);
        if (j > i) fprintf(f, "..%d", g->experts[j]);
        i = j + 1;
    }
    fputc('}', f);
}

static bool print_group(FILE *f, tgroup *g)
{
    char *name = NULL;
    size_t len = 0;
    const char *star = strstr(g->key, "experts.*.");
    FILE *nf = open_memstream(&name, &len);
    if (!nf) return false;
    if (star && g->n > 0) {
        fprintf(nf, "%.*sexperts.", (int)(star - g->key), g->key);
        print_expert_ranges(nf, g);
        fprintf(nf, ".%s", star + strlen("experts.*."));
    } else {
        fputs(g->key, nf);
    }
    if (fclose(nf) != 0) {
        free(name);
        return false;
    }
    fprintf(f, "    %-52s %-8s ", name, moe_dtype_name(g->dtype));
    free(name);
    print_shape(f, g->ndim, g->shape);
    if (g->n > 1) fprintf(f, " ×%zu", g->n);
    switch (g->kind) {
    case MOE_VERIFY_MISSING: fprintf(f, "  MISSING"); break;
    case MOE_VERIFY_ABSENT: fprintf(f, "  (optional, absent)"); break;
    case MOE_VERIFY_UNEXPECTED: fprintf(f, "  UNEXPECTED"); break;
    case MOE_VERIFY_BAD_DTYPE:
        fprintf(f, "  BAD DTYPE, accepted ");
        print_dtype_mask(f, g->want_mask);
        break;
    case MOE_VERIFY_BAD_SHAPE:
        fprintf(f, "  BAD SHAPE, expected ");
        print_shape(f, g->want_ndim, g->want_shape);
        break;
    case MOE_VERIFY_FOUND: break;
    }
    fputc('\n', f);
    return true;
}

static void clear_groups(walk_ctx *c)
{
    for (size_t i = 0; i < c->ngroups; i++)
        moe_free(c->groups[i].experts);
    c->ngroups = 0;
}

/* Renders the collected layer and hands it to the folder. */
static void flush_layer(walk_ctx *c)
{
    if (c->layer < 0) return;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        c->failed = true;
        clear_groups(c);
        return;
    }
    fputc('\n', f);
    for (size_t i = 0; i < c->ngroups; i++)
        if (!print_group(f, &c->groups[i])) c->failed = true;
    if (fclose(f) != 0) {
        free(buf);
        buf = NULL;
        c->failed = true;
    }
    if (buf) fold_add(&c->fold, c->layer, buf);
    clear_groups(c);
}

static bool push_line(char ***list, size_t *n, size_t *cap, const char *line)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **p = moe_realloc(*list, nc * sizeof *p);
        if (!p) return false;
        *list = p;
        *cap = nc;
    }
    char *s = moe_strdup(line);
    if (!s) return false;
    (*list)[(*n)++] = s;
    return true;
}

static moe_status on_item(void *ctx, const moe_verify_item *it)
{
    walk_ctx *c = ctx;
    if (it->layer != c->layer) {
        flush_layer(c);
        c->layer = it->layer;
    }
    const moe_tensor_spec *s = it->spec;
    const moe_tensor *t = it->tensor;
    const char *name = s ? s->name : t->name;
    char key[200];
    int expert = group_key(key, sizeof key, below_layer(name, it->layer));
    /* Show what the checkpoint holds; what the config expects where it holds nothing. */
    moe_dtype dtype = t ? t->dtype : s->dtype;
    int ndim = t ? t->ndim : s->ndim;
    const int64_t *shape = t ? t->shape : s->shape;
    tgroup *g = find_or_add_group(c, key, it->kind, dtype, ndim, shape);
    bool ok = g && group_add_expert(g, expert);
    if (ok && s) {
        g->want_mask = s->dtype_mask;
        g->want_ndim = s->ndim;
        memcpy(g->want_shape, s->shape, sizeof g->want_shape);
    }
    if (ok && it->status != MOE_OK && c->nproblems < MAX_PROBLEM_LINES)
        ok = push_line(&c->problems, &c->nproblems, &c->capproblems, it->message);
    if (ok && it->kind == MOE_VERIFY_UNEXPECTED && c->nwarnings < MAX_PROBLEM_LINES)
        ok = push_line(&c->warnings, &c->nwarnings, &c->capwarnings, it->message);
    if (!ok) {
        c->failed = true;
        return moe_error(MOE_ENOMEM, "out of memory listing the tensors");
    }
    return MOE_OK;
}

static void walk_ctx_free(walk_ctx *c)
{
    clear_groups(c);
    moe_free(c->groups);
    for (size_t i = 0; i < c->nproblems; i++)
        moe_free(c->problems[i]);
    for (size_t i = 0; i < c->nwarnings; i++)
        moe_free(c->warnings[i]);
    moe_free(c->problems);
    moe_free(c->warnings);
    free(c->fold.text);
}

/* ---- Kernels -------------------------------------------------------------------------- */

static void add_use(char *buf, size_t cap, const char *what)
{
    if (strstr(buf, what)) return;
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", what);
}

typedef char use_list[MOE_KERNEL_FAMILY_COUNT_][160]; /* per conversion: what needs it */

static void mlp_use(use_list use, const moe_mlp_desc *m, const char *what)
{
    switch (m->format) {
    case MOE_WFMT_BF16: add_use(use[MOE_KERNEL_FAMILY_CVT_BF16_F32], 160, what); break;
    case MOE_WFMT_FP8_BLOCK: add_use(use[MOE_KERNEL_FAMILY_CVT_E4M3_F32], 160, what); break;
    case MOE_WFMT_MXFP4: add_use(use[MOE_KERNEL_FAMILY_CVT_MXFP4_F32], 160, what); break;
    case MOE_WFMT_F32:
    case MOE_WFMT_F16:        /* no conversion kernel: f16 widens at packing */
    case MOE_WFMT_INT4_GROUP: /* nor INT4: packing converts its scales, the kernels the codes */
        break;
    }
    if (m->has_bias) add_use(use[MOE_KERNEL_FAMILY_CVT_BF16_F32], 160, "expert biases");
}

/* Which conversion each format present needs, what holds it, and the kernel selection
 * (a pure function of the allowed features) with its reason. */
static int print_kernels(const moe_cpu_info *info, const moe_model_desc *d)
{
    use_list use;
    memset(use, 0, sizeof use);
    int router = d->router_dtype == MOE_DTYPE_BF16  ? MOE_KERNEL_FAMILY_CVT_BF16_F32
                 : d->router_dtype == MOE_DTYPE_F16 ? MOE_KERNEL_FAMILY_CVT_F16_F32
                                                    : -1; /* f32 needs no conversion */
    for (int i = 0; i < d->n_layers; i++) {
        const moe_layer_desc *l = &d->layers[i];
        if (l->kind == MOE_LAYER_DENSE) {
            mlp_use(use, &l->dense, "dense MLP");
            continue;
        }
        if (router >= 0) add_use(use[router], 160, "router weights");
        mlp_use(use, &l->experts, "routed experts");
        if (l->n_shared > 0) mlp_use(use, &l->shared, "shared experts");
    }
    printf("\nkernels (MOE_ISA cap %s%s)\n", moe_isa_level_name(info->cap),
           info->cap_from_env ? ", from the environment" : "");
    for (int f = 0; f < MOE_KERNEL_FAMILY_COUNT_; f++) {
        if (!use[f][0]) continue;
        moe_cvt_problem problem = {.n = 0};
        moe_kernel_choice choice;
        if (moe_select_cvt((moe_kernel_family)f, &info->allowed, &problem, &choice) != MOE_OK)
            return 1;
        printf("  %-14s for %s\n    %s\n", moe_kernel_family_name((moe_kernel_family)f), use[f],
               choice.reason);
    }
    return 0;
}

/* ---- What moe_layer_create chooses -------------------------------------------------- */

/* A describe failure without its leading "layer N" (and "(family)"), so identical failures
 * of consecutive layers fold: "layer 0 (gpt_oss): routed experts ..." -> "routed experts ...". */
static const char *without_layer(const char *msg, int layer)
{
    char head[32];
    int n = snprintf(head, sizeof head, "layer %d", layer);
    if (strncmp(msg, head, (size_t)n) != 0) return msg;
    const char *p = msg + n;
    if (p[0] == ' ' && p[1] == '(') {
        const char *close = strchr(p, ')');
        if (close) p = close + 1;
    }
    if (p[0] == ':') p++;
    while (*p == ' ')
        p++;
    return *p ? p : msg;
}

/* One layer's description without its "layer N (...)" head line, indented under the fold
 * head, so identical consecutive layers compare equal. */
static char *render_created(const moe_model *model, const moe_model_desc *d, int layer,
                            const moe_layer_options *lo, int ranks)
{
    char *desc = NULL, *buf = NULL;
    size_t len = 0;
    const moe_ep_placement pl = {sizeof pl, 0, ranks, NULL, 0};
    const moe_status st = ranks > 0 ? moe_layer_describe_ep(model, layer, lo, &pl, &desc)
                                    : moe_layer_describe(model, layer, lo, &desc);
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        moe_free(desc);
        return NULL;
    }
    fprintf(f, " %s\n", moe_layer_kind_name(d->layers[layer].kind));
    if (st != MOE_OK) {
        fprintf(f, "    not runnable here: %s\n", without_layer(moe_last_error(), layer));
    } else {
        const char *body = desc;
        if (!strncmp(body, "layer ", 6) && strchr(body, '\n')) body = strchr(body, '\n') + 1;
        for (const char *line = body; *line;) {
            const char *end = strchr(line, '\n');
            const int n = end ? (int)(end - line) : (int)strlen(line);
            fprintf(f, "  %.*s\n", n, line);
            line += n + (end ? 1 : 0);
        }
    }
    moe_free(desc);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* " but experts_recipe = R" for --recipe R, "" without it. */
static const char *recipe_text(const inspect_args *o)
{
    switch (o->recipe) {
    case MOE_EXPERTS_RECIPE_F32: return " but experts_recipe = f32";
    case MOE_EXPERTS_RECIPE_BF16: return " but experts_recipe = bf16";
    case MOE_EXPERTS_RECIPE_TILE: return " but experts_recipe = tile";
    default: return "";
    }
}

/* Each layer as moe_layer_create would make it here (moe_layer_describe: the same plan,
 * nothing packed). Only for a checkpoint without problems: describe checks the tensors
 * again and would repeat every problem, layer by layer. */
static int print_created(const inspect_args *o, const moe_model_desc *d, size_t problems)
{
    printf("\nlayers (moe_layer_create on this machine, default options%s: kernels and why, "
           "recipe, packed bytes, resolved defaults)\n",
           recipe_text(o));
    if (problems) {
        printf("  not described: the checkpoint has problems (below)\n");
        return 0;
    }
    moe_open_options opt = {.size = sizeof opt, .no_mmap = o->no_mmap};
    moe_model *model = NULL;
    if (moe_model_open_ex(o->path, &opt, MOE_OPEN_SKIP_VERIFY, &model) != MOE_OK) return 1;
    folder fo = {0};
    const moe_layer_options lo = {.size = sizeof lo, .experts_recipe = o->recipe};
    for (int i = 0; i < d->n_layers; i++) {
        char *t = render_created(model, d, i, &lo, (int)o->ranks);
        if (!t) {
            fold_flush(&fo);
            moe_model_close(model);
            moe_error(MOE_ENOMEM, "out of memory describing layer %d", i);
            return 1;
        }
        fold_add(&fo, i, t);
    }
    fold_flush(&fo);
    moe_model_close(model);
    return 0;
}

/* --pack: every layer created for real, one at a time, and what that cost. */
static int print_packing(const inspect_args *o, const moe_model_desc *d, size_t problems)
{
    printf("\npacking (moe_layer_create of each layer, one at a time, default options%s",
           recipe_text(o));
    if (o->threads) printf("%s threads = %d", o->recipe ? " and" : " but", (int)o->threads);
    printf(")\n");
    if (problems) {
        printf("  not done: the checkpoint has problems (below)\n");
        return 0;
    }
    moe_open_options opt = {.size = sizeof opt, .no_mmap = o->no_mmap};
    moe_model *model = NULL;
    if (moe_model_open_ex(o->path, &opt, MOE_OPEN_SKIP_VERIFY, &model) != MOE_OK) return 1;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer *layer = NULL;
        create_stats cs;
        const moe_layer_options lo = {
            .size = sizeof lo, .threads = (int)o->threads, .experts_recipe = o->recipe};
        if (create_measured(model, i, &lo, NULL, &layer, &cs) != MOE_OK) {
            printf("  layer %d: not created: %s\n", i, without_layer(moe_last_error(), i));
            continue;
        }
        moe_layer_destroy(layer);
        printf("  layer %d: ", i);
        create_stats_print(stdout, &cs);
        putchar('\n');
    }
    moe_model_close(model);
    return 0;
}

/* ---- The command --------------------------------------------------------------------- */

static int fail(void)
{
    cli_print_error(PROG, moe_last_error());
    return 1;
}

static void print_all_tensors(const moe_ckpt *ck)
{
    printf("\nall tensors\n");
    for (size_t i = 0; i < moe_ckpt_count(ck); i++)
        print_tensor_line(moe_ckpt_tensor(ck, i), true);
}

/* The problems one by one (the first MAX_PROBLEM_LINES), the warnings, and the verdict. */
static int print_verdict(const char *dir, const walk_ctx *c, const moe_verify_summary *sum,
                         size_t n_tensors)
{
    size_t problems = sum->missing + sum->bad_dtype + sum->bad_shape;
    size_t ours = sum->found + sum->bad_dtype + sum->bad_shape + sum->unexpected;
    if (c->nwarnings) {
        printf("\nwarnings\n");
        for (size_t i = 0; i < c->nwarnings; i++)
            printf("  %s\n", c->warnings[i]);
        if (sum->unexpected > c->nwarnings)
            printf("  ... and %zu more (the tensors above show them all)\n",
                   sum->unexpected - c->nwarnings);
    }
    if (problems) {
        printf("\nproblems\n");
        for (size_t i = 0; i < c->nproblems; i++)
            printf("  %s\n", c->problems[i]);
        if (problems > c->nproblems)
            printf("  ... and %zu more (the tensors above show them all)\n",
                   problems - c->nproblems);
    }
    printf("\nresult       %s: %zu of %zu expected tensors found, %zu missing, %zu bad dtype, "
           "%zu bad shape, %zu unexpected; %zu other tensors (attention, norms, ...) not "
           "checked\n",
           problems ? "FAILED" : "OK", sum->found, sum->specs - sum->absent, sum->missing,
           sum->bad_dtype, sum->bad_shape, sum->unexpected,
           n_tensors > ours ? n_tensors - ours : 0);
    if (!problems) return 0;
    return cli_fail(PROG, 1,
                    "%s: %zu problem%s (%zu missing, %zu bad dtype, %zu bad shape); first: %s", dir,
                    problems, problems == 1 ? "" : "s", sum->missing, sum->bad_dtype,
                    sum->bad_shape, c->nproblems ? c->problems[0] : "?");
}

static int inspect_dir(const inspect_args *o)
{
    moe_st_options opt = {.no_mmap = o->no_mmap};
    moe_ckpt *ck = NULL;
    moe_model_desc d;
    bool have_desc = false;
    walk_ctx c = {.layer = -1};
    int rc = 1;
    size_t n = strlen(o->path) + sizeof "/config.json";
    char *cfg = moe_malloc(n);
    if (!cfg) {
        moe_error(MOE_ENOMEM, "out of memory");
        rc = fail();
        goto done;
    }
    snprintf(cfg, n, "%s/config.json", o->path);
    /* MOE_ISA first, so a bad value fails before any output. Then the tensors: a malformed
     * shard is the more basic fault, and a folder with an index but no config still gets
     * the index's own message. */
    moe_cpu_info cpu;
    if (moe_cpu_query(&cpu) != MOE_OK || moe_ckpt_open(o->path, &opt, &ck) != MOE_OK ||
        moe_model_desc_load(cfg, &d) != MOE_OK) {
        rc = fail();
        goto done;
    }
    have_desc = true;
    if (moe_model_resolve_formats(&d, ck) != MOE_OK) { /* as moe_model_open does */
        rc = fail();
        goto done;
    }
    print_summary(o->path, ck, &d);
    if (print_plan(&d)) {
        rc = fail();
        goto done;
    }
    printf("\ntensors (MoE blocks)\n");
    moe_verify_summary sum;
    memset(&sum, 0, sizeof sum);
    moe_status st = moe_model_verify_each(&d, ck, on_item, &c, &sum);
    flush_layer(&c);
    fold_flush(&c.fold);
    size_t problems = sum.missing + sum.bad_dtype + sum.bad_shape;
    if (c.failed || (st != MOE_OK && problems == 0)) {
        rc = fail();
        goto done;
    }
    if (o->tensors) print_all_tensors(ck);
    if (print_created(o, &d, problems) || (o->pack && print_packing(o, &d, problems)) ||
        print_kernels(&cpu, &d)) {
        rc = fail();
        goto done;
    }
    rc = print_verdict(o->path, &c, &sum, moe_ckpt_count(ck));
done:
    walk_ctx_free(&c);
    if (have_desc) moe_model_desc_free(&d);
    moe_ckpt_close(ck);
    moe_free(cfg);
    return rc;
}

int moe_cmd_inspect(int argc, char **argv)
{
    inspect_args o;
    int rc = parse_args(&o, argc, argv);
    if (rc < 0) {
        help();
        return 0;
    }
    if (rc) return rc;
    struct stat sb;
    if (stat(o.path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        /* A file has no config, layers or packing: what only a folder has is a usage error. */
        const char *folder_only = o.tensors ? "--tensors" : o.pack ? "--pack" : NULL;
        if (!folder_only && o.recipe != MOE_EXPERTS_RECIPE_DEFAULT) folder_only = "--recipe";
        if (!folder_only && o.ranks) folder_only = "--ranks";
        if (folder_only)
            return cli_fail(PROG, 2,
                            "%s applies to a model folder; %s is a file (a file's tensors are "
                            "listed without it)",
                            folder_only, o.path);
        return inspect_file(&o);
    }
    return inspect_dir(&o);
}
