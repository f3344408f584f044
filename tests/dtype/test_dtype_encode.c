/* test_dtype_encode.c — f32 -> format: round trips, midpoints, overflow, underflow, NaN. */
#include <fenv.h>
#include <float.h>
#include <stdio.h>

#include "test_dtype_formats.h"

/* encode(decode(code)) == code for every non-NaN code; a NaN code comes back as a NaN. */
static void test_round_trip(const fmt_desc *f)
{
    for (unsigned c = 0; c < f->ncodes; c++) {
        double v = f->ref(c);
        unsigned got = f->encode(f->decode(c));
        if (isnan(v))
            CHECKF(nan_result_ok(f, got, signbit(v) != 0), "%s NaN code 0x%X -> 0x%X", f->name, c,
                   got);
        else
            CHECKF(got == c, "%s code 0x%X (%a) -> 0x%X", f->name, c, v, got);
    }
}

static void check_encode(const fmt_desc *f, float x, unsigned want, const char *what)
{
    unsigned got = f->encode(x);
    CHECKF(got == want, "%s: %s x=%a: got 0x%X, want 0x%X", f->name, what, (double)x, got, want);
}

/*
 * For every pair of neighbouring values a < b (from the reference table): just below the
 * midpoint goes to a, just above to b, the midpoint itself to the code with the even
 * mantissa (the even integer for int4). A zero result keeps the input's sign.
 */
static void test_neighbours(const fmt_table *t)
{
    const fmt_desc *f = t->fmt;
    for (unsigned i = 0; i + 1 < t->n; i++) {
        double a = t->v[i], b = t->v[i + 1];
        double mid = (a + b) / 2;
        float xm = (float)mid;
        CHECKF((double)xm == mid, "%s midpoint %a is not an f32", f->name, mid);
        int neg = mid < 0;
        unsigned even = (t->code[i] & 1u) == 0 ? i : i + 1;
        check_encode(f, xm, table_code(t, even, neg), "midpoint");
        float below = nextafterf(xm, -INFINITY), above = nextafterf(xm, INFINITY);
        check_encode(f, below, table_code(t, i, below < 0), "below midpoint");
        check_encode(f, above, table_code(t, i + 1, above < 0), "above midpoint");
        check_encode(f, (float)a, table_code(t, i, signbit(a) != 0), "exact");
    }
}

/* Around the largest finite value: the midpoint to the would-be next value decides between
 * max and overflow (Inf, or max again where the format saturates). */
static void test_overflow(const fmt_table *t)
{
    const fmt_desc *f = t->fmt;
    double max = t->v[t->n - 1];
    unsigned max_code = t->code[t->n - 1];
    unsigned over = f->has_inf ? t->pos_inf : max_code;
    float omid = (float)((max + f->next_up) / 2);
    CHECKF((double)omid == (max + f->next_up) / 2, "%s overflow midpoint", f->name);
    check_encode(f, (float)max, max_code, "max");
    check_encode(f, nextafterf((float)max, INFINITY), max_code, "just above max");
    check_encode(f, nextafterf(omid, 0), max_code, "below overflow midpoint");
    check_encode(f, omid, over, "overflow midpoint");
    check_encode(f, nextafterf(omid, INFINITY), over, "above overflow midpoint");
    check_encode(f, FLT_MAX, over, "FLT_MAX");
    check_encode(f, INFINITY, over, "+Inf");
    if (t->v[0] != -max) return; /* int4 and E8M0 are not symmetric: see EDGES */
    unsigned neg_over = f->has_inf ? t->neg_inf : t->code[0];
    check_encode(f, -(float)max, t->code[0], "-max");
    check_encode(f, -nextafterf(omid, 0), t->code[0], "above -overflow midpoint");
    check_encode(f, -omid, neg_over, "-overflow midpoint");
    check_encode(f, -nextafterf(omid, INFINITY), neg_over, "below -overflow midpoint");
    check_encode(f, -FLT_MAX, neg_over, "-FLT_MAX");
    check_encode(f, -INFINITY, neg_over, "-Inf");
}

/* Around zero: half the smallest positive value is a tie that goes to (signed) zero. */
static void test_underflow(const fmt_table *t)
{
    const fmt_desc *f = t->fmt;
    if (f->unsigned_only) return; /* E8M0 has no zero */
    unsigned z = 0;
    while (t->v[z] != 0)
        z++;
    double s = t->v[z + 1];
    float half = (float)(s / 2);
    check_encode(f, 0.0f, t->code[z], "+0");
    check_encode(f, -0.0f, table_code(t, z, 1), "-0");
    check_encode(f, FLT_TRUE_MIN, t->code[z], "smallest f32 subnormal");
    check_encode(f, -FLT_TRUE_MIN, table_code(t, z, 1), "-smallest f32 subnormal");
    check_encode(f, half, t->code[z], "half the smallest");
    check_encode(f, nextafterf(half, 0), t->code[z], "below half the smallest");
    check_encode(f, nextafterf(half, 1), t->code[z + 1], "above half the smallest");
    check_encode(f, -half, table_code(t, z, 1), "-half the smallest");
    check_encode(f, -nextafterf(half, 1), t->code[z - 1], "below -half the smallest");
}

/* NaN inputs, quiet and signalling, both signs, with and without payload. */
static void test_nan_inputs(const fmt_desc *f)
{
    static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                                    0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u, 0xFF812345u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        unsigned got = f->encode(float_of(nans[i]));
        CHECKF(nan_result_ok(f, got, (nans[i] >> 31) != 0), "%s NaN 0x%08X -> 0x%X", f->name,
               nans[i], got);
    }
}

typedef struct edge_case {
    const fmt_desc *f;
    float x;
    unsigned code;
} edge_case;

/* Hand-derived cases from the format tables in formats.md, grouped by format and rule. */
static const edge_case EDGES[] = {
    /* bf16: ties to even inside a binade, into the next binade, into the normals, overflow */
    {&FMT_BF16, 0x1.01p0f, 0x3F80},
    {&FMT_BF16, 0x1.03p0f, 0x3F82},
    {&FMT_BF16, 0x1.ffp0f, 0x4000},
    {&FMT_BF16, 0x1.fep-127f, 0x0080},
    {&FMT_BF16, 0x1p-134f, 0x0000},
    {&FMT_BF16, 0x1.0002p-134f, 0x0001},
    {&FMT_BF16, -0x1p-134f, 0x8000},
    {&FMT_BF16, 0x1.fep127f, 0x7F7F},
    {&FMT_BF16, 0x1.fefffep127f, 0x7F7F},
    {&FMT_BF16, 0x1.ffp127f, 0x7F80},
    {&FMT_BF16, -0x1.ffp127f, 0xFF80},
    {&FMT_BF16, FLT_MAX, 0x7F80},
    /* f16 */
    {&FMT_F16, 2049.0f, 0x6800},
    {&FMT_F16, 2051.0f, 0x6802},
    {&FMT_F16, 0x1.ffcp-15f, 0x0400},
    {&FMT_F16, 0x1p-25f, 0x0000},
    {&FMT_F16, 0x1.000002p-25f, 0x0001},
    {&FMT_F16, 0x1.8p-24f, 0x0002},
    {&FMT_F16, -0x1p-25f, 0x8000},
    {&FMT_F16, 65504.0f, 0x7BFF},
    {&FMT_F16, 65519.996f, 0x7BFF},
    {&FMT_F16, 65520.0f, 0x7C00},
    {&FMT_F16, -65520.0f, 0xFC00},
    {&FMT_F16, 1e10f, 0x7C00},
    /* E4M3 "fn": saturates, 0x7F is never produced from a number */
    {&FMT_E4M3, 17.0f, 0x58},
    {&FMT_E4M3, 248.0f, 0x78},
    {&FMT_E4M3, 0x1.ep-7f, 0x08},
    {&FMT_E4M3, 0x1p-10f, 0x00},
    {&FMT_E4M3, 0x1.000002p-10f, 0x01},
    {&FMT_E4M3, 0x1.8p-9f, 0x02},
    {&FMT_E4M3, -0x1p-10f, 0x80},
    {&FMT_E4M3, 448.0f, 0x7E},
    {&FMT_E4M3, 464.0f, 0x7E},
    {&FMT_E4M3, 480.0f, 0x7E},
    {&FMT_E4M3, 1e9f, 0x7E},
    {&FMT_E4M3, -1e9f, 0xFE},
    {&FMT_E4M3, INFINITY, 0x7E},
    {&FMT_E4M3, -INFINITY, 0xFE},
    /* E5M2 */
    {&FMT_E5M2, 57344.0f, 0x7B},
    {&FMT_E5M2, 61439.996f, 0x7B},
    {&FMT_E5M2, 61440.0f, 0x7C},
    {&FMT_E5M2, -61440.0f, 0xFC},
    {&FMT_E5M2, 0x1p-17f, 0x00},
    {&FMT_E5M2, 0x1.000002p-17f, 0x01},
    {&FMT_E5M2, 1.125f, 0x3C},
    {&FMT_E5M2, 1.375f, 0x3E},
    /* E2M1: every tie of the 8 magnitudes, saturation at 6 */
    {&FMT_E2M1, 0.25f, 0x0},
    {&FMT_E2M1, 0.75f, 0x2},
    {&FMT_E2M1, 1.25f, 0x2},
    {&FMT_E2M1, 1.75f, 0x4},
    {&FMT_E2M1, 2.5f, 0x4},
    {&FMT_E2M1, 3.5f, 0x6},
    {&FMT_E2M1, 5.0f, 0x6},
    {&FMT_E2M1, 5.0000005f, 0x7},
    {&FMT_E2M1, 7.0f, 0x7},
    {&FMT_E2M1, 100.0f, 0x7},
    {&FMT_E2M1, -5.0f, 0xE},
    {&FMT_E2M1, -0.25f, 0x8},
    {&FMT_E2M1, -1.75f, 0xC},
    {&FMT_E2M1, -INFINITY, 0xF},
    /* E8M0: nearest power of two by value, ties (1.5 × 2^k) to the even code */
    {&FMT_E8M0, 1.0f, 127},
    {&FMT_E8M0, 1.5f, 128},
    {&FMT_E8M0, 3.0f, 128},
    {&FMT_E8M0, 1.4999999f, 127},
    {&FMT_E8M0, 1.5000001f, 128},
    {&FMT_E8M0, 2.9999998f, 128},
    {&FMT_E8M0, 3.0000002f, 129},
    {&FMT_E8M0, 1.45f, 127}, /* by value; a geometric (sqrt 2) midpoint would give 128 */
    {&FMT_E8M0, 0x1p-127f, 0x00},
    {&FMT_E8M0, 0x1.8p-127f, 0x00},
    {&FMT_E8M0, 0x1.800004p-127f, 0x01},
    {&FMT_E8M0, 0x1p-126f, 0x01},
    {&FMT_E8M0, 0x1p-140f, 0x00},
    {&FMT_E8M0, FLT_TRUE_MIN, 0x00},
    {&FMT_E8M0, 0.0f, 0x00},
    {&FMT_E8M0, -0.0f, 0x00},
    {&FMT_E8M0, -1.0f, 0xFF},
    {&FMT_E8M0, -FLT_TRUE_MIN, 0xFF},
    {&FMT_E8M0, -INFINITY, 0xFF},
    {&FMT_E8M0, 0x1p127f, 0xFE},
    {&FMT_E8M0, 0x1.8p126f, 0xFE},
    {&FMT_E8M0, 0x1.7ffffep126f, 0xFD},
    {&FMT_E8M0, FLT_MAX, 0xFE},
    {&FMT_E8M0, INFINITY, 0xFE},
    /* int4 (two's complement nibble) and uint4 (value + 8) */
    {&FMT_INT4, 0.5f, 0x0},
    {&FMT_INT4, 0.50000006f, 0x1},
    {&FMT_INT4, -0.5f, 0x0},
    {&FMT_INT4, -0.0f, 0x0},
    {&FMT_INT4, 1.5f, 0x2},
    {&FMT_INT4, 2.5f, 0x2},
    {&FMT_INT4, -1.5f, 0xE},
    {&FMT_INT4, -2.5f, 0xE},
    {&FMT_INT4, 6.5f, 0x6},
    {&FMT_INT4, 7.49f, 0x7},
    {&FMT_INT4, 7.5f, 0x7},
    {&FMT_INT4, 100.0f, 0x7},
    {&FMT_INT4, -7.5f, 0x8},
    {&FMT_INT4, -8.5f, 0x8},
    {&FMT_INT4, -9.0f, 0x8},
    {&FMT_INT4, -INFINITY, 0x8},
    {&FMT_INT4, INFINITY, 0x7},
    {&FMT_INT4, FLT_TRUE_MIN, 0x0},
    {&FMT_UINT4, 0.5f, 0x8},
    {&FMT_UINT4, -0.5f, 0x8},
    {&FMT_UINT4, -0.0f, 0x8},
    {&FMT_UINT4, 2.5f, 0xA},
    {&FMT_UINT4, -2.5f, 0x6},
    {&FMT_UINT4, 7.5f, 0xF},
    {&FMT_UINT4, -8.5f, 0x0},
    {&FMT_UINT4, -1e30f, 0x0},
    {&FMT_UINT4, 1e30f, 0xF},
    {&FMT_UINT4, -0.50000006f, 0x7},
};

static void test_edges(void)
{
    char what[64];
    for (size_t i = 0; i < sizeof EDGES / sizeof EDGES[0]; i++) {
        snprintf(what, sizeof what, "edge case %zu", i);
        check_encode(EDGES[i].f, EDGES[i].x, EDGES[i].code, what);
    }
}

/* E8M0 holds every power of two from 2^-127 to 2^127 exactly. */
static void test_e8m0_powers(void)
{
    for (int k = -127; k <= 127; k++)
        CHECKF(moe_f32_to_e8m0(ldexpf(1.0f, k)) == (uint8_t)(k + 127), "e8m0 2^%d", k);
}

/* The conversions are integer code: the same results under every FPU rounding mode. */
static void run_rounding_checks(const fmt_table *tables)
{
    for (size_t i = 0; i < N_FORMATS; i++) {
        test_neighbours(&tables[i]);
        test_overflow(&tables[i]);
        test_underflow(&tables[i]);
    }
    test_edges();
}

int main(void)
{
    fmt_table tables[N_FORMATS];
    for (size_t i = 0; i < N_FORMATS; i++) {
        tables[i] = table_build(ALL_FORMATS[i]);
        test_round_trip(ALL_FORMATS[i]);
        test_nan_inputs(ALL_FORMATS[i]);
    }
    test_e8m0_powers();

    static const int modes[] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        REQUIRE(fesetround(modes[m]) == 0);
        run_rounding_checks(tables);
    }
    REQUIRE(fesetround(FE_TONEAREST) == 0);

    for (size_t i = 0; i < N_FORMATS; i++)
        table_free(&tables[i]);
    return TEST_END();
}
