/* test_router_kernels.c — routers for every allowed ISA level equal the reference, bit for bit. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/router_internal.h"
#include "route_oracle.h"
#include "test.h"

#define VOCAB 500
#define ROWS_PER_KIND 5

/* The levels to try; each is intersected with what moe_cpu_query allows. */
typedef struct level {
    const char *name;
    moe_cpu_caps caps;
} level;

static const level levels[] = {
    {"avx2", {.avx2 = true}},
    {"avx512", {.avx2 = true, .avx512 = true}},
    {"avx512+bf16+vnni", {.avx2 = true, .avx512 = true, .avx512_bf16 = true, .avx512_vnni = true}},
};

/* The kinds of rows: each stresses a different corner of the selection or the weights. */
enum {
    KIND_RANDOM,
    KIND_TIES,      /* few distinct values: ties everywhere */
    KIND_EQUAL,     /* one value for the whole row */
    KIND_NONFINITE, /* NaN and ±Inf scattered */
    KIND_ALL_NAN,
    KIND_ALL_NEG_INF,
    KIND_ALL_POS_INF,
    KIND_HUGE,   /* ±FLT_MAX, ±1e30, subnormals, signed zeros */
    KIND_NEGBIG, /* everything very negative: underflowing scores */
    KIND_COUNT
};

static float pick(rng *r, const float *v, int n) { return v[rng_below(r, n)]; }

static void gen_row(rng *r, int kind, int e, float *z)
{
    static const float ties[] = {-1.0f, 0.0f, -0.0f, 0.5f, 1.0f};
    static const float bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    static const float huge[] = {FLT_MAX, -FLT_MAX, 1e30f, -1e30f,  1e-45f, -1e-45f,
                                 0.0f,    -0.0f,    88.0f, -104.0f, 1e-40f};
    const float c = rng_uniform(r, -3, 3);
    for (int i = 0; i < e; i++) {
        switch (kind) {
        case KIND_TIES: z[i] = pick(r, ties, 5); break;
        case KIND_EQUAL: z[i] = c; break;
        case KIND_NONFINITE:
            z[i] = rng_unit(r) < 0.3 ? pick(r, bad, 4) : rng_uniform(r, -5, 5);
            break;
        case KIND_ALL_NAN: z[i] = NAN; break;
        case KIND_ALL_NEG_INF: z[i] = -INFINITY; break;
        case KIND_ALL_POS_INF: z[i] = INFINITY; break;
        case KIND_HUGE:
            z[i] = rng_unit(r) < 0.5 ? pick(r, huge, 11) : rng_uniform(r, -50, 50);
            break;
        case KIND_NEGBIG: z[i] = rng_uniform(r, -220, -80); break;
        default: z[i] = rng_uniform(r, -8, 8); break;
        }
    }
}

static bool same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* Routes the same rows with the reference router and one built for CAPS; compares bits. */
static void compare_level(const route_cfg *c, const moe_router_params *p, const moe_cpu_caps *caps,
                          const char *lname, size_t n, const float *z, const int64_t *tokens,
                          const int32_t *ids_ref, const float *w_ref)
{
    moe_router *r = NULL;
    CHECK_STATUS(moe_router_create_caps(p, caps, &r), MOE_OK);
    if (!r) return;
    const size_t k = (size_t)c->k;
    int32_t *ids = malloc(n * k * sizeof *ids);
    float *w = malloc(n * k * sizeof *w);
    REQUIRE(ids && w);
    CHECK_STATUS(moe_router_forward(r, n, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
    for (size_t t = 0; t < n; t++) {
        CHECKF(same_bits(ids + t * k, ids_ref + t * k, k * sizeof *ids),
               "%s E=%d, %s, row %zu (kind %zu): ids differ from the reference (first %d vs %d)",
               c->name, c->e, lname, t, t / ROWS_PER_KIND, ids[t * k], ids_ref[t * k]);
        CHECKF(same_bits(w + t * k, w_ref + t * k, k * sizeof *w),
               "%s E=%d, %s, row %zu (kind %zu): weights differ from the reference (%.9g vs %.9g)",
               c->name, c->e, lname, t, t / ROWS_PER_KIND, (double)w[t * k], (double)w_ref[t * k]);
    }
    free(ids);
    free(w);
    moe_router_destroy(r);
}

/* Every id in [0, E) and distinct, every weight finite and >= 0, on every kind of row. */
static void check_valid(const route_cfg *c, size_t n, const int32_t *ids, const float *w)
{
    for (size_t t = 0; t < n; t++) {
        bool seen[ORACLE_MAX_E] = {false}, ok = true;
        for (int j = 0; j < c->k; j++) {
            int32_t id = ids[t * (size_t)c->k + (size_t)j];
            float x = w[t * (size_t)c->k + (size_t)j];
            ok = ok && id >= 0 && id < c->e && !seen[id] && isfinite(x) && x >= 0.0f;
            if (id >= 0 && id < c->e) seen[id] = true;
        }
        CHECKF(ok,
               "%s E=%d row %zu (kind %zu): an id is repeated or out of range, or a weight "
               "is not finite",
               c->name, c->e, t, t / ROWS_PER_KIND);
    }
}

static void run_cfg(const route_cfg *c, const moe_cpu_caps *allowed, uint64_t seed)
{
    rng r = {seed};
    const size_t n = (size_t)KIND_COUNT * ROWS_PER_KIND, k = (size_t)c->k;
    float *z = malloc(n * (size_t)c->e * sizeof *z);
    int32_t *ids = malloc(n * k * sizeof *ids), *table = malloc(VOCAB * k * sizeof *table);
    float *w = malloc(n * k * sizeof *w);
    int64_t tokens[KIND_COUNT * ROWS_PER_KIND];
    float bias[ORACLE_MAX_E];
    REQUIRE(z && ids && table && w);
    /* Negative biases (every key below 0), DeepSeek-V4-like +8, and huge ones alternate. */
    const int bias_kind = (int)(seed % 3);
    for (int i = 0; i < c->e; i++)
        bias[i] = bias_kind == 0   ? rng_uniform(&r, -10, -1)
                  : bias_kind == 1 ? rng_uniform(&r, 7.9, 8.1)
                                   : (rng_unit(&r) < 0.5 ? 3e38f : -3e38f);
    rng_table(&r, VOCAB, c->k, c->e, table);
    for (size_t t = 0; t < n; t++) {
        gen_row(&r, (int)(t / ROWS_PER_KIND), c->e, z + t * (size_t)c->e);
        tokens[t] = rng_below(&r, VOCAB);
    }
    moe_router_params p = route_params(c, bias, table, VOCAB);
    if (c->method == MOE_ROUTE_SOFTMAX_BIAS) p.renorm_min = 0.25f; /* binds on some rows */
    const moe_cpu_caps scalar = {0};
    moe_router *ref = NULL;
    CHECK_STATUS(moe_router_create_caps(&p, &scalar, &ref), MOE_OK);
    if (ref) {
        CHECK_STATUS(moe_router_forward(ref, n, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
        check_valid(c, n, ids, w);
        for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
            moe_cpu_caps caps = moe_cpu_caps_intersect(&levels[i].caps, allowed);
            if (caps.avx2 || caps.avx512) /* a level the machine lacks is the reference again */
                compare_level(c, &p, &caps, levels[i].name, n, z, tokens, ids, w);
        }
        moe_router_destroy(ref);
    }
    free(z);
    free(ids);
    free(table);
    free(w);
}

static const int sweep_e[] = {8, 16, 60, 64, 128, 160, 256, 384, 512};

/* Prints which kernels each level chose, so a log shows what was compared. */
static void show_kernels(const moe_cpu_caps *allowed)
{
    const float bias[16] = {0};
    const route_cfg c = {"show", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 16, 2, 1, 1, true, 1.0f};
    const moe_router_params p = route_params(&c, bias, NULL, 0);
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        moe_cpu_caps caps = moe_cpu_caps_intersect(&levels[i].caps, allowed);
        moe_router *r = NULL;
        CHECK_STATUS(moe_router_create_caps(&p, &caps, &r), MOE_OK);
        if (r) fprintf(stderr, "%s: %s\n", levels[i].name, moe_router_explain(r));
        moe_router_destroy(r);
    }
}

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    show_kernels(&info.allowed);
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof sweep_e / sizeof sweep_e[0]; i++) {
        const int e = sweep_e[i], g = groups_for(e), tg = g > 1 ? g / 2 : 1, m = e / g;
        const route_cfg cfgs[] = {
            {"softmax_topk", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, e, min_int(8, e), 1, 1,
             true, 1.0f},
            {"softmax_topk no norm", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, e, min_int(8, e), 1,
             1, false, 1.5f},
            {"topk_softmax", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, e, min_int(4, e), 1, 1,
             true, 1.0f},
            {"greedy", MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, e, min_int(6, e), 1, 1, false, 16.0f},
            {"group_limited_greedy", MOE_ROUTE_GROUP_LIMITED_GREEDY, MOE_SCORE_SOFTMAX, e,
             min_int(6, tg * m), g, tg, true, 16.0f},
            {"noaux_tc grouped", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, e, min_int(8, tg * m), g,
             tg, true, 2.5f},
            {"noaux_tc flat", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, e, min_int(8, e), 1, 1, false,
             2.827f},
            {"noaux_tc sqrtsoftplus", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, e, min_int(6, e),
             1, 1, true, 1.5f},
            {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, e, min_int(6, e), 1, 1, true, 1.5f},
            {"sigmoid_top1", MOE_ROUTE_SIGMOID_TOP1, MOE_SCORE_SIGMOID, e, 1, 1, 1, false, 1.0f},
            {"softmax_bias", MOE_ROUTE_SOFTMAX_BIAS, MOE_SCORE_SOFTMAX, e, min_int(6, e), 1, 1,
             true, 1.0f},
        };
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
            for (int rep = 0; rep < 3; rep++) /* three bias kinds */
                run_cfg(&cfgs[c], &info.allowed, seed++);
    }
    /* DeepSeek-V3's shape, which the AVX-512 noaux_tc kernel fuses, with other group counts. */
    const route_cfg v3[] = {
        {"noaux_tc V3 keep 3", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 6, 8, 3, true, 2.5f},
        {"noaux_tc V3 keep 7", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 7, false, 1.0f},
        {"noaux_tc V3 keep 1", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 2, 8, 1, true, 2.5f},
    };
    for (size_t c = 0; c < sizeof v3 / sizeof v3[0]; c++)
        for (int rep = 0; rep < 3; rep++)
            run_cfg(&v3[c], &info.allowed, seed++);
    return TEST_END();
}
