/* test_kernel_expert_int4.c — every INT4 (group) expert kernel set this CPU may run: packing
 * round trips, the micro-kernels against float64 from the checkpoint layout (scale × (u - 8))
 * and their own reference bit for bit at every m, group sizes 32..128, and the checks packing
 * makes at the door. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "expert_check.h"
#include "guarded.h"
#include "int4_mat.h"
#include "q8_check.h"

static const xset sets[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_INT4_Q8},
#include "kernels/expert_int4_q8.inc"
#undef MOE_KERNEL
};
#define NSETS (sizeof sets / sizeof sets[0])

/* ---- One case (the Q8 rows themselves are checked by test_kernel_expert_mxfp4) ---------- */

typedef struct kcase {
    int64_t k, n, group;
    int kind;
    bool bias;
} kcase;

static void check_case(const xset *xs, const kcase *c, bool gateup)
{
    mat g, u;
    mat_init(&g, c->n, c->k, c->group, c->bias);
    if (gateup) mat_init(&u, c->n, c->k, c->group, c->bias);
    guarded gp, gr;
    runner r = {.k = (size_t)c->k, .n = (size_t)c->n, .es = 4, .gateup = gateup};
    r.packed = pack_checked(xs->set, &g, gateup ? &u : NULL, &gp, &r.tb);
    r.ref_packed = pack_checked(xs->ref, &g, gateup ? &u : NULL, &gr, &r.ref_tb);
    tokens tok;
    tokens_init(&tok, xs->set, set_ntokens(xs, c->k, c->n), (size_t)c->k, gateup ? 1.0 : 0.3);
    char what[64];
    snprintf(what, sizeof what, "%s act %d group %lld", gateup ? "gate/up" : "down", c->kind,
             (long long)c->group);
    const exact_proj eg = {g.wd, g.bd}, eu = gateup ? (exact_proj){u.wd, u.bd} : eg;
    q8_check_case(xs, &r, &tok, eg, eu, c->kind, what);
    tokens_free(&tok);
    guarded_free(&gp);
    guarded_free(&gr);
    mat_free(&g);
    if (gateup) mat_free(&u);
}

/* K across one block, full and short steps and Kimi-K2's widths (2048, 7168); N below, at and
 * above the tile and many tiles; group sizes 32 (Kimi's), 64 and 128. */
static const kcase cases[] = {
    {32, 1, 32, 0, false},    {64, 15, 32, 1, true},    {96, 16, 32, 2, false},
    {160, 17, 32, 0, true},   {2048, 17, 32, 0, false}, {7168, 16, 32, 0, false},
    {64, 700, 64, 0, true},   {256, 33, 128, 1, false}, {384, 17, 128, 2, true},
    {32, 2048, 32, 0, false},
};

static void run_cases(const xset *xs)
{
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(xs, &cases[c], true);
        check_case(xs, &cases[c], false);
    }
}

/* The packed values by hand: nibble u is u - 8 (so 0x08 is 0, 0x0F is 7, 0x00 is -8), the low
 * nibble the even column, and a scale of a group covers exactly its G columns. */
static void test_values(const moe_cpu_info *info)
{
    const uint32_t allowed = moe_cpu_caps_mask(&info->allowed);
    const int64_t K = 128, G = 64;
    uint8_t codes[16 * 64];
    uint16_t scales[16 * 2];
    for (int r = 0; r < 16; r++) {
        for (int i = 0; i < 64; i++)
            codes[r * 64 + i] = 0x88; /* zeros */
        scales[r * 2] = to_bf16(0.5f);
        scales[r * 2 + 1] = to_bf16(-2.0f);
    }
    codes[3 * 64 + 0] = 0x0F;  /* row 3: column 0 = 7 (low), column 1 = -8 (high) */
    codes[3 * 64 + 32] = 0xF8; /* row 3: column 65 = 7, in group 1 */
    float x[128];
    for (int i = 0; i < 128; i++)
        x[i] = 0.0f;
    x[0] = 127.0f, x[1] = 127.0f, x[65] = 127.0f; /* q = 127, xs = 1 in blocks 0 and 2 */
    const moe_weight_src src = {.data = codes,
                                .dtype = MOE_DTYPE_I32,
                                .rows = 16,
                                .cols = K,
                                .row_stride = K / 2,
                                .col_stride = 1,
                                .scale = scales,
                                .scale_dtype = MOE_DTYPE_BF16,
                                .block_rows = 1,
                                .block_cols = (int)G,
                                .scale_stride = K / G};
    for (size_t s = 0; s < NSETS; s++) {
        const moe_expert_kernels *ks = sets[s].set;
        if ((sets[s].isa & ~allowed) != 0) continue;
        float y[16];
        q8_down_one(ks, &src, (size_t)K, x, y);
        /* row 3: 0.5·(7·127 - 8·127) + (-2)·(7·127) = -63.5 - 1778 */
        CHECKF(y[3] == -1841.5f, "%s: row 3 gives %g, not -1841.5", ks->name, (double)y[3]);
        CHECKF(y[0] == 0.0f && y[15] == 0.0f, "%s: zero rows give %g, %g", ks->name, (double)y[0],
               (double)y[15]);
    }
}

/* ---- Packing at the door ---------------------------------------------------------------- */

static void test_pack_errors(void)
{
    const moe_expert_kernels *ks = &moe_expert_int4_q8_8x16__ref;
    mat g, u;
    mat_init(&g, 20, 128, 32, false);
    mat_init(&u, 20, 128, 32, false);
    moe_weight_src sg = mat_src(&g), su = mat_src(&u);

    const uint16_t keep = u.scales[7 * 4 + 2];
    u.scales[7 * 4 + 2] = 0x7FC0;
    expect_reject(ks, &sg, &su, MOE_EVALUE, "up: group scale NaN at row 7, group 2");
    u.scales[7 * 4 + 2] = 0xFF80;
    expect_reject(ks, &sg, &su, MOE_EVALUE, "up: group scale infinite at row 7, group 2");
    u.scales[7 * 4 + 2] = keep;
    expect_w4_rejects(ks, &sg, &su);

    moe_weight_src t = su;
    t.cols = 80;
    expect_reject(ks, &t, NULL, MOE_ESHAPE, "80 columns are not a multiple of 32");
    t = su;
    t.block_cols = 96;
    expect_reject(ks, &t, NULL, MOE_ESHAPE, "group size 96 does not divide 128 columns");
    t = su;
    t.block_cols = 16;
    expect_reject(ks, &t, NULL, MOE_EUNSUPPORTED, "scale block [1, 16]");
    t = su;
    t.block_cols = 48;
    expect_reject(ks, &t, NULL, MOE_EUNSUPPORTED, "scale block [1, 48]");
    t = su;
    t.block_rows = 2;
    expect_reject(ks, &t, NULL, MOE_EUNSUPPORTED, "scale block [2, 32]");
    t = su;
    t.scale = NULL;
    expect_reject(ks, &sg, &t, MOE_EINVAL, "up: the INT4 group scales are NULL");
    t = su;
    t.scale_dtype = MOE_DTYPE_F8_E8M0;
    expect_reject(ks, &sg, &t, MOE_EDTYPE, "scale dtype f8_e8m0");

    for (size_t i = 0; i < NSETS; i++) {
        const moe_expert_kernels *x = sets[i].set;
        CHECK(x->gateup_tile_bytes(0) == 0 && x->down_tile_bytes(33) == 0);
        /* 5 bits per weight: full steps of 1280 bytes (4 units, 256 bytes of f32 scales). */
        CHECK(x->gateup_tile_bytes(64) == 128 + 1280 && x->down_tile_bytes(128) == 64 + 1280);
        CHECK(x->gateup_tile_bytes(96) == 128 + 1280 + 2 * (256 + 64));
        CHECK(x->down_tile_bytes(7168) == 64 + 56 * 1280);
    }
    mat_free(&g);
    mat_free(&u);
}

static void test_registry(void)
{
    for (size_t s = 0; s < NSETS; s++) {
        if (!set_registered(&sets[s])) continue;
        CHECK(sets[s].ref->isa == MOE_REQ_SCALAR && sets[s].set->prepare_act);
    }
}

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    rng_state = 0x9E3779B97F4A7C15ull;
    test_registry();
    test_pack_errors();
    test_values(&info);
    check_sets(sets, NSETS, &info, MOE_EXPERT_FMT_INT4_GROUP, MOE_RECIPE_Q8, 2e-2, run_cases);
    return TEST_END();
}
