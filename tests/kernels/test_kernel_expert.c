/* test_kernel_expert.c — every expert kernel set this CPU may run: packing round trips, the
 * micro-kernels against a float64 reference and their own reference bit for bit, same token
 * same bits at every m, edge shapes, guards, and the checks packing makes at the door. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <xmmintrin.h>

#include "dtype/dtype.h"
#include "expert_check.h"
#include "guarded.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/tile_bf16.h"

#define MXCSR_FLAGS 0x3Fu /* MXCSR's status flags */

/* ---- The kernel sets, from the enumerators -------------------------------------------- */

static const xset sets[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_BF16_F32},
#include "kernels/expert_bf16_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_BF16_BF16},
#include "kernels/expert_bf16_bf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_FP8_F32},
#include "kernels/expert_fp8_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_FP8_BF16},
#include "kernels/expert_fp8_bf16.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_F32_F32},
#include "kernels/expert_f32_f32.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_BF16_TILE},
#include "kernels/expert_bf16_tile.inc"
#undef MOE_KERNEL
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name, &ref, MOE_KERNEL_FAMILY_EXPERT_FP8_TILE},
#include "kernels/expert_fp8_tile.inc"
#undef MOE_KERNEL
};
#define NSETS (sizeof sets / sizeof sets[0])
#define MAX_MR (MAX_TOKENS - 2) /* expert_check.h's widest set: every m up to a set's MR is run */

/* ---- Independent decoders (ldexp of the fields, in double; dec_bf16: expert_check.h) ---- */

static double dec_f16(uint16_t c)
{
    return minifloat(c >> 15, (c >> 10) & 0x1F, c & 0x3FF, 10, 15);
}
static double dec_e4m3(uint8_t c) { return minifloat(c >> 7, (c >> 3) & 0xF, c & 7, 3, 7); }

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Round to nearest even f16 for the normal range the tests use (|f| in [2^-14, 65504]). */
static uint16_t to_f16(float f)
{
    uint32_t u = f32_bits(f), s = (u >> 16) & 0x8000u;
    int e = (int)((u >> 23) & 0xFF) - 127 + 15;
    uint32_t m = u & 0x7FFFFFu;
    uint32_t r = ((uint32_t)e << 10) | (m >> 13);
    uint32_t rest = m & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(s | r);
}

/* A trained-weight-like value in to_f16's range: 0.05·N(0, 1), magnitude at least 2^-14. */
static float normal_f16_value(void)
{
    const double v = 0.05 * gauss();
    return (float)(fabs(v) < 0x1p-14 ? copysign(0x1p-14, v) : v);
}

/* ---- One projection in the checkpoint layout ------------------------------------------- */

typedef struct mat {
    int fmt;
    moe_dtype wdt; /* the weights' dtype: BF16, F8_E4M3, or F32 / F16 (format F32) */
    int64_t rows, cols;
    void *data; /* row-major codes: uint16_t bf16 or f16, float, or uint8_t E4M3 */
    moe_dtype scale_dtype;
    void *scale; /* [ceil(rows/128), ceil(cols/128)] */
    int64_t srows, scols;
    moe_dtype bias_dtype; /* INVALID: no bias */
    void *bias;
    double *wd, *bd; /* every element's and bias's exact value (mat_w, mat_b), computed once */
} mat;

static size_t dsize(moe_dtype d) { return moe_dtype_bits(d) / 8; }

/* The dtype the next format-F32 matrices are stored in: F32 or F16 (both pack to the f32
 * sets' tiles). test_sets alternates it case by case. */
static moe_dtype plain_dtype = MOE_DTYPE_F32;

static uint8_t random_e4m3(void)
{
    for (;;) {
        uint8_t c = (uint8_t)rnd();
        if ((c & 0x7F) == 0x7F) continue;
        /* Mostly mid-range exponents (as trained weights); 1 in 8 anything: zeros and
         * subnormals too. */
        if (rnd() % 8 != 0) c = (uint8_t)((c & 0x87) | (uint8_t)((4 + rnd() % 6) << 3));
        return c;
    }
}

static void mat_init(mat *m, int fmt, int64_t rows, int64_t cols, moe_dtype sdt, moe_dtype bdt)
{
    memset(m, 0, sizeof *m);
    m->fmt = fmt;
    m->wdt = fmt == MOE_EXPERT_FMT_BF16        ? MOE_DTYPE_BF16
             : fmt == MOE_EXPERT_FMT_FP8_BLOCK ? MOE_DTYPE_F8_E4M3
                                               : plain_dtype;
    m->rows = rows;
    m->cols = cols;
    size_t n = (size_t)(rows * cols);
    if (m->wdt == MOE_DTYPE_F32) {
        /* Full 24-bit significands (not bf16-representable), 1 in 64 subnormal or zero. */
        float *w = malloc(n * 4);
        REQUIRE(w);
        for (size_t i = 0; i < n; i++) {
            const uint64_t r = rnd();
            w[i] = r % 64 == 0   ? (float)ldexp((double)(r >> 40), -150 + (int)(r % 3))
                   : r % 64 == 1 ? 0.0f
                                 : (float)(0.05 * gauss());
        }
        m->data = w;
    } else if (m->wdt == MOE_DTYPE_F16) {
        /* Mostly the trained-weight range; 1 in 8 any code below 2 in magnitude: subnormals
         * (which bf16 and f32 keep exactly) and zeros of both signs included. */
        uint16_t *w = malloc(n * 2);
        REQUIRE(w);
        for (size_t i = 0; i < n; i++)
            w[i] = rnd() % 8 ? to_f16(normal_f16_value()) : (uint16_t)(rnd() & 0xBFFFu);
        m->data = w;
    } else if (fmt == MOE_EXPERT_FMT_BF16) {
        uint16_t *w = malloc(n * 2);
        REQUIRE(w);
        for (size_t i = 0; i < n; i++)
            w[i] = to_bf16((float)(0.05 * gauss()));
        m->data = w;
    } else {
        uint8_t *w = malloc(n);
        REQUIRE(w);
        for (size_t i = 0; i < n; i++)
            w[i] = random_e4m3();
        m->data = w;
        m->scale_dtype = sdt;
        m->srows = (rows + 127) / 128;
        m->scols = (cols + 127) / 128;
        size_t ns = (size_t)(m->srows * m->scols);
        unsigned char *s = malloc(ns * 4);
        REQUIRE(s);
        for (size_t i = 0; i < ns; i++) {
            float v = (float)ldexp(1.0 + unit(), -9 - (int)(rnd() % 3));
            if (sdt == MOE_DTYPE_F32) memcpy(s + 4 * i, &v, 4);
            if (sdt == MOE_DTYPE_BF16) {
                uint16_t c = to_bf16(v);
                memcpy(s + 2 * i, &c, 2);
            }
            if (sdt == MOE_DTYPE_F8_E8M0 || sdt == MOE_DTYPE_U8) s[i] = (uint8_t)(116 + rnd() % 5);
        }
        m->scale = s;
    }
    m->bias_dtype = bdt;
    if (bdt != MOE_DTYPE_INVALID) {
        unsigned char *b = malloc((size_t)rows * 4);
        REQUIRE(b);
        for (int64_t r = 0; r < rows; r++) {
            float v = (float)(0.5 * gauss());
            /* to_f16 takes the normal range: an f16 bias is at least 2^-14 in magnitude. */
            if (bdt == MOE_DTYPE_F16 && fabsf(v) < 0x1p-14f) v = copysignf(0x1p-14f, v);
            if (bdt == MOE_DTYPE_F32) memcpy(b + 4 * r, &v, 4);
            uint16_t c = bdt == MOE_DTYPE_BF16 ? to_bf16(v) : to_f16(v);
            if (bdt != MOE_DTYPE_F32) memcpy(b + 2 * r, &c, 2);
        }
        m->bias = b;
    }
}

static void mat_free(mat *m)
{
    free(m->data);
    free(m->scale);
    free(m->bias);
    free(m->wd);
    free(m->bd);
}

static double scale_value(const mat *m, int64_t br, int64_t bc)
{
    const unsigned char *s =
        (const unsigned char *)m->scale + (size_t)(br * m->scols + bc) * dsize(m->scale_dtype);
    if (m->scale_dtype == MOE_DTYPE_F32) {
        float f;
        memcpy(&f, s, 4);
        return f;
    }
    if (m->scale_dtype == MOE_DTYPE_BF16) {
        uint16_t c;
        memcpy(&c, s, 2);
        return dec_bf16(c);
    }
    return ldexp(1.0, (int)s[0] - 127);
}

/* The exact value of element (r, c): the code's value times its block's scale. */
static double mat_w(const mat *m, int64_t r, int64_t c)
{
    size_t i = (size_t)(r * m->cols + c);
    if (m->wdt == MOE_DTYPE_F32) return ((const float *)m->data)[i];
    if (m->wdt == MOE_DTYPE_F16) return dec_f16(((const uint16_t *)m->data)[i]);
    if (m->fmt == MOE_EXPERT_FMT_BF16) return dec_bf16(((const uint16_t *)m->data)[i]);
    return dec_e4m3(((const uint8_t *)m->data)[i]) * scale_value(m, r / 128, c / 128);
}

static double mat_b(const mat *m, int64_t r)
{
    if (m->bias_dtype == MOE_DTYPE_INVALID) return 0.0;
    const unsigned char *b = (const unsigned char *)m->bias + (size_t)r * dsize(m->bias_dtype);
    if (m->bias_dtype == MOE_DTYPE_F32) {
        float f;
        memcpy(&f, b, 4);
        return f;
    }
    uint16_t c;
    memcpy(&c, b, 2);
    return m->bias_dtype == MOE_DTYPE_BF16 ? dec_bf16(c) : dec_f16(c);
}

static void mat_values(mat *m)
{
    m->wd = malloc((size_t)(m->rows * m->cols) * sizeof(double));
    m->bd = malloc((size_t)m->rows * sizeof(double));
    REQUIRE(m->wd && m->bd);
    for (int64_t r = 0; r < m->rows; r++) {
        m->bd[r] = mat_b(m, r);
        for (int64_t c = 0; c < m->cols; c++)
            m->wd[r * m->cols + c] = mat_w(m, r, c);
    }
}

static moe_weight_src mat_src(const mat *m)
{
    moe_weight_src s = {
        .data = m->data,
        .dtype = m->wdt,
        .rows = m->rows,
        .cols = m->cols,
        .row_stride = m->cols,
        .col_stride = 1,
        .scale = m->scale,
        .scale_dtype = m->scale_dtype,
        .block_rows = 128,
        .block_cols = 128,
        .bias = m->bias,
        .bias_dtype = m->bias_dtype,
        .bias_stride = 1,
    };
    return s;
}

/* ---- The float64 reference ------------------------------------------------------------ */

static double dot_d(const mat *m, int64_t r, const double *x)
{
    const double *w = m->wd + r * m->cols;
    double s = 0;
    for (int64_t c = 0; c < m->cols; c++)
        s += w[c] * x[c];
    return s + m->bd[r];
}

/* ---- One case: a kernel set, a projection kind, a shape ---------------------------------- */

typedef struct kcase {
    int64_t k, n;
    int kind; /* activation */
    moe_dtype bias, scale;
} kcase;

#define NTOK MAX_TOKENS

/* Tokens for a case: MR + 2, so every m up to MR has tokens to rotate; the references on
 * large shapes take 3 (m = 1..3): their outputs do not depend on m by construction, and
 * their scalar emulation dominates the run time under sanitizers. */
static int ntokens(const xset *xs, const kcase *c)
{
    if (xs->set->isa == MOE_REQ_SCALAR && c->k * c->n > LARGE) return 3;
    return xs->set->mr + 2;
}

/* Token rows, each in its own guarded buffer (ends at a PROT_NONE page): f32, and for the
 * bf16 recipe their bf16 roundings. xd / xb: the values in double. */
typedef struct tokens {
    guarded g[NTOK];
    const void *row[NTOK];
    double *xd[NTOK]; /* the f32 values */
    double *xb[NTOK]; /* the values the kernel reads (bf16-rounded for the bf16 recipe) */
    int n;            /* MR + 2 of the set under test */
} tokens;

static void tokens_init(tokens *t, int n, size_t k, bool bf16, double sigma)
{
    t->n = n;
    for (int i = 0; i < n; i++) {
        t->xd[i] = malloc(k * sizeof(double));
        t->xb[i] = malloc(k * sizeof(double));
        REQUIRE(t->xd[i] && t->xb[i]);
        void *row = guarded_alloc(&t->g[i], k * (bf16 ? 2 : 4));
        for (size_t c = 0; c < k; c++) {
            float v = (float)(sigma * gauss());
            t->xd[i][c] = v;
            if (bf16) {
                uint16_t code = to_bf16(v);
                memcpy((unsigned char *)row + 2 * c, &code, 2);
                t->xb[i][c] = dec_bf16(code);
            } else {
                memcpy((unsigned char *)row + 4 * c, &v, 4);
                t->xb[i][c] = v;
            }
        }
        t->row[i] = row;
    }
}

static void tokens_free(tokens *t)
{
    for (int i = 0; i < t->n; i++) {
        guarded_free(&t->g[i]);
        free(t->xd[i]);
        free(t->xb[i]);
    }
}

/* Packs with pack_fn into a guarded buffer; the unpacked copy must equal the sources. */
static void *pack_checked(const xset *xs, const mat *a, const mat *b, guarded *g, size_t *tb)
{
    const moe_expert_kernels *ks = xs->set;
    const bool pair = b != NULL;
    *tb = pair ? ks->gateup_tile_bytes(a->cols) : ks->down_tile_bytes(a->cols);
    REQUIRE(*tb > 0 && *tb % 64 == 0);
    size_t ntiles = (size_t)(a->rows + NR - 1) / NR;
    void *dst = guarded_alloc(g, ntiles * *tb);
    moe_weight_src sa = mat_src(a), sb = pair ? mat_src(b) : sa;
    moe_status st = pair ? ks->pack_gateup(&sa, &sb, dst) : ks->pack_down(&sa, dst);
    CHECK_STATUS(st, MOE_OK);

    /* unpack(pack(w)) == w: codes, scales (in their dtype) and biases, bit for bit. */
    const mat *src[2] = {a, b};
    moe_weight_dst d[2];
    for (int p = 0; p < (pair ? 2 : 1); p++) {
        const mat *m = src[p];
        size_t es = dsize(m->wdt);
        size_t nsc = (size_t)(m->srows * m->scols) * (m->scale ? dsize(m->scale_dtype) : 0);
        d[p] = (moe_weight_dst){
            .data = malloc((size_t)(m->rows * m->cols) * es),
            .dtype = m->wdt,
            .rows = m->rows,
            .cols = m->cols,
            .scale = m->scale ? malloc(nsc) : NULL,
            .scale_dtype = m->scale_dtype,
            .block_rows = 128,
            .block_cols = 128,
            .bias = m->bias ? malloc((size_t)m->rows * dsize(m->bias_dtype)) : NULL,
            .bias_dtype = m->bias_dtype,
        };
    }
    st = pair ? ks->unpack_gateup(dst, &d[0], &d[1]) : ks->unpack_down(dst, &d[0]);
    CHECK_STATUS(st, MOE_OK);
    for (int p = 0; p < (pair ? 2 : 1); p++) {
        const mat *m = src[p];
        size_t es = dsize(m->wdt);
        CHECKF(!memcmp(d[p].data, m->data, (size_t)(m->rows * m->cols) * es),
               "%s: unpacked weights differ (%lld x %lld)", xs->name, (long long)m->rows,
               (long long)m->cols);
        if (m->scale)
            CHECKF(!memcmp(d[p].scale, m->scale,
                           (size_t)(m->srows * m->scols) * dsize(m->scale_dtype)),
                   "%s: unpacked scales differ (%s)", xs->name, moe_dtype_name(m->scale_dtype));
        if (m->bias)
            CHECKF(!memcmp(d[p].bias, m->bias, (size_t)m->rows * dsize(m->bias_dtype)),
                   "%s: unpacked bias differs (%s)", xs->name, moe_dtype_name(m->bias_dtype));
        free(d[p].data);
        free(d[p].scale);
        free(d[p].bias);
    }
    /* f16 weights sit in the tiles widened: unpacked as f32 they are the exact values. */
    for (int p = 0; p < (pair ? 2 : 1) && src[p]->wdt == MOE_DTYPE_F16; p++) {
        const mat *m = src[p];
        const size_t n = (size_t)(m->rows * m->cols);
        float *w = malloc(n * 4);
        REQUIRE(w);
        moe_weight_dst f = {.data = w, .dtype = MOE_DTYPE_F32, .rows = m->rows, .cols = m->cols};
        moe_weight_dst other = f;
        other.data = malloc(n * 4);
        REQUIRE(other.data);
        st = pair ? ks->unpack_gateup(dst, p == 0 ? &f : &other, p == 0 ? &other : &f)
                  : ks->unpack_down(dst, &f);
        CHECK_STATUS(st, MOE_OK);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += (double)w[i] != m->wd[i];
        CHECKF(bad == 0, "%s: %zu f16 weights not widened exactly", xs->name, bad);
        free(w);
        free(other.data);
    }
    return dst;
}

/* The reference's own packing of the same matrices (NULL b: down). */
static const void *pack_ref(const xset *xs, const mat *a, const mat *b, guarded *g, size_t *tb)
{
    const moe_expert_kernels *ks = xs->ref;
    *tb = b ? ks->gateup_tile_bytes(a->cols) : ks->down_tile_bytes(a->cols);
    void *dst = guarded_alloc(g, (size_t)(a->rows + NR - 1) / NR * *tb);
    moe_weight_src sa = mat_src(a), sb = b ? mat_src(b) : sa;
    CHECK_STATUS(b ? ks->pack_gateup(&sa, &sb, dst) : ks->pack_down(&sa, dst), MOE_OK);
    return dst;
}

/* The recipes with bf16 activations (and h): bf16 and tile. */
static bool is_bf16_recipe(const xset *xs)
{
    return xs->set->recipe == MOE_RECIPE_BF16 || xs->set->recipe == MOE_RECIPE_TILE;
}

/* Against the exact activations a recipe with bf16 activations must stay within docs/design.md's
 * 1e-2 overall: the cases' relative errors pooled (weighted by their outputs), as a block
 * output pools many rows. A small case alone (ten outputs of one row) strays above it by
 * chance (2.1e-2 seen, with the random draws of a run that skipped other sets), so each case
 * is held to 3e-2. */
#define BF16_CASE_TOL 3e-2

/* Activations of about 2^-128 (half of them subnormal in bf16): the bf16 recipe reads them as
 * zero and flushes the tiny sums, and every set must do so as its reference does. Only the
 * bits are checked then (check_kernel); the tolerances against exact sums do not apply. */
static bool tiny_x;
#define TINY_SIGMA 0x1p-128

/* The token counts around the direct/buffered switch at 8 (expert_check.h) and the FP8 tile
 * sets' switches from the VBMI decode to the widened codes (AMX-BF16: 2 to 3; VBMI: 4 to 5). */
static const m_plan mplan = {{1, 2, 3, 4, 5, 8, 9, 13, 20}, 9, {7, 8, 9}, 3};

static void case_gateup(const xset *xs, const kcase *c)
{
    const int fmt = xs->set->format;
    const bool bf = is_bf16_recipe(xs);
    mat g, u;
    mat_init(&g, fmt, c->n, c->k, c->scale, c->bias);
    mat_init(&u, fmt, c->n, c->k, c->scale, c->bias);
    mat_values(&g);
    mat_values(&u);
    guarded gp, gr;
    size_t tb, rtb;
    const void *packed = pack_checked(xs, &g, &u, &gp, &tb);
    const void *ref_packed = pack_ref(xs, &g, &u, &gr, &rtb);

    tokens tok;
    tokens_init(&tok, ntokens(xs, c), (size_t)c->k, bf, tiny_x ? TINY_SIGMA : 1.0);
    const size_t n = (size_t)c->n, total = (size_t)tok.n * n;
    double *gd = malloc(total * sizeof(double)), *ud = malloc(total * sizeof(double));
    double *gb = malloc(total * sizeof(double)), *ub = malloc(total * sizeof(double));
    double *want = malloc(total * sizeof(double)), *wantb = malloc(total * sizeof(double));
    double *got = malloc(total * sizeof(double));
    REQUIRE(gd && ud && gb && ub && want && wantb && got);
    for (int t = 0; t < tok.n; t++)
        for (size_t r = 0; r < n; r++) {
            size_t i = (size_t)t * n + r;
            gd[i] = dot_d(&g, (int64_t)r, tok.xd[t]);
            ud[i] = dot_d(&u, (int64_t)r, tok.xd[t]);
            gb[i] = bf ? dot_d(&g, (int64_t)r, tok.xb[t]) : gd[i];
            ub[i] = bf ? dot_d(&u, (int64_t)r, tok.xb[t]) : ud[i];
        }
    const moe_act_params act = clipping_act(c->kind, ud, total);
    for (size_t i = 0; i < total; i++) {
        want[i] = act_d(&act, gd[i], ud[i]);
        wantb[i] = act_d(&act, gb[i], ub[i]);
    }

    runner r = {packed, ref_packed, tb, rtb, (size_t)c->k, n, bf ? 2 : 4, true, &act};
    char what[64];
    snprintf(what, sizeof what, "gate/up act %d", c->kind);
    check_kernel(xs, &r, tok.row, tok.n, &mplan, what, got);

    double e = rel_err(got, want, total), eb = rel_err(got, wantb, total);
    if (bf && !tiny_x) {
        /* Activations rounded to bf16: near the exact result (pooled above); against the
         * reference with the same bf16 activations only h's own bf16 rounding is left: 8
         * significant bits, so at most 2^-8 of each value (half an ulp is 2^-8 of the binade's
         * bottom), and so of the norm, plus the fp32 sums' 1e-6. */
        CHECKF(e <= BF16_CASE_TOL, "%s %s k=%lld n=%lld: error %.3g vs f32 activations", xs->name,
               what, (long long)c->k, (long long)c->n, e);
        pool_add(e, total);
        CHECKF(eb <= 0x1p-8 + 1e-5, "%s %s k=%lld n=%lld: error %.3g vs bf16 activations", xs->name,
               what, (long long)c->k, (long long)c->n, eb);
    } else if (!bf) {
        CHECKF(e <= 1e-5, "%s %s k=%lld n=%lld: error %.3g", xs->name, what, (long long)c->k,
               (long long)c->n, e);
    }
    free(gd), free(ud), free(gb), free(ub), free(want), free(wantb), free(got);
    tokens_free(&tok);
    guarded_free(&gp);
    guarded_free(&gr);
    mat_free(&g);
    mat_free(&u);
}

static void case_down(const xset *xs, const kcase *c)
{
    const int fmt = xs->set->format;
    const bool bf = is_bf16_recipe(xs);
    mat d;
    mat_init(&d, fmt, c->n, c->k, c->scale, c->bias);
    mat_values(&d);
    guarded gp, gr;
    size_t tb, rtb;
    const void *packed = pack_checked(xs, &d, NULL, &gp, &tb);
    const void *ref_packed = pack_ref(xs, &d, NULL, &gr, &rtb);
    tokens tok;
    tokens_init(&tok, ntokens(xs, c), (size_t)c->k, bf, tiny_x ? TINY_SIGMA : 0.3);
    const size_t n = (size_t)c->n, total = (size_t)tok.n * n;
    double *want = malloc(total * sizeof(double)), *wantb = malloc(total * sizeof(double));
    double *got = malloc(total * sizeof(double));
    REQUIRE(want && wantb && got);
    for (int t = 0; t < tok.n; t++)
        for (size_t r = 0; r < n; r++) {
            want[(size_t)t * n + r] = dot_d(&d, (int64_t)r, tok.xd[t]);
            wantb[(size_t)t * n + r] = dot_d(&d, (int64_t)r, tok.xb[t]);
        }
    runner r = {packed, ref_packed, tb, rtb, (size_t)c->k, n, 4, false, NULL};
    check_kernel(xs, &r, tok.row, tok.n, &mplan, "down", got);
    double e = rel_err(got, want, total), eb = rel_err(got, wantb, total);
    /* y is f32: against the reference with the activations the kernel read, only fp32
     * accumulation is left (~1e-6) in both recipes. */
    if (tiny_x) e = eb = 0;
    CHECKF(eb <= 1e-5, "%s down k=%lld n=%lld: error %.3g", xs->name, (long long)c->k,
           (long long)c->n, eb);
    if (bf && !tiny_x) pool_add(e, total);
    CHECKF(e <= (bf ? BF16_CASE_TOL : 1e-5), "%s down k=%lld n=%lld: error %.3g vs f32 activations",
           xs->name, (long long)c->k, (long long)c->n, e);
    free(want), free(wantb), free(got);
    tokens_free(&tok);
    guarded_free(&gp);
    guarded_free(&gr);
    mat_free(&d);
}

/* Shapes (K, N): every K of {32, 100, 128, 130, 256, 2048, 7168} and every N of
 * {1, 15, 16, 17, 129, 2048}, K below, at and above the 128-block, odd K of both residues
 * mod 4 (kernels step two k-pairs at a time), N below, at and above the tile and across a
 * scale block; activations, biases and scale dtypes rotate. */
static const kcase cases[] = {
    {32, 1, 0, MOE_DTYPE_INVALID, MOE_DTYPE_F32},
    {100, 15, 1, MOE_DTYPE_BF16, MOE_DTYPE_BF16},
    {128, 16, 2, MOE_DTYPE_F32, MOE_DTYPE_F8_E8M0},
    {130, 17, 0, MOE_DTYPE_F16, MOE_DTYPE_F32},
    {256, 129, 1, MOE_DTYPE_INVALID, MOE_DTYPE_U8},
    {2048, 33, 2, MOE_DTYPE_BF16, MOE_DTYPE_BF16},
    {7168, 17, 1, MOE_DTYPE_F32, MOE_DTYPE_F8_E8M0},
    {33, 2048, 2, MOE_DTYPE_INVALID, MOE_DTYPE_F32},
    {129, 1, 2, MOE_DTYPE_F32, MOE_DTYPE_F32},
    {35, 31, 0, MOE_DTYPE_BF16, MOE_DTYPE_F8_E8M0},
    {259, 16, 1, MOE_DTYPE_F16, MOE_DTYPE_BF16},
};

static void test_sets(const moe_cpu_info *info)
{
    /* The controls of MXCSR (not its sticky status flags) as every kernel must leave them: the
     * sets that set DAZ and FTZ around their chains put them back. */
    const unsigned mxcsr0 = _mm_getcsr() | MXCSR_FLAGS;
    const uint32_t allowed = moe_cpu_caps_mask(&info->allowed);
    for (size_t s = 0; s < NSETS; s++) {
        const xset *xs = &sets[s];
        if (!set_allowed(xs, allowed)) continue;
        CHECK(xs->set->mr >= 1 && xs->set->mr <= MAX_MR && xs->set->nr == NR);
        CHECK(!strcmp(xs->set->name, xs->name));
        CHECK(xs->set->isa == xs->isa);
        pool_sq = pool_n = 0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            plain_dtype = c % 2 ? MOE_DTYPE_F16 : MOE_DTYPE_F32; /* format F32 only */
            case_gateup(xs, &cases[c]);
            CHECKF((_mm_getcsr() | MXCSR_FLAGS) == mxcsr0, "%s gate/up case %zu: MXCSR %#x",
                   xs->name, c, _mm_getcsr());
            case_down(xs, &cases[c]);
            CHECKF((_mm_getcsr() | MXCSR_FLAGS) == mxcsr0, "%s down case %zu: MXCSR %#x", xs->name,
                   c, _mm_getcsr());
        }
        plain_dtype = MOE_DTYPE_F32;
        if (is_bf16_recipe(xs)) {
            /* The cases without biases, which would hide the tiny sums' bits. */
            tiny_x = true;
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                if (cases[c].bias != MOE_DTYPE_INVALID) continue;
                case_gateup(xs, &cases[c]);
                case_down(xs, &cases[c]);
            }
            tiny_x = false;
            const double pooled = sqrt(pool_sq / pool_n);
            CHECKF(pooled <= 1e-2, "%s: pooled error %.3g vs the f32 activations", xs->name,
                   pooled);
            fprintf(stderr, "%s: pooled error %.3g vs the f32 activations\n", xs->name, pooled);
        }
    }
}

/* ---- Packing at the door ---------------------------------------------------------------- */

static void test_pack_errors(void)
{
    const moe_expert_kernels *b16 = &moe_expert_bf16_f32_8x16__ref;
    const moe_expert_kernels *f8 = &moe_expert_fp8_f32_8x16__ref;
    mat g, u;
    mat_init(&g, MOE_EXPERT_FMT_FP8_BLOCK, 20, 200, MOE_DTYPE_F32, MOE_DTYPE_INVALID);
    mat_init(&u, MOE_EXPERT_FMT_FP8_BLOCK, 20, 200, MOE_DTYPE_F32, MOE_DTYPE_INVALID);
    moe_weight_src sg = mat_src(&g), su = mat_src(&u);
    uint8_t *codes = g.data;
    float *scales = u.scale;

    codes[3 * 200 + 5] = 0x7F;
    expect_reject(f8, &sg, &su, MOE_EVALUE, "row 3, col 5");
    codes[3 * 200 + 5] = 0xFF;
    expect_reject(f8, &sg, &su, MOE_EVALUE, "0xFF");
    codes[3 * 200 + 5] = 0x10;
    /* A NaN code at every column of a row is found and named (the scan reads 8 codes at a
     * time, then the bytes after the last word), and the largest finite codes are not NaN. */
    for (int c = 0; c < 200; c++) {
        char needle[32];
        snprintf(needle, sizeof needle, "row 3, col %d", c);
        const uint8_t keep = codes[3 * 200 + c];
        codes[3 * 200 + c] = c % 2 ? 0xFF : 0x7F;
        expect_reject(f8, &sg, &su, MOE_EVALUE, needle);
        const char *e = moe_last_error();
        CHECKF(strlen(e) >= strlen(needle) && !strcmp(e + strlen(e) - strlen(needle), needle),
               "message '%s' does not end with '%s'", e, needle);
        codes[3 * 200 + c] = keep;
    }
    uint8_t row3[200];
    memcpy(row3, codes + 3 * 200, sizeof row3);
    for (int c = 0; c < 200; c++)
        codes[3 * 200 + c] = c % 2 ? 0xFE : 0x7E;
    unsigned char *tiles = aligned_alloc(64, 2 * f8->gateup_tile_bytes(200)); /* 20 rows */
    REQUIRE(tiles);
    CHECK_STATUS(f8->pack_gateup(&sg, &su, tiles), MOE_OK);
    free(tiles);
    memcpy(codes + 3 * 200, row3, sizeof row3);
    mat narrow;
    mat_init(&narrow, MOE_EXPERT_FMT_FP8_BLOCK, 16, 13, MOE_DTYPE_F32, MOE_DTYPE_INVALID);
    moe_weight_src sn = mat_src(&narrow);
    ((uint8_t *)narrow.data)[5 * 13 + 12] = 0xFF;
    expect_reject(f8, &sn, NULL, MOE_EVALUE, "row 5, col 12");
    mat_free(&narrow);
    const float bad[] = {NAN, INFINITY, 0.0f, -1.0f, 0x1p120f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float keep = scales[1];
        scales[1] = bad[i];
        expect_reject(f8, &sg, &su, MOE_EVALUE, "block (0, 1)");
        scales[1] = keep;
    }
    CHECK_STATUS(f8->pack_gateup(&sg, &su, NULL), MOE_EINVAL);

    /* E8M0 0xFF is NaN; codes up to 2^119 are carried. */
    mat e;
    mat_init(&e, MOE_EXPERT_FMT_FP8_BLOCK, 16, 128, MOE_DTYPE_F8_E8M0, MOE_DTYPE_INVALID);
    moe_weight_src se = mat_src(&e);
    ((uint8_t *)e.scale)[0] = 0xFF;
    expect_reject(f8, &se, NULL, MOE_EVALUE, "block (0, 0)");
    ((uint8_t *)e.scale)[0] = 127 + 119;
    guarded gd;
    void *dst = guarded_alloc(&gd, f8->down_tile_bytes(128));
    CHECK_STATUS(f8->pack_down(&se, dst), MOE_OK);
    guarded_free(&gd);

    /* Shapes, dtypes, blocks, NULLs. */
    moe_weight_src t = su;
    t.rows = 19;
    expect_reject(f8, &sg, &t, MOE_ESHAPE, "differ in shape");
    t = su;
    t.block_cols = 64;
    expect_reject(f8, &sg, &t, MOE_EUNSUPPORTED, "scale block");
    t = su;
    t.block_rows = 8;
    expect_reject(f8, &sg, &t, MOE_EUNSUPPORTED, "scale block");
    t = su;
    t.scale = NULL;
    expect_reject(f8, &sg, &t, MOE_EINVAL, "up: the FP8 block scales are NULL");
    t = su;
    t.scale_dtype = MOE_DTYPE_F16;
    expect_reject(f8, &sg, &t, MOE_EDTYPE, "scale dtype f16");
    t = su;
    t.dtype = MOE_DTYPE_BF16;
    expect_reject(f8, &sg, &t, MOE_EDTYPE, "weight dtype bf16");
    t = su;
    t.bias = u.data;
    t.bias_dtype = MOE_DTYPE_I32;
    expect_reject(f8, &sg, &t, MOE_EDTYPE, "bias dtype i32");
    t = su;
    t.rows = 0;
    expect_reject(f8, &t, NULL, MOE_ESHAPE, "down: shape [0, 200]");
    t = su;
    t.data = NULL;
    expect_reject(f8, &t, NULL, MOE_EINVAL, "down: the weight data is NULL");
    t = su;
    t.row_stride = INT64_MAX / 2;
    expect_reject(f8, &t, NULL, MOE_EOVERFLOW, "strides");
    expect_reject(f8, NULL, NULL, MOE_EINVAL, "NULL");

    /* bf16 weights: BF16 only; F16 and F32 are named. */
    mat w;
    mat_init(&w, MOE_EXPERT_FMT_BF16, 16, 64, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID);
    moe_weight_src sw = mat_src(&w);
    sw.dtype = MOE_DTYPE_F16;
    expect_reject(b16, &sw, NULL, MOE_EDTYPE, "weight dtype f16");
    sw.dtype = MOE_DTYPE_F8_E4M3;
    expect_reject(b16, &sw, NULL, MOE_EDTYPE, "weight dtype f8_e4m3");

    /* Tile sizes: 0 for k < 1 and for k past the limit; multiples of 64 otherwise. */
    const int64_t ks[] = {1, 2, 127, 128, 129, 7168};
    for (size_t i = 0; i < NSETS; i++) {
        const moe_expert_kernels *x = sets[i].set;
        CHECK(x->gateup_tile_bytes(0) == 0 && x->down_tile_bytes(-5) == 0);
        CHECK(x->gateup_tile_bytes((int64_t)1 << 41) == 0);
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
            CHECK(x->gateup_tile_bytes(ks[j]) % 64 == 0 && x->down_tile_bytes(ks[j]) % 64 == 0);
    }
    /* Unpack checks its destination. */
    unsigned char pk[4096] = {0};
    uint16_t out[64 * 16];
    moe_weight_dst dd = {.data = out, .dtype = MOE_DTYPE_F32, .rows = 16, .cols = 64};
    CHECK_STATUS(b16->unpack_down(pk, &dd), MOE_EDTYPE);
    dd.dtype = MOE_DTYPE_BF16;
    dd.rows = 0;
    CHECK_STATUS(b16->unpack_down(pk, &dd), MOE_ESHAPE);
    mat_free(&g);
    mat_free(&u);
    mat_free(&e);
    mat_free(&w);

    /* f32 weights: F32 or F16 only; the others are named. Unpack holds f32 (or f16). */
    const moe_expert_kernels *f32 = &moe_expert_f32_f32_8x16__ref;
    mat_init(&w, MOE_EXPERT_FMT_BF16, 16, 64, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID);
    sw = mat_src(&w);
    expect_reject(f32, &sw, NULL, MOE_EDTYPE, "weight dtype bf16; the f32 expert kernels read f32");
    moe_weight_src sw2 = sw;
    sw2.dtype = MOE_DTYPE_F16;
    sw.dtype = MOE_DTYPE_F8_E4M3;
    expect_reject(f32, &sw2, &sw, MOE_EDTYPE, "up: weight dtype f8_e4m3");
    sw = sw2;
    sw.rows = 15;
    expect_reject(f32, &sw2, &sw, MOE_ESHAPE, "differ in shape");
    unsigned char f32pk[8192] = {0};
    float f32out[16 * 64];
    moe_weight_dst fd = {.data = f32out, .dtype = MOE_DTYPE_BF16, .rows = 16, .cols = 64};
    CHECK_STATUS(f32->unpack_down(f32pk, &fd), MOE_EDTYPE);
    CHECK(strstr(moe_last_error(), "holds f32") != NULL);
    mat_free(&w);
}

/* gpt-oss keeps gate_up [H, 2I] with gate in the even columns and down [I, H] transposed;
 * strides describe them, and the packed bytes equal those of contiguous copies. */
static void test_strided(void)
{
    const int64_t H = 70, I = 37;
    for (size_t s = 0; s < NSETS; s++) {
        const moe_expert_kernels *ks = sets[s].set;
        if (ks != sets[s].ref) continue; /* the pack functions are the references' */
        mat g, u, d;
        mat_init(&g, ks->format, I, H, MOE_DTYPE_F32, MOE_DTYPE_BF16);
        mat_init(&u, ks->format, I, H, MOE_DTYPE_F32, MOE_DTYPE_BF16);
        mat_init(&d, ks->format, H, I, MOE_DTYPE_F32, MOE_DTYPE_F32);
        const size_t es = dsize(g.wdt);
        /* gate_up[h][2i] = gate[i][h], gate_up[h][2i+1] = up[i][h]; biases interleaved too. */
        unsigned char *gu = malloc((size_t)(H * 2 * I) * es), *gub = malloc((size_t)(2 * I) * 2);
        unsigned char *dt = malloc((size_t)(I * H) * es);
        REQUIRE(gu && gub && dt);
        for (int64_t i = 0; i < I; i++) {
            for (int64_t h = 0; h < H; h++) {
                memcpy(gu + (size_t)(h * 2 * I + 2 * i) * es,
                       (unsigned char *)g.data + (size_t)(i * H + h) * es, es);
                memcpy(gu + (size_t)(h * 2 * I + 2 * i + 1) * es,
                       (unsigned char *)u.data + (size_t)(i * H + h) * es, es);
            }
            memcpy(gub + 4 * i, (unsigned char *)g.bias + 2 * i, 2);
            memcpy(gub + 4 * i + 2, (unsigned char *)u.bias + 2 * i, 2);
        }
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < I; i++)
                memcpy(dt + (size_t)(i * H + h) * es,
                       (unsigned char *)d.data + (size_t)(h * I + i) * es, es);
        moe_weight_src sg = mat_src(&g), su = mat_src(&u), sd = mat_src(&d);
        moe_weight_src tg = sg, tu = su, td = sd;
        tg.data = gu;
        tu.data = gu + es;
        tg.row_stride = tu.row_stride = 2;
        tg.col_stride = tu.col_stride = 2 * I;
        tg.bias = gub;
        tu.bias = gub + 2;
        tg.bias_stride = tu.bias_stride = 2;
        td.data = dt;
        td.row_stride = 1;
        td.col_stride = H;
        const size_t gb = ks->gateup_tile_bytes(H) * (size_t)((I + NR - 1) / NR);
        const size_t db = ks->down_tile_bytes(I) * (size_t)((H + NR - 1) / NR);
        unsigned char *p1 = malloc(gb), *p2 = malloc(gb), *q1 = malloc(db), *q2 = malloc(db);
        REQUIRE(p1 && p2 && q1 && q2);
        CHECK_STATUS(ks->pack_gateup(&sg, &su, p1), MOE_OK);
        CHECK_STATUS(ks->pack_gateup(&tg, &tu, p2), MOE_OK);
        CHECKF(!memcmp(p1, p2, gb), "%s: strided gate/up packs differently", ks->name);
        CHECK_STATUS(ks->pack_down(&sd, q1), MOE_OK);
        CHECK_STATUS(ks->pack_down(&td, q2), MOE_OK);
        CHECKF(!memcmp(q1, q2, db), "%s: transposed down packs differently", ks->name);
        /* Negative strides reach the same elements backwards. */
        moe_weight_src nd = sd;
        nd.data = (unsigned char *)d.data + (size_t)((H - 1) * I + (I - 1)) * es;
        nd.row_stride = -I;
        nd.col_stride = -1;
        nd.bias = NULL;
        CHECK_STATUS(ks->pack_down(&nd, q2), MOE_OK);
        free(gu), free(gub), free(dt), free(p1), free(p2), free(q1), free(q2);
        mat_free(&g);
        mat_free(&u);
        mat_free(&d);
    }
}

/* The f32 recipe is one arithmetic for bf16 and f32 weights (the same chains in the same
 * order), so bf16 weights stored as f32 give the bf16 sets' bits: the f32 reference against the
 * bf16 reference, both packed from the same values. */
static void test_f32_equals_bf16(void)
{
    const moe_expert_kernels *b16 = &moe_expert_bf16_f32_8x16__ref;
    const moe_expert_kernels *f32 = &moe_expert_f32_f32_8x16__ref;
    const int64_t ks[] = {1, 2, 35, 130, 259};
    const int64_t n = 33;
    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
        const int64_t k = ks[c];
        mat m[2];
        float *wf[2];
        unsigned char *pk[2][2];
        for (int p = 0; p < 2; p++) {
            mat_init(&m[p], MOE_EXPERT_FMT_BF16, n, k, MOE_DTYPE_INVALID, MOE_DTYPE_F16);
            wf[p] = malloc((size_t)(n * k) * 4);
            REQUIRE(wf[p]);
            for (int64_t i = 0; i < n * k; i++)
                wf[p][i] = (float)dec_bf16(((const uint16_t *)m[p].data)[i]);
        }
        moe_weight_src sb[2] = {mat_src(&m[0]), mat_src(&m[1])}, sf[2] = {sb[0], sb[1]};
        sf[0].data = wf[0];
        sf[1].data = wf[1];
        sf[0].dtype = sf[1].dtype = MOE_DTYPE_F32;
        const moe_expert_kernels *set[2] = {b16, f32};
        const moe_weight_src *src[2] = {sb, sf};
        for (int v = 0; v < 2; v++) {
            pk[v][0] = aligned_alloc(64, set[v]->gateup_tile_bytes(k) * 3);
            pk[v][1] = aligned_alloc(64, set[v]->down_tile_bytes(k) * 3);
            REQUIRE(pk[v][0] && pk[v][1]);
            CHECK_STATUS(set[v]->pack_gateup(&src[v][0], &src[v][1], pk[v][0]), MOE_OK);
            CHECK_STATUS(set[v]->pack_down(&src[v][0], pk[v][1]), MOE_OK);
        }
        float x[3][259];
        const void *rows[3] = {x[0], x[1], x[2]};
        for (int t = 0; t < 3; t++)
            for (int64_t i = 0; i < k; i++)
                x[t][i] = (float)gauss();
        const moe_act_params act = {1, 0.5f, 0.0f};
        float out[2][2][3 * 48];
        memset(out, 0, sizeof out);
        for (int v = 0; v < 2; v++)
            for (int64_t t = 0; t * NR < n; t++) {
                const size_t nv = n - t * NR < NR ? (size_t)(n - t * NR) : NR;
                set[v]->gateup(3, (size_t)k, rows, pk[v][0] + t * set[v]->gateup_tile_bytes(k),
                               &act, out[v][0] + t * NR, 48, nv);
                set[v]->down(3, (size_t)k, rows, pk[v][1] + t * set[v]->down_tile_bytes(k),
                             out[v][1] + t * NR, 48, nv);
            }
        CHECKF(!memcmp(out[0], out[1], sizeof out[0]), "k=%lld: f32 weights differ from bf16",
               (long long)k);
        for (int p = 0; p < 2; p++) {
            free(wf[p]);
            free(pk[p][0]);
            free(pk[p][1]);
            mat_free(&m[p]);
        }
    }
}

/* The enumerators are what the registry holds for the expert families. */
static void test_registry(void)
{
    for (size_t s = 0; s < NSETS; s++) {
        if (!set_registered(&sets[s])) continue;
        CHECK(sets[s].ref->isa == MOE_REQ_SCALAR && sets[s].ref->recipe == sets[s].set->recipe &&
              sets[s].ref->format == sets[s].set->format);
    }
}

/* ---- The tile recipe's FP8 statement ------------------------------------------------------ */

/* Row r of an FP8 matrix times the bf16 row x as the tile recipe states it for FP8 weights
 * (kernels/expert.h, "The tile recipe"), from the checkpoint's codes and scales: per 128-K
 * block C = +0, one moe_tile_bf16_dot_ref per 32-K chunk (x and the weights e4m3(code) · 2^-8,
 * exact in bf16, zero past k), then acc = fmaf(C, scale · 2^8, acc); plus the bias (0). */
static float fp8_tile_statement(const mat *m, int64_t r, const uint16_t *x)
{
    const uint8_t *codes = (const uint8_t *)m->data + r * m->cols;
    float acc = 0.0f;
    for (int64_t b = 0; b * 128 < m->cols; b++) {
        float c = 0.0f;
        for (int64_t k0 = b * 128; k0 < m->cols && k0 < (b + 1) * 128; k0 += 32) {
            uint16_t xc[32] = {0}, wc[32] = {0};
            for (int64_t j = 0; j < 32 && k0 + j < m->cols; j++) {
                xc[j] = x[k0 + j];
                wc[j] = to_bf16((float)ldexp(dec_e4m3(codes[k0 + j]), -8));
            }
            c = moe_tile_bf16_dot_ref(c, xc, wc, 16);
        }
        acc = fmaf(c, (float)(scale_value(m, r / 128, b) * 256.0), acc);
    }
    return acc + 0.0f;
}

/* The FP8 tile sets against that statement, bit for bit: down's y, and gate/up's h through the
 * bf16 recipe's epilogue (moe_xr_act, then moe_f32_to_bf16), for K on and across the chunk and
 * block edges, 17 rows (two tiles), every m of each set. The float64 checks above hold the sets
 * near the exact sums; this holds them to the recipe's order of operations. */
static void test_fp8_tile_statement(const moe_cpu_info *info)
{
    const uint32_t allowed = moe_cpu_caps_mask(&info->allowed);
    const int64_t kk[] = {1, 33, 128, 130, 259, 300};
    enum { N = 17, KMAX = 300, YS = 2 * NR };
    const moe_act_params act = {0, 0.0f, 0.0f};
    for (size_t c = 0; c < sizeof kk / sizeof kk[0]; c++) {
        const int64_t k = kk[c];
        mat g, u;
        mat_init(&g, MOE_EXPERT_FMT_FP8_BLOCK, N, k, MOE_DTYPE_F32, MOE_DTYPE_INVALID);
        mat_init(&u, MOE_EXPERT_FMT_FP8_BLOCK, N, k, MOE_DTYPE_F32, MOE_DTYPE_INVALID);
        const moe_weight_src sg = mat_src(&g), su = mat_src(&u);
        static uint16_t x[MAX_MR][KMAX];
        const void *rows[MAX_MR];
        float want_y[MAX_MR][N];
        uint16_t want_h[MAX_MR][N];
        for (int t = 0; t < MAX_MR; t++) {
            rows[t] = x[t];
            for (int64_t i = 0; i < k; i++)
                x[t][i] = to_bf16((float)gauss());
            for (int64_t r = 0; r < N; r++) {
                want_y[t][r] = fp8_tile_statement(&g, r, x[t]);
                want_h[t][r] = moe_f32_to_bf16(
                    moe_xr_act(&act, want_y[t][r], fp8_tile_statement(&u, r, x[t])));
            }
        }
        for (size_t s = 0; s < NSETS; s++) {
            const xset *xs = &sets[s];
            if (xs->family != MOE_KERNEL_FAMILY_EXPERT_FP8_TILE || !set_allowed(xs, allowed))
                continue;
            const moe_expert_kernels *ks = xs->set;
            const size_t gb = ks->gateup_tile_bytes(k), db = ks->down_tile_bytes(k);
            unsigned char *pg = aligned_alloc(64, 2 * gb), *pd = aligned_alloc(64, 2 * db);
            REQUIRE(pg && pd);
            CHECK_STATUS(ks->pack_gateup(&sg, &su, pg), MOE_OK);
            CHECK_STATUS(ks->pack_down(&sg, pd), MOE_OK);
            for (int m = 1; m <= ks->mr; m++) {
                float y[MAX_MR][YS];
                uint16_t h[MAX_MR][YS];
                for (int tile = 0; tile < 2; tile++) {
                    const size_t nv = tile ? N - NR : NR;
                    ks->down((size_t)m, (size_t)k, rows, pd + tile * db, y[0] + tile * NR, YS, nv);
                    ks->gateup((size_t)m, (size_t)k, rows, pg + tile * gb, &act, h[0] + tile * NR,
                               YS, nv);
                }
                for (int t = 0; t < m; t++)
                    CHECKF(!memcmp(y[t], want_y[t], sizeof want_y[t]) &&
                               !memcmp(h[t], want_h[t], sizeof want_h[t]),
                           "%s k=%lld m=%d token %d: not the recipe's bits", xs->name, (long long)k,
                           m, t);
            }
            free(pg);
            free(pd);
        }
        mat_free(&g);
        mat_free(&u);
    }
}

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    rng_state = 0x9E3779B97F4A7C15ull;
    test_registry();
    test_pack_errors();
    test_strided();
    test_f32_equals_bf16();
    test_fp8_tile_statement(&info);
    test_sets(&info);
    return TEST_END();
}
