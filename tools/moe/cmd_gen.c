/* cmd_gen.c — `moe gen`: write a synthetic checkpoint in a family's real names, dtypes and config.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "commands.h"
#include "cli_util.h"
#include "gen_config.h"
#include "gen_values.h"
#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "io/st_writer.h"
#include "model/model.h"

#define PROG "moe gen"
#define MAX_SHARDS 99999 /* HF shard names have five digits */
#define MAX_OMIT 64

static void help(void)
{
    printf(
        "usage: moe gen --family F --out DIR [options]\n"
        "\n"
        "Writes a synthetic checkpoint into DIR: config.json with the family's real Hugging Face\n"
        "fields, and the MoE tensors of every layer in the family's real names, dtypes and\n"
        "shapes (model.safetensors, or N shards with model.safetensors.index.json). Contents\n"
        "are deterministic from the seed, with realistic magnitudes; files are streamed, so a\n"
        "multi-GB checkpoint needs little memory. Nothing is left in DIR when gen fails.\n"
        "\n"
        "required:\n"
        "  --family F              deepseek_v2, deepseek_v3, kimi_k2, deepseek_v4, qwen3_moe,\n"
        "                          mixtral, gpt_oss, deepseek_v32, glm4_moe, glm_moe_dsa,\n"
        "                          glm4_moe_lite, minimax_m2, kimi_k25, qwen3_next,\n"
        "                          qwen3_5_moe, ernie4_5_moe or llama4 (top-k 1, one shared\n"
        "                          expert, bf16 only)\n"
        "  --out DIR               created if missing (parents too)\n"
        "\n"
        "shape (defaults in brackets):\n"
        "  --layers N              decoder layers, 1..4096 [2]\n"
        "  --hidden H              hidden size, 1..1048576 [256]\n"
        "  --experts E             routed experts, 1..4096 [8]\n"
        "  --stored-experts N      only routed experts 0..N-1 get random weights; the others'\n"
        "                          tensors are all zeros, written as holes (no disk space where\n"
        "                          the file system has sparse files): how moe bench keeps a\n"
        "                          model's real expert count and router on a small disk [E]\n"
        "  --topk K                experts per token, 1..E [2]\n"
        "  --intermediate I        each routed (and shared) expert's intermediate size [128]\n"
        "  --vocab V               vocab_size; rows of tid2eid on DeepSeek-V4 hash layers [2048]\n"
        "  --groups G              n_group (deepseek_v2/v3/v32: 4; kimi_k2/k25, glm*: 1) [see\n"
        "                          left]; the DeepSeek-style families below only\n"
        "  --topk-group TG         topk_group [G/2, at least 1]; deepseek_v2/v3/v32, kimi_k2,\n"
        "                          kimi_k25, glm4_moe, glm_moe_dsa, glm4_moe_lite only\n"
        "  --shared N              n_shared_experts, 0..64; those, deepseek_v4 and ernie4_5_moe\n"
        "                          (moe_num_shared_experts) only [1]; qwen3_next, qwen3_5_moe:\n"
        "                          shared_expert_intermediate_size = N x I, N >= 1\n"
        "  --first-dense N         first_k_dense_replace (dense first layers; glm4_moe_lite:\n"
        "                          mlp_layer_types; ernie4_5_moe: moe_layer_start_index); those\n"
        "                          only [1 if layers > 1, else 0]\n"
        "  --dense-intermediate D  the dense MLP's intermediate_size; those, qwen3_moe and\n"
        "                          qwen3_next only [4 x I]\n"
        "  --hash-layers N         num_hash_layers; deepseek_v4 only [1 if layers > 1, else 0]\n"
        "  --norm-min X            moe_norm_min, the floor of the renormalisation's divisor\n"
        "                          (w / max(sum, X)), finite and >= 0; ernie4_5_moe only [1e-12]\n"
        "\n"
        "formats:\n"
        "  --dtype bf16|fp8|mxfp4|int4  expert weights. deepseek_v2, qwen3_*, mixtral,\n"
        "                          ernie4_5_moe: bf16 [bf16]\n"
        "                          or fp8; deepseek_v3, kimi_k2: fp8 [fp8] or bf16; gpt_oss:\n"
        "                          mxfp4 [mxfp4] or bf16; deepseek_v4: mxfp4 (expert_dtype\n"
        "                          \"fp4\") [mxfp4] or fp8; deepseek_v32, glm_moe_dsa,\n"
        "                          minimax_m2: fp8 [fp8] or bf16; glm4_moe, glm4_moe_lite,\n"
        "                          kimi_k25: bf16 [bf16] or fp8. fp8 = E4M3 with 128x128 block\n"
        "                          scales.\n"
        "                          deepseek_v3, kimi_k2 also int4: routed experts in\n"
        "                          compressed-tensors pack-quantized symmetric int4, group 32,\n"
        "                          bf16 scales; shared experts and dense layers bf16 (ignored)\n"
        "  --torch-dtype T         bfloat16, float16 or float32: the router dtype [bfloat16]\n"
        "\n"
        "output:\n"
        "  --shards N              split the tensors into N files, 1..99999 [1]\n"
        "  --seed S                0..2^64-1 [1]\n"
        "  --force                 replace a checkpoint already in DIR\n"
        "  --omit NAME             leave tensor NAME out (repeatable; NAME must be one of the\n"
        "                          checkpoint's tensors): a broken checkpoint for tests\n"
        "  --help                  this text\n"
        "\n"
        "Prints one summary line. Exit status: 0 written, 1 failed (one line on stderr),\n"
        "2 usage error.\n");
}

/* ---- Options ------------------------------------------------------------------------- */

typedef struct int_opt {
    const char *name;
    int64_t min, max;
    int64_t value;
    bool given;
} int_opt;

enum {
    O_LAYERS,
    O_HIDDEN,
    O_EXPERTS,
    O_TOPK,
    O_INTERMEDIATE,
    O_VOCAB,
    O_GROUPS,
    O_TOPK_GROUP,
    O_SHARED,
    O_FIRST_DENSE,
    O_DENSE_INTERMEDIATE,
    O_HASH_LAYERS,
    O_SHARDS,
    O_STORED_EXPERTS,
    O_COUNT
};

typedef struct gen_request {
    int_opt num[O_COUNT];
    const char *family, *out, *dtype, *torch_dtype, *norm_min;
    uint64_t seed;
    bool force;
    const char *omit[MAX_OMIT];
    int n_omit;
    gen_options o; /* resolved */
    int64_t shards;
    int64_t stored_experts; /* routed experts with random weights; the rest are zeros */
} gen_request;

static void request_init(gen_request *r)
{
    static const int_opt defaults[O_COUNT] = {
        [O_LAYERS] = {"--layers", 1, 4096, 2, false},
        [O_HIDDEN] = {"--hidden", 1, 1 << 20, 256, false},
        [O_EXPERTS] = {"--experts", 1, 4096, 8, false},
        [O_TOPK] = {"--topk", 1, 4096, 2, false},
        [O_INTERMEDIATE] = {"--intermediate", 1, 1 << 20, 128, false},
        [O_VOCAB] = {"--vocab", 1, 1 << 24, 2048, false},
        [O_GROUPS] = {"--groups", 1, 4096, 0, false},
        [O_TOPK_GROUP] = {"--topk-group", 1, 4096, 0, false},
        [O_SHARED] = {"--shared", 0, 64, 1, false},
        [O_FIRST_DENSE] = {"--first-dense", 0, 4096, 0, false},
        [O_DENSE_INTERMEDIATE] = {"--dense-intermediate", 1, 1 << 20, 0, false},
        [O_HASH_LAYERS] = {"--hash-layers", 0, 4096, 0, false},
        [O_SHARDS] = {"--shards", 1, MAX_SHARDS, 1, false},
        [O_STORED_EXPERTS] = {"--stored-experts", 1, 4096, 0, false},
    };
    memset(r, 0, sizeof *r);
    memcpy(r->num, defaults, sizeof defaults);
    r->seed = 1;
}

/* Returns 0 to go on, 2 on a usage error, -1 after --help. */
static int parse_args(gen_request *r, int argc, char **argv)
{
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    while (!a.bad && cli_peek(&a)) {
        const char *v = NULL;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) return -1;
        if (cli_flag(&a, "--force")) {
            r->force = true;
            continue;
        }
        if (cli_option(&a, "--family", &r->family) || cli_option(&a, "--out", &r->out) ||
            cli_option(&a, "--dtype", &r->dtype) ||
            cli_option(&a, "--torch-dtype", &r->torch_dtype) ||
            cli_option(&a, "--norm-min", &r->norm_min))
            continue;
        if (cli_option(&a, "--omit", &v)) {
            if (v && r->n_omit == MAX_OMIT)
                return cli_usage_error(&a, "--omit: at most %d tensors", MAX_OMIT);
            if (v) r->omit[r->n_omit++] = v;
            continue;
        }
        if (cli_option(&a, "--seed", &v)) {
            if (v) cli_u64(&a, "--seed", v, &r->seed);
            continue;
        }
        bool matched = false;
        for (int k = 0; k < O_COUNT && !matched; k++) {
            int_opt *o = &r->num[k];
            if (!cli_option(&a, o->name, &v)) continue;
            matched = true;
            if (v && cli_int(&a, o->name, v, o->min, o->max, &o->value)) o->given = true;
        }
        if (!matched)
            return cli_usage_error(&a, "unknown argument '%s' (moe gen --help)", cli_peek(&a));
    }
    if (a.bad) return 2;
    if (!r->family) return cli_usage_error(&a, "--family is required (moe gen --help)");
    if (!r->out || !r->out[0]) return cli_usage_error(&a, "--out DIR is required");
    return 0;
}

/* A usage error: one line on stderr naming the option, exit status 2. */
#define usage(...) cli_fail(PROG, 2, __VA_ARGS__)

static bool is_deepseek_grouped(moe_family f)
{
    return f == MOE_FAMILY_DEEPSEEK_V2 || f == MOE_FAMILY_DEEPSEEK_V3 || f == MOE_FAMILY_KIMI_K2 ||
           f == MOE_FAMILY_DEEPSEEK_V32 || f == MOE_FAMILY_GLM4_MOE ||
           f == MOE_FAMILY_GLM_MOE_DSA || f == MOE_FAMILY_GLM4_MOE_LITE || f == MOE_FAMILY_KIMI_K25;
}

/* The families whose released models route in one group (Kimi-K2 and K2.5, every GLM). */
static bool one_group(moe_family f)
{
    return f == MOE_FAMILY_KIMI_K2 || f == MOE_FAMILY_KIMI_K25 || f == MOE_FAMILY_GLM4_MOE ||
           f == MOE_FAMILY_GLM_MOE_DSA || f == MOE_FAMILY_GLM4_MOE_LITE;
}

/* Qwen3-Next and Qwen3.5-MoE: one sigmoid-gated shared expert in every MoE layer. */
static bool is_qwen3_next(moe_family f)
{
    return f == MOE_FAMILY_QWEN3_NEXT || f == MOE_FAMILY_QWEN3_5_MOE;
}

/* Whether option K exists in family F's config. */
static bool applies(int k, moe_family f)
{
    bool ds = is_deepseek_grouped(f);
    switch (k) {
    case O_GROUPS:
    case O_TOPK_GROUP: return ds;
    case O_FIRST_DENSE: return ds || f == MOE_FAMILY_ERNIE4_5_MOE;
    case O_SHARED:
        return ds || f == MOE_FAMILY_DEEPSEEK_V4 || is_qwen3_next(f) ||
               f == MOE_FAMILY_ERNIE4_5_MOE || f == MOE_FAMILY_LLAMA4;
    case O_DENSE_INTERMEDIATE:
        return ds || f == MOE_FAMILY_QWEN3_MOE || f == MOE_FAMILY_QWEN3_NEXT ||
               f == MOE_FAMILY_ERNIE4_5_MOE;
    case O_HASH_LAYERS: return f == MOE_FAMILY_DEEPSEEK_V4;
    default: return true;
    }
}

/* Options that only some families have: giving one to another family is an error rather
 * than silently ignored. */
static int check_applicable(const gen_request *r, moe_family f)
{
    for (int k = 0; k < O_COUNT; k++)
        if (r->num[k].given && !applies(k, f))
            return usage("%s does not apply to %s (moe gen --help lists where it does)",
                         r->num[k].name, moe_family_name(f));
    if (is_qwen3_next(f) && r->num[O_SHARED].value == 0)
        return usage("--shared 0: every %s MoE layer has its shared expert (its width is "
                     "--shared x --intermediate)",
                     moe_family_name(f));
    if (f == MOE_FAMILY_LLAMA4 && r->num[O_SHARED].value != 1)
        return usage("--shared %lld: every llama4 MoE layer has exactly one shared expert",
                     (long long)r->num[O_SHARED].value);
    if (f == MOE_FAMILY_LLAMA4 && r->num[O_TOPK].given && r->num[O_TOPK].value != 1)
        return usage("--topk %lld: llama4 routes one expert per token",
                     (long long)r->num[O_TOPK].value);
    return 0;
}

static int resolve_family(gen_request *r)
{
    if (moe_family_from_name(r->family, &r->o.family)) return 0;
    return usage("--family '%s' is not one of deepseek_v2, deepseek_v3, kimi_k2, deepseek_v4, "
                 "qwen3_moe, mixtral, gpt_oss, deepseek_v32, glm4_moe, glm_moe_dsa, "
                 "glm4_moe_lite, minimax_m2, kimi_k25, qwen3_next, qwen3_5_moe, ernie4_5_moe, "
                 "llama4",
                 r->family);
}

static int resolve_dtype(gen_request *r)
{
    moe_family f = r->o.family;
    gen_dtype def, alt;
    switch (f) {
    case MOE_FAMILY_DEEPSEEK_V3:
    case MOE_FAMILY_KIMI_K2:
    case MOE_FAMILY_DEEPSEEK_V32:
    case MOE_FAMILY_GLM_MOE_DSA:
    case MOE_FAMILY_MINIMAX_M2: def = GEN_DTYPE_FP8, alt = GEN_DTYPE_BF16; break;
    case MOE_FAMILY_GPT_OSS: def = GEN_DTYPE_MXFP4, alt = GEN_DTYPE_BF16; break;
    case MOE_FAMILY_DEEPSEEK_V4: def = GEN_DTYPE_MXFP4, alt = GEN_DTYPE_FP8; break;
    default: def = GEN_DTYPE_BF16, alt = GEN_DTYPE_FP8; break;
    }
    if (!r->dtype) {
        r->o.dtype = def;
        return 0;
    }
    if (!strcmp(r->dtype, gen_dtype_name(def))) {
        r->o.dtype = def;
        return 0;
    }
    if (!strcmp(r->dtype, gen_dtype_name(alt))) {
        r->o.dtype = alt;
        return 0;
    }
    /* Kimi-K2-Thinking's compressed-tensors INT4 experts: DeepSeek-V3 / Kimi-K2 configs. */
    if ((f == MOE_FAMILY_DEEPSEEK_V3 || f == MOE_FAMILY_KIMI_K2) &&
        !strcmp(r->dtype, gen_dtype_name(GEN_DTYPE_INT4))) {
        r->o.dtype = GEN_DTYPE_INT4;
        return 0;
    }
    return usage("--dtype '%s' is not available for %s (use %s or %s)", r->dtype,
                 moe_family_name(f), gen_dtype_name(def), gen_dtype_name(alt));
}

static int resolve_torch_dtype(gen_request *r)
{
    const char *t = r->torch_dtype ? r->torch_dtype : "bfloat16";
    if (strcmp(t, "bfloat16") && strcmp(t, "float16") && strcmp(t, "float32"))
        return usage("--torch-dtype '%s' is not bfloat16, float16 or float32", t);
    r->o.torch_dtype = t;
    return 0;
}

/* ERNIE-4.5's moe_norm_min: Ernie4_5_MoeConfig's 1e-12 unless given. */
static int resolve_norm_min(gen_request *r)
{
    r->o.norm_min = 1e-12;
    if (!r->norm_min) return 0;
    if (r->o.family != MOE_FAMILY_ERNIE4_5_MOE)
        return usage("--norm-min does not apply to %s (moe gen --help lists where it does)",
                     moe_family_name(r->o.family));
    /* A decimal number only: no sign, spaces, inf or nan (strtod would take them). */
    const char *t = r->norm_min;
    char *end = NULL;
    errno = 0;
    const double v = strtod(t, &end);
    if (!(isdigit((unsigned char)t[0]) || t[0] == '.') || errno || *end || !isfinite(v) ||
        v > FLT_MAX)
        return usage("--norm-min '%s' is not a finite number >= 0", r->norm_min);
    r->o.norm_min = v;
    return 0;
}

/* Group defaults follow the real models: DeepSeek-V2/V3 route within groups (8 of 256 with
 * topk_group 4 in V3: half the groups), Kimi-K2 has one group. */
static void default_groups(gen_request *r)
{
    gen_options *o = &r->o;
    o->groups = r->num[O_GROUPS].given ? r->num[O_GROUPS].value : one_group(o->family) ? 1 : 4;
    if (r->num[O_TOPK_GROUP].given)
        o->topk_group = r->num[O_TOPK_GROUP].value;
    else
        o->topk_group = o->groups / 2 > 0 ? o->groups / 2 : 1;
}

/* The config rules the model parser enforces too, checked here so that a bad combination
 * is a usage error naming the options rather than a config error naming JSON fields. */
static int check_groups(const gen_request *r)
{
    const gen_options *o = &r->o;
    const char *g = r->num[O_GROUPS].given ? "" : " (the default)";
    const char *tg = r->num[O_TOPK_GROUP].given ? "" : " (the default)";
    if (o->experts % o->groups != 0)
        return usage("--groups %lld%s does not divide --experts %lld", (long long)o->groups, g,
                     (long long)o->experts);
    if (o->topk_group > o->groups)
        return usage("--topk-group %lld%s exceeds --groups %lld", (long long)o->topk_group, tg,
                     (long long)o->groups);
    int64_t per_group = o->experts / o->groups;
    if (o->topk > o->topk_group * per_group)
        return usage("--topk %lld exceeds --topk-group %lld x %lld experts per group",
                     (long long)o->topk, (long long)o->topk_group, (long long)per_group);
    /* noaux_tc scores a group by the sum of its top two experts. */
    if (o->family != MOE_FAMILY_DEEPSEEK_V2 && o->groups > 1 && per_group < 2)
        return usage("--groups %lld%s leaves %lld expert per group; noaux_tc needs 2",
                     (long long)o->groups, g, (long long)per_group);
    return 0;
}

static int resolve_shape(gen_request *r)
{
    gen_options *o = &r->o;
    o->layers = r->num[O_LAYERS].value;
    o->hidden = r->num[O_HIDDEN].value;
    o->experts = r->num[O_EXPERTS].value;
    /* llama4 routes one expert per token: its default --topk is 1. */
    o->topk = o->family == MOE_FAMILY_LLAMA4 && !r->num[O_TOPK].given ? 1 : r->num[O_TOPK].value;
    o->intermediate = r->num[O_INTERMEDIATE].value;
    o->vocab = r->num[O_VOCAB].value;
    o->shared = r->num[O_SHARED].value;
    o->dense_intermediate = r->num[O_DENSE_INTERMEDIATE].given ? r->num[O_DENSE_INTERMEDIATE].value
                                                               : 4 * o->intermediate;
    int64_t first = o->layers > 1 ? 1 : 0;
    o->first_dense = r->num[O_FIRST_DENSE].given ? r->num[O_FIRST_DENSE].value : first;
    o->hash_layers = r->num[O_HASH_LAYERS].given ? r->num[O_HASH_LAYERS].value : first;
    r->shards = r->num[O_SHARDS].value;
    o->groups = o->topk_group = 1;

    if (o->topk > o->experts)
        return usage("--topk %lld exceeds --experts %lld", (long long)o->topk,
                     (long long)o->experts);
    r->stored_experts =
        r->num[O_STORED_EXPERTS].given ? r->num[O_STORED_EXPERTS].value : o->experts;
    if (r->stored_experts > o->experts)
        return usage("--stored-experts %lld exceeds --experts %lld", (long long)r->stored_experts,
                     (long long)o->experts);
    if (o->first_dense > o->layers)
        return usage("--first-dense %lld exceeds --layers %lld", (long long)o->first_dense,
                     (long long)o->layers);
    if (o->hash_layers > o->layers)
        return usage("--hash-layers %lld exceeds --layers %lld", (long long)o->hash_layers,
                     (long long)o->layers);
    if (o->dtype == GEN_DTYPE_INT4 &&
        (o->hidden % 32 || o->intermediate % 32 || o->dense_intermediate % 32))
        return usage("--hidden, --intermediate and the dense intermediate must be multiples of "
                     "32 (the group size) for int4 experts");
    if (o->dtype == GEN_DTYPE_MXFP4) {
        /* MX blocks run 32 elements along K, which is H for gate/up and I for down. */
        if (o->hidden % 32)
            return usage("--hidden %lld must be a multiple of 32 for mxfp4 experts",
                         (long long)o->hidden);
        if (o->intermediate % 32)
            return usage("--intermediate %lld must be a multiple of 32 for mxfp4 experts",
                         (long long)o->intermediate);
    }
    if (!is_deepseek_grouped(o->family)) return 0;
    default_groups(r);
    return check_groups(r);
}

static int resolve(gen_request *r)
{
    int rc;
    if ((rc = resolve_family(r)) || (rc = check_applicable(r, r->o.family)) ||
        (rc = resolve_dtype(r)) || (rc = resolve_torch_dtype(r)) || (rc = resolve_norm_min(r)) ||
        (rc = resolve_shape(r)))
        return rc;
    return 0;
}

/* ---- Files --------------------------------------------------------------------------- */

/* What this run created, removed again on failure so DIR never holds a partial checkpoint. */
typedef struct created {
    char **paths;
    size_t n, cap;
    char **dirs; /* created folders, outermost first */
    size_t ndirs, capdirs;
} created;

static bool push_path(char ***list, size_t *n, size_t *cap, const char *path)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        char **p = moe_realloc(*list, c * sizeof *p);
        if (!p) return false;
        *list = p;
        *cap = c;
    }
    char *s = moe_strdup(path);
    if (!s) return false;
    (*list)[(*n)++] = s;
    return true;
}

static void created_free(created *c, bool remove)
{
    for (size_t i = c->n; i-- > 0;) {
        if (remove) unlink(c->paths[i]);
        moe_free(c->paths[i]);
    }
    for (size_t i = c->ndirs; i-- > 0;) {
        if (remove) rmdir(c->dirs[i]);
        moe_free(c->dirs[i]);
    }
    moe_free(c->paths);
    moe_free(c->dirs);
    memset(c, 0, sizeof *c);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = moe_malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* mkdir -p, remembering which folders were new. */
static moe_status make_dirs(const char *dir, created *c)
{
    char *p = moe_strdup(dir);
    moe_status st = MOE_OK;
    if (!p) return moe_error(MOE_ENOMEM, "out of memory");
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0777) == 0) {
            if (!push_path(&c->dirs, &c->ndirs, &c->capdirs, p))
                st = moe_error(MOE_ENOMEM, "out of memory");
        } else if (errno != EEXIST) {
            st = moe_error(MOE_EIO, "cannot create folder '%s': %s", p, strerror(errno));
        }
        *s = saved;
        if (st != MOE_OK || saved == '\0') break;
    }
    struct stat sb;
    if (st == MOE_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = moe_error(MOE_EIO, "--out '%s' is not a folder", dir);
    moe_free(p);
    return st;
}

static bool is_checkpoint_file(const char *name)
{
    size_t n = strlen(name);
    return !strcmp(name, "config.json") || !strcmp(name, "model.safetensors") ||
           !strcmp(name, "model.safetensors.index.json") ||
           (!strncmp(name, "model-", 6) && n > 12 && !strcmp(name + n - 12, ".safetensors") &&
            strstr(name, "-of-"));
}

/* A checkpoint already in DIR is refused, or removed with --force, so the folder never ends
 * up mixing two checkpoints (say, an old index next to a new single file). */
static moe_status clear_old(const char *dir, bool force)
{
    DIR *d = opendir(dir);
    moe_status st = MOE_OK;
    if (!d) return moe_error(MOE_EIO, "cannot read folder '%s': %s", dir, strerror(errno));
    for (struct dirent *e; st == MOE_OK && (e = readdir(d));) {
        if (!is_checkpoint_file(e->d_name)) continue;
        if (!force) {
            st = moe_error(MOE_EIO,
                           "'%s' already holds a checkpoint ('%s'); pass --force to replace it",
                           dir, e->d_name);
            break;
        }
        char *p = join(dir, e->d_name);
        if (!p)
            st = moe_error(MOE_ENOMEM, "out of memory");
        else if (unlink(p) != 0)
            st = moe_error(MOE_EIO, "cannot remove '%s': %s", p, strerror(errno));
        moe_free(p);
    }
    closedir(d);
    return st;
}

/* Writes TEXT to DIR/NAME through a temporary file and a rename. */
static moe_status write_text_file(const char *dir, const char *name, const char *text, created *c)
{
    char tmpl[64];
    snprintf(tmpl, sizeof tmpl, ".%s.XXXXXX", name);
    char *tmp = join(dir, tmpl), *path = join(dir, name);
    moe_status st = MOE_OK;
    int fd = -1;
    bool renamed = false;
    if (!tmp || !path) {
        st = moe_error(MOE_ENOMEM, "out of memory");
        goto done;
    }
    fd = mkstemp(tmp);
    if (fd < 0) {
        st = moe_error(MOE_EIO, "cannot create a file in '%s': %s", dir, strerror(errno));
        goto done;
    }
    /* mkstemp makes the file 0600; a checkpoint file is as readable as any other. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) {
        st = moe_error(MOE_EIO, "cannot set the mode of '%s': %s", tmp, strerror(errno));
        goto done;
    }
    size_t len = strlen(text);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            st = moe_error(MOE_EIO, "cannot write '%s': %s", path, strerror(errno));
            goto done;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        st = moe_error(MOE_EIO, "cannot write '%s': %s", path, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = moe_error(MOE_EIO, "cannot rename to '%s': %s", path, strerror(errno));
        goto done;
    }
    renamed = true;
    if (!push_path(&c->paths, &c->n, &c->cap, path)) st = moe_error(MOE_ENOMEM, "out of memory");
done:
    if (fd >= 0) close(fd);
    if (st != MOE_OK && tmp && !renamed) unlink(tmp);
    moe_free(tmp);
    moe_free(path);
    return st;
}

/* ---- Tensors ------------------------------------------------------------------------- */

typedef struct tensor_plan {
    moe_tensor_spec *specs; /* every layer's, in layer order */
    size_t count;
    uint64_t *bytes;
    gen_tensor *gens;
    size_t ngens; /* initialised entries of gens */
    int *shard;   /* shard index of each tensor */
    uint64_t total;
} tensor_plan;

static void plan_free(tensor_plan *p)
{
    for (size_t i = 0; i < p->ngens; i++)
        gen_tensor_free(&p->gens[i]);
    moe_free(p->specs);
    moe_free(p->bytes);
    moe_free(p->gens);
    moe_free(p->shard);
    memset(p, 0, sizeof *p);
}

static moe_status spec_bytes(const moe_tensor_spec *s, uint64_t *out)
{
    uint64_t n = 1, bits = moe_dtype_bits(s->dtype);
    for (int d = 0; d < s->ndim; d++)
        if (s->shape[d] < 0 || moe_mul_overflow_u64(n, (uint64_t)s->shape[d], &n))
            return moe_error(MOE_EOVERFLOW, "tensor '%s': shape overflows", s->name);
    if (bits == 0 || moe_mul_overflow_u64(n, bits, &n) || n % 8)
        return moe_error(MOE_ESHAPE, "tensor '%s': %s shape is not a whole number of bytes",
                         s->name, moe_dtype_name(s->dtype));
    *out = n / 8;
    return MOE_OK;
}

static moe_status append_layer(tensor_plan *p, const moe_model_desc *desc, int layer)
{
    moe_tensor_spec *specs = NULL;
    size_t n = 0, total;
    moe_status st = moe_model_layer_tensors(desc, layer, &specs, &n);
    if (st != MOE_OK) return st;
    if (moe_add_overflow_size(p->count, n, &total)) {
        moe_free(specs);
        return moe_error(MOE_EOVERFLOW, "too many tensors");
    }
    moe_tensor_spec *grown = moe_realloc(p->specs, total * sizeof *grown + 1);
    if (!grown) {
        moe_free(specs);
        return moe_error(MOE_ENOMEM, "out of memory listing the tensors of layer %d", layer);
    }
    if (n) memcpy(grown + p->count, specs, n * sizeof *specs);
    p->specs = grown;
    p->count = total;
    moe_free(specs);
    return MOE_OK;
}

/* Removes the tensors named by --omit; a name that matches nothing is a usage error. */
static int drop_omitted(tensor_plan *p, const gen_request *r)
{
    for (int k = 0; k < r->n_omit; k++) {
        size_t i = 0;
        while (i < p->count && strcmp(p->specs[i].name, r->omit[k]))
            i++;
        if (i == p->count)
            return usage("--omit '%s' is not a tensor of this checkpoint (moe inspect --tensors "
                         "lists them)",
                         r->omit[k]);
        memmove(&p->specs[i], &p->specs[i + 1], (p->count - i - 1) * sizeof *p->specs);
        p->count--;
    }
    return 0;
}

static moe_status list_tensors(tensor_plan *p, const moe_model_desc *desc)
{
    moe_status st;
    for (int l = 0; l < desc->n_layers; l++)
        if ((st = append_layer(p, desc, l)) != MOE_OK) return st;
    return MOE_OK;
}

static moe_status plan_tensors(tensor_plan *p, const moe_model_desc *desc, uint64_t seed,
                               int64_t stored_experts)
{
    moe_status st;
    p->bytes = moe_calloc(p->count + 1, sizeof *p->bytes);
    p->gens = moe_calloc(p->count + 1, sizeof *p->gens);
    p->shard = moe_calloc(p->count + 1, sizeof *p->shard);
    if (!p->bytes || !p->gens || !p->shard) return moe_error(MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->count; i++) {
        if ((st = spec_bytes(&p->specs[i], &p->bytes[i])) != MOE_OK) return st;
        if (moe_add_overflow_u64(p->total, p->bytes[i], &p->total))
            return moe_error(MOE_EOVERFLOW, "checkpoint size overflows");
        if ((st = gen_tensor_init(&p->gens[i], desc, &p->specs[i], seed)) != MOE_OK) return st;
        gen_tensor_zero_experts(&p->gens[i], desc, &p->specs[i], p->bytes[i], stored_experts);
        p->ngens = i + 1;
    }
    return MOE_OK;
}

/* Cuts the tensors, in layer order, into SHARDS runs of about equal bytes; every shard gets
 * at least one tensor (the caller checked SHARDS <= count). */
static void assign_shards(tensor_plan *p, int64_t shards)
{
    int64_t k = 0;
    size_t in_k = 0;
    uint64_t cum = 0;
    for (size_t i = 0; i < p->count; i++) {
        size_t left = p->count - i;
        double bound = (double)p->total * (double)(k + 1) / (double)shards;
        bool full = (double)cum >= bound || left <= (size_t)(shards - 1 - k);
        if (k < shards - 1 && in_k > 0 && full) {
            k++;
            in_k = 0;
        }
        p->shard[i] = (int)k;
        cum += p->bytes[i];
        in_k++;
    }
}

static moe_status fill(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    gen_tensor **gens = ctx;
    gen_tensor_fill(gens[index], offset, buf, len);
    return MOE_OK;
}

static void shard_name(char *buf, size_t cap, int k, int64_t shards)
{
    if (shards == 1)
        snprintf(buf, cap, "model.safetensors");
    else
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", k + 1, (int)shards);
}

static moe_status write_shard(tensor_plan *p, const char *dir, int k, int64_t shards, created *c)
{
    char name[64];
    shard_name(name, sizeof name, k, shards);
    char *path = join(dir, name);
    gen_tensor **order = moe_calloc(p->count + 1, sizeof *order);
    moe_st_writer *w = NULL;
    moe_status st = MOE_OK;
    if (!path || !order) {
        st = moe_error(MOE_ENOMEM, "out of memory");
        goto done;
    }
    if ((st = moe_st_writer_create(&w)) != MOE_OK ||
        (st = moe_st_writer_metadata(w, "format", "pt")) != MOE_OK)
        goto done;
    size_t n = 0;
    for (size_t i = 0; i < p->count; i++) {
        if (p->shard[i] != k) continue;
        const moe_tensor_spec *s = &p->specs[i];
        if ((st = moe_st_writer_add(w, s->name, s->dtype, s->ndim, s->shape)) != MOE_OK) goto done;
        order[n++] = &p->gens[i];
    }
    if ((st = moe_st_writer_write(w, path, fill, order)) != MOE_OK) goto done;
    if (!push_path(&c->paths, &c->n, &c->cap, path)) st = moe_error(MOE_ENOMEM, "out of memory");
done:
    moe_st_writer_destroy(w);
    moe_free(order);
    moe_free(path);
    return st;
}

/* model.safetensors.index.json as huggingface_hub writes it: total_size is the sum of the
 * tensors' bytes (not of the files), weight_map sorted by tensor name. */
static moe_status write_index(const tensor_plan *p, const char *dir, int64_t shards, created *c)
{
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    moe_status st = MOE_OK;
    bool ok = root && meta && map;
    for (size_t i = 0; ok && i < p->count; i++) {
        char name[64];
        shard_name(name, sizeof name, p->shard[i], shards);
        ok = json_object_set_new(map, p->specs[i].name, json_string(name)) == 0;
    }
    ok = ok && json_object_set_new(meta, "total_size", json_integer((json_int_t)p->total)) == 0;
    ok = ok && json_object_set(root, "metadata", meta) == 0 &&
         json_object_set(root, "weight_map", map) == 0;
    char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    if (!text) {
        st = moe_error(MOE_ENOMEM, "out of memory building the index");
    } else {
        size_t n = strlen(text);
        char *t2 = realloc(text, n + 2);
        if (!t2) {
            st = moe_error(MOE_ENOMEM, "out of memory building the index");
        } else {
            text = t2;
            memcpy(text + n, "\n", 2);
            st = write_text_file(dir, "model.safetensors.index.json", text, c);
        }
    }
    free(text);
    json_decref(root);
    json_decref(meta);
    json_decref(map);
    return st;
}

/* ---- The command --------------------------------------------------------------------- */

/* Everything is decided in memory first (config, its parse, the tensor list, the shards),
 * so a bad request touches no file. */
static int prepare(gen_request *r, char **text, tensor_plan *plan, moe_model_desc *desc,
                   bool *have_desc)
{
    moe_status st;
    *text = gen_config_text(&r->o);
    if (!*text) {
        moe_error(MOE_ENOMEM, "out of memory building config.json");
        return 1;
    }
    /* The tensors come from parsing the very bytes written to config.json: the model
     * module stays the one source of truth for names, dtypes and shapes. */
    char name[4096];
    snprintf(name, sizeof name, "%s/config.json", r->out);
    if ((st = moe_model_desc_parse(*text, strlen(*text), name, desc)) != MOE_OK) return 1;
    *have_desc = true;
    if ((st = list_tensors(plan, desc)) != MOE_OK) return 1;
    int rc = drop_omitted(plan, r);
    if (rc) return rc;
    if ((st = plan_tensors(plan, desc, r->seed, r->stored_experts)) != MOE_OK) return 1;
    if ((uint64_t)r->shards > plan->count)
        return usage("--shards %lld exceeds the %zu tensors of this checkpoint",
                     (long long)r->shards, plan->count);
    assign_shards(plan, r->shards);
    return 0;
}

static moe_status write_all(gen_request *r, const char *text, tensor_plan *plan, created *c)
{
    moe_status st;
    if ((st = make_dirs(r->out, c)) != MOE_OK || (st = clear_old(r->out, r->force)) != MOE_OK ||
        (st = write_text_file(r->out, "config.json", text, c)) != MOE_OK)
        return st;
    for (int k = 0; k < r->shards; k++)
        if ((st = write_shard(plan, r->out, k, r->shards, c)) != MOE_OK) return st;
    if (r->shards > 1 && (st = write_index(plan, r->out, r->shards, c)) != MOE_OK) return st;
    return MOE_OK;
}

int moe_cmd_gen(int argc, char **argv)
{
    gen_request r;
    request_init(&r);
    int rc = parse_args(&r, argc, argv);
    if (rc < 0) {
        help();
        return 0;
    }
    if (rc || (rc = resolve(&r))) return rc;

    created c = {0};
    tensor_plan plan = {0};
    moe_model_desc desc;
    bool have_desc = false;
    char *text = NULL;
    rc = prepare(&r, &text, &plan, &desc, &have_desc);
    if (rc == 0 && write_all(&r, text, &plan, &c) != MOE_OK) rc = 1;
    if (rc == 0)
        printf("wrote %s: %s %s, %lld layer%s, %lld shard%s, %zu tensors, %llu bytes of tensor "
               "data, seed %llu%s%s\n",
               r.out, moe_family_name(r.o.family), gen_dtype_name(r.o.dtype), (long long)r.o.layers,
               r.o.layers > 1 ? "s" : "", (long long)r.shards, r.shards > 1 ? "s" : "", plan.count,
               (unsigned long long)plan.total, (unsigned long long)r.seed,
               r.n_omit ? " (tensors omitted on request)" : "",
               r.stored_experts < r.o.experts ? " (routed experts past --stored-experts zero)"
                                              : "");
    else if (rc == 1)
        cli_print_error(PROG, moe_last_error());
    created_free(&c, rc != 0);
    plan_free(&plan);
    free(text);
    if (have_desc) moe_model_desc_free(&desc);
    return rc;
}
