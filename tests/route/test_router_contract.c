/* test_router_contract.c — the routing contract, every validation, and routing.md §8 bugs. */
#include <float.h>
#include <stddef.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route_oracle.h"
#include "test.h"

#define POISON_ID ((int32_t)0x7EADBEEF)
#define POISON_W 12345.0f

static bool msg_has(const char *needle) { return strstr(moe_last_error(), needle) != NULL; }

static void poison(int32_t *ids, float *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ids[i] = POISON_ID;
        w[i] = POISON_W;
    }
}

static bool untouched(const int32_t *ids, const float *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] != POISON_ID || w[i] != POISON_W) return false;
    return true;
}

/* Creates a router that must succeed. */
static moe_router *make(const moe_router_params *p)
{
    moe_router *r = NULL;
    moe_status st = moe_router_create(p, &r);
    if (st) fprintf(stderr, "create: %s\n", moe_last_error());
    REQUIRE(st == MOE_OK && r);
    return r;
}

static moe_router *make_cfg(const route_cfg *c, const float *bias, const int32_t *table,
                            int64_t vocab)
{
    moe_router_params p = route_params(c, bias, table, vocab);
    return make(&p);
}

/* Creation must fail with WANT and a message holding NEEDLE, leaving *out as it was. */
static void create_fails(const moe_router_params *p, moe_status want, const char *needle,
                         const char *what)
{
    moe_router *sentinel = (moe_router *)&sentinel, *r = sentinel;
    moe_status st = moe_router_create(p, &r);
    CHECKF(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, moe_last_error());
    CHECKF(r == sentinel, "%s: *out was written on error", what);
    CHECKF(msg_has(needle), "%s: message '%s' lacks '%s'", what, moe_last_error(), needle);
    if (st == MOE_OK && r != sentinel) moe_router_destroy(r);
}

static bool ids_valid(const int32_t *ids, int k, int e)
{
    bool seen[ORACLE_MAX_E] = {false};
    for (int j = 0; j < k; j++) {
        if (ids[j] < 0 || ids[j] >= e || seen[ids[j]]) return false;
        seen[ids[j]] = true;
    }
    return true;
}

static const float zero_bias[ORACLE_MAX_E];

static const route_cfg base_noaux = {
    "v3", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, 2.5f};

/* ---- Validation at creation ------------------------------------------------------------ */

static void test_create_validation(void)
{
    const route_cfg c = base_noaux;
    moe_router_params p = route_params(&c, zero_bias, NULL, 0);
    moe_router *r = NULL;
    CHECK_STATUS(moe_router_create(NULL, &r), MOE_EINVAL);
    CHECK_STATUS(moe_router_create(&p, NULL), MOE_EINVAL);

    moe_router_params q = p;
    q.size = offsetof(moe_router_params, vocab_size);
    create_fails(&q, MOE_EINVAL, "size", "size too small");
    q = p, q.method = (moe_route_method)99;
    create_fails(&q, MOE_EINVAL, "method", "unknown method");
    q = p, q.score = (moe_score_func)-1;
    create_fails(&q, MOE_EINVAL, "score", "unknown score");
    q = p, q.top_k = 0;
    create_fails(&q, MOE_EINVAL, "top_k", "top_k 0");
    q = p, q.top_k = 257;
    create_fails(&q, MOE_EINVAL, "top_k", "top_k > E");
    q = p, q.n_experts = 0;
    create_fails(&q, MOE_EINVAL, "n_experts", "E 0");
    q = p, q.n_experts = 8192, q.n_group = 1, q.topk_group = 1;
    create_fails(&q, MOE_EINVAL, "n_experts", "E above the maximum");
    q = p, q.n_group = 0;
    create_fails(&q, MOE_EINVAL, "n_group", "n_group 0");
    q = p, q.n_group = 7;
    create_fails(&q, MOE_EINVAL, "n_group", "n_group not dividing");
    q = p, q.topk_group = 0;
    create_fails(&q, MOE_EINVAL, "topk_group", "topk_group 0");
    q = p, q.topk_group = 9;
    create_fails(&q, MOE_EINVAL, "topk_group", "topk_group > n_group");
    q = p, q.topk_group = 1, q.top_k = 33;
    create_fails(&q, MOE_EINVAL, "top_k", "top_k beyond the kept groups");
    q = p, q.n_group = 256, q.topk_group = 128;
    create_fails(&q, MOE_EINVAL, "n_group", "noaux_tc with one expert per group");
    q = p, q.score = MOE_SCORE_SOFTMAX;
    create_fails(&q, MOE_EINVAL, "score", "softmax for noaux_tc");
    q = p, q.routed_scaling_factor = 0.0f;
    create_fails(&q, MOE_EINVAL, "routed_scaling_factor", "rsf 0");
    q = p, q.routed_scaling_factor = NAN;
    create_fails(&q, MOE_EINVAL, "routed_scaling_factor", "rsf NaN");
    q = p, q.routed_scaling_factor = INFINITY;
    create_fails(&q, MOE_EINVAL, "routed_scaling_factor", "rsf Inf");

    /* The correction bias: required by noaux_tc, refused elsewhere, finite, known dtype. */
    q = p, q.correction_bias = NULL;
    create_fails(&q, MOE_EINVAL, "correction_bias", "noaux_tc without a bias");
    q = p, q.correction_bias_dtype = MOE_DTYPE_F64;
    create_fails(&q, MOE_EDTYPE, "correction_bias_dtype", "f64 bias");
    float bad_bias[256] = {0};
    bad_bias[77] = NAN;
    q = p, q.correction_bias = bad_bias;
    create_fails(&q, MOE_EVALUE, "correction_bias[77]", "NaN bias");
    bad_bias[77] = -INFINITY;
    create_fails(&q, MOE_EVALUE, "correction_bias[77]", "-Inf bias");
    uint16_t bf16_inf[256] = {0};
    bf16_inf[3] = 0x7F80; /* +Inf in bf16 */
    q = p, q.correction_bias = bf16_inf, q.correction_bias_dtype = MOE_DTYPE_BF16;
    create_fails(&q, MOE_EVALUE, "correction_bias[3]", "bf16 +Inf bias");
    const route_cfg soft = {"q", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 128, 8, 1, 1, true, 1};
    q = route_params(&soft, NULL, NULL, 0), q.correction_bias = zero_bias;
    q.correction_bias_dtype = MOE_DTYPE_F32;
    create_fails(&q, MOE_EINVAL, "correction_bias", "a bias for softmax_topk");

    /* Method-specific rules. */
    const route_cfg top1 = {"l4", MOE_ROUTE_SIGMOID_TOP1, MOE_SCORE_SIGMOID, 16, 1, 1, 1, false, 1};
    q = route_params(&top1, NULL, NULL, 0), q.top_k = 2;
    create_fails(&q, MOE_EINVAL, "top_k", "sigmoid_top1 with K = 2");
    q = route_params(&top1, NULL, NULL, 0), q.norm_topk_prob = true;
    create_fails(&q, MOE_EINVAL, "norm_topk_prob", "sigmoid_top1 renormalised");
    q = route_params(&top1, NULL, NULL, 0), q.score = MOE_SCORE_SOFTMAX;
    create_fails(&q, MOE_EINVAL, "score", "sigmoid_top1 with softmax");
    const route_cfg oss = {"oss", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 32, 4, 1, 1, true, 1};
    q = route_params(&oss, NULL, NULL, 0), q.norm_topk_prob = false;
    create_fails(&q, MOE_EINVAL, "norm_topk_prob", "topk_softmax not normalised");
    q = route_params(&oss, NULL, NULL, 0), q.score = MOE_SCORE_SIGMOID;
    create_fails(&q, MOE_EINVAL, "score", "topk_softmax with sigmoid");
    const route_cfg greedy = {"v2", MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, false, 1};
    q = route_params(&greedy, NULL, NULL, 0), q.score = MOE_SCORE_SQRTSOFTPLUS;
    create_fails(&q, MOE_EINVAL, "score", "greedy with sqrtsoftplus");

    /* softmax_bias (ERNIE-4.5): a bias, renormalised, softmax, and a finite floor >= 0 that
     * no other method takes. */
    const route_cfg ernie = {"ernie", MOE_ROUTE_SOFTMAX_BIAS, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, true,
                             1};
    q = route_params(&ernie, NULL, NULL, 0);
    create_fails(&q, MOE_EINVAL, "correction_bias", "softmax_bias without a bias");
    q = route_params(&ernie, zero_bias, NULL, 0), q.norm_topk_prob = false;
    create_fails(&q, MOE_EINVAL, "norm_topk_prob", "softmax_bias not renormalised");
    q = route_params(&ernie, zero_bias, NULL, 0), q.score = MOE_SCORE_SIGMOID;
    create_fails(&q, MOE_EINVAL, "score", "softmax_bias with sigmoid");
    q = route_params(&ernie, zero_bias, NULL, 0), q.renorm_min = -1e-12f;
    create_fails(&q, MOE_EINVAL, "renorm_min", "a negative floor");
    q.renorm_min = NAN;
    create_fails(&q, MOE_EINVAL, "renorm_min", "a NaN floor");
    q.renorm_min = INFINITY;
    create_fails(&q, MOE_EINVAL, "renorm_min", "an infinite floor");
    q = route_params(&soft, NULL, NULL, 0), q.renorm_min = 1e-12f;
    create_fails(&q, MOE_EINVAL, "renorm_min", "a floor for softmax_topk");
    /* A struct that ends before renorm_min reads it as 0. */
    q = route_params(&ernie, zero_bias, NULL, 0), q.renorm_min = NAN;
    q.size = offsetof(moe_router_params, renorm_min);
    moe_router *old = make(&q);
    CHECK(strstr(moe_router_explain(old), "renorm_min=0") != NULL);
    moe_router_destroy(old);
}

static void test_table_validation(void)
{
    const route_cfg c = {"v4 hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 16, 3, 1, 1, true,
                         1.5f};
    int32_t table[4 * 3] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    const moe_router_params p = route_params(&c, NULL, table, 4);
    moe_router *r = make(&p);
    moe_router_destroy(r);

    moe_router_params q = p;
    q.tid2eid = NULL;
    create_fails(&q, MOE_EINVAL, "tid2eid", "hash without a table");
    q = p, q.tid2eid_dtype = MOE_DTYPE_U8;
    create_fails(&q, MOE_EDTYPE, "tid2eid_dtype", "u8 table");
    q = p, q.tid2eid_dtype = MOE_DTYPE_F32;
    create_fails(&q, MOE_EDTYPE, "tid2eid_dtype", "f32 table");
    q = p, q.vocab_size = 0;
    create_fails(&q, MOE_EINVAL, "vocab_size", "vocab 0");
    q = p, q.score = MOE_SCORE_SOFTMAX;
    create_fails(&q, MOE_EINVAL, "score", "hash with softmax");
    q = p, q.correction_bias = zero_bias, q.correction_bias_dtype = MOE_DTYPE_F32;
    create_fails(&q, MOE_EINVAL, "correction_bias", "hash with a bias");

    table[7] = 16; /* row 2, column 1 */
    create_fails(&p, MOE_ERANGE, "tid2eid[2][1] = 16", "entry = E");
    table[7] = -1;
    create_fails(&p, MOE_ERANGE, "tid2eid[2][1] = -1", "negative entry");
    table[7] = 6; /* row 2 is now 6 6 8 */
    create_fails(&p, MOE_EVALUE, "row 2 names expert 6 twice (columns 0 and 1)", "repeat");
    table[7] = 7;

    /* i64 entries are checked in their width: 2^32 + 1 must not pass as 1. */
    int64_t wide[4 * 3] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    q = p, q.tid2eid = wide, q.tid2eid_dtype = MOE_DTYPE_I64;
    r = make(&q);
    moe_router_destroy(r);
    wide[11] = (INT64_C(1) << 32) + 1;
    create_fails(&q, MOE_ERANGE, "tid2eid[3][2] = 4294967297", "i64 entry past 2^32");

    /* A table for another method is refused rather than ignored. */
    const route_cfg soft = {"q", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 16, 3, 1, 1, true, 1};
    q = route_params(&soft, NULL, NULL, 0), q.tid2eid = table, q.tid2eid_dtype = MOE_DTYPE_I32;
    q.vocab_size = 4;
    create_fails(&q, MOE_EINVAL, "tid2eid", "a table for softmax_topk");
}

/* ---- Validation at forward ------------------------------------------------------------- */

static void test_forward_validation(void)
{
    const route_cfg c = {"v4 hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 16, 3, 1, 1, true,
                         1.5f};
    int32_t table[5 * 3];
    rng g = {7};
    rng_table(&g, 5, 3, 16, table);
    moe_router *r = make_cfg(&c, NULL, table, 5);
    float z[4 * 16];
    for (int i = 0; i < 4 * 16; i++)
        z[i] = rng_uniform(&g, -3, 3);
    int32_t ids[4 * 3];
    float w[4 * 3];
    int32_t tok32[4] = {0, 4, 2, 1};
    int64_t tok64[4] = {0, 4, 2, 1};

    /* T = 0 is a no-op whatever the pointers. */
    CHECK_STATUS(moe_router_forward(r, 0, NULL, NULL, MOE_DTYPE_INVALID, NULL, NULL), MOE_OK);
    CHECK_STATUS(moe_router_forward(NULL, 4, z, tok32, MOE_DTYPE_I32, ids, w), MOE_EINVAL);

    poison(ids, w, 12);
    CHECK_STATUS(moe_router_forward(r, 4, NULL, tok32, MOE_DTYPE_I32, ids, w), MOE_EINVAL);
    CHECK(msg_has("logits"));
    CHECK_STATUS(moe_router_forward(r, 4, z, tok32, MOE_DTYPE_I32, NULL, w), MOE_EINVAL);
    CHECK(msg_has("ids"));
    CHECK_STATUS(moe_router_forward(r, 4, z, tok32, MOE_DTYPE_I32, ids, NULL), MOE_EINVAL);
    CHECK(msg_has("weights"));
    CHECK_STATUS(moe_router_forward(r, 4, z, NULL, MOE_DTYPE_I32, ids, w), MOE_EINVAL);
    CHECKF(msg_has("hash-routed") && msg_has("--input-ids"), "'%s'", moe_last_error());
    CHECK_STATUS(moe_router_forward(r, 4, z, tok32, MOE_DTYPE_U32, ids, w), MOE_EDTYPE);
    CHECK(msg_has("token_id_dtype"));
    /* A bad id in the last row: nothing is written, not even the rows before it. */
    tok32[3] = 5;
    CHECK_STATUS(moe_router_forward(r, 4, z, tok32, MOE_DTYPE_I32, ids, w), MOE_ERANGE);
    CHECKF(msg_has("token_ids[3] = 5"), "'%s'", moe_last_error());
    tok64[3] = -1;
    CHECK_STATUS(moe_router_forward(r, 4, z, tok64, MOE_DTYPE_I64, ids, w), MOE_ERANGE);
    CHECKF(msg_has("token_ids[3] = -1"), "'%s'", moe_last_error());
    tok64[3] = (INT64_C(1) << 32) + 1; /* would be 1 if narrowed to 32 bits */
    CHECK_STATUS(moe_router_forward(r, 4, z, tok64, MOE_DTYPE_I64, ids, w), MOE_ERANGE);
    CHECK(untouched(ids, w, 12));

    /* Both widths, read in place, give the same result: the table's rows in order. */
    tok32[3] = 1, tok64[3] = 1;
    int32_t ids64[4 * 3];
    float w64[4 * 3];
    CHECK_STATUS(moe_router_forward(r, 4, z, tok32, MOE_DTYPE_I32, ids, w), MOE_OK);
    CHECK_STATUS(moe_router_forward(r, 4, z, tok64, MOE_DTYPE_I64, ids64, w64), MOE_OK);
    CHECK(!memcmp(ids, ids64, sizeof ids) && !memcmp(w, w64, sizeof w));
    for (int t = 0; t < 4; t++)
        CHECK(!memcmp(ids + 3 * t, table + 3 * tok32[t], 3 * sizeof(int32_t)));
    moe_router_destroy(r);

    /* Token ids are ignored (may be NULL) for every other method. */
    const route_cfg soft = {"q", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 16, 3, 1, 1, true, 1};
    r = make_cfg(&soft, NULL, NULL, 0);
    CHECK_STATUS(moe_router_forward(r, 4, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
    moe_router_destroy(r);
}

/* ---- The contract on hostile rows ------------------------------------------------------ */

/* Every method at once, each on the same row. */
static const route_cfg all_methods[] = {
    {"softmax_topk", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 64, 8, 1, 1, true, 1.0f},
    {"softmax_topk raw", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 64, 8, 1, 1, false, 1.0f},
    {"topk_softmax", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 64, 4, 1, 1, true, 1.0f},
    {"greedy", MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, false, 16.0f},
    {"group_limited_greedy", MOE_ROUTE_GROUP_LIMITED_GREEDY, MOE_SCORE_SOFTMAX, 64, 6, 8, 3, true,
     16.0f},
    {"noaux_tc", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 64, 8, 8, 4, true, 2.5f},
    {"noaux_tc sqrtsoftplus", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 64, 6, 1, 1, true, 1.5f},
    {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 64, 6, 1, 1, true, 1.5f},
    {"sigmoid_top1", MOE_ROUTE_SIGMOID_TOP1, MOE_SCORE_SIGMOID, 64, 1, 1, 1, false, 1.0f},
    {"softmax_bias", MOE_ROUTE_SOFTMAX_BIAS, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, true, 1.0f},
};
#define N_METHODS (sizeof all_methods / sizeof all_methods[0])

/* Routes one row with every method; checks the ids and the weights' finiteness. */
static void route_all(const float *z, const char *what, int32_t ids[N_METHODS][8],
                      float w[N_METHODS][8])
{
    static int32_t table[8 * 6];
    rng g = {3};
    rng_table(&g, 8, 6, 64, table);
    const int64_t token = 5;
    for (size_t m = 0; m < N_METHODS; m++) {
        const route_cfg *c = &all_methods[m];
        moe_router *r = make_cfg(c, zero_bias, table, 8);
        CHECK_STATUS(moe_router_forward(r, 1, z, &token, MOE_DTYPE_I64, ids[m], w[m]), MOE_OK);
        CHECKF(ids_valid(ids[m], c->k, c->e), "%s, %s: ids repeated or out of range", what,
               c->name);
        for (int j = 0; j < c->k; j++)
            CHECKF(isfinite(w[m][j]) && w[m][j] >= 0.0f, "%s, %s: slot %d weight %g", what, c->name,
                   j, (double)w[m][j]);
        moe_router_destroy(r);
    }
}

static void expect_ids_0_to_k(int32_t ids[N_METHODS][8], const char *what)
{
    for (size_t m = 0; m < N_METHODS; m++) {
        if (all_methods[m].method == MOE_ROUTE_HASH) continue;
        for (int j = 0; j < all_methods[m].k; j++)
            CHECKF(ids[m][j] == j, "%s, %s: slot %d holds %d, want %d (lower id first)", what,
                   all_methods[m].name, j, ids[m][j], j);
    }
}

static void test_nonfinite_rows(void)
{
    float z[64];
    int32_t ids[N_METHODS][8];
    float w[N_METHODS][8];
    const float fill[] = {NAN, -NAN, INFINITY, -INFINITY};
    const char *names[] = {"all NaN", "all -NaN", "all +Inf", "all -Inf"};
    for (int f = 0; f < 4; f++) {
        for (int i = 0; i < 64; i++)
            z[i] = fill[f];
        route_all(z, names[f], ids, w);
        /* Nothing real: ids 0..K-1 (the excluded order), every weight exactly 0. */
        expect_ids_0_to_k(ids, names[f]);
        for (size_t m = 0; m < N_METHODS; m++)
            for (int j = 0; j < all_methods[m].k; j++)
                CHECKF(w[m][j] == 0.0f, "%s, %s: slot %d weight %g", names[f], all_methods[m].name,
                       j, (double)w[m][j]);
    }
    /* A few finite logits among NaN and ±Inf: the finite ones come first, whatever their
     * value; the rest weigh 0. +Inf is not "largest". */
    for (int i = 0; i < 64; i++)
        z[i] = fill[i % 4];
    z[50] = -30.0f, z[10] = 2.0f, z[33] = -1.0f;
    route_all(z, "three finite", ids, w);
    for (size_t m = 0; m < N_METHODS; m++) {
        const route_cfg *c = &all_methods[m];
        if (c->method == MOE_ROUTE_HASH) continue;
        /* Grouped methods may have masked some of the three; they still lead if kept. */
        if (c->method == MOE_ROUTE_SIGMOID_TOP1) {
            CHECK(ids[m][0] == 10 && w[m][0] > 0.0f);
            continue;
        }
        if (c->g > 1) continue;
        CHECKF(ids[m][0] == 10 && ids[m][1] == 33 && ids[m][2] == 50, "%s: %d %d %d", c->name,
               ids[m][0], ids[m][1], ids[m][2]);
        /* The rest are the non-finite experts in ascending id order (0, 1, 2, ...), weight 0. */
        for (int j = 3; j < c->k; j++)
            CHECKF(ids[m][j] == j - 3 && w[m][j] == 0.0f, "%s: slot %d holds %d, weight %g",
                   c->name, j, ids[m][j], (double)w[m][j]);
        CHECKF(w[m][0] > 0.0f, "%s: the finite top weighs 0", c->name);
    }
}

static void test_ties_and_order(void)
{
    float z[64];
    int32_t ids[N_METHODS][8];
    float w[N_METHODS][8];
    /* All equal: lower ids win, for several values including ±0 and huge ones. */
    const float values[] = {0.0f, -0.0f, 1.0f, -7.5f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX};
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
        for (int i = 0; i < 64; i++)
            z[i] = (i % 2) ? values[v] : (values[v] == 0.0f ? -values[v] : values[v]);
        char what[64];
        snprintf(what, sizeof what, "all equal %g", (double)values[v]);
        route_all(z, what, ids, w);
        expect_ids_0_to_k(ids, what);
    }
    /* Descending logit order for the logit-selecting methods, on a row with repeats. */
    rng g = {11};
    for (int i = 0; i < 64; i++)
        z[i] = (float)rng_below(&g, 5);
    route_all(z, "repeats", ids, w);
    for (size_t m = 0; m < N_METHODS; m++) {
        const route_cfg *c = &all_methods[m];
        if (c->method == MOE_ROUTE_HASH || c->method == MOE_ROUTE_NOAUX_TC || c->g > 1) continue;
        for (int j = 1; j < c->k; j++) {
            const float a = z[ids[m][j - 1]], b = z[ids[m][j]];
            CHECKF(a > b || (a == b && ids[m][j - 1] < ids[m][j]),
                   "%s: slots %d, %d out of order (%g/%d, %g/%d)", c->name, j - 1, j, (double)a,
                   ids[m][j - 1], (double)b, ids[m][j]);
        }
    }
}

/* ---- routing.md §8 ------------------------------------------------------------------------ */

/* §8.1, §8.15: the weights are the unbiased scores, even under a +8 bias. */
static void test_unbiased_weights(void)
{
    const route_cfg c = {"v3 no norm", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, false,
                         1.0f};
    float bias[256], z[256];
    rng g = {21};
    for (int i = 0; i < 256; i++) {
        bias[i] = 8.0f + rng_uniform(&g, -0.1, 0.1);
        z[i] = rng_uniform(&g, -4, 4);
    }
    moe_router *r = make_cfg(&c, bias, NULL, 0);
    int32_t ids[8];
    float w[8];
    CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
    for (int j = 0; j < 8; j++) {
        const double s = 1.0 / (1.0 + exp(-(double)z[ids[j]]));
        CHECKF(fabs(w[j] - s) <= 1e-6 * s, "slot %d: weight %g, sigmoid %g (biased would be %g)", j,
               (double)w[j], s, s + bias[ids[j]]);
    }
    moe_router_destroy(r);
}

/* §8.2: keys all negative (negative biases), so a zero mask would let masked experts win. */
static void test_negative_keys_masked_groups(void)
{
    const route_cfg c = base_noaux;
    float bias[256], z[256];
    rng g = {22};
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < 256; i++) {
            bias[i] = rng_uniform(&g, -6, -4);
            z[i] = rng_uniform(&g, -3, 3);
        }
        moe_router *r = make_cfg(&c, bias, NULL, 0);
        int32_t ids[8];
        float w[8];
        CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
        /* The kept groups, worked out here in double: top-2 sums, best 4. */
        double gs[8];
        for (int grp = 0; grp < 8; grp++) {
            double a = -INFINITY, b = -INFINITY;
            for (int i = 0; i < 32; i++) {
                double k = 1.0 / (1.0 + exp(-(double)z[grp * 32 + i])) + bias[grp * 32 + i];
                if (k > a)
                    b = a, a = k;
                else if (k > b)
                    b = k;
            }
            gs[grp] = a + b;
        }
        for (int j = 0; j < 8; j++) {
            const int grp = ids[j] / 32;
            int better = 0;
            for (int h = 0; h < 8; h++)
                better += gs[h] > gs[grp];
            CHECKF(better < 4, "rep %d: expert %d from group %d, which is not among the 4 kept",
                   rep, ids[j], grp);
        }
        moe_router_destroy(r);
    }
}

/* §8.5: sigmoids that underflow next to a large bias; §8.6: the hash row of z = -200. */
static void test_underflow(void)
{
    float bias[256], z[256];
    for (int i = 0; i < 256; i++) {
        bias[i] = 5.0f + 0.001f * (float)i;
        z[i] = -95.0f - (float)(i % 7); /* e^z is a float subnormal */
    }
    moe_router *r = make_cfg(&base_noaux, bias, NULL, 0);
    int32_t ids[8];
    float w[8];
    CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
    float sum = 0;
    for (int j = 0; j < 8; j++) {
        CHECKF(isfinite(w[j]), "slot %d: weight %g", j, (double)w[j]);
        sum += w[j];
    }
    CHECKF(sum == 0.0f || fabsf(sum - 2.5f) <= 1e-5f, "sum of weights %g (0 or rsf)", (double)sum);
    moe_router_destroy(r);

    const route_cfg h = {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true, 1.5f};
    int32_t table[2 * 6] = {3, 1, 4, 15, 9, 2, 6, 5, 35, 8, 97, 93};
    r = make_cfg(&h, NULL, table, 2);
    for (int i = 0; i < 256; i++)
        z[i] = -200.0f;
    const int32_t token = 1;
    CHECK_STATUS(moe_router_forward(r, 1, z, &token, MOE_DTYPE_I32, ids, w), MOE_OK);
    for (int j = 0; j < 6; j++) {
        CHECK(ids[j] == table[6 + j]);
        /* sqrt(softplus(-200)) = e^-100 > 0 in float: equal scores renormalise to rsf / 6. */
        CHECKF(isfinite(w[j]) && fabsf(w[j] - 0.25f) <= 1e-6f, "slot %d: weight %g", j,
               (double)w[j]);
    }
    moe_router_destroy(r);
}

/* §8.6: sqrt-softplus over z in [-200, 200] against double: the router's weights are the
 * scores themselves when all E experts are selected and nothing is renormalised. */
static void test_sqrtsoftplus_sweep(void)
{
    const route_cfg c = {"ssp", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 8, 8, 1, 1, false, 1};
    moe_router *r = make_cfg(&c, zero_bias, NULL, 0);
    float z[8];
    int32_t ids[8];
    float w[8];
    for (int step = 0; step <= 4000; step += 8) {
        for (int i = 0; i < 8; i++)
            z[i] = -200.0f + 0.1f * (float)(step + i);
        CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
        for (int j = 0; j < 8; j++) {
            const double x = z[ids[j]];
            const double want = sqrt(x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)));
            /* Relative 1e-6 where the result is a normal float; below, a few subnormal ulps. */
            const double tol = want > 0x1p-126 ? 1e-6 * want : 8 * 0x1p-149;
            CHECKF(w[j] > 0.0f && fabs(w[j] - want) <= tol, "z = %.9g: %.9g, want %.9g", x,
                   (double)w[j], want);
        }
    }
    moe_router_destroy(r);
}

/* §8.7: biases 7 ± 0.1 differ below bf16's resolution; rounding them to bf16 would change
 * the selection, and the router must not. */
static void test_bias_kept_f32(void)
{
    const route_cfg c = {"flat", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 64, 8, 1, 1, true, 1.0f};
    float bias[64], rounded[64], z[64];
    for (int i = 0; i < 64; i++) {
        z[i] = 0.0f; /* every sigmoid is 0.5: the bias alone decides */
        /* Ascending within bf16's step (2^-5 at 7), so bf16 maps many to one value and the
         * tie would go to the lowest id, while f32 keeps the highest. */
        bias[i] = 7.0f + (float)i * 0x1p-12f;
        uint32_t u;
        memcpy(&u, &bias[i], sizeof u);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u; /* round to nearest even bf16 */
        memcpy(&rounded[i], &u, sizeof u);
    }
    int32_t ids_f32[8], ids_bf16[8];
    float w[8];
    moe_router *r = make_cfg(&c, bias, NULL, 0);
    CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids_f32, w), MOE_OK);
    moe_router_destroy(r);
    r = make_cfg(&c, rounded, NULL, 0);
    CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids_bf16, w), MOE_OK);
    moe_router_destroy(r);
    for (int j = 0; j < 8; j++)
        CHECKF(ids_f32[j] == 63 - j, "f32 bias: slot %d holds %d, want %d", j, ids_f32[j], 63 - j);
    CHECK(memcmp(ids_f32, ids_bf16, sizeof ids_f32) != 0);
}

/* A bf16 (or f16) bias is converted once at creation: the router equals one built from the
 * f32 values, and the caller's buffer can be freed or changed afterwards. */
static void test_bias_conversion(void)
{
    const route_cfg c = base_noaux;
    uint16_t bf16[256], f16[256];
    float as_f32[256], halves[256], z[256 * 9];
    rng g = {31};
    for (int i = 0; i < 256; i++) {
        float b = rng_uniform(&g, -2, 2);
        uint32_t u;
        memcpy(&u, &b, sizeof u);
        bf16[i] = (uint16_t)(u >> 16); /* truncation: any bf16 code is fine here */
        u = (uint32_t)bf16[i] << 16;
        memcpy(&as_f32[i], &u, sizeof u);
        /* f16 codes of i/64 - 2: exact in both formats (sign, 5-bit exponent, 10-bit mantissa). */
        halves[i] = (float)i / 64.0f - 2.0f;
        const float a = fabsf(halves[i]);
        int e = 0;
        float m = a == 0.0f ? 0.0f : frexpf(a, &e); /* a = m · 2^e, m in [0.5, 1) */
        f16[i] = a == 0.0f
                     ? 0
                     : (uint16_t)(((unsigned)(e + 14) << 10) | ((unsigned)(m * 2048.0f) & 0x3FFu));
        if (halves[i] < 0) f16[i] |= 0x8000;
    }
    for (int i = 0; i < 256 * 9; i++)
        z[i] = rng_uniform(&g, -4, 4);
    moe_router_params p = route_params(&c, NULL, NULL, 0);
    int32_t ids_a[9 * 8], ids_b[9 * 8];
    float w_a[9 * 8], w_b[9 * 8];
    const struct {
        const void *data;
        moe_dtype dt;
        const float *ref;
        size_t bytes;
    } cases[] = {{bf16, MOE_DTYPE_BF16, as_f32, sizeof bf16},
                 {f16, MOE_DTYPE_F16, halves, sizeof f16}};
    for (int k = 0; k < 2; k++) {
        void *copy = malloc(cases[k].bytes);
        REQUIRE(copy);
        memcpy(copy, cases[k].data, cases[k].bytes);
        p.correction_bias = copy;
        p.correction_bias_dtype = cases[k].dt;
        moe_router *ra = make(&p);
        memset(copy, 0x7F, cases[k].bytes); /* the router must not look at it again */
        free(copy);
        moe_router *rb = make_cfg(&c, cases[k].ref, NULL, 0);
        CHECK_STATUS(moe_router_forward(ra, 9, z, NULL, MOE_DTYPE_INVALID, ids_a, w_a), MOE_OK);
        CHECK_STATUS(moe_router_forward(rb, 9, z, NULL, MOE_DTYPE_INVALID, ids_b, w_b), MOE_OK);
        CHECKF(!memcmp(ids_a, ids_b, sizeof ids_a) && !memcmp(w_a, w_b, sizeof w_a),
               "%s bias differs from its f32 values", moe_dtype_name(cases[k].dt));
        CHECKF(strstr(moe_router_explain(ra), moe_dtype_name(cases[k].dt)) != NULL, "%s",
               moe_router_explain(ra));
        moe_router_destroy(ra);
        moe_router_destroy(rb);
    }
}

/* §8.11: the routed scaling factor is applied exactly once. */
static void test_rsf_once(void)
{
    rng g = {41};
    float z[256 * 16];
    for (int i = 0; i < 256 * 16; i++)
        z[i] = rng_uniform(&g, -5, 5);
    int32_t table[16 * 6];
    rng_table(&g, 16, 6, 256, table);
    int64_t tokens[16];
    for (int t = 0; t < 16; t++)
        tokens[t] = t;
    const struct {
        route_cfg c;
        float want; /* the sum of each row's weights */
    } cases[] = {
        {{"v3", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, 2.5f}, 2.5f},
        {{"kimi", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 1, 1, true, 2.827f}, 2.827f},
        {{"v4", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true, 1.5f}, 1.5f},
        {{"v4 hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true, 1.5f}, 1.5f},
        {{"qwen3", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 256, 8, 1, 1, true, 3.0f}, 3.0f},
        {{"gpt-oss", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 256, 4, 1, 1, true, 2.0f}, 2.0f},
        /* HF DeepSeek-V2: renormalised greedy weights take no rsf. */
        {{"v2 norm", MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, 256, 6, 1, 1, true, 16.0f}, 1.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe_router *r = make_cfg(&cases[i].c, zero_bias, table, 16);
        int32_t ids[16 * 8];
        float w[16 * 8];
        const int k = cases[i].c.k;
        CHECK_STATUS(moe_router_forward(r, 16, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
        for (int t = 0; t < 16; t++) {
            double sum = 0;
            for (int j = 0; j < k; j++)
                sum += w[t * k + j];
            CHECKF(fabs(sum - cases[i].want) <= 1e-6 * cases[i].want,
                   "%s row %d: sum %.9g, want %g", cases[i].c.name, t, sum, (double)cases[i].want);
        }
        moe_router_destroy(r);
    }
    /* Without renormalisation the scores are scaled once: noaux_tc weights = sigmoid · rsf,
     * greedy = softmax · rsf, softmax_topk = softmax · rsf. */
    const route_cfg plain[] = {
        {"v3 no norm", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, false, 2.5f},
        {"v2", MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, 256, 6, 1, 1, false, 16.0f},
        {"softmax raw", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 256, 8, 1, 1, false, 3.0f},
    };
    for (size_t i = 0; i < 3; i++) {
        moe_router *r = make_cfg(&plain[i], zero_bias, NULL, 0);
        int32_t ids[8];
        float w[8];
        CHECK_STATUS(moe_router_forward(r, 1, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
        double zmax = -INFINITY, sum = 0;
        for (int e = 0; e < 256; e++)
            zmax = z[e] > zmax ? z[e] : zmax;
        for (int e = 0; e < 256; e++)
            sum += exp(z[e] - zmax);
        for (int j = 0; j < plain[i].k; j++) {
            const double zi = z[ids[j]];
            const double s = plain[i].method == MOE_ROUTE_NOAUX_TC ? 1.0 / (1.0 + exp(-zi))
                                                                   : exp(zi - zmax) / sum;
            const double want = s * plain[i].rsf;
            CHECKF(fabs(w[j] - want) <= 1e-6 * want, "%s slot %d: %.9g, want %.9g", plain[i].name,
                   j, (double)w[j], want);
        }
        moe_router_destroy(r);
    }
}

/* ---- Batches and threads ----------------------------------------------------------------- */

/* A row's result does not depend on its neighbours or the batch size (§ batch invariance),
 * and every row of a large batch is written (§8.16). */
static void test_batch_invariance(void)
{
    enum { T = 1000, BIG = 4097 };
    rng g = {51};
    int32_t table[64 * 6];
    rng_table(&g, 64, 6, 64, table);
    float *z = malloc((size_t)BIG * 64 * sizeof *z);
    int64_t *tokens = malloc(BIG * sizeof *tokens);
    int32_t *ids = malloc((size_t)BIG * 8 * sizeof *ids);
    float *w = malloc((size_t)BIG * 8 * sizeof *w);
    REQUIRE(z && tokens && ids && w);
    for (size_t i = 0; i < (size_t)BIG * 64; i++)
        z[i] = (i % 97 == 0) ? NAN : rng_uniform(&g, -6, 6);
    for (int t = 0; t < BIG; t++)
        tokens[t] = rng_below(&g, 64);
    for (size_t m = 0; m < N_METHODS; m++) {
        const route_cfg *c = &all_methods[m];
        const size_t k = (size_t)c->k;
        moe_router *r = make_cfg(c, zero_bias, table, 64);
        CHECK_STATUS(moe_router_forward(r, T, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
        for (int t = 0; t < T; t += 37) {
            int32_t one_ids[8];
            float one_w[8];
            CHECK_STATUS(moe_router_forward(r, 1, z + (size_t)t * 64, tokens + t, MOE_DTYPE_I64,
                                            one_ids, one_w),
                         MOE_OK);
            CHECKF(!memcmp(one_ids, ids + t * k, k * sizeof *ids) &&
                       !memcmp(one_w, w + t * k, k * sizeof *w),
                   "%s: row %d alone differs from row %d of a batch of %d", c->name, t, t, T);
        }
        poison(ids, w, (size_t)BIG * k);
        CHECK_STATUS(moe_router_forward(r, BIG, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
        bool all = true;
        for (int t = 0; t < BIG; t++)
            all = all && ids_valid(ids + t * k, c->k, c->e) && w[t * k] != POISON_W;
        CHECKF(all, "%s: a row of %d was not written", c->name, BIG);
        moe_router_destroy(r);
    }
    free(z);
    free(tokens);
    free(ids);
    free(w);
}

typedef struct thread_job {
    const moe_router *r;
    const float *z;
    size_t n;
    int32_t *ids;
    float *w;
    moe_status st;
} thread_job;

static void *run_job(void *arg)
{
    thread_job *j = arg;
    for (int rep = 0; rep < 20 && j->st == MOE_OK; rep++)
        j->st = moe_router_forward(j->r, j->n, j->z, NULL, MOE_DTYPE_INVALID, j->ids, j->w);
    return NULL;
}

/* One router, several threads forwarding at once, each result equal to a lone forward. */
static void test_threads(void)
{
    enum { T = 200, THREADS = 4 };
    rng g = {61};
    static float z[T * 256];
    static int32_t ids[THREADS][T * 8], want_ids[T * 8];
    static float w[THREADS][T * 8], want_w[T * 8];
    for (int i = 0; i < T * 256; i++)
        z[i] = rng_uniform(&g, -4, 4);
    float bias[256];
    for (int i = 0; i < 256; i++)
        bias[i] = rng_uniform(&g, -1, 1);
    moe_router *r = make_cfg(&base_noaux, bias, NULL, 0);
    CHECK_STATUS(moe_router_forward(r, T, z, NULL, MOE_DTYPE_INVALID, want_ids, want_w), MOE_OK);
    pthread_t th[THREADS];
    thread_job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (thread_job){r, z, T, ids[i], w[i], MOE_OK};
        REQUIRE(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].st == MOE_OK);
        CHECK(!memcmp(ids[i], want_ids, sizeof want_ids) && !memcmp(w[i], want_w, sizeof want_w));
    }
    moe_router_destroy(r);
}

static void test_explain(void)
{
    moe_router *r = make_cfg(&base_noaux, zero_bias, NULL, 0);
    const char *e = moe_router_explain(r);
    CHECKF(strstr(e, "noaux_tc") && strstr(e, "sigmoid") && strstr(e, "top_k=8") &&
               strstr(e, "n_group=8 topk_group=4") && strstr(e, "routed_scaling_factor=2.5") &&
               strstr(e, "noaux_tc: moe_route_noaux_tc__"),
           "%s", e);
    moe_router_destroy(r);
    CHECK(strlen(moe_router_explain(NULL)) > 0);
    moe_router_destroy(NULL);
}

int main(void)
{
    test_create_validation();
    test_table_validation();
    test_forward_validation();
    test_nonfinite_rows();
    test_ties_and_order();
    test_unbiased_weights();
    test_negative_keys_masked_groups();
    test_underflow();
    test_sqrtsoftplus_sweep();
    test_bias_kept_f32();
    test_bias_conversion();
    test_rsf_once();
    test_batch_invariance();
    test_threads();
    test_explain();
    return TEST_END();
}
