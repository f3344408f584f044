/* test_tensors.c — per-layer tensor tables against hand-written names, dtypes, shapes, counts. */
#include <stdio.h>
#include <string.h>

#include "config_fixture.h"
#include "core/alloc.h"

#define BIT(d) (1u << (unsigned)(d))

/* One expected spec; shapes worked out by hand from formats.md §2–4 and routing.md §7. */
typedef struct exp_spec {
    const char *name;
    moe_dtype dtype;
    int ndim;
    int64_t shape[4];
    moe_tensor_group group;
    moe_tensor_role role;
    int expert;
} exp_spec;

typedef struct table {
    moe_tensor_spec *v;
    size_t n;
} table;

static void load(const char *file, moe_model_desc *d)
{
    moe_status st = load_fixture(file, d);
    if (st) fprintf(stderr, "%s: %s\n", file, moe_last_error());
    REQUIRE(st == MOE_OK);
}

static table layer_table(const moe_model_desc *d, int layer)
{
    table t = {NULL, 0};
    moe_status st = moe_model_layer_tensors(d, layer, &t.v, &t.n);
    if (st) fprintf(stderr, "layer %d: %s\n", layer, moe_last_error());
    REQUIRE(st == MOE_OK);
    return t;
}

static const moe_tensor_spec *by_name(const table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->v[i].name, name)) return &t->v[i];
    return NULL;
}

static void check_spec(const moe_tensor_spec *s, const exp_spec *e, int layer)
{
    CHECKF(s != NULL, "missing spec %s", e->name);
    if (!s) return;
    CHECKF(!strcmp(s->name, e->name), "name %s, want %s", s->name, e->name);
    CHECKF(s->dtype == e->dtype, "%s dtype %s", e->name, moe_dtype_name(s->dtype));
    CHECKF(s->dtype_mask & BIT(s->dtype), "%s mask lacks its own dtype", e->name);
    CHECKF(s->ndim == e->ndim, "%s ndim %d", e->name, s->ndim);
    for (int i = 0; i < e->ndim && i < 4; i++)
        CHECKF(s->shape[i] == e->shape[i], "%s dim %d = %lld, want %lld", e->name, i,
               (long long)s->shape[i], (long long)e->shape[i]);
    CHECKF(s->group == e->group, "%s group %s", e->name, moe_tensor_group_name(s->group));
    CHECKF(s->role == e->role, "%s role %s", e->name, moe_tensor_role_name(s->role));
    CHECKF(s->expert == e->expert, "%s expert %d", e->name, s->expert);
    CHECKF(s->layer == layer, "%s layer %d", e->name, s->layer);
    CHECK(!s->optional);
}

/* The first N specs of T in order, then the names of the rest must all be distinct. */
static void check_prefix(const table *t, const exp_spec *e, size_t n, int layer)
{
    for (size_t i = 0; i < n; i++)
        check_spec(i < t->n ? &t->v[i] : NULL, &e[i], layer);
}

static void check_distinct(const table *t)
{
    /* Tables are a few thousand entries: the quadratic check stays cheap. */
    for (size_t i = 0; i < t->n; i++)
        for (size_t j = i + 1; j < t->n; j++)
            if (!strcmp(t->v[i].name, t->v[j].name)) {
                CHECKF(0, "duplicate name %s", t->v[i].name);
                return;
            }
}

static void test_deepseek_v3(void)
{
    moe_model_desc d;
    load("deepseek-v3.json", &d);
    table t = layer_table(&d, 0);
    const exp_spec dense[] = {
        {"model.layers.0.mlp.gate_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {18432, 7168},
         MOE_GROUP_DENSE,
         MOE_ROLE_GATE,
         -1},
        {"model.layers.0.mlp.gate_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {144, 56},
         MOE_GROUP_DENSE,
         MOE_ROLE_GATE_SCALE,
         -1},
        {"model.layers.0.mlp.up_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {18432, 7168},
         MOE_GROUP_DENSE,
         MOE_ROLE_UP,
         -1},
        {"model.layers.0.mlp.up_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {144, 56},
         MOE_GROUP_DENSE,
         MOE_ROLE_UP_SCALE,
         -1},
        {"model.layers.0.mlp.down_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {7168, 18432},
         MOE_GROUP_DENSE,
         MOE_ROLE_DOWN,
         -1},
        {"model.layers.0.mlp.down_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {56, 144},
         MOE_GROUP_DENSE,
         MOE_ROLE_DOWN_SCALE,
         -1},
    };
    CHECK(t.n == 6);
    check_prefix(&t, dense, 6, 0);
    moe_free(t.v);

    t = layer_table(&d, 3);
    CHECKF(t.n == 1 + 1 + 256 * 3 * 2 + 3 * 2, "V3 layer 3 has %zu specs", t.n);
    const exp_spec moe[] = {
        {"model.layers.3.mlp.gate.weight",
         MOE_DTYPE_BF16,
         1 + 1,
         {256, 7168},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.3.mlp.gate.e_score_correction_bias",
         MOE_DTYPE_F32,
         1,
         {256},
         MOE_GROUP_ROUTER,
         MOE_ROLE_CORRECTION_BIAS,
         -1},
        {"model.layers.3.mlp.experts.0.gate_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {2048, 7168},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
        {"model.layers.3.mlp.experts.0.gate_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {16, 56},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_SCALE,
         0},
        {"model.layers.3.mlp.experts.0.up_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {2048, 7168},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP,
         0},
        {"model.layers.3.mlp.experts.0.up_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {16, 56},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP_SCALE,
         0},
        {"model.layers.3.mlp.experts.0.down_proj.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {7168, 2048},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         0},
        {"model.layers.3.mlp.experts.0.down_proj.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {56, 16},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_SCALE,
         0},
    };
    check_prefix(&t, moe, 8, 3);
    const exp_spec last = {"model.layers.3.mlp.experts.255.down_proj.weight_scale_inv",
                           MOE_DTYPE_F32,
                           2,
                           {56, 16},
                           MOE_GROUP_ROUTED,
                           MOE_ROLE_DOWN_SCALE,
                           255};
    check_spec(by_name(&t, last.name), &last, 3);
    const exp_spec shared = {"model.layers.3.mlp.shared_experts.down_proj.weight",
                             MOE_DTYPE_F8_E4M3,
                             2,
                             {7168, 2048},
                             MOE_GROUP_SHARED,
                             MOE_ROLE_DOWN,
                             -1};
    check_spec(by_name(&t, shared.name), &shared, 3);
    /* Router and bias accept every float dtype; FP8 weights only E4M3; f32 scales also bf16. */
    const uint32_t floats = BIT(MOE_DTYPE_BF16) | BIT(MOE_DTYPE_F16) | BIT(MOE_DTYPE_F32);
    CHECK(t.n > 3 && t.v[0].dtype_mask == floats && t.v[1].dtype_mask == floats);
    CHECK(t.n > 3 && t.v[2].dtype_mask == BIT(MOE_DTYPE_F8_E4M3));
    CHECK(t.n > 3 && t.v[3].dtype_mask == (BIT(MOE_DTYPE_F32) | BIT(MOE_DTYPE_BF16)));
    check_distinct(&t);
    moe_free(t.v);

    t = layer_table(&d, 60);
    CHECK(t.n == 1544);
    CHECK(t.n && !strcmp(t.v[0].name, "model.layers.60.mlp.gate.weight"));
    moe_free(t.v);

    moe_tensor_spec *v = NULL;
    size_t n = 0;
    CHECK_STATUS(moe_model_layer_tensors(&d, 61, &v, &n), MOE_EINVAL);
    CHECK_STATUS(moe_model_layer_tensors(&d, -1, &v, &n), MOE_EINVAL);
    CHECK_STATUS(moe_model_layer_tensors(NULL, 0, &v, &n), MOE_EINVAL);
    CHECK(v == NULL && n == 0);
    char alt[256];
    CHECK(!moe_model_alt_name(&d, "model.layers.3.mlp.gate.weight", alt, sizeof alt));
    moe_model_desc_free(&d);
}

static void test_kimi_and_v2(void)
{
    moe_model_desc d;
    load("kimi-k2.json", &d);
    table t = layer_table(&d, 1);
    CHECK(t.n == 1 + 1 + 384 * 6 + 6);
    moe_free(t.v);
    t = layer_table(&d, 0);
    CHECK(t.n == 6 && !strcmp(t.v[0].name, "model.layers.0.mlp.gate_proj.weight"));
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("deepseek-v2.json", &d);
    t = layer_table(&d, 1);
    CHECK(t.n == 1 + 160 * 3 + 3); /* bf16: no scales; group_limited_greedy: no bias */
    const exp_spec v2[] = {
        {"model.layers.1.mlp.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {160, 5120},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.1.mlp.experts.0.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {1536, 5120},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
        {"model.layers.1.mlp.experts.0.up_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {1536, 5120},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP,
         0},
        {"model.layers.1.mlp.experts.0.down_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {5120, 1536},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         0},
    };
    check_prefix(&t, v2, 4, 1);
    const exp_spec shared = {"model.layers.1.mlp.shared_experts.gate_proj.weight",
                             MOE_DTYPE_BF16,
                             2,
                             {3072, 5120},
                             MOE_GROUP_SHARED,
                             MOE_ROLE_GATE,
                             -1};
    check_spec(by_name(&t, shared.name), &shared, 1);
    CHECK(by_name(&t, "model.layers.1.mlp.gate.e_score_correction_bias") == NULL);
    moe_free(t.v);
    t = layer_table(&d, 0);
    const exp_spec dense = {"model.layers.0.mlp.down_proj.weight",
                            MOE_DTYPE_BF16,
                            2,
                            {5120, 12288},
                            MOE_GROUP_DENSE,
                            MOE_ROLE_DOWN,
                            -1};
    CHECK(t.n == 3);
    check_spec(by_name(&t, dense.name), &dense, 0);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

static void test_deepseek_v4(void)
{
    moe_model_desc d;
    load("deepseek-v4-flash.json", &d);
    table t = layer_table(&d, 0);
    CHECK(t.n == 1 + 1 + 256 * 6 + 6);
    const exp_spec hash[] = {
        {"layers.0.ffn.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {256, 4096},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"layers.0.ffn.gate.tid2eid",
         MOE_DTYPE_I64,
         2,
         {129280, 6},
         MOE_GROUP_ROUTER,
         MOE_ROLE_TID2EID,
         -1},
        {"layers.0.ffn.experts.0.w1.weight",
         MOE_DTYPE_I8,
         2,
         {2048, 2048},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
        {"layers.0.ffn.experts.0.w1.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {2048, 128},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_SCALE,
         0},
        {"layers.0.ffn.experts.0.w3.weight",
         MOE_DTYPE_I8,
         2,
         {2048, 2048},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP,
         0},
        {"layers.0.ffn.experts.0.w3.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {2048, 128},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP_SCALE,
         0},
        {"layers.0.ffn.experts.0.w2.weight",
         MOE_DTYPE_I8,
         2,
         {4096, 1024},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         0},
        {"layers.0.ffn.experts.0.w2.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {4096, 64},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_SCALE,
         0},
    };
    check_prefix(&t, hash, 8, 0);
    CHECK(t.n > 1 && t.v[1].dtype_mask == (BIT(MOE_DTYPE_I32) | BIT(MOE_DTYPE_I64)));
    CHECK(t.n > 2 && t.v[2].dtype_mask == (BIT(MOE_DTYPE_I8) | BIT(MOE_DTYPE_U8)));
    CHECK(t.n > 3 && t.v[3].dtype_mask == (BIT(MOE_DTYPE_F8_E8M0) | BIT(MOE_DTYPE_U8)));
    const exp_spec shared[] = {
        {"layers.0.ffn.shared_experts.w1.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {2048, 4096},
         MOE_GROUP_SHARED,
         MOE_ROLE_GATE,
         -1},
        {"layers.0.ffn.shared_experts.w1.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {16, 32},
         MOE_GROUP_SHARED,
         MOE_ROLE_GATE_SCALE,
         -1},
        {"layers.0.ffn.shared_experts.w3.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {2048, 4096},
         MOE_GROUP_SHARED,
         MOE_ROLE_UP,
         -1},
        {"layers.0.ffn.shared_experts.w3.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {16, 32},
         MOE_GROUP_SHARED,
         MOE_ROLE_UP_SCALE,
         -1},
        {"layers.0.ffn.shared_experts.w2.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {4096, 2048},
         MOE_GROUP_SHARED,
         MOE_ROLE_DOWN,
         -1},
        {"layers.0.ffn.shared_experts.w2.scale",
         MOE_DTYPE_F8_E8M0,
         2,
         {32, 16},
         MOE_GROUP_SHARED,
         MOE_ROLE_DOWN_SCALE,
         -1},
    };
    if (t.n >= 6) check_prefix(&(table){t.v + t.n - 6, 6}, shared, 6, 0);
    /* Shared FP8 scales: E8M0 as written, f32 accepted too. */
    CHECK(t.n && (t.v[t.n - 1].dtype_mask & BIT(MOE_DTYPE_F32)));
    CHECK(by_name(&t, "layers.0.ffn.gate.bias") == NULL);
    check_distinct(&t);
    moe_free(t.v);

    t = layer_table(&d, 3);
    const exp_spec bias = {"layers.3.ffn.gate.bias",
                           MOE_DTYPE_F32,
                           1,
                           {256},
                           MOE_GROUP_ROUTER,
                           MOE_ROLE_CORRECTION_BIAS,
                           -1};
    CHECK(t.n == 1544);
    check_spec(t.n > 1 ? &t.v[1] : NULL, &bias, 3);
    CHECK(by_name(&t, "layers.3.ffn.gate.tid2eid") == NULL);
    moe_free(t.v);

    char alt[256];
    CHECK(moe_model_alt_name(&d, "layers.3.ffn.gate.bias", alt, sizeof alt));
    CHECK(!strcmp(alt, "model.layers.3.ffn.gate.bias"));
    CHECK(!moe_model_alt_name(&d, "layers.3.ffn.gate.bias", alt, 10)); /* does not fit */
    CHECK(!moe_model_alt_name(&d, "model.layers.3.ffn.gate.bias", alt, sizeof alt));
    moe_model_desc_free(&d);
}

static void test_qwen3_mixtral(void)
{
    moe_model_desc d;
    load("qwen3-30b-a3b.json", &d);
    table t = layer_table(&d, 47);
    CHECK(t.n == 1 + 128 * 3);
    const exp_spec q[] = {
        {"model.layers.47.mlp.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {128, 2048},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.47.mlp.experts.0.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {768, 2048},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
    };
    check_prefix(&t, q, 2, 47);
    const exp_spec down = {"model.layers.47.mlp.experts.127.down_proj.weight",
                           MOE_DTYPE_BF16,
                           2,
                           {2048, 768},
                           MOE_GROUP_ROUTED,
                           MOE_ROLE_DOWN,
                           127};
    check_spec(t.n ? &t.v[t.n - 1] : NULL, &down, 47);
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("qwen3-30b-a3b-fp8.json", &d);
    t = layer_table(&d, 0);
    CHECK(t.n == 1 + 128 * 6);
    const exp_spec qs = {"model.layers.0.mlp.experts.5.down_proj.weight_scale_inv",
                         MOE_DTYPE_F32,
                         2,
                         {16, 6},
                         MOE_GROUP_ROUTED,
                         MOE_ROLE_DOWN_SCALE,
                         5};
    check_spec(by_name(&t, qs.name), &qs, 0);
    const exp_spec qg = {"model.layers.0.mlp.experts.5.gate_proj.weight_scale_inv",
                         MOE_DTYPE_F32,
                         2,
                         {6, 16},
                         MOE_GROUP_ROUTED,
                         MOE_ROLE_GATE_SCALE,
                         5};
    check_spec(by_name(&t, qg.name), &qg, 0);
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("mixtral-8x7b.json", &d);
    t = layer_table(&d, 31);
    CHECK(t.n == 1 + 8 * 3);
    const exp_spec m[] = {
        {"model.layers.31.block_sparse_moe.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {8, 4096},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.31.block_sparse_moe.experts.0.w1.weight",
         MOE_DTYPE_BF16,
         2,
         {14336, 4096},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
        {"model.layers.31.block_sparse_moe.experts.0.w3.weight",
         MOE_DTYPE_BF16,
         2,
         {14336, 4096},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP,
         0},
        {"model.layers.31.block_sparse_moe.experts.0.w2.weight",
         MOE_DTYPE_BF16,
         2,
         {4096, 14336},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         0},
    };
    check_prefix(&t, m, 4, 31);
    check_distinct(&t);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

static void test_gpt_oss(void)
{
    moe_model_desc d;
    load("gpt-oss-20b.json", &d);
    table t = layer_table(&d, 23);
    const exp_spec mx[] = {
        {"model.layers.23.mlp.router.weight",
         MOE_DTYPE_BF16,
         2,
         {32, 2880},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.23.mlp.router.bias",
         MOE_DTYPE_BF16,
         1,
         {32},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_BIAS,
         -1},
        {"model.layers.23.mlp.experts.gate_up_proj_blocks",
         MOE_DTYPE_U8,
         4,
         {32, 5760, 90, 16},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP,
         -1},
        {"model.layers.23.mlp.experts.gate_up_proj_scales",
         MOE_DTYPE_U8,
         3,
         {32, 5760, 90},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP_SCALE,
         -1},
        {"model.layers.23.mlp.experts.gate_up_proj_bias",
         MOE_DTYPE_BF16,
         2,
         {32, 5760},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP_BIAS,
         -1},
        {"model.layers.23.mlp.experts.down_proj_blocks",
         MOE_DTYPE_U8,
         4,
         {32, 2880, 90, 16},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         -1},
        {"model.layers.23.mlp.experts.down_proj_scales",
         MOE_DTYPE_U8,
         3,
         {32, 2880, 90},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_SCALE,
         -1},
        {"model.layers.23.mlp.experts.down_proj_bias",
         MOE_DTYPE_BF16,
         2,
         {32, 2880},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_BIAS,
         -1},
    };
    CHECK(t.n == 8);
    check_prefix(&t, mx, 8, 23);
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("gpt-oss-120b.json", &d);
    t = layer_table(&d, 35);
    CHECK(t.n == 8);
    const exp_spec blocks = {"model.layers.35.mlp.experts.gate_up_proj_blocks",
                             MOE_DTYPE_U8,
                             4,
                             {128, 5760, 90, 16},
                             MOE_GROUP_ROUTED,
                             MOE_ROLE_GATE_UP,
                             -1};
    check_spec(t.n > 2 ? &t.v[2] : NULL, &blocks, 35);
    moe_free(t.v);
    moe_model_desc_free(&d);

    /* Without quantization_config: HF's dequantised, transposed bf16 layout. */
    const char *cfg = "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                      "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"intermediate_size\":48}";
    REQUIRE(moe_model_desc_parse(cfg, strlen(cfg), "bf16.json", &d) == MOE_OK);
    t = layer_table(&d, 0);
    const exp_spec bf[] = {
        {"model.layers.0.mlp.router.weight",
         MOE_DTYPE_BF16,
         2,
         {4, 64},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.0.mlp.router.bias",
         MOE_DTYPE_BF16,
         1,
         {4},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_BIAS,
         -1},
        {"model.layers.0.mlp.experts.gate_up_proj",
         MOE_DTYPE_BF16,
         3,
         {4, 64, 96},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP,
         -1},
        {"model.layers.0.mlp.experts.gate_up_proj_bias",
         MOE_DTYPE_BF16,
         2,
         {4, 96},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP_BIAS,
         -1},
        {"model.layers.0.mlp.experts.down_proj",
         MOE_DTYPE_BF16,
         3,
         {4, 48, 64},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         -1},
        {"model.layers.0.mlp.experts.down_proj_bias",
         MOE_DTYPE_BF16,
         2,
         {4, 64},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_BIAS,
         -1},
    };
    CHECK(t.n == 6);
    check_prefix(&t, bf, 6, 0);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

/* MiniMax-M2.7 as released: the correction bias on the block, w1/w3/w2 in FP8 with f32 block
 * scales (its index lists exactly these names, dtypes and shapes). */
static void test_minimax_m2(void)
{
    moe_model_desc d;
    load("minimax-m2.7.json", &d);
    table t = layer_table(&d, 61);
    CHECK(t.n == 2 + 256 * 6);
    const exp_spec m[] = {
        {"model.layers.61.block_sparse_moe.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {256, 3072},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.61.block_sparse_moe.e_score_correction_bias",
         MOE_DTYPE_F32,
         1,
         {256},
         MOE_GROUP_ROUTER,
         MOE_ROLE_CORRECTION_BIAS,
         -1},
        {"model.layers.61.block_sparse_moe.experts.0.w1.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {1536, 3072},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
        {"model.layers.61.block_sparse_moe.experts.0.w1.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {12, 24},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_SCALE,
         0},
        {"model.layers.61.block_sparse_moe.experts.0.w3.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {1536, 3072},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP,
         0},
        {"model.layers.61.block_sparse_moe.experts.0.w3.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {12, 24},
         MOE_GROUP_ROUTED,
         MOE_ROLE_UP_SCALE,
         0},
        {"model.layers.61.block_sparse_moe.experts.0.w2.weight",
         MOE_DTYPE_F8_E4M3,
         2,
         {3072, 1536},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         0},
        {"model.layers.61.block_sparse_moe.experts.0.w2.weight_scale_inv",
         MOE_DTYPE_F32,
         2,
         {24, 12},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN_SCALE,
         0},
    };
    check_prefix(&t, m, 8, 61);
    /* The released router is f32 (modules_to_not_convert keeps it out of FP8). */
    CHECK(t.v[0].dtype_mask & BIT(MOE_DTYPE_F32));
    check_distinct(&t);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

/* Qwen3-Next and Qwen3.5-MoE: router, experts, then shared_expert and its [1, H] gate. */
static void test_qwen3_next(void)
{
    static const char *const files[] = {"qwen3-next-80b-a3b.json", "qwen3.5-35b-a3b.json"};
    static const char *const base[] = {"model.layers", "model.language_model.layers"};
    static const int experts[] = {512, 256};
    for (int f = 0; f < 2; f++) {
        moe_model_desc d;
        load(files[f], &d);
        table t = layer_table(&d, 3);
        const int e = experts[f];
        CHECKF(t.n == (size_t)(1 + e * 3 + 3 + 1), "%s: %zu specs", files[f], t.n);
        char name[4][128];
        snprintf(name[0], sizeof name[0], "%s.3.mlp.gate.weight", base[f]);
        snprintf(name[1], sizeof name[1], "%s.3.mlp.experts.%d.down_proj.weight", base[f], e - 1);
        snprintf(name[2], sizeof name[2], "%s.3.mlp.shared_expert.up_proj.weight", base[f]);
        snprintf(name[3], sizeof name[3], "%s.3.mlp.shared_expert_gate.weight", base[f]);
        const exp_spec want[4] = {
            {name[0], MOE_DTYPE_BF16, 2, {e, 2048}, MOE_GROUP_ROUTER, MOE_ROLE_ROUTER_WEIGHT, -1},
            {name[1], MOE_DTYPE_BF16, 2, {2048, 512}, MOE_GROUP_ROUTED, MOE_ROLE_DOWN, e - 1},
            {name[2], MOE_DTYPE_BF16, 2, {512, 2048}, MOE_GROUP_SHARED, MOE_ROLE_UP, -1},
            {name[3], MOE_DTYPE_BF16, 2, {1, 2048}, MOE_GROUP_SHARED, MOE_ROLE_SHARED_GATE, -1},
        };
        for (int i = 0; i < 4; i++)
            check_spec(by_name(&t, want[i].name), &want[i], 3);
        check_spec(t.n ? &t.v[t.n - 1] : NULL, &want[3], 3); /* the gate comes last */
        moe_free(t.v);
        moe_model_desc_free(&d);
    }
}

/* ERNIE-4.5: layer 0 dense; MoE layers with the [1, E] correction bias of moe_statics. */
static void test_ernie(void)
{
    moe_model_desc d;
    load("ernie-4.5-21b-a3b.json", &d);
    table t = layer_table(&d, 0);
    CHECK(t.n == 3);
    const exp_spec dense = {"model.layers.0.mlp.down_proj.weight",
                            MOE_DTYPE_BF16,
                            2,
                            {2560, 12288},
                            MOE_GROUP_DENSE,
                            MOE_ROLE_DOWN,
                            -1};
    check_spec(by_name(&t, dense.name), &dense, 0);
    moe_free(t.v);
    t = layer_table(&d, 27);
    CHECK(t.n == 2 + 64 * 3 + 3);
    const exp_spec want[3] = {
        {"model.layers.27.mlp.moe_statics.e_score_correction_bias",
         MOE_DTYPE_F32,
         2,
         {1, 64},
         MOE_GROUP_ROUTER,
         MOE_ROLE_CORRECTION_BIAS,
         -1},
        {"model.layers.27.mlp.experts.63.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {1536, 2560},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         63},
        {"model.layers.27.mlp.shared_experts.down_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {2560, 3072},
         MOE_GROUP_SHARED,
         MOE_ROLE_DOWN,
         -1},
    };
    for (int i = 0; i < 3; i++)
        check_spec(by_name(&t, want[i].name), &want[i], 27);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

/* Llama-4 Maverick: layer 0 dense (feed_forward MLP), layer 1 MoE with stacked experts. */
static void test_llama4(void)
{
    moe_model_desc d;
    load("llama-4-maverick.json", &d);
    table t = layer_table(&d, 1);
    CHECK(t.n == 1 + 2 + 3);
    const exp_spec want[4] = {
        {"language_model.model.layers.1.feed_forward.router.weight",
         MOE_DTYPE_BF16,
         2,
         {128, 5120},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"language_model.model.layers.1.feed_forward.experts.gate_up_proj",
         MOE_DTYPE_BF16,
         3,
         {128, 5120, 16384},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE_UP,
         -1},
        {"language_model.model.layers.1.feed_forward.experts.down_proj",
         MOE_DTYPE_BF16,
         3,
         {128, 8192, 5120},
         MOE_GROUP_ROUTED,
         MOE_ROLE_DOWN,
         -1},
        {"language_model.model.layers.1.feed_forward.shared_expert.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {8192, 5120},
         MOE_GROUP_SHARED,
         MOE_ROLE_GATE,
         -1},
    };
    for (int i = 0; i < 4; i++)
        check_spec(by_name(&t, want[i].name), &want[i], 1);
    moe_free(t.v);
    t = layer_table(&d, 0);
    const exp_spec dense = {"language_model.model.layers.0.feed_forward.up_proj.weight",
                            MOE_DTYPE_BF16,
                            2,
                            {16384, 5120},
                            MOE_GROUP_DENSE,
                            MOE_ROLE_UP,
                            -1};
    CHECK(t.n == 3);
    check_spec(by_name(&t, dense.name), &dense, 0);
    moe_free(t.v);
    moe_model_desc_free(&d);
}

/* The DeepSeek-V3 layout under deepseek_v32 and glm4_moe; Kimi-K2.5's under language_model,
 * with the spelling transformers 5.25 saves as the other name. */
static void test_v3_layouts(void)
{
    moe_model_desc d;
    load("glm4-moe-transformers5.json", &d);
    table t = layer_table(&d, 1);
    CHECK(t.n == 2 + 128 * 3 + 3);
    const exp_spec g[] = {
        {"model.layers.1.mlp.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {128, 4096},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"model.layers.1.mlp.gate.e_score_correction_bias",
         MOE_DTYPE_F32,
         1,
         {128},
         MOE_GROUP_ROUTER,
         MOE_ROLE_CORRECTION_BIAS,
         -1},
        {"model.layers.1.mlp.experts.0.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {1408, 4096},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
    };
    check_prefix(&t, g, 3, 1);
    const exp_spec gs = {"model.layers.1.mlp.shared_experts.down_proj.weight",
                         MOE_DTYPE_BF16,
                         2,
                         {4096, 1408},
                         MOE_GROUP_SHARED,
                         MOE_ROLE_DOWN,
                         -1};
    check_spec(t.n ? &t.v[t.n - 1] : NULL, &gs, 1);
    moe_free(t.v);
    t = layer_table(&d, 0);
    CHECK(t.n == 3 && !strcmp(t.v[0].name, "model.layers.0.mlp.gate_proj.weight"));
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("deepseek-v32-transformers5.json", &d);
    t = layer_table(&d, 3);
    CHECK(t.n == 2 + 256 * 3 + 3);
    CHECK(!strcmp(t.v[1].name, "model.layers.3.mlp.gate.e_score_correction_bias"));
    moe_free(t.v);
    moe_model_desc_free(&d);

    load("kimi-k25-transformers5.json", &d);
    t = layer_table(&d, 3);
    CHECK(t.n == 2 + 256 * 3 + 3);
    const exp_spec k[] = {
        {"language_model.model.layers.3.mlp.gate.weight",
         MOE_DTYPE_BF16,
         2,
         {256, 7168},
         MOE_GROUP_ROUTER,
         MOE_ROLE_ROUTER_WEIGHT,
         -1},
        {"language_model.model.layers.3.mlp.gate.e_score_correction_bias",
         MOE_DTYPE_F32,
         1,
         {256},
         MOE_GROUP_ROUTER,
         MOE_ROLE_CORRECTION_BIAS,
         -1},
        {"language_model.model.layers.3.mlp.experts.0.gate_proj.weight",
         MOE_DTYPE_BF16,
         2,
         {2048, 7168},
         MOE_GROUP_ROUTED,
         MOE_ROLE_GATE,
         0},
    };
    check_prefix(&t, k, 3, 3);
    check_distinct(&t);
    moe_free(t.v);
    t = layer_table(&d, 0);
    const exp_spec kd = {"language_model.model.layers.0.mlp.gate_proj.weight",
                         MOE_DTYPE_BF16,
                         2,
                         {18432, 7168},
                         MOE_GROUP_DENSE,
                         MOE_ROLE_GATE,
                         -1};
    check_spec(t.n ? &t.v[0] : NULL, &kd, 0);
    moe_free(t.v);
    char alt[200];
    CHECK(moe_model_alt_name(&d, "language_model.model.layers.3.mlp.gate.weight", alt, sizeof alt));
    CHECK(!strcmp(alt, "language_model.model.blocks.3.mlp.gate.weight"));
    CHECK(
        !moe_model_alt_name(&d, "language_model.model.blocks.3.mlp.gate.weight", alt, sizeof alt));
    CHECK(!moe_model_alt_name(&d, "model.layers.3.mlp.gate.weight", alt, sizeof alt));
    CHECK(!moe_model_alt_name(&d, "language_model.model.layers.3.mlp.gate.weight", alt, 20));
    moe_model_desc_free(&d);
}

int main(void)
{
    test_deepseek_v3();
    test_kimi_and_v2();
    test_deepseek_v4();
    test_qwen3_mixtral();
    test_gpt_oss();
    test_minimax_m2();
    test_v3_layouts();
    test_qwen3_next();
    test_ernie();
    test_llama4();
    return TEST_END();
}
