/* test_kernel_route.c — every routing kernel against the reference bit for bit, and oracles. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"
#include "kernels/ref/math_ref.h"
#include "guarded.h"
#include "route_kernels.h"
#include "xorshift.h"

/* ---- Sizes (the kernels: route_kernels.h) ------------------------------------------------ */

static const size_t sizes[] = {1, 7, 8, 15, 16, 17, 60, 64, 128, 160, 256, 384, 512, 1000, 4096};
#define MAX_N 4096

/* ---- Helpers ----------------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Du;

static uint64_t rng_next(void) { return xorshift64(&rng_state); }

/* Uniform in [0, 1). */
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-53; }

/* Roughly normal with standard deviation sd (a sum of four uniforms). */
static float rng_normal(double sd)
{
    double s = rng_unit() + rng_unit() + rng_unit() + rng_unit() - 2.0;
    return (float)(s * sd * 1.7320508);
}

/* ---- Inputs that end at an inaccessible page; outputs between guard zones ---------------- */

/* 4-byte elements at placement PLACE (guarded.h); the rest is filled with 0xA5 so a stray
 * write before the array shows (guarded_intact). */
static void *placed(guarded *g, size_t bytes, int place)
{
    memset(g->map, 0xA5, g->data);
    return guarded_place(g, bytes, 4, place);
}

static bool guarded_intact(const guarded *g, const void *p, size_t bytes)
{
    const uint8_t *a = p;
    for (const uint8_t *q = g->map; q < g->end; q++)
        if ((q < a || q >= a + bytes) && *q != 0xA5) return false;
    return true;
}

#define GUARD 32             /* 4-byte words of sentinel before and after every output */
#define SENTINEL 0x7FBADBADu /* a signalling-NaN pattern no kernel produces */

typedef struct outbuf {
    uint32_t *base;
} outbuf;

static void outbuf_init(outbuf *o)
{
    o->base = malloc((MAX_N + 2 * GUARD + 8) * sizeof(uint32_t));
    REQUIRE(o->base != NULL);
}

static void *outbuf_prepare(outbuf *o, size_t n, size_t offset)
{
    for (size_t i = 0; i < GUARD + offset + n + GUARD; i++)
        o->base[i] = SENTINEL;
    return o->base + GUARD + offset;
}

static size_t outbuf_damage(const outbuf *o, size_t n, size_t offset)
{
    size_t bad = 0;
    for (size_t i = 0; i < GUARD + offset; i++)
        bad += o->base[i] != SENTINEL;
    for (size_t i = GUARD + offset + n; i < GUARD + offset + n + GUARD; i++)
        bad += o->base[i] != SENTINEL;
    return bad;
}

/* ---- Rows -------------------------------------------------------------------------------- */

enum row_kind {
    ROW_RANDOM,    /* logits of a router: normal, sd 3 */
    ROW_TIES,      /* a handful of values, ±0 among them: many exact ties */
    ROW_ALL_EQUAL, /* one value everywhere */
    ROW_SPECIALS,  /* random with NaN, ±Inf, ±0, ±FLT_MAX, subnormals mixed in */
    ROW_ALL_NAN,   /* NaN everywhere (CUDA-graph padding rows) */
    ROW_NONFINITE, /* only NaN and ±Inf */
    ROW_HUGE,      /* any finite magnitude, both signs */
    ROW_WIDE,      /* uniform in [-250, 250]: tiny sigmoids, the e^(z/2) branch */
    ROW_BITS,      /* any 32-bit pattern: NaN payloads, negative NaNs */
    ROW_KINDS_
};

static const char *const row_names[ROW_KINDS_] = {
    "random", "ties", "all-equal", "specials", "all-NaN", "non-finite", "huge", "wide", "bits"};

static float special_value(void)
{
    static const uint32_t specials[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F800000u,
                                        0xFF800000u, 0x00000000u, 0x80000000u, 0x7F7FFFFFu,
                                        0xFF7FFFFFu, 0x00000001u, 0x80000001u, 0x007FFFFFu};
    return f32_from(specials[rng_next() % COUNT(specials)]);
}

static void fill_row(float *z, size_t n, enum row_kind kind)
{
    static const float tie_values[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 1.0f, 3.0f};
    float same = rng_normal(3.0);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next();
        switch (kind) {
        case ROW_RANDOM: z[i] = rng_normal(3.0); break;
        case ROW_TIES: z[i] = tie_values[r % COUNT(tie_values)]; break;
        case ROW_ALL_EQUAL: z[i] = same; break;
        case ROW_SPECIALS: z[i] = (r & 3) == 0 ? special_value() : rng_normal(3.0); break;
        case ROW_ALL_NAN: z[i] = NAN; break;
        case ROW_NONFINITE: z[i] = (r & 1) ? NAN : (r & 2) ? INFINITY : -INFINITY; break;
        case ROW_HUGE: {
            float f = f32_from((uint32_t)r);
            z[i] = isfinite(f) ? f : 1e38f;
            break;
        }
        case ROW_WIDE: z[i] = (float)(rng_unit() * 500.0 - 250.0); break;
        case ROW_BITS: z[i] = f32_from((uint32_t)(r >> 17)); break;
        case ROW_KINDS_: break;
        }
    }
}

enum bias_kind { BIAS_NONE, BIAS_SMALL, BIAS_NEGATIVE, BIAS_LARGE, BIAS_SPECIALS, BIAS_KINDS_ };
static const char *const bias_names[BIAS_KINDS_] = {"NULL", "small", "negative", "large",
                                                    "specials"};

static void fill_bias(float *b, size_t n, enum bias_kind kind)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case BIAS_NONE: b[i] = 0.0f; break;
        case BIAS_SMALL: b[i] = rng_normal(0.05); break;
        case BIAS_NEGATIVE: b[i] = -(float)(rng_unit() * 8.0); break;
        case BIAS_LARGE: b[i] = 7.0f + rng_normal(0.1); break; /* DeepSeek-like β ≈ 7 */
        case BIAS_SPECIALS: b[i] = (rng_next() & 7) == 0 ? special_value() : rng_normal(1.0); break;
        case BIAS_KINDS_: break;
        }
    }
}

/* ---- Which kernels run here -------------------------------------------------------------- */

static uint32_t allowed_mask;

static bool runnable(const test_kernel *k)
{
    uint32_t missing = k->isa & ~allowed_mask;
    if (missing == 0) {
        fprintf(stderr, "test %s\n", k->name);
        return true;
    }
    char need[96];
    moe_cpu_mask_format(missing, need, sizeof need);
    fprintf(stderr, "skip %s: needs %s, not allowed here\n", k->name, need);
    return false;
}

/* ---- Shared scratch ---------------------------------------------------------------------- */

typedef struct scratch {
    guarded in_z, in_b, in_key;
    outbuf out_s, out_key, out_ids, out_top;
    float z[MAX_N], bias[MAX_N], ref_s[MAX_N];
    uint32_t ref_key[MAX_N], keys[MAX_N], ref_top[MAX_N];
    int32_t ref_ids[MAX_N];
} scratch;

static size_t case_counter; /* cycles placements and offsets through the cases */

/* ---- Key kernels ------------------------------------------------------------------------- */

typedef enum key_family { KEYS_LOGIT, KEYS_SIGMOID, KEYS_SSP } key_family;

static void call_keys(key_family f, moe_kernel_fn fn, size_t n, const float *z, const float *b,
                      float *s, uint32_t *key)
{
    switch (f) {
    case KEYS_LOGIT: fn.route_logit_keys(n, z, key); return;
    case KEYS_SIGMOID: fn.route_sigmoid_keys(n, z, b, s, key); return;
    case KEYS_SSP: fn.route_sqrtsoftplus_keys(n, z, b, s, key); return;
    }
}

/* What the reference's output must satisfy, from the contract alone: excluded exactly for
 * non-finite inputs (or sums), s = 0 there, and otherwise a key that decodes to the float
 * the contract names (score + bias, with -0 as +0). Scores themselves are checked against
 * double in test_route_math.c. */
static void check_ref_contract(key_family f, size_t n, const float *z, const float *b,
                               const float *s, const uint32_t *key, const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok;
        if (!isfinite(z[i])) {
            ok = key[i] == MOE_ROUTE_KEY_EXCLUDED && (f == KEYS_LOGIT || f32_bits(s[i]) == 0);
        } else {
            float v = f == KEYS_LOGIT ? z[i] : b ? s[i] + b[i] : s[i];
            if (!isfinite(v)) {
                ok = key[i] == MOE_ROUTE_KEY_EXCLUDED;
            } else {
                float d = moe_route_key_decode(key[i]);
                ok = key[i] > MOE_ROUTE_KEY_EXCLUDED && d == v && !(d == 0.0f && signbit(d));
            }
            if (f != KEYS_LOGIT) ok = ok && s[i] >= 0.0f && isfinite(s[i]);
        }
        if (!ok && bad++ < 3)
            fprintf(stderr, "  reference %s: element %zu: z=%a key=0x%08x\n", what, i, (double)z[i],
                    key[i]);
    }
    CHECKF(bad == 0, "reference %s: %zu elements break the contract", what, bad);
}

static void run_keys_case(key_family f, const test_kernel *ks, size_t nk, scratch *sc, size_t n,
                          const char *label, enum bias_kind bk)
{
    const float *bias = bk == BIAS_NONE ? NULL : sc->bias;
    call_keys(f, ks[0].fn, n, sc->z, bias, sc->ref_s, sc->ref_key);
    check_ref_contract(f, n, sc->z, bias, sc->ref_s, sc->ref_key, label);
    for (size_t k = 1; k < nk; k++) {
        if ((ks[k].isa & ~allowed_mask) != 0) continue;
        size_t c = case_counter++;
        int place = (int)(c % NPLACES);
        size_t off = (c / NPLACES) % 4;
        float *z = placed(&sc->in_z, n * 4, place);
        memcpy(z, sc->z, n * 4);
        float *b = NULL;
        if (bias) {
            b = placed(&sc->in_b, n * 4, (place + 2) % NPLACES);
            memcpy(b, sc->bias, n * 4);
        }
        float *s = outbuf_prepare(&sc->out_s, n, (off + 1) % 4);
        uint32_t *key = outbuf_prepare(&sc->out_key, n, off);
        call_keys(f, ks[k].fn, n, z, b, s, key);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            bool same = key[i] == sc->ref_key[i] &&
                        (f == KEYS_LOGIT || f32_bits(s[i]) == f32_bits(sc->ref_s[i]));
            if (!same && bad++ < 3)
                fprintf(stderr,
                        "  %s %s n=%zu: element %zu z=%a: key 0x%08x ref 0x%08x, s %a ref %a\n",
                        ks[k].name, label, n, i, (double)sc->z[i], key[i], sc->ref_key[i],
                        f == KEYS_LOGIT ? 0.0 : (double)s[i], (double)sc->ref_s[i]);
        }
        CHECKF(bad == 0, "%s %s n=%zu place %d off %zu: %zu elements differ from the reference",
               ks[k].name, label, n, place, off, bad);
        size_t dmg = outbuf_damage(&sc->out_key, n, off);
        if (f != KEYS_LOGIT) dmg += outbuf_damage(&sc->out_s, n, (off + 1) % 4);
        CHECKF(dmg == 0, "%s %s n=%zu: %zu guard words overwritten", ks[k].name, label, n, dmg);
        CHECKF(guarded_intact(&sc->in_z, z, n * 4), "%s: wrote around its input", ks[k].name);
    }
}

static void test_keys(key_family f, const test_kernel *ks, size_t nk, scratch *sc)
{
    for (size_t si = 0; si < COUNT(sizes); si++) {
        size_t n = sizes[si];
        for (int kind = 0; kind < ROW_KINDS_; kind++) {
            for (int bk = 0; bk < (f == KEYS_LOGIT ? 1 : BIAS_KINDS_); bk++) {
                fill_row(sc->z, n, (enum row_kind)kind);
                fill_bias(sc->bias, n, (enum bias_kind)bk);
                char label[64];
                snprintf(label, sizeof label, "%s bias %s", row_names[kind], bias_names[bk]);
                run_keys_case(f, ks, nk, sc, n, label, (enum bias_kind)bk);
            }
        }
    }
    /* The encoding orders like the floats: a dense ladder of finite values, ±0 included. */
    if (f == KEYS_LOGIT) {
        size_t n = 0;
        for (int e = -149; e <= 127 && n + 2 <= MAX_N; e += 2) {
            sc->z[n++] = ldexpf(1.0f, e);
            sc->z[n++] = -ldexpf(1.5f, e);
        }
        sc->z[n++] = 0.0f;
        sc->z[n++] = -0.0f;
        ks[0].fn.route_logit_keys(n, sc->z, sc->ref_key);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                bad += (sc->z[i] < sc->z[j]) != (sc->ref_key[i] < sc->ref_key[j]) ||
                       (sc->z[i] == sc->z[j]) != (sc->ref_key[i] == sc->ref_key[j]);
        CHECKF(bad == 0, "key order differs from float order in %zu pairs", bad);
    }
}

/* ---- Top-k ------------------------------------------------------------------------------------
 */

/* The oracle: indices sorted by (real key before excluded, larger float first, lower index
 * first), from the floats, never from the encoded keys. */
static const float *oracle_vals;
static const bool *oracle_excluded;

static int oracle_cmp(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (oracle_excluded[a] != oracle_excluded[b]) return oracle_excluded[a] ? 1 : -1;
    if (!oracle_excluded[a] && oracle_vals[a] != oracle_vals[b])
        return oracle_vals[a] > oracle_vals[b] ? -1 : 1;
    return a < b ? -1 : 1;
}

/* Keys from the floats of the row; `mask` sets every seventh key to EXCLUDED, as a masked
 * group would be, and `taken` pre-marks every fifth of the rest TAKEN (then never picked). */
static size_t make_keys(scratch *sc, size_t n, bool mask, bool taken, bool *excluded, bool *gone)
{
    logit_kernels[0].fn.route_logit_keys(n, sc->z, sc->keys);
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        gone[i] = false;
        if (mask && i % 7 == 3) sc->keys[i] = MOE_ROUTE_KEY_EXCLUDED;
        if (taken && i % 5 == 1) {
            sc->keys[i] = MOE_ROUTE_KEY_TAKEN;
            gone[i] = true;
        }
        excluded[i] = sc->keys[i] == MOE_ROUTE_KEY_EXCLUDED;
        live += !gone[i];
    }
    return live;
}

static void run_topk_case(scratch *sc, size_t n, size_t k, const char *label, const bool *excluded,
                          const bool *gone)
{
    /* The reference against the oracle. */
    static int32_t order[MAX_N];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!gone[i]) order[m++] = (int32_t)i;
    oracle_vals = sc->z;
    oracle_excluded = excluded;
    qsort(order, m, sizeof order[0], oracle_cmp);

    static uint32_t before[MAX_N];
    memcpy(before, sc->keys, n * 4);
    memcpy(sc->ref_key, sc->keys, n * 4);
    topk_kernels[0].fn.route_topk(n, sc->ref_key, k, sc->ref_ids, sc->ref_top);
    size_t bad = 0;
    for (size_t j = 0; j < k; j++) {
        int32_t id = sc->ref_ids[j];
        bool ok = id == order[j] && sc->ref_top[j] == before[id] &&
                  sc->ref_key[id] == MOE_ROUTE_KEY_TAKEN;
        if (!ok && bad++ < 3)
            fprintf(stderr, "  reference topk %s n=%zu k=%zu: slot %zu: id %d, oracle %d\n", label,
                    n, k, j, id, order[j]);
    }
    /* Exactly the picks changed, to TAKEN; every other key is as it was. */
    static bool picked[MAX_N];
    memset(picked, 0, n);
    for (size_t j = 0; j < k; j++)
        if (sc->ref_ids[j] >= 0 && (size_t)sc->ref_ids[j] < n) picked[sc->ref_ids[j]] = true;
    size_t changed = 0;
    for (size_t i = 0; i < n; i++)
        changed += picked[i] ? sc->ref_key[i] != MOE_ROUTE_KEY_TAKEN : sc->ref_key[i] != before[i];
    CHECKF(bad == 0 && changed == 0, "reference topk %s n=%zu k=%zu: %zu slots wrong, %zu keys",
           label, n, k, bad, changed);

    /* Every other kernel against the reference: ids, top and the keys left behind. */
    for (size_t t = 1; t < COUNT(topk_kernels); t++) {
        const test_kernel *tk = &topk_kernels[t];
        if ((tk->isa & ~allowed_mask) != 0) continue;
        size_t c = case_counter++;
        int place = (int)(c % NPLACES);
        size_t off = (c / NPLACES) % 4;
        uint32_t *key = placed(&sc->in_key, n * 4, place);
        memcpy(key, before, n * 4);
        int32_t *ids = outbuf_prepare(&sc->out_ids, k, off);
        uint32_t *top = outbuf_prepare(&sc->out_top, k, 3 - off);
        tk->fn.route_topk(n, key, k, ids, top);
        bool same = memcmp(ids, sc->ref_ids, k * 4) == 0 && memcmp(top, sc->ref_top, k * 4) == 0 &&
                    memcmp(key, sc->ref_key, n * 4) == 0;
        if (!same) {
            for (size_t j = 0; j < k && j < 8; j++)
                fprintf(stderr, "  slot %zu: id %d top 0x%08x, ref id %d top 0x%08x\n", j, ids[j],
                        top[j], sc->ref_ids[j], sc->ref_top[j]);
        }
        CHECKF(same, "%s %s n=%zu k=%zu place %d off %zu: differs from the reference", tk->name,
               label, n, k, place, off);
        size_t dmg = outbuf_damage(&sc->out_ids, k, off) + outbuf_damage(&sc->out_top, k, 3 - off);
        CHECKF(dmg == 0, "%s %s n=%zu k=%zu: %zu guard words overwritten", tk->name, label, n, k,
               dmg);
        CHECKF(guarded_intact(&sc->in_key, key, n * 4), "%s: wrote around its keys", tk->name);
    }
}

static void test_topk(scratch *sc)
{
    static bool excluded[MAX_N], gone[MAX_N];
    static const size_t ks[] = {1, 2, 4, 6, 8};
    for (size_t si = 0; si < COUNT(sizes); si++) {
        size_t n = sizes[si];
        for (int kind = 0; kind < ROW_KINDS_; kind++) {
            for (int variant = 0; variant < 3; variant++) {
                fill_row(sc->z, n, (enum row_kind)kind);
                size_t live = make_keys(sc, n, variant == 1, variant == 2, excluded, gone);
                char label[64];
                snprintf(label, sizeof label, "%s%s", row_names[kind],
                         variant == 1   ? " masked"
                         : variant == 2 ? " pre-taken"
                                        : "");
                for (size_t ki = 0; ki < COUNT(ks); ki++) {
                    if (ks[ki] > live) continue;
                    run_topk_case(sc, n, ks[ki], label, excluded, gone);
                }
                /* k = every live key: the full order. Quadratic, so not at the largest n for
                 * every kind. */
                if (n <= 1000 || kind == ROW_TIES)
                    run_topk_case(sc, n, live, label, excluded, gone);
            }
        }
    }
}

/* ---- Exp-sum --------------------------------------------------------------------------------- */

static void run_expsum_case(scratch *sc, size_t n, const char *label)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(sc->z[i]) && sc->z[i] > m) m = sc->z[i];
    if (m == -INFINITY) m = 0.0f; /* no finite logit: any finite m, the sum is 0 */

    /* The reference against a double sum; all terms are ≥ 0, so the float result's relative
     * error is at most the longest chain of roundings: n/16 additions into one partial sum,
     * four folds, and each exp's own ≤ 1 ulp. */
    float ref = expsum_kernels[0].fn.route_expsum(n, sc->z, m);
    double want = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(sc->z[i])) want += exp((double)sc->z[i] - (double)m);
    double tol = ((double)n / 16.0 + 6.0) * 0x1p-23 * want;
    CHECKF(fabs((double)ref - want) <= tol, "reference expsum %s n=%zu: %.9g, double %.9g", label,
           n, (double)ref, want);
    CHECKF(!signbit(ref), "reference expsum %s n=%zu: negative zero", label, n);

    for (size_t t = 1; t < COUNT(expsum_kernels); t++) {
        const test_kernel *tk = &expsum_kernels[t];
        if ((tk->isa & ~allowed_mask) != 0) continue;
        size_t c = case_counter++;
        float *z = placed(&sc->in_z, n * 4, (int)(c % NPLACES));
        memcpy(z, sc->z, n * 4);
        float got = tk->fn.route_expsum(n, z, m);
        CHECKF(f32_bits(got) == f32_bits(ref), "%s %s n=%zu: %a, reference %a", tk->name, label, n,
               (double)got, (double)ref);
    }
}

static void test_expsum(scratch *sc)
{
    for (size_t si = 0; si < COUNT(sizes); si++) {
        for (int kind = 0; kind < ROW_KINDS_; kind++) {
            fill_row(sc->z, sizes[si], (enum row_kind)kind);
            run_expsum_case(sc, sizes[si], row_names[kind]);
        }
    }
    /* Every length up to 40 (each tail, each number of whole blocks), and n = 0. */
    for (size_t n = 0; n <= 40; n++) {
        fill_row(sc->z, n, ROW_SPECIALS);
        run_expsum_case(sc, n, "specials, every length");
    }
    /* The order of the additions matters: values spread over 2^40 make a different order give
     * different bits; the reference spells out route.h's order, the others must follow it. */
    for (size_t n = 1; n <= 300; n += 13) {
        for (size_t i = 0; i < n; i++)
            sc->z[i] = (float)(rng_unit() * 28.0 - 28.0);
        run_expsum_case(sc, n, "wide range");
    }
}

/* The exp-sum's order, checked on the reference independently of its code: the 16 partial
 * sums and the folds written out here from route.h's description, on 200 rows whose terms
 * span many binades, so that another order would round differently somewhere. Each term
 * comes from the kernel itself with n = 1 (a one-term sum is that term), so this checks the
 * order of the additions only. */
static void test_expsum_order(void)
{
    static float z[300], e[300];
    size_t bad = 0;
    for (int row = 0; row < 200; row++) {
        size_t n = 1 + (size_t)(rng_next() % 300);
        for (size_t i = 0; i < n; i++) {
            z[i] = (float)(rng_unit() * 30.0 - 30.0);
            e[i] = expsum_kernels[0].fn.route_expsum(1, &z[i], 0.0f);
        }
        float acc[16] = {0};
        for (size_t i = 0; i < n; i++)
            acc[i % 16] += e[i];
        float f8[8], f4[4], f2[2];
        for (int j = 0; j < 8; j++)
            f8[j] = acc[j] + acc[j + 8];
        for (int j = 0; j < 4; j++)
            f4[j] = f8[j] + f8[j + 4];
        for (int j = 0; j < 2; j++)
            f2[j] = f4[j] + f4[j + 2];
        float want = f2[0] + f2[1];
        float got = expsum_kernels[0].fn.route_expsum(n, z, 0.0f);
        if (f32_bits(got) != f32_bits(want) && bad++ < 3)
            fprintf(stderr, "  reference expsum n=%zu: %a, route.h order %a\n", n, (double)got,
                    (double)want);
    }
    CHECKF(bad == 0, "reference expsum: %zu rows not summed in route.h's order", bad);
}

/* ---- noaux_tc rows ----------------------------------------------------------------------- */

#define NOAUX_MAX_E 512
#define NOAUX_MAX_K 16
#define NOAUX_ROWS 23 /* odd, and more than two of the AVX-512 kernel's blocks of 8 */

typedef struct noaux_shape {
    int e, k, g, tg;
    moe_score_func score;
    bool renorm;
    float scale;
} noaux_shape;

/* The oracle: the method from its definition (docs/routing.md), written without keys or the
 * primitives: scores by the scalar functions of math_ref.h, selection by sorting floats. */
typedef struct noaux_item {
    int id;
    bool real;
    float v;
} noaux_item;

static int noaux_item_cmp(const void *pa, const void *pb)
{
    const noaux_item *a = pa, *b = pb;
    if (a->real != b->real) return a->real ? -1 : 1;
    if (a->real && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->id < b->id ? -1 : 1;
}

static void noaux_oracle(const noaux_shape *sh, const float *z, const float *bias, int32_t *ids,
                         float *w)
{
    static float s[NOAUX_MAX_E];
    static noaux_item items[NOAUX_MAX_E], groups[NOAUX_MAX_E];
    const int e = sh->e, m = sh->e / sh->g;
    for (int i = 0; i < e; i++) {
        const bool finite = isfinite(z[i]);
        s[i] = !finite                               ? 0.0f
               : sh->score == MOE_SCORE_SQRTSOFTPLUS ? moe_math_sqrtsoftplus(z[i])
                                                     : moe_math_sigmoid(z[i]);
        items[i] = (noaux_item){i, finite && isfinite(s[i] + bias[i]), s[i] + bias[i]};
    }
    if (sh->g > 1 && sh->tg < sh->g) {
        for (int g = 0; g < sh->g; g++) { /* the sum of the group's two largest real keys */
            float top[2] = {-INFINITY, -INFINITY};
            int n = 0;
            for (int i = g * m; i < (g + 1) * m; i++) {
                if (!items[i].real) continue;
                n++;
                if (items[i].v > top[0]) {
                    top[1] = top[0];
                    top[0] = items[i].v;
                } else if (items[i].v > top[1]) {
                    top[1] = items[i].v;
                }
            }
            groups[g] = (noaux_item){g, n >= 2, n >= 2 ? top[0] + top[1] : 0.0f};
        }
        qsort(groups, (size_t)sh->g, sizeof groups[0], noaux_item_cmp);
        for (int r = sh->tg; r < sh->g; r++) /* the dropped groups: below every real key */
            for (int i = groups[r].id * m; i < (groups[r].id + 1) * m; i++)
                items[i].real = false;
    }
    qsort(items, (size_t)e, sizeof items[0], noaux_item_cmp);
    float sum = 0.0f;
    for (int j = 0; j < sh->k; j++) {
        ids[j] = items[j].id;
        w[j] = items[j].real ? s[items[j].id] : 0.0f;
        sum += w[j];
    }
    for (int j = 0; j < sh->k; j++)
        w[j] = !sh->renorm ? w[j] * sh->scale : sum > 0.0f ? (w[j] / sum) * sh->scale : w[j];
}

/* Extra row kinds for noaux_tc, past fill_row's: each aims at one exit of the fused path. */
enum noaux_row_kind {
    NOAUX_ROW_TOP_TIE = ROW_KINDS_, /* random, then the largest logit copied into another group */
    NOAUX_ROW_SPARSE,               /* 95% NaN: kept groups without two real keys */
    NOAUX_ROW_KINDS_
};

static void noaux_fill_row(float *z, int e, int kind)
{
    if (kind < ROW_KINDS_) {
        fill_row(z, (size_t)e, (enum row_kind)kind);
        return;
    }
    fill_row(z, (size_t)e, ROW_RANDOM);
    if (kind == NOAUX_ROW_SPARSE) {
        for (int i = 0; i < e; i++)
            if (rng_next() % 20 != 0) z[i] = NAN;
        return;
    }
    int best = 0;
    for (int i = 1; i < e; i++)
        best = z[i] > z[best] ? i : best;
    z[(best + e / 2) % e] = z[best];
}

enum noaux_bias_kind { NB_ZERO, NB_SMALL, NB_NEGATIVE, NB_LARGE, NB_HUGE, NB_BINADES, NB_KINDS_ };
static const char *const noaux_bias_names[NB_KINDS_] = {"zero",  "small", "negative",
                                                        "large", "huge",  "binades"};

/* Finite biases only: the kernels' contract (the router rejects others at creation). */
static void noaux_fill_bias(float *b, int e, int kind)
{
    for (int i = 0; i < e; i++) {
        switch (kind) {
        case NB_ZERO: b[i] = 0.0f; break;
        case NB_SMALL: b[i] = rng_normal(0.05); break;
        case NB_NEGATIVE: b[i] = -(float)(rng_unit() * 8.0); break;
        case NB_LARGE: b[i] = 7.0f + rng_normal(0.1); break;
        case NB_HUGE: b[i] = (rng_next() & 1) ? 3e38f : -3e38f; break;
        default: b[i] = ldexpf((rng_next() & 1) ? 1.0f : -1.0f, (int)(rng_next() % 41) - 20);
        }
    }
}

typedef struct noaux_bufs {
    guarded in_z;
    outbuf out_ids, out_w;
    float z[NOAUX_ROWS * NOAUX_MAX_E], bias[NOAUX_MAX_E], w_ref[NOAUX_ROWS * NOAUX_MAX_K];
    int32_t ids_ref[NOAUX_ROWS * NOAUX_MAX_K];
    moe_route_scratch work;
} noaux_bufs;

static void run_noaux_case(const noaux_shape *sh, noaux_bufs *nb, size_t rows, const char *label)
{
    const moe_route_noaux_tc_args args = {nb->bias, sh->e,     sh->k,      sh->g,
                                          sh->tg,   sh->score, sh->renorm, sh->scale};
    const size_t k = (size_t)sh->k, zbytes = rows * (size_t)sh->e * 4;
    noaux_kernels[0].fn.route_noaux_tc(&args, rows, nb->z, nb->ids_ref, nb->w_ref, &nb->work);
    size_t bad = 0;
    for (size_t t = 0; t < rows; t++) {
        int32_t ids[NOAUX_MAX_K];
        float w[NOAUX_MAX_K];
        noaux_oracle(sh, nb->z + t * (size_t)sh->e, nb->bias, ids, w);
        bool same = memcmp(ids, nb->ids_ref + t * k, k * 4) == 0 &&
                    memcmp(w, nb->w_ref + t * k, k * 4) == 0;
        if (!same && bad++ < 3)
            fprintf(stderr, "  reference noaux_tc %s row %zu: slot 0 id %d w %a, oracle %d %a\n",
                    label, t, nb->ids_ref[t * k], (double)nb->w_ref[t * k], ids[0], (double)w[0]);
    }
    CHECKF(bad == 0, "reference noaux_tc %s E=%d K=%d G=%d TG=%d: %zu rows differ from the oracle",
           label, sh->e, sh->k, sh->g, sh->tg, bad);

    for (size_t i = 1; i < COUNT(noaux_kernels); i++) {
        const test_kernel *tk = &noaux_kernels[i];
        if ((tk->isa & ~allowed_mask) != 0) continue;
        size_t c = case_counter++;
        float *z = placed(&nb->in_z, zbytes, (int)(c % NPLACES));
        memcpy(z, nb->z, zbytes);
        size_t off = (c / NPLACES) % 4;
        int32_t *ids = outbuf_prepare(&nb->out_ids, rows * k, off);
        float *w = outbuf_prepare(&nb->out_w, rows * k, 3 - off);
        tk->fn.route_noaux_tc(&args, rows, z, ids, w, &nb->work);
        size_t diff = 0;
        for (size_t t = 0; t < rows; t++) {
            bool same = memcmp(ids + t * k, nb->ids_ref + t * k, k * 4) == 0 &&
                        memcmp(w + t * k, nb->w_ref + t * k, k * 4) == 0;
            if (!same && diff++ < 3)
                fprintf(stderr, "  %s %s row %zu: slot 0 id %d w %a, reference %d %a\n", tk->name,
                        label, t, ids[t * k], (double)w[t * k], nb->ids_ref[t * k],
                        (double)nb->w_ref[t * k]);
        }
        CHECKF(diff == 0, "%s %s E=%d K=%d G=%d TG=%d: %zu rows differ from the reference",
               tk->name, label, sh->e, sh->k, sh->g, sh->tg, diff);
        size_t dmg = outbuf_damage(&nb->out_ids, rows * k, off) +
                     outbuf_damage(&nb->out_w, rows * k, 3 - off);
        CHECKF(dmg == 0, "%s %s: %zu guard words overwritten", tk->name, label, dmg);
        CHECKF(guarded_intact(&nb->in_z, z, zbytes), "%s: wrote around its logits", tk->name);
    }
}

#define FUSED_SHAPES 7

/* A DeepSeek-V3 row with chosen keys: logit 0 everywhere (sigmoid 0.5, exactly) and the bias
 * v - 0.5, so the key of expert i is v[i] (every v here is 0.5 + an exact bias). Experts not
 * named get distinct keys below -1. */
static void noaux_design(noaux_bufs *nb, const int *at, const float *v, int n)
{
    for (int i = 0; i < 256; i++) {
        nb->z[i] = 0.0f;
        nb->bias[i] = -1.5f - 0.001f * (float)i;
    }
    for (int j = 0; j < n; j++)
        nb->bias[at[j]] = v[j] - 0.5f;
}

/* Rows built for the fused path's edges, each routed alone (DeepSeek-V3's shape). */
static void test_noaux_designed(noaux_bufs *nb)
{
    const noaux_shape v3 = {256, 8, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f};
    /* Groups 3 and 5 tie for the fourth place (0.625 + 0.375 = 0.75 + 0.25, exactly): group 3,
     * the lower, is kept, and its two keys are picks 7 and 8. */
    const int tie_at[] = {0, 1, 32, 33, 64, 65, 96, 97, 160, 161};
    const float tie_v[] = {3.0f, 2.9f, 3.01f, 2.91f, 3.02f, 2.92f, 0.625f, 0.375f, 0.75f, 0.25f};
    noaux_design(nb, tie_at, tie_v, 10);
    run_noaux_case(&v3, nb, 1, "designed: groups tied at the boundary");
    /* 17 and 16 keys at the bound (group 3's second key, 1.0), the best of them the row's last
     * expert: one more than a register holds, and exactly a register. */
    for (int extra = 5; extra >= 4; extra--) {
        int at[20];
        float v[20];
        int n = 0;
        for (int g = 0; g < 3; g++)
            for (int j = 0; j < (g == 2 ? extra : 5); j++) {
                at[n] = 32 * g + j;
                v[n++] = 2.0f + 0.0625f * (float)(5 * g + j);
            }
        at[n] = 100;
        v[n++] = 1.0f;
        at[n] = 127;
        v[n++] = 9.0f;
        noaux_design(nb, at, v, n);
        run_noaux_case(&v3, nb, 1,
                       extra == 5 ? "designed: 17 candidates" : "designed: 16 candidates");
    }
}

static void test_noaux(void)
{
    static const noaux_shape shapes[] = {
        /* DeepSeek-V3/R1, and the fused path's other shapes (K ≤ 8, K ≤ 2·TG) */
        {256, 8, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f},
        {256, 8, 8, 4, MOE_SCORE_SIGMOID, false, 2.5f},
        {256, 8, 8, 4, MOE_SCORE_SIGMOID, true, 1.0f},
        {256, 6, 8, 3, MOE_SCORE_SIGMOID, true, 1.5f},
        {256, 1, 8, 1, MOE_SCORE_SIGMOID, false, 1.0f},
        {256, 2, 8, 1, MOE_SCORE_SIGMOID, true, 2.0f},
        {256, 8, 8, 7, MOE_SCORE_SIGMOID, true, 2.5f},
        /* near misses: the portable path on every ISA (FUSED_SHAPES counts the ones above) */
        {256, 8, 8, 2, MOE_SCORE_SIGMOID, true, 2.5f},  /* K > 2·TG */
        {256, 16, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f}, /* K > 8 */
        {256, 8, 8, 8, MOE_SCORE_SIGMOID, true, 2.5f},  /* every group kept */
        {256, 8, 8, 4, MOE_SCORE_SQRTSOFTPLUS, true, 2.5f},
        {256, 8, 4, 2, MOE_SCORE_SIGMOID, true, 2.5f},
        /* Kimi-K2, DeepSeek-V4 score layers, and small and odd shapes */
        {384, 8, 1, 1, MOE_SCORE_SIGMOID, true, 2.827f},
        {256, 6, 1, 1, MOE_SCORE_SQRTSOFTPLUS, true, 1.5f},
        {8, 2, 1, 1, MOE_SCORE_SIGMOID, true, 1.0f},
        {16, 4, 4, 2, MOE_SCORE_SIGMOID, false, 3.0f},
        {60, 6, 6, 3, MOE_SCORE_SQRTSOFTPLUS, true, 1.0f},
        {160, 6, 8, 3, MOE_SCORE_SIGMOID, true, 16.0f},
        {512, 8, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f},
    };
    noaux_bufs *nb = malloc(sizeof *nb);
    REQUIRE(nb != NULL);
    guarded_init(&nb->in_z, sizeof nb->z);
    outbuf_init(&nb->out_ids);
    outbuf_init(&nb->out_w);
    for (size_t si = 0; si < COUNT(shapes); si++) {
        const noaux_shape *sh = &shapes[si];
        for (int bk = 0; bk < NB_KINDS_; bk++) {
            /* Every row kind in one batch, so the fused path's blocks mix its exits. */
            noaux_fill_bias(nb->bias, sh->e, bk);
            for (int t = 0; t < NOAUX_ROWS; t++)
                noaux_fill_row(nb->z + (size_t)t * (size_t)sh->e, sh->e,
                               (t * 7 + bk) % NOAUX_ROW_KINDS_);
            char label[64];
            snprintf(label, sizeof label, "mixed rows, bias %s", noaux_bias_names[bk]);
            run_noaux_case(sh, nb, NOAUX_ROWS, label);
            /* One row alone; for the fused path's shapes also a few rows of each kind. */
            run_noaux_case(sh, nb, 1, "one row");
            if (si >= FUSED_SHAPES) continue;
            for (int kind = 0; kind < NOAUX_ROW_KINDS_; kind++) {
                for (int t = 0; t < 3; t++)
                    noaux_fill_row(nb->z + (size_t)t * (size_t)sh->e, sh->e, kind);
                snprintf(label, sizeof label, "kind %d, bias %s", kind, noaux_bias_names[bk]);
                run_noaux_case(sh, nb, 3, label);
            }
        }
    }
    test_noaux_designed(nb);
    /* No rows: nothing is read or written, NULL pointers included. */
    const moe_route_noaux_tc_args args = {nb->bias, 256, 8, 8, 4, MOE_SCORE_SIGMOID, true, 2.5f};
    for (size_t i = 0; i < COUNT(noaux_kernels); i++)
        if ((noaux_kernels[i].isa & ~allowed_mask) == 0)
            noaux_kernels[i].fn.route_noaux_tc(&args, 0, NULL, NULL, NULL, &nb->work);
    guarded_free(&nb->in_z);
    free(nb->out_ids.base);
    free(nb->out_w.base);
    free(nb);
}

/* ---- Driver ------------------------------------------------------------------------------ */

int main(void)
{
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, "moe_cpu_query: %s\n", moe_last_error());
        return 1;
    }
    allowed_mask = moe_cpu_caps_mask(&info.allowed);

    check_registered(MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS, logit_kernels, COUNT(logit_kernels));
    check_registered(MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS, sigmoid_kernels, COUNT(sigmoid_kernels));
    check_registered(MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS, ssp_kernels, COUNT(ssp_kernels));
    check_registered(MOE_KERNEL_FAMILY_ROUTE_TOPK, topk_kernels, COUNT(topk_kernels));
    check_registered(MOE_KERNEL_FAMILY_ROUTE_EXPSUM, expsum_kernels, COUNT(expsum_kernels));
    check_registered(MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC, noaux_kernels, COUNT(noaux_kernels));
    const test_kernel *all[] = {logit_kernels, sigmoid_kernels, ssp_kernels,
                                topk_kernels,  expsum_kernels,  noaux_kernels};
    const size_t counts[] = {COUNT(logit_kernels), COUNT(sigmoid_kernels), COUNT(ssp_kernels),
                             COUNT(topk_kernels),  COUNT(expsum_kernels),  COUNT(noaux_kernels)};
    for (size_t f = 0; f < COUNT(all); f++)
        for (size_t i = 0; i < counts[f]; i++)
            (void)runnable(&all[f][i]);

    scratch *sc = malloc(sizeof *sc);
    REQUIRE(sc != NULL);
    guarded_init(&sc->in_z, MAX_N * 4);
    guarded_init(&sc->in_b, MAX_N * 4);
    guarded_init(&sc->in_key, MAX_N * 4);
    outbuf_init(&sc->out_s);
    outbuf_init(&sc->out_key);
    outbuf_init(&sc->out_ids);
    outbuf_init(&sc->out_top);

    test_keys(KEYS_LOGIT, logit_kernels, COUNT(logit_kernels), sc);
    test_keys(KEYS_SIGMOID, sigmoid_kernels, COUNT(sigmoid_kernels), sc);
    test_keys(KEYS_SSP, ssp_kernels, COUNT(ssp_kernels), sc);
    test_topk(sc);
    test_expsum(sc);
    test_expsum_order();
    test_noaux();

    guarded_free(&sc->in_z);
    guarded_free(&sc->in_b);
    guarded_free(&sc->in_key);
    free(sc->out_s.base);
    free(sc->out_key.base);
    free(sc->out_ids.base);
    free(sc->out_top.base);
    free(sc);
    return TEST_END();
}
