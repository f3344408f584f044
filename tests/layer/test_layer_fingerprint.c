/* test_layer_fingerprint.c — every field that changes a layer's output changes its fingerprint. */
#include "layer_fixture.h"
#include "moe_ep.h"

enum { MAX_E = 64 };

/* A copy of a plan whose model, layer and placement table a case may change. */
typedef struct variant {
    moe_model_desc d;
    moe_layer_desc ld;
    moe_layer_plan p;
    int32_t table[MAX_E];
} variant;

static void variant_of(const moe_layer_plan *base, variant *v)
{
    v->d = *base->desc;
    v->ld = *base->ld;
    v->p = *base;
    v->p.desc = &v->d;
    v->p.ld = &v->ld;
    REQUIRE(base->ld->routing.n_experts <= MAX_E);
    if (base->ep.expert_rank) {
        memcpy(v->table, base->ep.expert_rank,
               (size_t)base->ld->routing.n_experts * sizeof(int32_t));
        v->p.ep.expert_rank = v->table;
    }
}

/* B if V is A, else A: another valid value of an enum or dtype. */
static int other(int v, int a, int b) { return v == a ? b : a; }

static moe_dtype other_dtype(moe_dtype d)
{
    return (moe_dtype)other((int)d, MOE_DTYPE_BF16, MOE_DTYPE_F32);
}

/* The MLP description fields, each changed to another value. */
static const char *const mlp_fields[] = {"hidden",    "intermediate", "format",     "scale_dtype",
                                         "block_out", "block_in",     "activation", "swiglu_limit",
                                         "alpha",     "has_bias"};
#define N_MLP_FIELDS (sizeof mlp_fields / sizeof mlp_fields[0])

static void change_mlp(moe_mlp_desc *m, size_t field)
{
    switch (field) {
    case 0: m->hidden += 32; break;
    case 1: m->intermediate += 32; break;
    case 2:
        m->format = (moe_weight_format)other(m->format, MOE_WFMT_BF16, MOE_WFMT_FP8_BLOCK);
        break;
    case 3:
        m->scale_dtype = (moe_dtype)other(m->scale_dtype, MOE_DTYPE_F32, MOE_DTYPE_F8_E8M0);
        break;
    case 4: m->block_out = m->block_out ? 2 * m->block_out : 128; break;
    case 5: m->block_in = m->block_in ? 2 * m->block_in : 128; break;
    case 6:
        m->activation = (moe_activation)other(m->activation, MOE_ACT_SILU_GLU, MOE_ACT_GPTOSS_GLU);
        break;
    case 7: m->swiglu_limit = m->swiglu_limit * 2 + 1; break;
    case 8: m->alpha = m->alpha * 2 + 1; break;
    default: m->has_bias = !m->has_bias; break;
    }
}

/* The routing, layer, model and plan fields, each changed to another value. */
static const char *const fields[] = {"family",
                                     "model_type",
                                     "hidden",
                                     "vocab_size",
                                     "index",
                                     "kind",
                                     "method",
                                     "score",
                                     "n_experts",
                                     "top_k",
                                     "n_group",
                                     "topk_group",
                                     "has_correction_bias",
                                     "has_router_bias",
                                     "norm_topk_prob",
                                     "routed_scaling_factor",
                                     "renorm_min",
                                     "n_shared",
                                     "shared_gate",
                                     "scale_input",
                                     "recipe",
                                     "logits_dtype",
                                     "router weight dtype",
                                     "correction bias dtype",
                                     "shared gate dtype",
                                     "n_ranks",
                                     "expert_rank[last]"};
#define N_FIELDS (sizeof fields / sizeof fields[0])
enum { F_CORRECTION_BIAS_DTYPE = 23, F_SHARED_GATE_DTYPE = 24 };

static void change(variant *v, size_t field)
{
    moe_routing_desc *r = &v->ld.routing;
    switch (field) {
    case 0:
        v->d.family = (moe_family)other(v->d.family, MOE_FAMILY_QWEN3_MOE, MOE_FAMILY_MIXTRAL);
        break;
    case 1: v->d.model_type[0] ^= 1; break;
    case 2: v->d.hidden += 32; break;
    case 3: v->d.vocab_size += 1; break;
    case 4: v->p.index += 1; break;
    case 5: v->ld.kind = (moe_layer_kind)other(v->ld.kind, MOE_LAYER_MOE, MOE_LAYER_HASH); break;
    case 6:
        r->method = (moe_route_method)other(r->method, MOE_ROUTE_SOFTMAX_TOPK, MOE_ROUTE_GREEDY);
        break;
    case 7: r->score = (moe_score_func)other(r->score, MOE_SCORE_SOFTMAX, MOE_SCORE_SIGMOID); break;
    case 8: r->n_experts += 1; break;
    case 9: r->top_k += 1; break;
    case 10: r->n_group *= 2; break;
    case 11: r->topk_group += 1; break;
    case 12: r->has_correction_bias = !r->has_correction_bias; break;
    case 13: r->has_router_bias = !r->has_router_bias; break;
    case 14: r->norm_topk_prob = !r->norm_topk_prob; break;
    case 15: r->routed_scaling_factor *= 2; break;
    case 16: r->renorm_min = r->renorm_min * 2 + 0.25f; break;
    case 17: v->ld.n_shared += 1; break;
    case 18: v->ld.shared_gate = !v->ld.shared_gate; break;
    case 19: v->ld.scale_input = !v->ld.scale_input; break;
    case 20:
        v->p.recipe = (moe_expert_recipe)other(v->p.recipe, MOE_RECIPE_F32, MOE_RECIPE_BF16);
        break;
    case 21: v->p.logits_dtype = other_dtype(v->p.logits_dtype); break;
    case 22: v->p.gate_problem.weight_dtype = other_dtype(v->p.gate_problem.weight_dtype); break;
    case F_CORRECTION_BIAS_DTYPE:
        v->p.router_params.correction_bias_dtype =
            other_dtype(v->p.router_params.correction_bias_dtype);
        break;
    case F_SHARED_GATE_DTYPE: v->p.shared_gate_dtype = other_dtype(v->p.shared_gate_dtype); break;
    case 25: v->p.ep.n_ranks += 1; break;
    default: {
        const int last = r->n_experts - 1;
        v->table[last] = (v->table[last] + 1) % v->p.ep.n_ranks;
        break;
    }
    }
}

/* The group fields, each changed to another value (groups present in the base plan). */
static const char *const group_fields[] = {"present",    "weight_dtype", "scale_dtype",
                                           "bias_dtype", "recipe",       "expert_stride"};
#define N_GROUP_FIELDS (sizeof group_fields / sizeof group_fields[0])

static void change_group(moe_layer_group_plan *g, size_t field)
{
    switch (field) {
    case 0: g->present = false; break;
    case 1: g->weight_dtype = other_dtype(g->weight_dtype); break;
    case 2:
        g->scale_dtype = (moe_dtype)other(g->scale_dtype, MOE_DTYPE_F32, MOE_DTYPE_F8_E8M0);
        break;
    case 3: g->bias_dtype = other_dtype(g->bias_dtype); break;
    case 4: g->recipe = (moe_expert_recipe)other(g->recipe, MOE_RECIPE_F32, MOE_RECIPE_BF16); break;
    default: g->group.expert_stride += 64; break;
    }
}

/* The plan of LAYER of M on rank RANK of N_RANKS (contiguous placement, or TABLE), THREADS
 * threads, the f32 recipe. */
static void plan_of(const moe_model *m, int layer, int rank, int n_ranks, const int32_t *table,
                    size_t n_entries, int threads, moe_layer_plan *p)
{
    const moe_layer_options o = fx_options(threads, MOE_RECIPE_F32);
    const moe_ep_placement pl = {sizeof pl, rank, n_ranks, table, n_entries};
    moe_status st = moe_layer_plan_make_ep(m, layer, &o, NULL, &pl, p);
    if (st) fprintf(stderr, "plan layer %d: %s\n", layer, moe_last_error());
    REQUIRE(st == MOE_OK);
}

/* Every field changed alone changes the fingerprint of rank 0 of 2's plan of LAYER; plans that
 * differ in nothing the output depends on (the copy, another rank, a table equal to the
 * contiguous placement, other threads, a checkpoint of other values: DIR2) have its
 * fingerprint. */
static void check_case(const char *name, const char *config, int layer, const char *dir,
                       const char *dir2)
{
    fx_write_model(dir, config, 11);
    fx_write_model(dir2, config, 12);
    moe_model *m = fx_open(dir, false), *m2 = fx_open(dir2, false);
    moe_layer_plan base;
    plan_of(m, layer, 0, 2, NULL, 0, 1, &base);
    const uint64_t fp = moe_layer_fingerprint(&base);
    variant *v = malloc(sizeof *v);
    REQUIRE(v);

    variant_of(&base, v);
    CHECKF(moe_layer_fingerprint(&v->p) == fp, "%s: an unchanged copy", name);
    for (size_t f = 0; f < N_FIELDS; f++) {
        /* The dtypes of tensors the layer does not have are not fed. */
        if ((f == F_CORRECTION_BIAS_DTYPE && !base.ld->routing.has_correction_bias) ||
            (f == F_SHARED_GATE_DTYPE && !base.ld->shared_gate))
            continue;
        variant_of(&base, v);
        change(v, f);
        CHECKF(moe_layer_fingerprint(&v->p) != fp, "%s: %s changed, fingerprint equal", name,
               fields[f]);
    }
    static const char *const mlps[] = {"experts", "shared", "dense"};
    for (int g = 0; g < 3; g++)
        for (size_t f = 0; f < N_MLP_FIELDS; f++) {
            variant_of(&base, v);
            change_mlp(g == 0 ? &v->ld.experts : g == 1 ? &v->ld.shared : &v->ld.dense, f);
            CHECKF(moe_layer_fingerprint(&v->p) != fp, "%s: %s.%s changed, fingerprint equal", name,
                   mlps[g], mlp_fields[f]);
        }
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        if (!base.groups[id].present) continue;
        for (size_t f = 0; f < N_GROUP_FIELDS; f++) {
            variant_of(&base, v);
            change_group(&v->p.groups[id], f);
            CHECKF(moe_layer_fingerprint(&v->p) != fp, "%s: %s %s changed, fingerprint equal", name,
                   moe_layer_group_label[id], group_fields[f]);
        }
    }
    free(v);

    const int e = base.ld->routing.n_experts;
    int32_t table[MAX_E];
    for (int i = 0; i < e; i++)
        table[i] = (int32_t)(i * 2 / e);
    moe_layer_plan same;
    plan_of(m, layer, 1, 2, NULL, 0, 1, &same);
    CHECKF(moe_layer_fingerprint(&same) == fp, "%s: rank 1's fingerprint differs", name);
    moe_layer_plan_free(&same);
    plan_of(m, layer, 0, 2, table, (size_t)e, 1, &same);
    CHECKF(moe_layer_fingerprint(&same) == fp, "%s: the contiguous table's fingerprint differs",
           name);
    moe_layer_plan_free(&same);
    plan_of(m, layer, 0, 2, NULL, 0, 2, &same);
    CHECKF(moe_layer_fingerprint(&same) == fp, "%s: 2 threads' fingerprint differs", name);
    moe_layer_plan_free(&same);
    plan_of(m2, layer, 0, 2, NULL, 0, 1, &same);
    CHECKF(moe_layer_fingerprint(&same) == fp, "%s: other weight values' fingerprint differs",
           name);
    moe_layer_plan_free(&same);

    moe_layer_plan_free(&base);
    moe_model_close(m);
    moe_model_close(m2);
    fx_remove_model(dir);
    fx_remove_model(dir2);
}

/* moe_ep_get_info's fingerprint of LAYER of CONFIG (values seeded alike). */
static uint64_t info_fingerprint(const char *config, int layer, const char *dir)
{
    fx_write_model(dir, config, 21);
    moe_model *m = fx_open(dir, false);
    const moe_layer_options o = fx_options(1, MOE_RECIPE_F32);
    const moe_ep_placement pl = {sizeof pl, 0, 2, NULL, 0};
    moe_layer *l = NULL;
    moe_status st = moe_layer_create_ep(m, layer, &o, &pl, &l);
    if (st) fprintf(stderr, "create layer %d: %s\n", layer, moe_last_error());
    REQUIRE(st == MOE_OK);
    moe_ep_info info = {.size = sizeof info};
    REQUIRE(moe_ep_get_info(l, &info) == MOE_OK);
    moe_layer_destroy(l);
    moe_model_close(m);
    fx_remove_model(dir);
    return info.fingerprint;
}

/* Through the public API: two ERNIE checkpoints alike but for moe_norm_min. */
#define ERNIE(norm_min)                                                                            \
    "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":288,\"num_hidden_layers\":2,"                \
    "\"intermediate_size\":352,\"moe_intermediate_size\":96,\"moe_num_experts\":16,"               \
    "\"moe_k\":4,\"moe_num_shared_experts\":2,\"moe_layer_start_index\":1,\"moe_norm_"             \
    "min\":" norm_min ",\"use_bias\":false}"

static void check_created(const char *dir)
{
    const uint64_t a = info_fingerprint(ERNIE("0.3"), 1, dir);
    CHECK(info_fingerprint(ERNIE("0.3"), 1, dir) == a);
    CHECK(info_fingerprint(ERNIE("0.5"), 1, dir) != a);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_fingerprint_XXXXXX";
    char dir2[] = "/tmp/moe_test_layer_fingerprint2_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL && mkdtemp(dir2) != NULL);
    /* Qwen3-Next: a shared expert with its sigmoid gate; ERNIE: a correction bias and a
     * renormalisation floor; DeepSeek-V3 FP8: block scales. */
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const fam_case *fc = &fam_cases[i];
        if (!strcmp(fc->name, "qwen3_next") || !strcmp(fc->name, "ernie4_5_moe") ||
            !strcmp(fc->name, "deepseek_v3_fp8"))
            check_case(fc->name, fc->config, fc->moe_layer, dir, dir2);
    }
    check_created(dir);
    rmdir(dir);
    rmdir(dir2);
    return TEST_END();
}
