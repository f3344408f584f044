/* test_kernel_tile_bf16.c — the tdpbf16ps reference against hand-derived cases, an independent
 * double-precision model and, where AMX-BF16 is allowed, the instruction, bit for bit; and the
 * vdpbf16ps reference's flush and NaN order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/tile_bf16.h"
#include "test.h"
#include "xorshift.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- Hand-derived cases ----------------------------------------------------------------
 * One element, kp ≤ 4 pairs given as (x even, w even, x odd, w odd) codes. Each expected
 * value is derived in its comment from docs/kernels.md's statement of the instruction.
 * bf16 codes used: 3F80 1, 4000 2, 4040 3, 4080 4, 40A0 5, 3380 2^-24, 4580 2^12,
 * 4700 2^15, C700 -2^15, 0080 2^-126, 0040 2^-127 (denormal), 0D80 2^-100, 3080 2^-30,
 * 1A00 2^-75, 1A80 2^-74, 1A40 1.5·2^-75, 9A22 -1.265625·2^-75, 9A10 -1.125·2^-75,
 * 9A20 -1.25·2^-75, 7F00 2^127, FF7F -1.9921875·2^127, 7F80 +Inf, FF80 -Inf, 7FC1 7FC2
 * quiet NaNs, 7F81 a signalling NaN. */
typedef struct hand_case {
    const char *what;
    uint32_t c;
    size_t kp;
    uint16_t p[4][4];
    uint32_t want;
} hand_case;

static const hand_case hand_cases[] = {
    /* 1 + 2·3 + 4·5 = 27 */
    {"plain", 0x3F800000u, 1, {{0x4000, 0x4040, 0x4080, 0x40A0}}, 0x41D80000u},
    /* e = 2^-24, o = 2^-24, e + o = 2^-23 exactly, 1 + 2^-23 exact. (C first would round
     * 1 + 2^-24 to 1 twice.) */
    {"C last", 0x3F800000u, 1, {{0x3380, 0x3F80, 0x3380, 0x3F80}}, 0x3F800001u},
    /* e: 1, then 1 + 2^-24 (a tie: 1), then 1 again; one rounding of 1 + 2^-23 would be
     * 1 + 2^-23. The chain rounds each step. */
    {"even chain rounds each step",
     0,
     3,
     {{0x3F80, 0x3F80, 0, 0}, {0x3380, 0x3F80, 0, 0}, {0x3380, 0x3F80, 0, 0}},
     0x3F800000u},
    /* e = 2^24, o = 1: e + o = 2^24 + 1, a tie between 2^24 and 2^24 + 2: 2^24 (even). */
    {"pair sum needs 25 bits", 0, 1, {{0x4580, 0x4580, 0x3F80, 0x3F80}}, 0x4B800000u},
    /* e = 2^30, o = -2^30: t = +0, 1 + 0 = 1. (From C: 1 + 2^30 = 2^30, then 0.) */
    {"cancellation before C", 0x3F800000u, 1, {{0x4700, 0x4700, 0xC700, 0x4700}}, 0x3F800000u},
    /* a denormal bf16 is 0: 2^-127 · 2 reads as 0 · 2 */
    {"DAZ on bf16", 0, 1, {{0x0040, 0x4000, 0, 0}}, 0x00000000u},
    /* C = 2^-127 (denormal) reads as 0: 0 + 2^-126 */
    {"DAZ on C", 0x00400000u, 1, {{0x0080, 0x3F80, 0, 0}}, 0x00800000u},
    /* 2^-100 · 2^-30 = 2^-130 is a denormal result of its FMA: flushed */
    {"FTZ of a tiny product", 0, 1, {{0x0D80, 0x3080, 0, 0}}, 0x00000000u},
    /* e = 2^-126, then fma(1.5·2^-75, 2^-75, e): exact 2^-126 + 1.5·2^-150, rounded to
     * 2^-126 + 2^-149 (the product is not flushed on its own) */
    {"denormal product into a normal sum",
     0,
     2,
     {{0x0080, 0x3F80, 0, 0}, {0x1A40, 0x1A00, 0, 0}},
     0x00800001u},
    /* e = 2^-126, + 2^-149 = 2^-126 + 2^-149, + -1.265625·2^-149: exact 2^-126 - 2^-151 -
     * 2^-155. 24 bits: 2^-126 - 2^-150 (nearer than 2^-126), below 2^-126: flushed to 0.
     * (fmaf rounds on the denormal grid to 2^-126.) */
    {"FTZ after rounding to 24 bits",
     0,
     3,
     {{0x0080, 0x3F80, 0, 0}, {0x1A00, 0x1A80, 0, 0}, {0x9A22, 0x1A80, 0, 0}},
     0x00000000u},
    /* as above with -1.125·2^-149: exact 2^-126 - 2^-152, nearest 2^-126: kept */
    {"just above the FTZ midpoint",
     0,
     3,
     {{0x0080, 0x3F80, 0, 0}, {0x1A00, 0x1A80, 0, 0}, {0x9A10, 0x1A80, 0, 0}},
     0x00800000u},
    /* with -1.25·2^-149: exact 2^-126 - 2^-151, the midpoint: the tie goes to 2^-126 (even) */
    {"on the FTZ midpoint",
     0,
     3,
     {{0x0080, 0x3F80, 0, 0}, {0x1A00, 0x1A80, 0, 0}, {0x9A20, 0x1A80, 0, 0}},
     0x00800000u},
    /* e = -1.9921875·2^127, then + 2^127·2 = 2^128 (not representable alone): 2^120 */
    {"product past FLT_MAX, fused",
     0,
     2,
     {{0xFF7F, 0x3F80, 0, 0}, {0x7F00, 0x4000, 0, 0}},
     0x7B800000u},
    {"overflow", 0, 1, {{0x7F00, 0x4000, 0, 0}}, 0x7F800000u},
    /* NaN: A's operand before B's, quieted; C before the products; the later product in a
     * chain before the chain's earlier NaN; e before o; invalid operations the default NaN */
    {"NaN: A before B", 0, 1, {{0x7FC1, 0x7FC2, 0, 0}}, 0x7FC10000u},
    {"NaN: B", 0, 1, {{0x3F80, 0x7FC2, 0, 0}}, 0x7FC20000u},
    {"NaN: signalling, quieted", 0, 1, {{0x7F81, 0x3F80, 0, 0}}, 0x7FC10000u},
    {"NaN: C first", 0x7FC30000u, 1, {{0x7FC1, 0x3F80, 0x7FC2, 0x3F80}}, 0x7FC30000u},
    {"NaN: C signalling, quieted", 0x7F800001u, 1, {{0x7FC1, 0x3F80, 0, 0}}, 0x7FC00001u},
    {"NaN: the chain's later product",
     0,
     2,
     {{0x7FC1, 0x3F80, 0, 0}, {0x7FC2, 0x3F80, 0, 0}},
     0x7FC20000u},
    {"NaN: e before o", 0, 2, {{0, 0, 0x7FC1, 0x3F80}, {0x7FC2, 0x3F80, 0, 0}}, 0x7FC20000u},
    {"NaN: Inf - Inf in e before o's NaN",
     0,
     2,
     {{0x7F80, 0x3F80, 0x7FC2, 0x3F80}, {0xFF80, 0x3F80, 0, 0}},
     0xFFC00000u},
    {"NaN: Inf · 0", 0, 1, {{0x7F80, 0x0000, 0, 0}}, 0xFFC00000u},
    {"NaN: C = Inf, products -Inf", 0x7F800000u, 1, {{0xFF80, 0x3F80, 0, 0}}, 0xFFC00000u},
    /* e and o start at +0: -0 + (+0) = +0, whatever C's zero */
    {"signed zeros", 0x80000000u, 1, {{0x8000, 0x3F80, 0x8000, 0x3F80}}, 0x00000000u},
};
#define N_HAND (sizeof hand_cases / sizeof hand_cases[0])

static void case_operands(const hand_case *h, uint16_t *x, uint16_t *w)
{
    for (size_t k = 0; k < h->kp; k++) {
        x[2 * k] = h->p[k][0];
        w[2 * k] = h->p[k][1];
        x[2 * k + 1] = h->p[k][2];
        w[2 * k + 1] = h->p[k][3];
    }
}

static void check_hand_cases_ref(void)
{
    for (size_t i = 0; i < N_HAND; i++) {
        uint16_t x[8], w[8];
        case_operands(&hand_cases[i], x, w);
        uint32_t got =
            bits(moe_tile_bf16_dot_ref(from_bits(hand_cases[i].c), x, w, hand_cases[i].kp));
        CHECKF(got == hand_cases[i].want, "reference, %s: got %08x, want %08x", hand_cases[i].what,
               got, hand_cases[i].want);
    }
}

/* The bf16 recipe's vdpbf16ps reference (moe_xr_dpbf16, one pair step: odd product, then
 * even, from acc) flushes by the same rule, and its NaN order is the manual's table for
 * vdpbf16ps: A even, B even, A odd, B odd, acc. Pairs are (even | odd << 16). */
static void check_dpbf16_ref(void)
{
    float acc = moe_xr_dpbf16(0.0f, 0x0080u, 0x3F80u); /* 2^-126 */
    acc = moe_xr_dpbf16(acc, 0x1A00u, 0x1A80u);        /* + 2^-149 */
    CHECK(bits(acc) == 0x00800001u);
    /* -1.265625·2^-149: exact 2^-126 - 2^-151 - 2^-155, 24 bits 2^-126 - 2^-150: flushed */
    CHECK(bits(moe_xr_dpbf16(acc, 0x9A22u, 0x1A80u)) == 0x00000000u);
    /* -1.125·2^-149: exact 2^-126 - 2^-152, nearest 2^-126 */
    CHECK(bits(moe_xr_dpbf16(acc, 0x9A10u, 0x1A80u)) == 0x00800000u);
    const float nan5 = from_bits(0x7FC50000u);
    CHECK(bits(moe_xr_dpbf16(nan5, 0x7FC37FC1u, 0x7FC47FC2u)) == 0x7FC10000u);
    CHECK(bits(moe_xr_dpbf16(nan5, 0x7FC33F80u, 0x7FC47FC2u)) == 0x7FC20000u);
    CHECK(bits(moe_xr_dpbf16(nan5, 0x7FC33F80u, 0x7FC43F80u)) == 0x7FC30000u);
    CHECK(bits(moe_xr_dpbf16(nan5, 0x3F803F80u, 0x7FC43F80u)) == 0x7FC40000u);
    CHECK(bits(moe_xr_dpbf16(nan5, 0x3F803F80u, 0x3F803F80u)) == 0x7FC50000u);
}

/* ---- An independent model: sums in double, the rounding applied by hand ------------------
 * Every operand has at most 24 significant bits, so a sum of two whose exponents differ by at
 * most 29 is exact in double; with a larger gap the result rounds to the larger operand
 * either way (the smaller is below a 32nd of its half-ulp), so rounding the double sum to 24
 * bits gives the exact sum's 24-bit rounding. */

static int is_nan_bits(uint32_t u) { return (u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu); }

/* The exact value v (a double) to f32 as the tile unit rounds: 24 significant bits to nearest
 * even with no exponent limit, then below 2^-126 a zero of its sign, from 2^128 infinity. */
static float round_tile(double v)
{
    if (v == 0) return v < 0 || signbit(v) ? -0.0f : 0.0f;
    int ex;
    const double m = frexp(v, &ex);                      /* |m| in [0.5, 1) */
    const double q = ldexp(rint(ldexp(m, 24)), ex - 24); /* rint: nearest even by default */
    if (fabs(q) < 0x1p-126) return v < 0 ? -0.0f : 0.0f;
    if (fabs(q) >= 0x1p128) return v < 0 ? -INFINITY : INFINITY;
    return (float)q; /* exact */
}

static double value_daz(uint32_t u) /* f32 bits read with DAZ */
{
    if ((u & 0x7F800000u) == 0) return (u & 0x80000000u) ? -0.0 : 0.0;
    return (double)from_bits(u);
}

/* NaN operands in priority order, else Inf arithmetic, else the rounded exact value. */
static uint32_t model_op(uint32_t x, uint32_t y, uint32_t z, int fused)
{
    const uint32_t ops[3] = {x, y, z};
    for (int i = 0; i < (fused ? 3 : 2); i++)
        if (is_nan_bits(ops[i])) return ops[i] | 0x00400000u;
    const double dx = value_daz(x), dy = value_daz(y), dz = fused ? value_daz(z) : 0.0;
    const double exact = fused ? dx * dy + dz : dx + dy; /* dx·dy is exact (16 bits) */
    if (isnan(exact)) return 0xFFC00000u;
    if (isinf(exact)) return bits((float)exact);
    if (exact == 0) { /* IEEE: +0 unless both addends are -0 */
        const double p = fused ? dx * dy : dx, s = fused ? dz : dy;
        return (signbit(p) && signbit(s)) ? 0x80000000u : 0u;
    }
    return bits(round_tile(exact));
}

static uint32_t model_dot(uint32_t c, const uint16_t *x, const uint16_t *w, size_t kp)
{
    uint32_t e = 0, o = 0;
    for (size_t k = 0; k < kp; k++) {
        e = model_op((uint32_t)x[2 * k] << 16, (uint32_t)w[2 * k] << 16, e, 1);
        o = model_op((uint32_t)x[2 * k + 1] << 16, (uint32_t)w[2 * k + 1] << 16, o, 1);
    }
    return model_op(c, model_op(e, o, 0, 0), 0, 0);
}

static void check_hand_cases_model(void)
{
    for (size_t i = 0; i < N_HAND; i++) {
        uint16_t x[8], w[8];
        case_operands(&hand_cases[i], x, w);
        uint32_t got = model_dot(hand_cases[i].c, x, w, hand_cases[i].kp);
        CHECKF(got == hand_cases[i].want, "model, %s: got %08x, want %08x", hand_cases[i].what, got,
               hand_cases[i].want);
    }
}

/* ---- Random operands ------------------------------------------------------------------- */

enum { NEAR_ONE, WIDE, NEAR_MIN_NORMAL, ANY_CODE, N_REGIMES };
static const char *const regime_names[N_REGIMES] = {"near 1", "2^±20", "products near 2^-126",
                                                    "any code"};

/* A bf16 code: exponent field by regime (NEAR_MIN_NORMAL: products of two land near 2^-126,
 * so sums cross the normal boundary), random sign and mantissa. */
static uint16_t random_bf16(uint64_t *s, int regime)
{
    const uint64_t r = xorshift64(s);
    unsigned e;
    switch (regime) {
    case NEAR_ONE: e = 124 + (unsigned)(r % 7); break;
    case WIDE: e = 107 + (unsigned)(r % 41); break;
    case NEAR_MIN_NORMAL: e = 60 + (unsigned)(r % 8); break;
    default: return (uint16_t)(r >> 24);
    }
    return (uint16_t)(((r >> 40) & 0x8000u) | e << 7 | ((r >> 8) & 0x7Fu));
}

/* An f32 accumulator: zero a quarter of the time, else by regime. */
static float random_c(uint64_t *s, int regime)
{
    const uint64_t r = xorshift64(s);
    if (r % 4 == 0) return 0.0f;
    unsigned e;
    switch (regime) {
    case NEAR_ONE: e = 123 + (unsigned)(r % 9); break;
    case WIDE: e = 107 + (unsigned)(r % 41); break;
    case NEAR_MIN_NORMAL: e = (unsigned)(r % 4); break;
    default: return from_bits((uint32_t)(r >> 16));
    }
    return from_bits((uint32_t)((r >> 32) & 0x80000000u) | e << 23 |
                     (uint32_t)((r >> 8) & 0x7FFFFFu));
}

#define LDA 40 /* strides that are not the tile's width */
#define LDB 36
#define LDC 20

typedef struct tile_case {
    size_t m, n, kp;
    float c[MOE_TILE_BF16_ROWS * LDC];
    uint16_t a[MOE_TILE_BF16_ROWS * LDA], b[MOE_TILE_BF16_PAIRS * LDB];
} tile_case;

static void random_tile(tile_case *t, uint64_t *s, int regime)
{
    t->m = 1 + xorshift64(s) % MOE_TILE_BF16_ROWS;
    t->n = 1 + xorshift64(s) % 16;
    t->kp = 1 + xorshift64(s) % MOE_TILE_BF16_PAIRS;
    for (size_t i = 0; i < sizeof t->a / sizeof t->a[0]; i++)
        t->a[i] = random_bf16(s, regime);
    for (size_t i = 0; i < sizeof t->b / sizeof t->b[0]; i++)
        t->b[i] = random_bf16(s, regime);
    for (size_t i = 0; i < sizeof t->c / sizeof t->c[0]; i++)
        t->c[i] = random_c(s, regime);
}

/* The reference's tile against the model element by element, and nothing outside the tile
 * touched. */
static void check_random_ref(void)
{
    uint64_t s = 0x9E3779B97F4A7C15u;
    static tile_case t, r;
    for (int regime = 0; regime < N_REGIMES; regime++) {
        long bad = 0;
        for (int trial = 0; trial < 300; trial++) {
            random_tile(&t, &s, regime);
            r = t;
            moe_tile_bf16_dp_ref(r.m, r.n, r.kp, r.c, LDC, r.a, LDA, r.b, LDB);
            for (size_t i = 0; i < MOE_TILE_BF16_ROWS; i++)
                for (size_t j = 0; j < LDC; j++) {
                    uint32_t want = bits(t.c[i * LDC + j]);
                    if (i < t.m && j < t.n) {
                        uint16_t w[2 * MOE_TILE_BF16_PAIRS];
                        for (size_t k = 0; k < t.kp; k++) {
                            w[2 * k] = t.b[k * LDB + 2 * j];
                            w[2 * k + 1] = t.b[k * LDB + 2 * j + 1];
                        }
                        want = model_dot(want, t.a + i * LDA, w, t.kp);
                    }
                    if (bits(r.c[i * LDC + j]) != want && bad++ < 5)
                        fprintf(stderr, "%s trial %d (%zu, %zu): reference %08x, model %08x\n",
                                regime_names[regime], trial, i, j, bits(r.c[i * LDC + j]), want);
                }
        }
        CHECKF(bad == 0, "reference vs model, %s: %ld elements differ", regime_names[regime], bad);
    }
}

/* ---- The instruction ------------------------------------------------------------------- */

#ifdef MOE_COMPILED_AVX512AMXBF16
static void check_instruction(void)
{
    /* The hand cases through the instruction. */
    for (size_t i = 0; i < N_HAND; i++) {
        const hand_case *h = &hand_cases[i];
        float c = from_bits(h->c);
        uint16_t x[8], w[8];
        case_operands(h, x, w);
        moe_tile_bf16_dp__avx512amxbf16(1, 1, h->kp, &c, 1, x, 2 * h->kp, w, 2);
        CHECKF(bits(c) == h->want, "tdpbf16ps, %s: got %08x, want %08x", h->what, bits(c), h->want);
    }
    /* Random tiles, and a second instruction on the first one's result (C chained). */
    uint64_t s = 0x2545F4914F6CDD1Du;
    static tile_case t, hw, ref;
    long elements = 0;
    for (int regime = 0; regime < N_REGIMES; regime++) {
        long bad = 0;
        for (int trial = 0; trial < 2000; trial++) {
            random_tile(&t, &s, regime);
            hw = ref = t;
            for (int step = 0; step < 2; step++) {
                moe_tile_bf16_dp__avx512amxbf16(t.m, t.n, t.kp, hw.c, LDC, t.a + step, LDA,
                                                t.b + step * 2, LDB);
                moe_tile_bf16_dp_ref(t.m, t.n, t.kp, ref.c, LDC, t.a + step, LDA, t.b + step * 2,
                                     LDB);
            }
            for (size_t i = 0; i < MOE_TILE_BF16_ROWS * LDC; i++) {
                elements++;
                if (bits(hw.c[i]) != bits(ref.c[i]) && bad++ < 5)
                    fprintf(stderr, "%s trial %d element %zu: tdpbf16ps %08x, reference %08x\n",
                            regime_names[regime], trial, i, bits(hw.c[i]), bits(ref.c[i]));
            }
        }
        CHECKF(bad == 0, "tdpbf16ps vs reference, %s: %ld elements differ", regime_names[regime],
               bad);
    }
    fprintf(stderr, "tdpbf16ps: %ld elements compared with the reference\n", elements);
}
#endif

int main(void)
{
    check_hand_cases_ref();
    check_hand_cases_model();
    check_dpbf16_ref();
    check_random_ref();
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
#ifdef MOE_COMPILED_AVX512AMXBF16
    if (info.allowed.amx_bf16)
        check_instruction();
    else
        fprintf(stderr, "amx_bf16 not allowed here: the instruction is not compared\n");
#else
    fprintf(stderr, "no AMX-BF16 kernels in this build: the instruction is not compared\n");
#endif
    return TEST_END();
}
