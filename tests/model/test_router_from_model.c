/* test_router_from_model.c — moe_router_create_from_model on small written checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "core/alloc.h"
#include "io/st_writer.h"
#include "model/model.h"
#include "model/model_handle.h"

/* Layer 0 dense, layers 1 and 2 MoE: 8 experts in 2 groups, keep 1, top-2, rsf 2.5. */
static const char cfg_v3[] =
    "{\"model_type\":\"deepseek_v3\",\"hidden_size\":128,\"num_hidden_layers\":3,"
    "\"intermediate_size\":128,\"moe_intermediate_size\":128,\"n_routed_experts\":8,"
    "\"num_experts_per_tok\":2,\"n_group\":2,\"topk_group\":1,\"first_k_dense_replace\":1,"
    "\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,"
    "\"routed_scaling_factor\":2.5,\"vocab_size\":1000}";

/* Layer 0 hash-routed (tid2eid [100, 2]), layers 1 and 2 scored with sqrt-softplus. */
static const char cfg_v4[] =
    "{\"model_type\":\"deepseek_v4\",\"hidden_size\":64,\"num_hidden_layers\":3,"
    "\"moe_intermediate_size\":64,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
    "\"num_hash_layers\":1,\"vocab_size\":100,\"norm_topk_prob\":true,"
    "\"routed_scaling_factor\":1.5,\"scoring_func\":\"sqrtsoftplus\",\"expert_dtype\":\"fp4\"}";

#define E 8
#define K 2
#define VOCAB 100

/* What the fill callback writes: router tensors get real values, everything else zeros. */
typedef struct ckpt_plan {
    moe_tensor_role role[4096];
    size_t n;
    moe_dtype bias_dtype, table_dtype;
    int bad_table_entry; /* > 0: write this value into row 3, column 1 of tid2eid */
    bool nan_bias;
} ckpt_plan;

/* The bias of expert x, exact in bf16 (few mantissa bits) so both encodings agree. */
static float bias_value(int x) { return (float)(x % 5) * 0.25f - 0.5f + (x == 6 ? 0.125f : 0.0f); }

static int table_value(int64_t row, int col) { return (int)((row * 3 + col * 5) % E); }

static void put_bias(const ckpt_plan *p, uint64_t elem, unsigned char *dst)
{
    float f = p->nan_bias && elem == 5 ? NAN : bias_value((int)elem);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (p->bias_dtype == MOE_DTYPE_BF16) {
        uint16_t h = (uint16_t)(u >> 16); /* exact: bias_value has few mantissa bits */
        memcpy(dst, &h, 2);
    } else {
        memcpy(dst, &u, 4);
    }
}

static void put_entry(const ckpt_plan *p, uint64_t elem, unsigned char *dst)
{
    const int64_t row = (int64_t)(elem / K);
    const int col = (int)(elem % K);
    int64_t v = table_value(row, col);
    if (p->bad_table_entry && row == 3 && col == 1) v = p->bad_table_entry;
    if (p->table_dtype == MOE_DTYPE_I32) {
        int32_t v32 = (int32_t)v;
        memcpy(dst, &v32, 4);
    } else {
        memcpy(dst, &v, 8);
    }
}

static moe_status fill(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    const ckpt_plan *p = ctx;
    unsigned char *out = buf;
    memset(buf, 0, len);
    const moe_tensor_role role = index < p->n ? p->role[index] : MOE_ROLE_GATE;
    size_t width = 0;
    if (role == MOE_ROLE_CORRECTION_BIAS) width = p->bias_dtype == MOE_DTYPE_BF16 ? 2 : 4;
    if (role == MOE_ROLE_TID2EID) width = p->table_dtype == MOE_DTYPE_I32 ? 4 : 8;
    if (!width) return MOE_OK;
    for (size_t b = 0; b < len; b += width) {
        const uint64_t elem = (offset + b) / width;
        if (role == MOE_ROLE_CORRECTION_BIAS)
            put_bias(p, elem, out + b);
        else
            put_entry(p, elem, out + b);
    }
    return MOE_OK;
}

/* Writes DIR/config.json and DIR/model.safetensors from the tables of CFG; DROP_ROLE's
 * tensors (if not -1) are left out, and the bias gets one extra element when BAD_SHAPE. */
static void write_model(const char *dir, const char *cfg, ckpt_plan *plan, int drop_role,
                        bool bad_shape)
{
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(cfg, 1, strlen(cfg), f) == strlen(cfg) && fclose(f) == 0);
    moe_model_desc d;
    REQUIRE(moe_model_desc_parse(cfg, strlen(cfg), "test config", &d) == MOE_OK);
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    plan->n = 0;
    for (int layer = 0; layer < d.n_layers; layer++) {
        moe_tensor_spec *v = NULL;
        size_t n = 0;
        REQUIRE(moe_model_layer_tensors(&d, layer, &v, &n) == MOE_OK);
        for (size_t i = 0; i < n; i++) {
            if ((int)v[i].role == drop_role) continue;
            moe_dtype dt = v[i].dtype;
            int64_t shape[4];
            memcpy(shape, v[i].shape, sizeof shape);
            if (v[i].role == MOE_ROLE_CORRECTION_BIAS) {
                dt = plan->bias_dtype;
                if (bad_shape) shape[0]++;
            }
            if (v[i].role == MOE_ROLE_TID2EID) dt = plan->table_dtype;
            REQUIRE(plan->n < sizeof plan->role / sizeof plan->role[0]);
            plan->role[plan->n++] = v[i].role;
            REQUIRE(moe_st_writer_add(w, v[i].name, dt, v[i].ndim, shape) == MOE_OK);
        }
        moe_free(v);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moe_status st = moe_st_writer_write(w, path, fill, plan);
    if (st) fprintf(stderr, "%s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    moe_st_writer_destroy(w);
    moe_model_desc_free(&d);
}

static moe_model *open_model(const char *dir, unsigned flags)
{
    moe_model *m = NULL;
    moe_status st = moe_model_open_ex(dir, NULL, flags, &m);
    if (st) fprintf(stderr, "open: %s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    return m;
}

/* The router the layer must equal, built by hand from the values the checkpoint holds. */
static moe_router *expected_router(moe_route_method method, moe_score_func score, int g, int tg,
                                   float rsf, const void *table)
{
    static float bias[E];
    for (int x = 0; x < E; x++)
        bias[x] = bias_value(x);
    moe_router_params p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.method = method;
    p.score = score;
    p.n_experts = E;
    p.top_k = K;
    p.n_group = g;
    p.topk_group = tg;
    p.norm_topk_prob = true;
    p.routed_scaling_factor = rsf;
    if (method == MOE_ROUTE_NOAUX_TC) {
        p.correction_bias = bias;
        p.correction_bias_dtype = MOE_DTYPE_F32;
    } else {
        p.tid2eid = table;
        p.tid2eid_dtype = MOE_DTYPE_I32;
        p.vocab_size = VOCAB;
    }
    moe_router *r = NULL;
    REQUIRE(moe_router_create(&p, &r) == MOE_OK);
    return r;
}

/* Both routers give the same bits on the same rows. */
static void same_routing(const moe_router *a, const moe_router *b, const char *what)
{
    enum { T = 31 };
    float z[T * E];
    int32_t tokens[T], ids_a[T * K], ids_b[T * K];
    float w_a[T * K], w_b[T * K];
    for (int i = 0; i < T * E; i++)
        z[i] = (float)((i * 37) % 23) * 0.3f - 3.0f;
    for (int t = 0; t < T; t++)
        tokens[t] = (t * 13) % VOCAB;
    CHECK_STATUS(moe_router_forward(a, T, z, tokens, MOE_DTYPE_I32, ids_a, w_a), MOE_OK);
    CHECK_STATUS(moe_router_forward(b, T, z, tokens, MOE_DTYPE_I32, ids_b, w_b), MOE_OK);
    CHECKF(!memcmp(ids_a, ids_b, sizeof ids_a) && !memcmp(w_a, w_b, sizeof w_a), "%s", what);
}

static bool has(const char *needle) { return strstr(moe_last_error(), needle) != NULL; }

static void test_v3(const char *dir)
{
    ckpt_plan *plan = calloc(1, sizeof *plan);
    REQUIRE(plan);
    plan->bias_dtype = MOE_DTYPE_BF16;
    write_model(dir, cfg_v3, plan, -1, false);
    moe_model *m = open_model(dir, 0);
    moe_router *want = expected_router(MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 2, 1, 2.5f, NULL);
    for (int layer = 1; layer <= 2; layer++) {
        moe_router *r = NULL;
        CHECK_STATUS(moe_router_create_from_model(m, layer, &r), MOE_OK);
        if (!r) continue;
        same_routing(r, want, "v3 layer vs the hand-built router");
        const char *e = moe_router_explain(r);
        CHECKF(strstr(e, "noaux_tc") && strstr(e, "converted from bf16") &&
                   strstr(e, "n_group=2 topk_group=1") && strstr(e, "routed_scaling_factor=2.5"),
               "%s", e);
        moe_router_destroy(r);
    }
    moe_router_destroy(want);

    moe_router *sentinel = (moe_router *)&sentinel, *r = sentinel;
    CHECK_STATUS(moe_router_create_from_model(m, 0, &r), MOE_EINVAL);
    CHECK(has("layer 0 is dense") && r == sentinel);
    CHECK_STATUS(moe_router_create_from_model(m, 3, &r), MOE_EINVAL);
    CHECK(has("layer 3") && r == sentinel);
    CHECK_STATUS(moe_router_create_from_model(m, -1, &r), MOE_EINVAL);
    CHECK_STATUS(moe_router_create_from_model(NULL, 1, &r), MOE_EINVAL);
    CHECK_STATUS(moe_router_create_from_model(m, 1, NULL), MOE_EINVAL);
    moe_model_close(m);

    /* A non-finite bias value, named with its layer. */
    plan->bias_dtype = MOE_DTYPE_F32;
    plan->nan_bias = true;
    write_model(dir, cfg_v3, plan, -1, false);
    m = open_model(dir, 0);
    CHECK_STATUS(moe_router_create_from_model(m, 2, &r), MOE_EVALUE);
    CHECKF(has("layer 2") && has("correction_bias[5]") && r == sentinel, "%s", moe_last_error());
    moe_model_close(m);
    plan->nan_bias = false;

    /* Opened without verification: a missing or misshapen bias is still caught here. */
    write_model(dir, cfg_v3, plan, MOE_ROLE_CORRECTION_BIAS, false);
    m = open_model(dir, MOE_OPEN_SKIP_VERIFY);
    CHECK_STATUS(moe_router_create_from_model(m, 1, &r), MOE_EMISSING);
    CHECKF(has("model.layers.1.mlp.gate.e_score_correction_bias") && r == sentinel, "%s",
           moe_last_error());
    moe_model_close(m);
    write_model(dir, cfg_v3, plan, -1, true);
    m = open_model(dir, MOE_OPEN_SKIP_VERIFY);
    CHECK_STATUS(moe_router_create_from_model(m, 1, &r), MOE_ESHAPE);
    CHECKF(has("[9]") && has("[8]"), "%s", moe_last_error());
    moe_model_close(m);
    free(plan);
}

static void test_v4(const char *dir)
{
    ckpt_plan *plan = calloc(1, sizeof *plan);
    REQUIRE(plan);
    plan->bias_dtype = MOE_DTYPE_F32;
    static int32_t table[VOCAB * K];
    for (int64_t row = 0; row < VOCAB; row++)
        for (int col = 0; col < K; col++)
            table[row * K + col] = table_value(row, col);
    const moe_dtype widths[] = {MOE_DTYPE_I64, MOE_DTYPE_I32};
    for (int wi = 0; wi < 2; wi++) {
        plan->table_dtype = widths[wi];
        write_model(dir, cfg_v4, plan, -1, false);
        moe_model *m = open_model(dir, 0);
        moe_router *r = NULL;
        CHECK_STATUS(moe_router_create_from_model(m, 0, &r), MOE_OK);
        moe_router *want =
            expected_router(MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 1, 1, 1.5f, table);
        if (r) same_routing(r, want, "v4 hash layer vs the hand-built router");
        /* A hash layer without token ids is an error, not "route everything by row 0". */
        float z[E] = {0};
        int32_t ids[K];
        float w[K];
        if (r) CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_I32, ids, w), MOE_EINVAL);
        CHECK(has("hash-routed"));
        moe_router_destroy(r);
        moe_router_destroy(want);
        r = NULL;
        CHECK_STATUS(moe_router_create_from_model(m, 1, &r), MOE_OK);
        want = expected_router(MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 1, 1, 1.5f, NULL);
        if (r) same_routing(r, want, "v4 score layer vs the hand-built router");
        moe_router_destroy(r);
        moe_router_destroy(want);
        moe_model_close(m);
    }
    /* A table entry out of range in the checkpoint: caught at creation, with row and column. */
    plan->table_dtype = MOE_DTYPE_I64;
    plan->bad_table_entry = 8;
    write_model(dir, cfg_v4, plan, -1, false);
    moe_model *m = open_model(dir, 0);
    moe_router *r = NULL;
    CHECK_STATUS(moe_router_create_from_model(m, 0, &r), MOE_ERANGE);
    CHECKF(has("layer 0") && has("tid2eid[3][1] = 8"), "%s", moe_last_error());
    moe_model_close(m);
    /* The same entry repeating its row's other column. */
    plan->bad_table_entry = table_value(3, 0);
    write_model(dir, cfg_v4, plan, -1, false);
    m = open_model(dir, 0);
    CHECK_STATUS(moe_router_create_from_model(m, 0, &r), MOE_EVALUE);
    CHECKF(has("row 3"), "%s", moe_last_error());
    moe_model_close(m);
    free(plan);
}

/* A hand-written file whose f32 bias starts 2 bytes past a 4-byte boundary: the router reads
 * it through memcpy, and gets the same values. */
static void test_unaligned(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(cfg_v3, 1, strlen(cfg_v3), f) == strlen(cfg_v3) && fclose(f) == 0);
    char header[256];
    int n = snprintf(header, sizeof header,
                     "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[1],"
                     "\"data_offsets\":[0,2]},\"model.layers.1.mlp.gate.e_score_correction_bias\":"
                     "{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[2,%d]}}",
                     E, 2 + 4 * E);
    while ((8 + n) % 8)
        header[n++] = ' ';
    const uint64_t hlen = (uint64_t)n;
    unsigned char data[2 + 4 * E] = {0};
    for (int x = 0; x < E; x++) {
        float b = bias_value(x);
        memcpy(data + 2 + 4 * x, &b, 4);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(&hlen, 8, 1, f) == 1 && fwrite(header, 1, (size_t)n, f) == (size_t)n);
    REQUIRE(fwrite(data, 1, sizeof data, f) == sizeof data && fclose(f) == 0);
    moe_model *m = open_model(dir, MOE_OPEN_SKIP_VERIFY);
    moe_router *r = NULL;
    CHECK_STATUS(moe_router_create_from_model(m, 1, &r), MOE_OK);
    moe_router *want = expected_router(MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 2, 1, 2.5f, NULL);
    if (r) same_routing(r, want, "unaligned bias vs the hand-built router");
    moe_router_destroy(r);
    moe_router_destroy(want);
    moe_model_close(m);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_router_model_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    test_v3(dir);
    test_v4(dir);
    test_unaligned(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
