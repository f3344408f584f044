/* test_kernel_gate.c — every router gate kernel this CPU may run against a float64 reference and
 * the reference kernel (shapes, m, bias, dtypes, logits modes, NaN/Inf, guards), and the gate. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"
#include "dtype/dtype.h"
#include "gate/gate.h"
#include "kernels/gate.h"
#include "guarded.h"
#include "test.h"
#include "xorshift.h"

/* ---- The kernels, generated from the enumerators ------------------------------------- */

typedef struct test_kernel {
    const char *name;
    uint32_t isa;
    moe_gate_ukernel *fn;
} test_kernel;

#define MOE_KERNEL(name, isa, ref) {#name, isa, name},
static const test_kernel k_xf32_wf32[] = {
#include "kernels/gate_xf32_wf32.inc"
};
static const test_kernel k_xf32_wbf16[] = {
#include "kernels/gate_xf32_wbf16.inc"
};
static const test_kernel k_xf32_wf16[] = {
#include "kernels/gate_xf32_wf16.inc"
};
static const test_kernel k_xbf16_wf32[] = {
#include "kernels/gate_xbf16_wf32.inc"
};
static const test_kernel k_xbf16_wbf16[] = {
#include "kernels/gate_xbf16_wbf16.inc"
};
static const test_kernel k_xbf16_wf16[] = {
#include "kernels/gate_xbf16_wf16.inc"
};
#undef MOE_KERNEL
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct family {
    moe_kernel_family id;
    moe_dtype xd, wd;
    const test_kernel *ks;
    size_t nk;
} family;

static const family families[6] = {
    {MOE_KERNEL_FAMILY_GATE_XF32_WF32, MOE_DTYPE_F32, MOE_DTYPE_F32, k_xf32_wf32,
     COUNT(k_xf32_wf32)},
    {MOE_KERNEL_FAMILY_GATE_XF32_WBF16, MOE_DTYPE_F32, MOE_DTYPE_BF16, k_xf32_wbf16,
     COUNT(k_xf32_wbf16)},
    {MOE_KERNEL_FAMILY_GATE_XF32_WF16, MOE_DTYPE_F32, MOE_DTYPE_F16, k_xf32_wf16,
     COUNT(k_xf32_wf16)},
    {MOE_KERNEL_FAMILY_GATE_XBF16_WF32, MOE_DTYPE_BF16, MOE_DTYPE_F32, k_xbf16_wf32,
     COUNT(k_xbf16_wf32)},
    {MOE_KERNEL_FAMILY_GATE_XBF16_WBF16, MOE_DTYPE_BF16, MOE_DTYPE_BF16, k_xbf16_wbf16,
     COUNT(k_xbf16_wbf16)},
    {MOE_KERNEL_FAMILY_GATE_XBF16_WF16, MOE_DTYPE_BF16, MOE_DTYPE_F16, k_xbf16_wf16,
     COUNT(k_xbf16_wf16)},
};

static uint32_t allowed_mask;

static bool may_run(const test_kernel *k) { return (k->isa & ~allowed_mask) == 0; }

/* Kernels that follow kernels/gate.h's FMA order must give the reference's bits exactly;
 * vdpbf16ps orders each pair differently and flushes denormals, so it gets the tolerance. */
static bool bit_exact(const test_kernel *k) { return strstr(k->name, "avx512bf16") == NULL; }

/* ---- Values ----------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng_next(void) { return xorshift64(&rng_state); }

static double uniform(void) { return ((double)(rng_next() >> 11) + 0.5) * 0x1p-53; }

/* Roughly normal (a sum of four uniforms, variance 1/3 each): cheap, and good enough for
 * weights and activations with a realistic spread of magnitudes and signs. */
static double normal(double sigma)
{
    return sigma * 1.7320508075688772 * (uniform() + uniform() + uniform() + uniform() - 2.0);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static size_t dsize(moe_dtype d) { return d == MOE_DTYPE_F32 ? 4 : 2; }

/* Stores v (already representable or rounded here) as dtype d at p (any alignment). */
static void put(void *p, moe_dtype d, float v)
{
    if (d == MOE_DTYPE_F32) {
        memcpy(p, &v, 4);
        return;
    }
    uint16_t c = d == MOE_DTYPE_BF16 ? moe_f32_to_bf16(v) : moe_f32_to_f16(v);
    memcpy(p, &c, 2);
}

/* The exact value of the element at p, from its fields by the dtype module's decoders. */
static double get(const void *p, moe_dtype d)
{
    if (d == MOE_DTYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t c;
    memcpy(&c, p, 2);
    return d == MOE_DTYPE_BF16 ? moe_bf16_to_f32(c) : moe_f16_to_f32(c);
}

/* ---- Writes outside the rows are seen (reads past the end fault: guarded.h) -------------- */

#define GUARD 32
#define SENTINEL 0x7FBADBADu /* a signalling-NaN pattern no kernel produces */
#define LD_PAD 3             /* floats between the end of a logits row and the next row */

typedef struct outbuf {
    uint32_t *base;
    size_t rows, n, ld;
} outbuf;

static float *out_prepare(outbuf *o, size_t rows)
{
    o->rows = rows;
    for (size_t i = 0; i < 2 * GUARD + rows * o->ld; i++)
        o->base[i] = SENTINEL;
    return (float *)(o->base + GUARD);
}

/* Guards, and the gap columns [n, ld) of every row, untouched. */
static size_t out_damage(const outbuf *o)
{
    size_t bad = 0;
    for (size_t i = 0; i < GUARD; i++)
        bad += (o->base[i] != SENTINEL) + (o->base[GUARD + o->rows * o->ld + i] != SENTINEL);
    for (size_t r = 0; r < o->rows; r++)
        for (size_t c = o->n; c < o->ld; c++)
            bad += o->base[GUARD + r * o->ld + c] != SENTINEL;
    return bad;
}

/* ---- One problem: checkpoint-layout data, the float64 reference, the packed weight ------- */

typedef struct problem {
    size_t n, k, m_max, stride;
    moe_dtype xd, wd;
    uint8_t *w_buf;       /* owns w_src */
    const uint8_t *w_src; /* [n, k] of wd, at an odd address: checkpoints need not align */
    uint8_t *x;           /* [m_max, stride] of xd */
    float *bias;          /* [n] */
    double *sum;          /* [m_max, n] Σ x·w in double (NaN / Inf as IEEE says) */
    double *abs_sum;      /* [m_max, n] Σ |x·w| */
    guarded wg;           /* the packed weight, ending at a guard page */
    const void *packed;
} problem;

/* Rows 2, 3 and 4 carry NaN, +Inf and ±Inf: they must propagate and never crash. (Rows 0
 * and 1, which every m ≥ 2 run holds, stay finite for the numeric checks.) */
static void poison_rows(problem *p)
{
    static const float nan_ = NAN, inf = INFINITY;
    size_t xs = dsize(p->xd);
    if (p->m_max > 2) put(p->x + (2 * p->stride + p->k / 2) * xs, p->xd, nan_);
    if (p->m_max > 3) put(p->x + (3 * p->stride + p->k - 1) * xs, p->xd, inf);
    if (p->m_max > 4) {
        put(p->x + (4 * p->stride + 0) * xs, p->xd, -inf);
        put(p->x + (4 * p->stride + p->k / 3) * xs, p->xd, inf);
    }
}

static void problem_init(problem *p, size_t n, size_t k, size_t m_max, moe_dtype xd, moe_dtype wd)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->k = k, p->m_max = m_max, p->xd = xd, p->wd = wd;
    p->stride = k + 3;
    size_t ws = dsize(wd), xs = dsize(xd);
    p->w_buf = malloc(n * k * ws + 8);
    REQUIRE(p->w_buf);
    p->w_src = p->w_buf + (ws == 4 ? 2 : 1);
    for (size_t i = 0; i < n * k; i++)
        put((uint8_t *)p->w_src + i * ws, wd, (float)normal(0.05));
    p->x = calloc(m_max * p->stride + 1, xs);
    p->bias = malloc(n * sizeof(float));
    p->sum = malloc((m_max * n + 1) * sizeof(double));
    p->abs_sum = malloc((m_max * n + 1) * sizeof(double));
    REQUIRE(p->x && p->bias && p->sum && p->abs_sum);
    for (size_t i = 0; i < m_max; i++)
        for (size_t h = 0; h < k; h++)
            put(p->x + (i * p->stride + h) * xs, xd, (float)normal(1.0));
    poison_rows(p);
    for (size_t e = 0; e < n; e++)
        p->bias[e] = (float)normal(0.5);
    for (size_t i = 0; i < m_max; i++) {
        for (size_t e = 0; e < n; e++) {
            double s = 0, a = 0;
            for (size_t h = 0; h < k; h++) {
                double t =
                    get(p->x + (i * p->stride + h) * xs, xd) * get(p->w_src + (e * k + h) * ws, wd);
                s += t;
                a += fabs(t);
            }
            p->sum[i * n + e] = s;
            p->abs_sum[i * n + e] = a;
        }
    }
}

static const moe_packing *packing_for(moe_dtype wd)
{
    return wd == MOE_DTYPE_F32    ? &moe_gate_packing_f32
           : wd == MOE_DTYPE_BF16 ? &moe_gate_packing_bf16
                                  : &moe_gate_packing_f16;
}

/* Packs from the unaligned source, checks unpack(pack(w)) == w bit for bit. */
static void problem_pack(problem *p)
{
    const moe_packing *pk = packing_for(p->wd);
    size_t bytes = 0;
    CHECK_STATUS(pk->bytes((int64_t)p->n, (int64_t)p->k, &bytes), MOE_OK);
    size_t kp = p->wd == MOE_DTYPE_BF16 ? (p->k + 1) / 2 * 2 : p->k;
    CHECK(bytes == (p->n + 15) / 16 * 16 * kp * dsize(p->wd));
    guarded_init(&p->wg, bytes + 64);
    void *dst = guarded_tail(&p->wg, bytes, 64);
    CHECK_STATUS(pk->pack(p->w_src, (int64_t)p->n, (int64_t)p->k, dst), MOE_OK);
    p->packed = dst;
    uint8_t *back = malloc(p->n * p->k * dsize(p->wd));
    REQUIRE(back);
    pk->unpack(dst, (int64_t)p->n, (int64_t)p->k, back);
    CHECKF(memcmp(back, p->w_src, p->n * p->k * dsize(p->wd)) == 0,
           "unpack(pack(w)) != w for %s [%zu, %zu]", moe_dtype_name(p->wd), p->n, p->k);
    free(back);
}

static void problem_free(problem *p)
{
    guarded_free(&p->wg);
    free(p->w_buf);
    free(p->x);
    free(p->bias);
    free(p->sum);
    free(p->abs_sum);
}

/* ---- Running and checking --------------------------------------------------------------- */

typedef struct run_ctx {
    const problem *p;
    guarded xg; /* x copies ending at a guard page */
    outbuf out;
} run_ctx;

/* Runs kernel fn on the first m rows and the expert tiles [t0, t1); returns the logits (in
 * ctx->out, the rest of it SENTINEL before the call). */
static float *run_tiles(run_ctx *c, moe_gate_ukernel *fn, size_t m, bool bias, int round, size_t t0,
                        size_t t1)
{
    const problem *p = c->p;
    size_t xs = dsize(p->xd);
    size_t xbytes = m ? ((m - 1) * p->stride + p->k) * xs : 0;
    uint8_t *x = guarded_tail(&c->xg, xbytes, xs);
    memcpy(x, p->x, xbytes);
    float *logits = out_prepare(&c->out, m);
    moe_gate_args a = {.m = m,
                       .n = p->n,
                       .k = p->k,
                       .x = x,
                       .x_stride = p->stride,
                       .w = p->packed,
                       .bias = bias ? p->bias : NULL,
                       .round_bf16 = round,
                       .logits = logits,
                       .ld = c->out.ld,
                       .tile_begin = t0,
                       .tile_end = t1};
    fn(&a);
    return logits;
}

/* run_tiles over every tile. */
static float *run(run_ctx *c, moe_gate_ukernel *fn, size_t m, bool bias, int round)
{
    return run_tiles(c, fn, m, bias, round, 0, moe_gate_tiles(c->p->n));
}

static bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b) || (a != a && b != b); }

/* The float64 expectation of logit (i, e), and the tolerance of the fp32 accumulation. */
static double expect(const problem *p, size_t i, size_t e, bool bias, double *tol)
{
    double s = p->sum[i * p->n + e], b = bias ? p->bias[e] : 0.0;
    *tol = 1e-5 * (p->abs_sum[i * p->n + e] + fabs(b)) + 1e-37;
    return s + b;
}

/* Checks one value against the float64 sum: non-finite sums classified as IEEE says. */
static bool near_f64(double want, double tol, float got, bool rounded)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return (double)got == want;
    if (!isfinite(got)) return false;
    double err = fabs((double)got - want);
    /* bf16 keeps 8 significant bits: half an ulp is at most 2^-8 of the magnitude. */
    if (rounded) tol += ldexp(fabs(want) + tol, -8);
    return err <= tol;
}

typedef struct base {
    float *v[2]; /* [round] the kernel's own m_max run, copied */
} base;

static void base_take(base *b, int round, const float *logits, const problem *p, size_t ld)
{
    b->v[round] = malloc((p->m_max * p->n + 1) * sizeof(float));
    REQUIRE(b->v[round]);
    for (size_t i = 0; i < p->m_max; i++)
        memcpy(b->v[round] + i * p->n, logits + i * ld, p->n * sizeof(float));
}

static void base_free(base *b)
{
    free(b->v[0]);
    free(b->v[1]);
}

static char case_str[160];

/* The kernel's own m_max runs against the float64 sums, the bf16 mode against the RNE of its
 * own fp32 values, and (bit-exact kernels) against the reference kernel's bits. */
static void check_base(const test_kernel *k, const problem *p, const base *own, const base *ref,
                       bool bias)
{
    size_t bad = 0;
    for (size_t i = 0; i < p->m_max; i++) {
        for (size_t e = 0; e < p->n; e++) {
            double tol, want = expect(p, i, e, bias, &tol);
            float f = own->v[0][i * p->n + e], r = own->v[1][i * p->n + e];
            /* Exactly, NaNs included: the same kernel's fp32 value, rounded by dtype.h. */
            uint32_t rb = (uint32_t)moe_f32_to_bf16(f) << 16;
            bool ok =
                near_f64(want, tol, f, false) && near_f64(want, tol, r, true) && f32_bits(r) == rb;
            if (bit_exact(k))
                ok = ok && same_bits(f, ref->v[0][i * p->n + e]) &&
                     same_bits(r, ref->v[1][i * p->n + e]);
            if (!ok && bad++ < 3)
                fprintf(stderr,
                        "  %s %s: row %zu expert %zu: f32 %.9g (0x%08x) bf16 %.9g, reference "
                        "kernel %.9g, float64 %.12g ± %.3g\n",
                        k->name, case_str, i, e, f, f32_bits(f), r, ref->v[0][i * p->n + e], want,
                        tol);
        }
    }
    CHECKF(bad == 0, "%s %s: %zu logits wrong", k->name, case_str, bad);
}

/* A run with m rows gives every row the bits of the m_max run: same token, same bits. */
static void check_rows(const test_kernel *k, const problem *p, size_t m, int round,
                       const float *got, size_t ld, const base *own)
{
    size_t bad = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t e = 0; e < p->n; e++)
            if (!same_bits(got[i * ld + e], own->v[round][i * p->n + e]) && bad++ < 2)
                fprintf(stderr, "  %s %s m=%zu round=%d: row %zu expert %zu: %a vs %a alone\n",
                        k->name, case_str, m, round, i, e, got[i * ld + e],
                        own->v[round][i * p->n + e]);
    CHECKF(bad == 0, "%s %s m=%zu round=%d: %zu logits depend on m", k->name, case_str, m, round,
           bad);
}

/* A run over the tiles [t0, t1) only (a decode step split between threads by experts): those
 * experts' logits have the bits of the whole run, every other element is untouched. */
static void check_tile_range(const test_kernel *k, run_ctx *c, size_t m, bool bias, size_t t0,
                             size_t t1, const base *own)
{
    const problem *p = c->p;
    const float *l = run_tiles(c, k->fn, m, bias, 0, t0, t1);
    size_t bad = 0, touched = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t e = 0; e < p->n; e++) {
            const bool in = e >= t0 * MOE_GATE_NR && e < t1 * MOE_GATE_NR;
            if (in)
                bad += !same_bits(l[i * c->out.ld + e], own->v[0][i * p->n + e]);
            else
                touched += f32_bits(l[i * c->out.ld + e]) != SENTINEL;
        }
    CHECKF(bad == 0 && touched == 0 && out_damage(&c->out) == 0,
           "%s %s m=%zu tiles [%zu, %zu): %zu differ from the whole run, %zu outside written",
           k->name, case_str, m, t0, t1, bad, touched);
}

static const size_t m_list[] = {0, 1, 2, 3, 7, 16, 33, 300};

/* The largest m a shape is run with, so the whole program stays fast even in a Debug build
 * under sanitizers: about 80K multiply-adds per run (experts padded to whole tiles), at least
 * m = 2 up to 200K weights and m = 1 beyond (the larger shapes are there for many chunks and
 * tiles; row blocking is exercised on the smaller ones and the edge shapes, m = 300 on one). */
static size_t m_cap(size_t n, size_t k)
{
    size_t cap = 80000 / (moe_gate_tiles(n) * MOE_GATE_NR * k);
    size_t best = n * k > 200000 ? 1 : 2;
    for (size_t i = 0; i < COUNT(m_list); i++)
        if (m_list[i] <= cap && m_list[i] > best) best = m_list[i];
    return best;
}

/* The RNE bf16 of each of the reference kernel's fp32 logits (its bf16 mode, checked against
 * this on the smaller shapes, is then not run on the larger ones). */
static void base_round(base *b, const problem *p)
{
    b->v[1] = malloc((p->m_max * p->n + 1) * sizeof(float));
    REQUIRE(b->v[1]);
    for (size_t i = 0; i < p->m_max * p->n; i++) {
        uint32_t bits = (uint32_t)moe_f32_to_bf16(b->v[0][i]) << 16;
        memcpy(&b->v[1][i], &bits, 4);
    }
}

/* One family on one shape, with rows up to m_max (0: m_cap's). */
static void run_family(const family *f, size_t n, size_t k, size_t m_max, bool bias)
{
    if (m_max == 0) m_max = m_cap(n, k);
    problem p;
    problem_init(&p, n, k, m_max, f->xd, f->wd);
    problem_pack(&p);
    run_ctx c = {.p = &p};
    guarded_init(&c.xg, m_max * p.stride * dsize(f->xd) + 64);
    c.out.n = n;
    c.out.ld = n + LD_PAD;
    c.out.base = malloc((2 * GUARD + m_max * c.out.ld) * sizeof(uint32_t));
    REQUIRE(c.out.base);
    snprintf(case_str, sizeof case_str, "E=%zu H=%zu x %s W %s %s", n, k, moe_dtype_name(f->xd),
             moe_dtype_name(f->wd), bias ? "bias" : "no bias");

    /* fp32 logits always; the bf16 mode on shapes up to 200K weights (it is the same
     * epilogue on every shape: larger ones check fp32 only, and take the bf16 values the
     * comparisons need from moe_f32_to_bf16 of the fp32 ones). */
    bool small = n * k <= 200000;
    base ref = {{NULL, NULL}};
    for (int round = 0; round < 1 + small; round++) {
        float *l = run(&c, f->ks[0].fn, m_max, bias, round);
        CHECKF(out_damage(&c.out) == 0, "%s %s: wrote outside the logits", f->ks[0].name, case_str);
        base_take(&ref, round, l, &p, c.out.ld);
    }
    if (!small) base_round(&ref, &p);
    for (size_t ki = 0; ki < f->nk; ki++) {
        const test_kernel *kr = &f->ks[ki];
        if (!may_run(kr)) continue;
        base own = {{NULL, NULL}};
        for (int round = 0; round < 1 + small && ki > 0; round++) {
            float *l = run(&c, kr->fn, m_max, bias, round);
            CHECKF(out_damage(&c.out) == 0, "%s %s m=%zu: wrote outside the logits", kr->name,
                   case_str, m_max);
            base_take(&own, round, l, &p, c.out.ld);
        }
        if (ki > 0 && !small) base_round(&own, &p);
        check_base(kr, &p, ki > 0 ? &own : &ref, &ref, bias);
        /* Tile ranges: the middle ones, the first alone, the last alone, none. */
        const size_t tiles = moe_gate_tiles(n), mt = m_max < 3 ? m_max : 3;
        check_tile_range(kr, &c, mt, bias, tiles > 2 ? 1 : 0, tiles > 2 ? tiles - 1 : 1,
                         ki > 0 ? &own : &ref);
        check_tile_range(kr, &c, mt, bias, 0, 1, ki > 0 ? &own : &ref);
        check_tile_range(kr, &c, mt, bias, tiles - 1, tiles, ki > 0 ? &own : &ref);
        check_tile_range(kr, &c, mt, bias, tiles / 2, tiles / 2, ki > 0 ? &own : &ref);
        /* Fewer rows: the same bits per row (the reference, trivially so, at m ≤ 3 only). */
        for (size_t mi = 0; mi < COUNT(m_list) && m_list[mi] < m_max; mi++) {
            if (ki == 0 && m_list[mi] > 3) break;
            for (int round = 0; round < 1 + small; round++) {
                float *l = run(&c, kr->fn, m_list[mi], bias, round);
                CHECKF(out_damage(&c.out) == 0, "%s %s m=%zu: wrote outside the logits", kr->name,
                       case_str, m_list[mi]);
                check_rows(kr, &p, m_list[mi], round, l, c.out.ld, ki > 0 ? &own : &ref);
            }
        }
        base_free(&own);
    }
    base_free(&ref);
    free(c.out.base);
    guarded_free(&c.xg);
    problem_free(&p);
}

/* Every shape of the brief. Each shape runs every dtype pair up to 200K weights, three of the
 * six up to 1M and two beyond, rotating so that every pair meets the larger shapes, which
 * keeps the program fast under sanitizers. */
static void test_kernels(void)
{
    static const size_t es[] = {8, 32, 128, 256, 384};
    static const size_t hs[] = {64, 100, 2880, 7168};
    size_t shape = 0, turn[3] = {0, 0, 0}; /* per size class: which pairs run next */
    for (size_t ei = 0; ei < COUNT(es); ei++) {
        for (size_t hi = 0; hi < COUNT(hs); hi++, shape++) {
            size_t n = es[ei], k = hs[hi];
            size_t cls = n * k > 1000000 ? 2 : n * k > 200000 ? 1 : 0, step = cls + 1;
            for (size_t fi = 0; fi < 6; fi++)
                if (fi % step == turn[cls] % step)
                    run_family(&families[fi], n, k, 0, (shape + fi) % 2 == 0);
            turn[cls]++;
        }
    }
    /* Edges: one expert, a partial last tile, odd hidden sizes across chunk edges; full row
     * blocks (m = 16: blocks of 6, 5, 5) over several tile groups and chunks; m = 300. */
    static const size_t edge[][3] = {{1, 1, 0},  {1, 257, 0},   {17, 255, 0}, {47, 513, 0},
                                     {16, 2, 0}, {70, 300, 16}, {8, 64, 300}};
    for (size_t i = 0; i < COUNT(edge); i++)
        for (size_t fi = 0; fi < 6; fi++)
            for (int b = 0; b < 2; b++)
                if (edge[i][2] == 0 || b == (int)(fi % 2))
                    run_family(&families[fi], edge[i][0], edge[i][1], edge[i][2], b);
}

/* ---- The packed layouts, against kernels/gate.h's drawings ------------------------------- */

/* The byte offset of W[e][h], spelled out from the diagram rather than taken from the header. */
static size_t drawn_offset(size_t n, size_t k, moe_dtype wd, size_t e, size_t h)
{
    size_t tiles = (n + 15) / 16, es = dsize(wd);
    size_t chunk = h / 256, chunk_h = k - chunk * 256 < 256 ? k - chunk * 256 : 256;
    if (wd == MOE_DTYPE_BF16) chunk_h += chunk_h % 2;
    size_t at = chunk * 256 * tiles * 16 * es; /* every earlier chunk is full */
    at += (e / 16) * 16 * chunk_h * es;
    size_t hl = h % 256, el = e % 16;
    if (wd == MOE_DTYPE_BF16) return at + ((hl / 2) * 32 + el * 2 + hl % 2) * es;
    return at + (hl * 16 + el) * es;
}

static void test_layouts(void)
{
    static const moe_dtype wds[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16, MOE_DTYPE_F16};
    static const size_t shapes[][2] = {{40, 777}, {16, 256}, {3, 1}, {33, 513}};
    for (size_t d = 0; d < 3; d++) {
        for (size_t s = 0; s < COUNT(shapes); s++) {
            size_t n = shapes[s][0], k = shapes[s][1], es = dsize(wds[d]);
            const moe_packing *pk = packing_for(wds[d]);
            CHECK(pk->dtype == wds[d]);
            size_t bytes = 0;
            CHECK_STATUS(pk->bytes((int64_t)n, (int64_t)k, &bytes), MOE_OK);
            uint8_t *src = malloc(n * k * es), *dst = malloc(bytes);
            REQUIRE(src && dst);
            for (size_t i = 0; i < n * k; i++)
                put(src + i * es, wds[d], (float)(i % 1000) - 500.0f);
            memset(dst, 0xEE, bytes);
            CHECK_STATUS(pk->pack(src, (int64_t)n, (int64_t)k, dst), MOE_OK);
            size_t bad = 0, nonzero_pad = 0;
            uint8_t *seen = calloc(bytes, 1);
            REQUIRE(seen);
            for (size_t e = 0; e < n; e++) {
                for (size_t h = 0; h < k; h++) {
                    size_t off = drawn_offset(n, k, wds[d], e, h);
                    bad += off + es > bytes || memcmp(dst + off, src + (e * k + h) * es, es);
                    if (off + es <= bytes) memset(seen + off, 1, es);
                }
            }
            for (size_t b = 0; b < bytes; b++)
                nonzero_pad += !seen[b] && dst[b] != 0;
            CHECKF(bad == 0, "%s [%zu, %zu]: %zu weights not where the drawing puts them",
                   moe_dtype_name(wds[d]), n, k, bad);
            CHECKF(nonzero_pad == 0, "%s [%zu, %zu]: padding not zero", moe_dtype_name(wds[d]), n,
                   k);
            free(seen);
            free(src);
            free(dst);
        }
    }
    /* Bad shapes, and weights no router may hold: the message names the element. */
    size_t bytes = 123;
    CHECK_STATUS(moe_gate_packing_bf16.bytes(0, 5, &bytes), MOE_EINVAL);
    CHECK_STATUS(moe_gate_packing_f32.bytes(5, -1, &bytes), MOE_EINVAL);
    CHECK_STATUS(moe_gate_packing_f32.bytes(INT64_MAX / 2, INT64_MAX / 2, &bytes), MOE_EOVERFLOW);
    CHECK(bytes == 123);
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint8_t dst[4096];
    w[4] = NAN;
    CHECK_STATUS(moe_gate_packing_f32.pack(w, 2, 3, dst), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "[1, 1]") && strstr(moe_last_error(), "NaN"), "'%s'",
           moe_last_error());
    uint16_t hw[4] = {0x3C00, 0x3C00, 0x3C00, 0xFC00}; /* f16 -Inf at [1, 1] */
    CHECK_STATUS(moe_gate_packing_f16.pack(hw, 2, 2, dst), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "[1, 1]") && strstr(moe_last_error(), "Inf"), "'%s'",
           moe_last_error());
    uint16_t bw[3] = {0x3F80, 0x7F80, 0x3F80}; /* bf16 +Inf at [0, 1] */
    CHECK_STATUS(moe_gate_packing_bf16.pack(bw, 1, 3, dst), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "[0, 1]"), "'%s'", moe_last_error());
}

/* ---- Through moe_gate_create / forward -------------------------------------------------- */

static void test_gate_object(const moe_cpu_caps *allowed)
{
    const size_t n = 40, k = 300, m = 9;
    problem p;
    problem_init(&p, n, k, m, MOE_DTYPE_BF16, MOE_DTYPE_BF16);
    problem_pack(&p);
    /* The bias as a checkpoint holds it: bf16, at an odd address. */
    uint8_t *bias_buf = malloc(2 * n + 1);
    REQUIRE(bias_buf);
    for (size_t e = 0; e < n; e++)
        put(bias_buf + 1 + 2 * e, MOE_DTYPE_BF16, p.bias[e]);
    for (size_t e = 0; e < n; e++)
        p.bias[e] = (float)get(bias_buf + 1 + 2 * e, MOE_DTYPE_BF16);
    moe_gate_src src = {.weight = p.w_src,
                        .weight_dtype = MOE_DTYPE_BF16,
                        .bias = bias_buf + 1,
                        .bias_dtype = MOE_DTYPE_BF16,
                        .n_experts = (int64_t)n,
                        .hidden = (int64_t)k};
    moe_gate *g = NULL;
    CHECK_STATUS(moe_gate_create(&src, allowed, MOE_DTYPE_INVALID, &g), MOE_OK);
    REQUIRE(g);
    /* Undecided logits resolve to f32; packed bytes: the bf16 tiles and the f32 bias. */
    CHECK(moe_gate_logits_dtype(g) == MOE_DTYPE_F32);
    CHECK(moe_gate_packed_bytes(g) == 48 * 300 * 2 + 40 * 4);
    const moe_kernel_choice *cf = moe_gate_choice(g, MOE_DTYPE_F32);
    const moe_kernel_choice *cb = moe_gate_choice(g, MOE_DTYPE_BF16);
    REQUIRE(cf && cb);
    CHECK(moe_gate_choice(g, MOE_DTYPE_F16) == NULL);
    CHECK(cf->kernel->family == MOE_KERNEL_FAMILY_GATE_XF32_WBF16);
    CHECK(cb->kernel->family == MOE_KERNEL_FAMILY_GATE_XBF16_WBF16);
    CHECK(cf->packing == &moe_gate_packing_bf16 && cb->packing == cf->packing);
    CHECK(strstr(cb->reason, "bias") && strstr(cb->reason, "f32 logits"));

    /* forward == the chosen kernel on the same inputs; both input dtypes. */
    float *want = malloc(m * n * sizeof(float)), *got = malloc((m * (n + 2) + 4) * sizeof(float));
    float *xf = malloc(m * p.stride * sizeof(float));
    REQUIRE(want && got && xf);
    for (size_t i = 0; i < m * p.stride; i++)
        xf[i] = (float)get(p.x + 2 * i, MOE_DTYPE_BF16);
    for (int pass = 0; pass < 2; pass++) {
        int round = pass; /* pass 1 after the late set to bf16 */
        for (int s = 0; s < 2; s++) {
            const moe_kernel_choice *ch = s ? cb : cf;
            const void *x = s ? (const void *)p.x : (const void *)xf;
            moe_gate_args a = {.m = m,
                               .n = n,
                               .k = k,
                               .x = x,
                               .x_stride = p.stride,
                               .w = p.packed,
                               .bias = p.bias,
                               .round_bf16 = round,
                               .logits = want,
                               .ld = n,
                               .tile_begin = 0,
                               .tile_end = moe_gate_tiles(n)};
            /* The test's own packing of the same weight: the gate's must equal it. */
            ch->kernel->fn.gate(&a);
            for (size_t i = 0; i < m * (n + 2) + 4; i++)
                memcpy(&got[i], &(uint32_t){SENTINEL}, 4);
            moe_gate_forward(g, m, x, s ? MOE_DTYPE_BF16 : MOE_DTYPE_F32, p.stride, got, n + 2, 0,
                             1);
            size_t bad = 0, damage = 0;
            for (size_t i = 0; i < m; i++) {
                for (size_t e = 0; e < n; e++)
                    bad += !same_bits(got[i * (n + 2) + e], want[i * n + e]);
                damage += f32_bits(got[i * (n + 2) + n]) != SENTINEL;
            }
            CHECKF(bad == 0 && damage == 0, "gate forward (x %s, round %d): %zu differ, %zu gap",
                   s ? "bf16" : "f32", round, bad, damage);
            /* Float64: within the logits tolerance (bias included, bf16 mode rounded). */
            size_t far = 0;
            for (size_t i = 0; i < m; i++) {
                for (size_t e = 0; e < n; e++) {
                    double tol, w = expect(&p, i, e, true, &tol);
                    far += !near_f64(w, tol, got[i * (n + 2) + e], round);
                }
            }
            CHECKF(far == 0, "gate forward (x %s, round %d): %zu logits off the float64 sum",
                   s ? "bf16" : "f32", round, far);
            /* Shares of the experts (a decode step split between threads): all of them in
             * reverse order give the whole; share 1 alone writes its own tiles' experts only. */
            const moe_dtype xd = s ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
            const size_t tiles = moe_gate_tiles(n);
            for (size_t parts = 2; parts <= 4; parts++) {
                for (int alone = 0; alone < 2; alone++) {
                    for (size_t i = 0; i < m * (n + 2) + 4; i++)
                        memcpy(&got[i], &(uint32_t){SENTINEL}, 4);
                    for (size_t q = parts; q-- > 0;)
                        if (!alone || q == 1)
                            moe_gate_forward(g, m, x, xd, p.stride, got, n + 2, q, parts);
                    const size_t e0 = alone ? tiles * 1 / parts * MOE_GATE_NR : 0,
                                 e1 = alone ? tiles * 2 / parts * MOE_GATE_NR : n;
                    bad = damage = 0;
                    for (size_t i = 0; i < m; i++) {
                        for (size_t e = 0; e < n; e++)
                            bad += e >= e0 && e < e1
                                       ? !same_bits(got[i * (n + 2) + e], want[i * n + e])
                                       : f32_bits(got[i * (n + 2) + e]) != SENTINEL;
                        damage += f32_bits(got[i * (n + 2) + n]) != SENTINEL;
                    }
                    CHECKF(bad == 0 && damage == 0,
                           "gate forward (x %s, round %d), %s of %zu shares: %zu wrong, %zu gap",
                           s ? "bf16" : "f32", round, alone ? "share 1" : "all", parts, bad,
                           damage);
                }
            }
        }
        if (pass == 0) {
            const moe_kernel *before = cb->kernel;
            CHECK_STATUS(moe_gate_set_logits_dtype(g, allowed, MOE_DTYPE_BF16), MOE_OK);
            CHECK(moe_gate_logits_dtype(g) == MOE_DTYPE_BF16);
            cf = moe_gate_choice(g, MOE_DTYPE_F32);
            cb = moe_gate_choice(g, MOE_DTYPE_BF16);
            CHECK(cb->kernel == before && strstr(cb->reason, "bf16 logits"));
        }
    }
    /* Unknown input dtype or m = 0: nothing written. */
    for (size_t i = 0; i < 8; i++)
        memcpy(&got[i], &(uint32_t){SENTINEL}, 4);
    moe_gate_forward(g, 1, xf, MOE_DTYPE_F16, k, got, n, 0, 1);
    moe_gate_forward(g, 0, xf, MOE_DTYPE_F32, k, got, n, 0, 1);
    CHECK(f32_bits(got[0]) == SENTINEL && f32_bits(got[7]) == SENTINEL);
    CHECK_STATUS(moe_gate_set_logits_dtype(g, allowed, MOE_DTYPE_F16), MOE_EDTYPE);
    CHECK_STATUS(moe_gate_set_logits_dtype(g, allowed, MOE_DTYPE_INVALID), MOE_EDTYPE);
    CHECK_STATUS(moe_gate_set_logits_dtype(NULL, allowed, MOE_DTYPE_F32), MOE_EINVAL);
    CHECK(moe_gate_logits_dtype(g) == MOE_DTYPE_BF16);
    moe_gate_destroy(g);

    /* Creation errors: each names what is wrong, and *out stays untouched. */
    moe_gate *sentinel = (moe_gate *)&p, *out = sentinel;
    moe_gate_src bad = src;
    CHECK_STATUS(moe_gate_create(NULL, allowed, MOE_DTYPE_F32, &out), MOE_EINVAL);
    CHECK_STATUS(moe_gate_create(&src, NULL, MOE_DTYPE_F32, &out), MOE_EINVAL);
    CHECK_STATUS(moe_gate_create(&src, allowed, MOE_DTYPE_F32, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_gate_create(&src, allowed, MOE_DTYPE_F16, &out), MOE_EDTYPE);
    bad.weight = NULL;
    CHECK_STATUS(moe_gate_create(&bad, allowed, MOE_DTYPE_F32, &out), MOE_EINVAL);
    bad = src;
    bad.hidden = 0;
    CHECK_STATUS(moe_gate_create(&bad, allowed, MOE_DTYPE_F32, &out), MOE_ESHAPE);
    bad = src;
    bad.weight_dtype = MOE_DTYPE_F8_E4M3;
    CHECK_STATUS(moe_gate_create(&bad, allowed, MOE_DTYPE_F32, &out), MOE_EDTYPE);
    CHECK(strstr(moe_last_error(), "f8_e4m3") != NULL);
    bad = src;
    bad.bias_dtype = MOE_DTYPE_I32;
    CHECK_STATUS(moe_gate_create(&bad, allowed, MOE_DTYPE_F32, &out), MOE_EDTYPE);
    CHECK(strstr(moe_last_error(), "bias") != NULL);
    put(bias_buf + 1 + 2 * 7, MOE_DTYPE_BF16, NAN);
    CHECK_STATUS(moe_gate_create(&src, allowed, MOE_DTYPE_F32, &out), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "bias [7]") != NULL, "'%s'", moe_last_error());
    put(bias_buf + 1 + 2 * 7, MOE_DTYPE_BF16, 1.0f);
    put((uint8_t *)p.w_src + 2 * (3 * k + 11), MOE_DTYPE_BF16, -INFINITY);
    CHECK_STATUS(moe_gate_create(&src, allowed, MOE_DTYPE_F32, &out), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "[3, 11]") != NULL, "'%s'", moe_last_error());
    CHECK(out == sentinel);

    /* Every weight and bias dtype, f32 input: forward within tolerance of float64. */
    static const moe_dtype wds[] = {MOE_DTYPE_F32, MOE_DTYPE_F16, MOE_DTYPE_BF16};
    static const moe_dtype bds[] = {MOE_DTYPE_F16, MOE_DTYPE_F32, MOE_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++) {
        problem q;
        problem_init(&q, 24, 130, 5, MOE_DTYPE_F32, wds[d]);
        uint8_t *bb = malloc(4 * 24 + 1);
        REQUIRE(bb);
        for (size_t e = 0; e < 24; e++) {
            put(bb + 1 + dsize(bds[d]) * e, bds[d], q.bias[e]);
            q.bias[e] = (float)get(bb + 1 + dsize(bds[d]) * e, bds[d]);
        }
        moe_gate_src s2 = {q.w_src, wds[d], bb + 1, bds[d], 24, 130};
        moe_gate *g2 = NULL;
        CHECK_STATUS(moe_gate_create(&s2, allowed, MOE_DTYPE_F32, &g2), MOE_OK);
        REQUIRE(g2);
        CHECK(moe_gate_choice(g2, MOE_DTYPE_F32)->packing == packing_for(wds[d]));
        float l[5 * 24];
        moe_gate_forward(g2, 5, q.x, MOE_DTYPE_F32, q.stride, l, 24, 0, 1);
        size_t far = 0;
        for (size_t i = 0; i < 5; i++)
            for (size_t e = 0; e < 24; e++) {
                double tol, w = expect(&q, i, e, true, &tol);
                far += !near_f64(w, tol, l[i * 24 + e], false);
            }
        CHECKF(far == 0, "gate W %s bias %s: %zu logits off", moe_dtype_name(wds[d]),
               moe_dtype_name(bds[d]), far);
        moe_gate_destroy(g2);
        free(bb);
        problem_free(&q);
    }
    moe_gate_destroy(NULL);
    free(want);
    free(got);
    free(xf);
    free(bias_buf);
    problem_free(&p);
}

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    allowed_mask = moe_cpu_caps_mask(&info.allowed);
    for (size_t f = 0; f < 6; f++) {
        for (size_t i = 0; i < families[f].nk; i++) {
            const test_kernel *k = &families[f].ks[i];
            const moe_kernel *r = moe_kernel_find(k->name);
            CHECKF(r && r->family == families[f].id && r->fn.gate == k->fn && r->isa == k->isa,
                   "%s: enumerator and registry disagree", k->name);
            if (!may_run(k)) {
                char need[64];
                moe_cpu_mask_format(k->isa & ~allowed_mask, need, sizeof need);
                fprintf(stderr, "skip %s: needs %s\n", k->name, need);
            }
        }
    }
    test_layouts();
    test_kernels();
    test_gate_object(&info.allowed);
    return TEST_END();
}
