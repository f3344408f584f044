/* expert_check.h — expert kernel tests (bf16/FP8 and MXFP4): what both run on every kernel set. */
#ifndef MOE_TEST_EXPERT_CHECK_H
#define MOE_TEST_EXPERT_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "act_d.h"
#include "guarded.h"
#include "kernels/expert.h"
#include "select/kernel.h"
#include "test.h"
#include "xorshift.h"

#define NR MOE_EXPERT_NR
#define MAX_TOKENS 130 /* the most token rows a check takes: the engine's widest mr (128) + 2 */

/* ---- The kernel sets, from the enumerators -------------------------------------------- */

typedef struct xset {
    const char *name;
    uint32_t isa;
    const moe_expert_kernels *set, *ref;
    moe_kernel_family family;
} xset;

/* Whether the CPU allows the set; one it does not is named with what it needs. */
static inline bool set_allowed(const xset *xs, uint32_t allowed)
{
    if ((xs->isa & ~allowed) == 0) return true;
    char need[96];
    moe_cpu_mask_format(xs->isa & ~allowed, need, sizeof need);
    fprintf(stderr, "skip %s: needs %s\n", xs->name, need);
    return false;
}

/* The set is what the registry holds under its name; false when it is not registered. */
static inline bool set_registered(const xset *xs)
{
    const moe_kernel *k = moe_kernel_find(xs->name);
    CHECKF(k != NULL, "%s is not registered", xs->name);
    if (!k) return false;
    CHECK(k->family == xs->family && k->isa == xs->isa);
    CHECK(k->fn.expert_set == xs->set && k->ref.expert_set == xs->ref);
    return true;
}

/* ---- Random numbers; bf16 by an independent decoder (ldexp of the fields, in double) --- */

static uint64_t rng_state; /* each test's main() seeds it (xorshift64 stays at 0 from 0) */

static inline uint64_t rnd(void) { return xorshift64(&rng_state); }

static inline double unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static inline double gauss(void)
{
    return (unit() + unit() + unit() + unit() - 2.0) * 1.7320508075688772;
}

static inline double minifloat(unsigned sign, unsigned e, unsigned m, int mbits, int bias)
{
    double mag = e == 0 ? ldexp((double)m, 1 - bias - mbits)
                        : ldexp(1.0 + ldexp((double)m, -mbits), (int)e - bias);
    return sign ? -mag : mag;
}

static inline double dec_bf16(uint16_t c)
{
    return minifloat(c >> 15, (c >> 7) & 0xFF, c & 0x7F, 7, 127);
}

/* Round to nearest even bf16 (finite inputs only). */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* ---- The float64 reference's activation and error measures ----------------------------- */

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}


/* The activation of KIND with a limit that clips: the median |up| of UP (TOTAL values), so
 * about half of the projections exceed it; a clamping kind must clip a quarter at least. */
static inline moe_act_params clipping_act(int kind, const double *up, size_t total)
{
    double *mag = malloc(total * sizeof(double));
    REQUIRE(mag);
    for (size_t i = 0; i < total; i++)
        mag[i] = fabs(up[i]);
    qsort(mag, total, sizeof(double), cmp_double);
    const moe_act_params act = {.kind = kind, .limit = (float)mag[total / 2], .alpha = 1.702f};
    free(mag);
    size_t clipped = 0;
    for (size_t i = 0; i < total; i++)
        clipped += fabs(up[i]) > act.limit;
    if (kind != 0)
        CHECKF(clipped >= total / 4, "limit %g clips only %zu of %zu", act.limit, clipped, total);
    return act;
}

/* Relative Frobenius error of got against want. */
static inline double rel_err(const double *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Σ w[c]·x[c] over c < k in double, in order: the float64 references' dot products, from the
 * activations the kernels read (x double) or the f32 ones (xf). */
static inline double dot_exact(const double *w, const double *x, int64_t k)
{
    double s = 0;
    for (int64_t c = 0; c < k; c++)
        s += w[c] * x[c];
    return s;
}

static inline double dot_exact_f(const double *w, const float *xf, int64_t k)
{
    double s = 0;
    for (int64_t c = 0; c < k; c++)
        s += w[c] * xf[c];
    return s;
}

/* The cases' relative errors pooled, weighted by their outputs (a block output pools many
 * rows); each test holds a set's pool to its recipe's bound. */
static double pool_sq, pool_n;

static inline void pool_add(double err, size_t n)
{
    pool_sq += err * err * (double)n;
    pool_n += (double)n;
}

/* ---- Outputs between guards ------------------------------------------------------------ */

#define PAD 5         /* elements between the last valid column and the next row */
#define GUARD_ROWS 2  /* whole sentinel rows after the last row written */
#define SENTINEL 0xA5 /* byte pattern nothing writes */

typedef struct outbuf {
    unsigned char *p;
    size_t es, stride, rows, bytes; /* element size, elements per row, rows incl. guards */
} outbuf;

static inline void out_init(outbuf *o, size_t es, size_t n, size_t m)
{
    o->es = es;
    o->stride = n + PAD;
    o->rows = m + GUARD_ROWS;
    o->bytes = o->rows * o->stride * es;
    o->p = malloc(o->bytes);
    REQUIRE(o->p);
    memset(o->p, SENTINEL, o->bytes);
}

/* Everything outside rows < m, columns < n kept its sentinel. */
static inline bool out_guards_ok(const outbuf *o, size_t m, size_t n)
{
    for (size_t r = 0; r < o->rows; r++)
        for (size_t b = 0; b < o->stride * o->es; b++) {
            bool inside = r < m && b < n * o->es;
            if (!inside && o->p[r * o->stride * o->es + b] != SENTINEL) return false;
        }
    return true;
}

/* Output (i, n): f32, or bf16 (es 2). */
static inline double out_value(const outbuf *o, size_t i, size_t n)
{
    const unsigned char *p = o->p + (i * o->stride + n) * o->es;
    if (o->es == 4) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t c;
    memcpy(&c, p, 2);
    return dec_bf16(c);
}

/* ---- Running a kernel over all tiles ---------------------------------------------------- */

/* One projection packed by the set's and by its reference's pack function, k inputs, n
 * outputs of es bytes; gate/up (with act) or down. */
typedef struct runner {
    const void *packed, *ref_packed;
    size_t tb, ref_tb, k, n, es;
    bool gateup;
    const moe_act_params *act;
} runner;

/* Every tile through the single-tile entry of ks (ref: on the reference's packing). */
static inline void run(const runner *r, const moe_expert_kernels *ks, bool ref, size_t m,
                       const void *const *rows, outbuf *o)
{
    const unsigned char *packed = ref ? r->ref_packed : r->packed;
    const size_t tb = ref ? r->ref_tb : r->tb;
    for (size_t t = 0; t * NR < r->n; t++) {
        const size_t nv = r->n - t * NR < NR ? r->n - t * NR : NR;
        if (r->gateup)
            ks->gateup(m, r->k, rows, packed + t * tb, r->act, o->p + t * NR * o->es, o->stride,
                       nv);
        else
            ks->down(m, r->k, rows, packed + t * tb, (float *)o->p + t * NR, o->stride, nv);
    }
}

/* The same through the set's multi-tile entry, per_call tiles a call (the last call the rest). */
static inline void run_tiles(const runner *r, const moe_expert_kernels *ks, size_t m,
                             const void *const *rows, outbuf *o, size_t per_call)
{
    const size_t ntiles = (r->n + NR - 1) / NR;
    for (size_t t = 0; t < ntiles; t += per_call) {
        const size_t n = ntiles - t < per_call ? ntiles - t : per_call;
        const size_t last = t + n - 1, nv = r->n - last * NR < NR ? r->n - last * NR : NR;
        const unsigned char *tile = (const unsigned char *)r->packed + t * r->tb;
        if (r->gateup)
            ks->gateup_tiles(m, r->k, rows, tile, n, r->act, o->p + t * NR * o->es, o->stride, nv);
        else
            ks->down_tiles(m, r->k, rows, tile, n, (float *)o->p + t * NR, o->stride, nv);
    }
}

/* ---- Same token, same bits -------------------------------------------------------------- */

/* The token counts a family's checks try besides 1..3, mr / 2 and the top two: those around
 * the switches between its kernels' paths. */
typedef struct m_plan {
    size_t tiles[10], ntiles; /* the multi-tile check's (mr is tried too) */
    size_t edges[8], nedges; /* the every-m check keeps them where it thins out */
} m_plan;

static inline bool m_listed(const size_t *ms, size_t n, size_t m)
{
    for (size_t i = 0; i < n; i++)
        if (ms[i] == m) return true;
    return false;
}

/* A set's multi-tile entry gives the tile-by-tile bits, every tile at once and three at a
 * time (so pairs and a lone last tile), for token counts on both sides of the switches, and
 * writes nothing outside its outputs. */
static inline void check_tiles(const xset *xs, const runner *r, const void *const *tok, int ntok,
                               const m_plan *mp, const char *what)
{
    const moe_expert_kernels *ks = xs->set;
    if (r->gateup ? !ks->gateup_tiles : !ks->down_tiles) return;
    for (size_t i = 0; i <= mp->ntiles; i++) {
        const size_t m = i < mp->ntiles ? mp->tiles[i] : (size_t)ks->mr;
        if (m > (size_t)ntok || m > (size_t)ks->mr) continue;
        const void *rows[MAX_TOKENS];
        for (size_t t = 0; t < m; t++)
            rows[t] = tok[(t + 1) % (size_t)ntok];
        outbuf one, all, three;
        out_init(&one, r->es, r->n, m);
        out_init(&all, r->es, r->n, m);
        out_init(&three, r->es, r->n, m);
        run(r, ks, false, m, rows, &one);
        run_tiles(r, ks, m, rows, &all, (r->n + NR - 1) / NR);
        run_tiles(r, ks, m, rows, &three, 3);
        CHECKF(out_guards_ok(&all, m, r->n) && out_guards_ok(&three, m, r->n),
               "%s %s: the multi-tile entry wrote outside its outputs (m=%zu)", xs->name, what, m);
        CHECKF(!memcmp(one.p, all.p, one.bytes) && !memcmp(one.p, three.p, one.bytes),
               "%s %s k=%zu n=%zu m=%zu: the multi-tile entry differs from tile by tile", xs->name,
               what, r->k, r->n, m);
        free(one.p), free(all.p), free(three.p);
    }
}

/* K·N above which a case counts as large (fewer m, fewer tokens for the references). */
#define LARGE 40000

/* Every token alone (its outputs into got, token by token); then every m, tokens rotated so
 * each sits at several positions, equal to alone bit for bit; then the same bits as the set's
 * reference; then check_tiles. Nothing outside the outputs may change. */
static inline void check_kernel(const xset *xs, const runner *r, const void *const *tok, int ntok,
                                const m_plan *mp, const char *what, double *got)
{
    const moe_expert_kernels *ks = xs->set;
    const size_t mr = (size_t)ks->mr, n = r->n, es = r->es;
    REQUIRE(ntok <= MAX_TOKENS);
    outbuf alone[MAX_TOKENS];
    /* Every m on small shapes; on large ones (they dominate the run time, under sanitizers
     * most of all) and for the slow references the edges of each path: 1..3, the family's
     * switches, the middle and the top; one rotation of the tokens. */
    const bool large = r->k * r->n > LARGE;
    const size_t rotations = ks->isa == MOE_REQ_SCALAR || large ? 1 : 2;
    for (int t = 0; t < ntok; t++) {
        out_init(&alone[t], es, n, 1);
        run(r, ks, false, 1, &tok[t], &alone[t]);
        CHECKF(out_guards_ok(&alone[t], 1, n), "%s %s: m=1 wrote outside its outputs", xs->name,
               what);
        for (size_t c = 0; c < n; c++)
            got[(size_t)t * n + c] = out_value(&alone[t], 0, c);
    }
    for (size_t m = 1; m <= mr && m <= (size_t)ntok; m++) {
        const bool edge =
            m <= 3 || m_listed(mp->edges, mp->nedges, m) || m == mr / 2 || m + 1 >= mr;
        if ((large || ks->isa == MOE_REQ_SCALAR) && !edge) continue;
        for (size_t rot = 0; rot < rotations; rot++) {
            const void *rows[MAX_TOKENS];
            int ids[MAX_TOKENS];
            for (size_t i = 0; i < m; i++) {
                ids[i] = (int)((i + m + rot * 3) % (size_t)ntok);
                rows[i] = tok[ids[i]];
            }
            outbuf o;
            out_init(&o, es, n, m);
            run(r, ks, false, m, rows, &o);
            CHECKF(out_guards_ok(&o, m, n), "%s %s: m=%zu wrote outside its outputs", xs->name,
                   what, m);
            for (size_t i = 0; i < m; i++)
                CHECKF(!memcmp(o.p + i * o.stride * es, alone[ids[i]].p, n * es),
                       "%s %s k=%zu n=%zu: token %d at position %zu of m=%zu differs from alone",
                       xs->name, what, r->k, n, ids[i], i, m);
            free(o.p);
        }
    }
    /* The same bits as the set's reference (the reference packs with its own function). Each
     * token's outputs are the same in every m (checked above), so a few tokens suffice. */
    if (xs->ref != ks) {
        for (int t = 0; t < ntok && t < 3; t++) {
            outbuf o;
            out_init(&o, es, n, 1);
            run(r, xs->ref, true, 1, &tok[t], &o);
            CHECKF(!memcmp(o.p, alone[t].p, n * es), "%s %s k=%zu n=%zu: token %d differs from %s",
                   xs->name, what, r->k, n, t, xs->ref->name);
            free(o.p);
        }
    }
    check_tiles(xs, r, tok, ntok, mp, what);
    for (int t = 0; t < ntok; t++)
        free(alone[t].p);
}

/* The tokens a case of K·N weights runs on: the set's mr + 2 (MAX_TOKENS at most), or 3 for
 * the slow scalar sets on a large case. */
static inline int set_ntokens(const xset *xs, int64_t k, int64_t n)
{
    if (xs->set->isa == MOE_REQ_SCALAR && k * n > LARGE) return 3;
    return xs->set->mr + 2 < MAX_TOKENS ? xs->set->mr + 2 : MAX_TOKENS;
}

/* Every set of the list that the CPU allows: its fields (mr, nr, name, isa, the family's format
 * and recipe), then its cases (run_set), their errors against the f32 activations pooled and the
 * pool held to bound. */
static inline void check_sets(const xset *sets, size_t nsets, const moe_cpu_info *info, int format,
                              moe_expert_recipe recipe, double bound, void (*run_set)(const xset *))
{
    const uint32_t allowed = moe_cpu_caps_mask(&info->allowed);
    for (size_t s = 0; s < nsets; s++) {
        const xset *xs = &sets[s];
        if (!set_allowed(xs, allowed)) continue;
        CHECK(xs->set->mr >= 1 && xs->set->mr <= MAX_TOKENS - 2 && xs->set->nr == NR);
        CHECK(!strcmp(xs->set->name, xs->name) && xs->set->isa == xs->isa);
        CHECK(xs->set->format == format && xs->set->recipe == recipe);
        pool_sq = pool_n = 0;
        run_set(xs);
        const double pooled = sqrt(pool_sq / pool_n);
        CHECKF(pooled <= bound, "%s: pooled error %.3g vs the f32 activations", xs->name, pooled);
        fprintf(stderr, "%s: pooled error %.3g vs the f32 activations\n", xs->name, pooled);
    }
}

/* ---- Packing at the door ---------------------------------------------------------------- */

/* A rejected pack must name what it names and leave dst alone. */
static inline void expect_reject(const moe_expert_kernels *ks, const moe_weight_src *g,
                                 const moe_weight_src *u, moe_status want, const char *needle)
{
    static unsigned char dst[1 << 16]; /* room for every shape here, should a pack succeed */
    memset(dst, 0x3C, sizeof dst);
    moe_status st = u ? ks->pack_gateup(g, u, dst) : ks->pack_down(g, dst);
    CHECK_STATUS(st, want);
    CHECKF(strstr(moe_last_error(), needle) != NULL, "message '%s' lacks '%s'", moe_last_error(),
           needle);
    bool untouched = true;
    for (size_t i = 0; i < sizeof dst; i++)
        untouched = untouched && dst[i] == 0x3C;
    CHECKF(untouched, "%s: dst written on error (%s)", ks->name, needle);
}

/* Packs a (and b: gate/up) with ks into a guarded buffer of whole tiles (*tb bytes each), then
 * unpacks it into d[0] (and d[1]) for the caller to compare with the sources. */
static inline void *pack_unpack(const moe_expert_kernels *ks, const moe_weight_src *a,
                                const moe_weight_src *b, const moe_weight_dst *d, guarded *g,
                                size_t *tb)
{
    const bool pair = b != NULL;
    *tb = pair ? ks->gateup_tile_bytes(a->cols) : ks->down_tile_bytes(a->cols);
    REQUIRE(*tb > 0 && *tb % 64 == 0);
    const size_t ntiles = (size_t)(a->rows + NR - 1) / NR;
    void *dst = guarded_alloc(g, ntiles * *tb);
    CHECK_STATUS(pair ? ks->pack_gateup(a, b, dst) : ks->pack_down(a, dst), MOE_OK);
    CHECK_STATUS(pair ? ks->unpack_gateup(dst, &d[0], &d[1]) : ks->unpack_down(dst, &d[0]), MOE_OK);
    return dst;
}

#endif
