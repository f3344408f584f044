/* test_route_math.c — routing exp/log1p/sigmoid/sqrt-softplus vs double; SIMD vs scalar bits. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"
#include "kernels/ref/math_ref.h"
#include "route_kernels.h"

/* ---- Error in units in the last place ------------------------------------------------- */

/* The float ulp at the magnitude of an exact (double) value: 2^(e-23) for a normal result,
 * 2^-149 in the subnormal range, and the ulp of FLT_MAX beyond it. */
static double ulp_at(double exact)
{
    double a = fabs(exact);
    if (a < 0x1p-126) return 0x1p-149;
    if (a >= 0x1p127) return 0x1p104;
    int e;
    frexp(a, &e); /* a = f·2^e, f in [0.5, 1) */
    return ldexp(1.0, e - 24);
}

/* |got - exact| in ulps of the exact value; an infinite got, and an exact value beyond the
 * float range, count as 2^128 (one ulp past FLT_MAX). */
static double ulp_error(float got, double exact)
{
    double g = isinf(got) ? copysign(0x1p128, got) : (double)got;
    if (fabs(exact) > 0x1p128) exact = copysign(0x1p128, exact); /* both overflow: no error */
    return fabs(g - exact) / ulp_at(exact);
}

/* Floats are ordered like these integers, so the distance between two floats in ulps (the
 * number of floats between them) is the difference of their ranks; ±0 share rank 0. */
static int64_t rank(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    int64_t mag = (int64_t)(u & 0x7FFFFFFFu);
    return (u >> 31) ? -mag : mag;
}

/* Distance in ulps from the correctly rounded result (the exact double rounded to float). */
static int64_t ulps_from_rounded(float got, double exact)
{
    int64_t d = rank(got) - rank((float)exact);
    return d < 0 ? -d : d;
}

typedef struct worst {
    const char *what;
    double max_exact; /* largest |got - exact| in ulps, real-valued */
    float at_exact;
    int64_t max_ulps; /* largest distance from the correctly rounded float */
    float at;
    long points;
} worst;

static void note(worst *w, float x, float got, double exact)
{
    w->points++;
    if (isnan(exact)) {
        CHECKF(isnan(got), "%s(%a) = %a, want NaN", w->what, (double)x, (double)got);
        return;
    }
    double e = ulp_error(got, exact);
    if (!(e <= w->max_exact)) {
        w->max_exact = e;
        w->at_exact = x;
    }
    int64_t d = ulps_from_rounded(got, exact);
    if (d > w->max_ulps) {
        w->max_ulps = d;
        w->at = x;
    }
}

/* Fails when the distance from the correctly rounded result exceeds `limit` ulps. */
static void report(const worst *w, int64_t limit)
{
    fprintf(stderr,
            "%-13s %ld points: max %lld ulp from the rounded result (at %a), max %.3f ulp from "
            "the exact value (at %a)\n",
            w->what, w->points, (long long)w->max_ulps, (double)w->at, w->max_exact,
            (double)w->at_exact);
    CHECKF(w->max_ulps <= limit, "%s: %lld ulp at %a exceeds %lld", w->what, (long long)w->max_ulps,
           (double)w->at, (long long)limit);
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- Independent references in double ------------------------------------------------ */

static double ref_sigmoid(double z)
{
    if (z >= 0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

static double ref_sqrtsoftplus(double z) { return sqrt(fmax(z, 0.0) + log1p(exp(-fabs(z)))); }

/* ---- Sweeps --------------------------------------------------------------------------- */

/* Calls fn on every float whose bit pattern is lo, lo + step, ... ≤ hi, and on `dense`
 * evenly spaced values of [a, b]. */
typedef void point_fn(worst *w, float x);

static void sweep_bits(worst *w, point_fn *fn, uint32_t lo, uint32_t hi, uint32_t step)
{
    /* lo and hi share a sign, so the patterns in between are the floats in between. */
    for (uint64_t u = lo; u <= hi; u += step)
        fn(w, from_bits((uint32_t)u));
    fn(w, from_bits(hi));
}

static void sweep_values(worst *w, point_fn *fn, double a, double b, long dense)
{
    for (long i = 0; i <= dense; i++)
        fn(w, (float)(a + (b - a) * (double)i / (double)dense));
}

/* The `count` floats either side of x (through zero, across the sign, where x is small). */
static void sweep_around(worst *w, point_fn *fn, float x, int count)
{
    int64_t r = rank(x);
    for (int64_t d = -count; d <= count; d++) {
        int64_t q = r + d;
        uint32_t u = q < 0 ? 0x80000000u | (uint32_t)-q : (uint32_t)q;
        fn(w, from_bits(u));
    }
}

static void exp_point(worst *w, float x) { note(w, x, moe_math_exp(x), exp((double)x)); }
static void log1p_point(worst *w, float x) { note(w, x, moe_math_log1p(x), log1p((double)x)); }
static void sigmoid_point(worst *w, float x)
{
    note(w, x, moe_math_sigmoid(x), ref_sigmoid((double)x));
}
static void ssp_point(worst *w, float x)
{
    note(w, x, moe_math_sqrtsoftplus(x), ref_sqrtsoftplus((double)x));
}

#define POS_MAX 0x7F7FFFFFu /* FLT_MAX */
#define NEG_MAX 0xFF7FFFFFu /* -FLT_MAX */

static void test_exp(void)
{
    worst w = {.what = "exp"};
    sweep_bits(&w, exp_point, 0, POS_MAX, 6143);           /* every magnitude, positive */
    sweep_bits(&w, exp_point, 0x80000000u, NEG_MAX, 6133); /* and negative */
    sweep_values(&w, exp_point, -104.5, 89.5, 400000);
    /* Around the thresholds: the last finite result, the normal/subnormal boundary, the
     * least subnormal and the rounding to 0; 2000 floats either side of each. */
    const float edges[] = {0x1.62e42ep+6f, -87.33654f,  -103.27893f, -103.97208f,
                           0.0f,           0.34657359f, -0.34657359f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        sweep_around(&w, exp_point, edges[i], 2000);
    report(&w, 1);

    CHECK(moe_math_exp(0.0f) == 1.0f && moe_math_exp(-0.0f) == 1.0f);
    CHECK(moe_math_exp(-INFINITY) == 0.0f && !signbit(moe_math_exp(-INFINITY)));
    CHECK(moe_math_exp(INFINITY) == INFINITY);
    CHECK(moe_math_exp(FLT_MAX) == INFINITY && moe_math_exp(-FLT_MAX) == 0.0f);
    CHECK(moe_math_exp(0x1.62e42ep+6f) < INFINITY); /* the largest x with a finite e^x */
    CHECK(moe_math_exp(0x1.62e430p+6f) == INFINITY);
    CHECK(isnan(moe_math_exp(NAN)));
    /* FTZ-free: the subnormal range is reached, and the least subnormal. */
    CHECK(moe_math_exp(-100.0f) > 0.0f && moe_math_exp(-100.0f) < FLT_MIN);
    CHECK(moe_math_exp(-103.2f) == from_bits(1));
    CHECK(moe_math_exp(-104.0f) == 0.0f);
}

static void test_log1p(void)
{
    worst w = {.what = "log1p"};
    sweep_bits(&w, log1p_point, 0, POS_MAX, 6143);
    sweep_bits(&w, log1p_point, 0x80000000u, 0xBF7FFFFFu, 3067); /* (-1, -0] */
    sweep_values(&w, log1p_point, -0.999999, 3.0, 400000);
    const float edges[] = {0.0f, -0.29289323f, 0.41421357f, -0.5f, 1.0f, -1.0f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        sweep_around(&w, log1p_point, edges[i], 2000); /* below -1: NaN both sides */
    report(&w, 1);

    float z = moe_math_log1p(0.0f), nz = moe_math_log1p(-0.0f);
    CHECK(z == 0.0f && !signbit(z) && nz == 0.0f && signbit(nz));
    CHECK(moe_math_log1p(-1.0f) == -INFINITY);
    CHECK(isnan(moe_math_log1p(-1.5f)) && isnan(moe_math_log1p(-INFINITY)));
    CHECK(isnan(moe_math_log1p(NAN)));
    CHECK(moe_math_log1p(INFINITY) == INFINITY);
    CHECK(moe_math_log1p(from_bits(1)) == from_bits(1)); /* subnormal in, unchanged out */
    CHECK(moe_math_log1p(-0x1p-30f) == -0x1p-30f);
    CHECK(isfinite(moe_math_log1p(FLT_MAX)));
}

static void test_sigmoid(void)
{
    worst w = {.what = "sigmoid"};
    sweep_bits(&w, sigmoid_point, 0, POS_MAX, 12289);
    sweep_bits(&w, sigmoid_point, 0x80000000u, NEG_MAX, 12281);
    sweep_values(&w, sigmoid_point, -120.0, 120.0, 300000);
    sweep_around(&w, sigmoid_point, 0.0f, 3000);
    report(&w, 2);

    CHECK(moe_math_sigmoid(0.0f) == 0.5f && moe_math_sigmoid(-0.0f) == 0.5f);
    CHECK(moe_math_sigmoid(INFINITY) == 1.0f && moe_math_sigmoid(-INFINITY) == 0.0f);
    CHECK(moe_math_sigmoid(-FLT_MAX) == 0.0f && moe_math_sigmoid(FLT_MAX) == 1.0f);
    CHECK(isnan(moe_math_sigmoid(NAN)));
    /* The accurate form: tiny sigmoids are e^z, not 0 and not 1/(1 + huge) rounded. */
    CHECK(moe_math_sigmoid(-90.0f) > 0.0f);
    for (float v = -0.0f; v >= -100.0f; v -= 0.25f)
        CHECKF(moe_math_sigmoid(v) > 0.0f && moe_math_sigmoid(v) <= 0.5f, "sigmoid(%g)", v);
}

static void test_sqrtsoftplus(void)
{
    worst w = {.what = "sqrtsoftplus"};
    sweep_bits(&w, ssp_point, 0, POS_MAX, 12289);
    sweep_bits(&w, ssp_point, 0x80000000u, NEG_MAX, 12281);
    sweep_values(&w, ssp_point, -200.0, 200.0, 300000);
    sweep_around(&w, ssp_point, -20.0f, 3000); /* the switch to e^(z/2) */
    sweep_around(&w, ssp_point, 0.0f, 3000);
    report(&w, 2);

    /* Never 0 where the true value is a float: down to z ≈ -207 (e^(z/2) ≥ 2^-149). */
    for (float v = 200.0f; v >= -200.0f; v -= 0.125f)
        CHECKF(moe_math_sqrtsoftplus(v) > 0.0f, "sqrtsoftplus(%g) is 0", v);
    CHECK(moe_math_sqrtsoftplus(-206.0f) > 0.0f);
    CHECK(moe_math_sqrtsoftplus(-INFINITY) == 0.0f);
    CHECK(moe_math_sqrtsoftplus(INFINITY) == INFINITY);
    CHECK(moe_math_sqrtsoftplus(FLT_MAX) == sqrtf(FLT_MAX));
    CHECK(isnan(moe_math_sqrtsoftplus(NAN)));
    CHECK(moe_math_sqrtsoftplus(-0.0f) == moe_math_sqrtsoftplus(0.0f));
}

/* ---- Every SIMD variant equals the scalar math, bit for bit ---------------------------- */

static bool runnable(const test_kernel *k, uint32_t allowed)
{
    if ((k->isa & ~allowed) == 0) return true;
    fprintf(stderr, "skip %s: needs features not allowed here\n", k->name);
    return false;
}

/* The chosen z values: every finite float with a bit pattern ≡ 0 mod 16381 (both signs, every
 * magnitude), then a dense grid of [-220, 220] where the scores change. */
static size_t fill_sweep(float *z, size_t cap)
{
    size_t n = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFu && n < cap; u += 16381) {
        float f = from_bits((uint32_t)u);
        if (isfinite(f)) z[n++] = f;
    }
    for (long i = 0; i <= 300000 && n < cap; i++)
        z[n++] = (float)(-220.0 + 440.0 * (double)i / 3e5);
    return n;
}

/* Compares n scores with the scalar function's, bit for bit; prints the first few misses. */
static void compare_scores(const char *kernel, const char *what, size_t n, const float *z,
                           const float *got, const float *want)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (bits(got[i]) != bits(want[i]) && bad++ < 3)
            fprintf(stderr, "  %s: %s(%a) = %a, scalar %a\n", kernel, what, (double)z[i],
                    (double)got[i], (double)want[i]);
    CHECKF(bad == 0, "%s: %zu of %zu values differ from the scalar %s", kernel, bad, n, what);
}

static void test_simd_scores(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    uint32_t allowed = moe_cpu_caps_mask(&info.allowed);
    size_t cap = 600000;
    float *z = malloc(cap * sizeof *z), *s = malloc(cap * sizeof *s);
    float *want = malloc(cap * sizeof *want);
    uint32_t *key = malloc(cap * sizeof *key);
    REQUIRE(z && s && want && key);
    size_t n = fill_sweep(z, cap);

    for (size_t i = 0; i < n; i++)
        want[i] = moe_math_sigmoid(z[i]);
    for (size_t k = 0; k < COUNT(sigmoid_kernels); k++) {
        if (!runnable(&sigmoid_kernels[k], allowed)) continue;
        sigmoid_kernels[k].fn.route_sigmoid_keys(n, z, NULL, s, key);
        compare_scores(sigmoid_kernels[k].name, "sigmoid", n, z, s, want);
    }
    for (size_t i = 0; i < n; i++)
        want[i] = moe_math_sqrtsoftplus(z[i]);
    for (size_t k = 0; k < COUNT(ssp_kernels); k++) {
        if (!runnable(&ssp_kernels[k], allowed)) continue;
        ssp_kernels[k].fn.route_sqrtsoftplus_keys(n, z, NULL, s, key);
        compare_scores(ssp_kernels[k].name, "sqrtsoftplus", n, z, s, want);
    }
    /* exp through the exp-sum of one element with m = 0: a one-term sum is that term. Every
     * fifth value of the sweep, each in the vector's first lane. */
    size_t ne = 0;
    for (size_t i = 0; i < n; i += 5) {
        z[ne] = z[i];
        want[ne++] = moe_math_exp(z[i]);
    }
    for (size_t k = 0; k < COUNT(expsum_kernels); k++) {
        if (!runnable(&expsum_kernels[k], allowed)) continue;
        for (size_t i = 0; i < ne; i++)
            s[i] = expsum_kernels[k].fn.route_expsum(1, &z[i], 0.0f);
        compare_scores(expsum_kernels[k].name, "exp", ne, z, s, want);
    }
    free(z);
    free(s);
    free(want);
    free(key);
}

/*
 * The noaux_tc kernels' scores: the AVX-512 kernel computes its own sigmoid on its fused path
 * (DeepSeek-V3's shape). Rows whose eight picks are known: experts 0, 1, 32, 33, 64, 65, 96, 97
 * (two in each of groups 0-3) carry biases 1007 down to 1000 and every other expert bias 0 and
 * logit 0, so groups 0-3 are kept and slot j holds the j-th of them; with renormalisation off
 * and scale 1 the weights are those experts' sigmoids, which must equal moe_math_sigmoid's bits.
 * Every third value of the sweep goes through one of those slots (the dense grid stays dense
 * enough to cross every binade of e^-|z|). The reference kernel is the sigmoid key kernel's,
 * compared above, and is skipped (it is slow at this size).
 */
#define NOAUX_CHUNK 1024 /* rows per call */

static void test_noaux_scores(void)
{
    static const int picks[8] = {0, 1, 32, 33, 64, 65, 96, 97};
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    const uint32_t allowed = moe_cpu_caps_mask(&info.allowed);
    size_t cap = 600000;
    float *sweep = malloc(cap * sizeof *sweep), *z = calloc(NOAUX_CHUNK * 256, sizeof *z);
    float *w = malloc(NOAUX_CHUNK * 8 * sizeof *w), *want = malloc(NOAUX_CHUNK * 8 * sizeof *want);
    int32_t *ids = malloc(NOAUX_CHUNK * 8 * sizeof *ids);
    moe_route_scratch *work = malloc(sizeof *work);
    REQUIRE(sweep && z && w && want && ids && work);
    size_t n = fill_sweep(sweep, cap);
    for (size_t i = 0; 3 * i < n; i++)
        sweep[i] = sweep[3 * i];
    n = (n + 2) / 3;
    float bias[256] = {0};
    for (int j = 0; j < 8; j++)
        bias[picks[j]] = 1007.0f - (float)j;
    const moe_route_noaux_tc_args args = {bias, 256, 8, 8, 4, MOE_SCORE_SIGMOID, false, 1.0f};
    for (size_t k = 1; k < COUNT(noaux_kernels); k++) {
        if (!runnable(&noaux_kernels[k], allowed)) continue;
        size_t bad = 0;
        for (size_t first = 0; first < n; first += NOAUX_CHUNK * 8) {
            const size_t rows =
                (n - first + 7) / 8 < NOAUX_CHUNK ? (n - first + 7) / 8 : NOAUX_CHUNK;
            for (size_t t = 0; t < rows; t++) {
                for (int j = 0; j < 8; j++) {
                    size_t i = first + t * 8 + (size_t)j;
                    float x = i < n ? sweep[i] : 0.0f;
                    z[t * 256 + (size_t)picks[j]] = x;
                    want[t * 8 + (size_t)j] = moe_math_sigmoid(x);
                }
            }
            noaux_kernels[k].fn.route_noaux_tc(&args, rows, z, ids, w, work);
            for (size_t t = 0; t < rows * 8; t++) {
                bool same = ids[t] == picks[t % 8] && bits(w[t]) == bits(want[t]);
                if (!same && bad++ < 3)
                    fprintf(stderr, "  %s: slot %zu: id %d, sigmoid %a, scalar %a\n",
                            noaux_kernels[k].name, t % 8, ids[t], (double)w[t], (double)want[t]);
            }
        }
        CHECKF(bad == 0, "%s: %zu slots differ from the scalar sigmoid", noaux_kernels[k].name,
               bad);
    }
    free(sweep);
    free(z);
    free(w);
    free(want);
    free(ids);
    free(work);
}

int main(void)
{
    test_exp();
    test_log1p();
    test_sigmoid();
    test_sqrtsoftplus();
    test_simd_scores();
    test_noaux_scores();
    return TEST_END();
}
