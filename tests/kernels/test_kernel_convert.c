/* test_kernel_convert.c — every conversion kernel this CPU may run, against the reference and an
 * independent double-precision formula, bit for bit, at edge sizes, odd alignments and guards. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"
#include "kernels/cvt.h"
#include "guarded.h"
#include "kernel_table.h"
#include "xorshift.h"

/* ---- The kernels, generated from the enumerators ------------------------------------- */

static const test_kernel bf16_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.cvt_bf16_f32 = name}},
#include "kernels/cvt_bf16_f32.inc"
#undef MOE_KERNEL
};
static const test_kernel f16_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.cvt_f16_f32 = name}},
#include "kernels/cvt_f16_f32.inc"
#undef MOE_KERNEL
};
static const test_kernel e4m3_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.cvt_e4m3_f32 = name}},
#include "kernels/cvt_e4m3_f32.inc"
#undef MOE_KERNEL
};
static const test_kernel mxfp4_kernels[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, {.cvt_mxfp4_f32 = name}},
#include "kernels/cvt_mxfp4_f32.inc"
#undef MOE_KERNEL
};

/* ---- Independent expectations: the value from its fields with ldexp, in double ---------- */

#define QNAN 0x7FC00000u

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Every value these formats decode to is an f32 exactly, or (MXFP4 with a huge scale) at
 * least 2^128, which IEEE rounding takes to Inf. Anything else would be a test bug. */
static uint32_t exact_f32(double v)
{
    if (fabs(v) >= 0x1p128) return f32_bits(v < 0 ? -INFINITY : INFINITY);
    float f = (float)v;
    REQUIRE((double)f == v);
    return f32_bits(f);
}

/* A sign, a biased exponent field and a mantissa field of `mbits` bits, IEEE-style. */
static double minifloat(unsigned sign, unsigned e, unsigned m, int mbits, int bias)
{
    double mag = e == 0 ? ldexp((double)m, 1 - bias - mbits)
                        : ldexp(1.0 + ldexp((double)m, -mbits), (int)e - bias);
    return sign ? -mag : mag;
}

static uint32_t expect_bf16(uint32_t c)
{
    unsigned s = c >> 15, e = (c >> 7) & 0xFF, m = c & 0x7F;
    if (e == 0xFF && m != 0) return c << 16; /* NaN: every bit kept (cvt.h) */
    if (e == 0xFF) return s ? f32_bits(-INFINITY) : f32_bits(INFINITY);
    return exact_f32(minifloat(s, e, m, 7, 127));
}

static uint32_t expect_f16(uint32_t c)
{
    unsigned s = c >> 15, e = (c >> 10) & 0x1F, m = c & 0x3FF;
    if (e == 0x1F && m != 0) return ((uint32_t)s << 31) | QNAN | ((uint32_t)m << 13);
    if (e == 0x1F) return s ? f32_bits(-INFINITY) : f32_bits(INFINITY);
    return exact_f32(minifloat(s, e, m, 10, 15));
}

static uint32_t expect_e4m3(uint32_t c)
{
    unsigned s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
    if (e == 0xF && m == 7) return ((uint32_t)s << 31) | QNAN; /* no Inf in E4M3 "fn" */
    return exact_f32(minifloat(s, e, m, 3, 7));
}

/* One E2M1 code (bias 1, one mantissa bit) times 2^(scale-127); a 0xFF scale is NaN. */
static uint32_t expect_mxfp4(unsigned code, unsigned scale)
{
    if (scale == 0xFF) return QNAN;
    double v = minifloat(code >> 3, (code >> 1) & 3, code & 1, 1, 1);
    return exact_f32(ldexp(v, (int)scale - 127));
}

/* ---- Outputs between guard zones (inputs end at an inaccessible page: guarded.h) --------- */

#define GUARD 64             /* floats of sentinel before and after every output */
#define SENTINEL 0x7FBADBADu /* a signalling-NaN pattern no kernel produces */

typedef struct outbuf {
    uint32_t *base; /* 64-byte aligned */
    size_t cap;     /* floats */
} outbuf;

static void outbuf_init(outbuf *o, size_t max_n)
{
    o->cap = max_n + 2 * GUARD + 8;
    void *p = NULL;
    REQUIRE(posix_memalign(&p, 64, o->cap * sizeof(float)) == 0);
    o->base = p;
}

static float *outbuf_prepare(outbuf *o, size_t n, size_t offset)
{
    for (size_t i = 0; i < GUARD + offset + n + GUARD; i++)
        o->base[i] = SENTINEL;
    return (float *)(o->base + GUARD + offset);
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

/* ---- Comparing ------------------------------------------------------------------------ */

/* Checks y against the independent bits and the reference's output; prints the first few
 * mismatches as a case string to paste into a debugger session. */
static void compare(const char *kernel, const char *what, size_t n, const float *y,
                    const uint32_t *want, const float *ref)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t got = f32_bits(y[i]);
        uint32_t r = ref ? f32_bits(ref[i]) : want[i];
        if (got == want[i] && got == r) continue;
        if (bad++ < 4)
            fprintf(stderr, "  %s %s: element %zu: got 0x%08x, formula 0x%08x, reference 0x%08x\n",
                    kernel, what, i, got, want[i], r);
    }
    test_checks_++;
    if (bad) {
        test_failures_++;
        fprintf(stderr, "%s %s: %zu of %zu elements differ\n", kernel, what, bad, n);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng_next(void) { return xorshift64(&rng_state); }

static const size_t edge_sizes[] = {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000};
#define MAX_EDGE 1000

/* ---- Row families: bf16, f16, E4M3 ------------------------------------------------------ */

typedef struct row_family {
    const char *what;
    moe_kernel_family family;
    size_t code_size; /* bytes per code */
    const test_kernel *kernels;
    size_t nkernels;
    uint32_t (*expect)(uint32_t code);
} row_family;

static void call_row(const row_family *f, moe_kernel_fn fn, size_t n, const void *x, float *y)
{
    switch (f->family) {
    case MOE_KERNEL_FAMILY_CVT_BF16_F32: fn.cvt_bf16_f32(n, x, y); return;
    case MOE_KERNEL_FAMILY_CVT_F16_F32: fn.cvt_f16_f32(n, x, y); return;
    case MOE_KERNEL_FAMILY_CVT_E4M3_F32: fn.cvt_e4m3_f32(n, x, y); return;
    default: REQUIRE(!"not a row family");
    }
}

static uint32_t code_at(const row_family *f, const uint8_t *x, size_t i)
{
    if (f->code_size == 1) return x[i];
    uint16_t c;
    memcpy(&c, x + 2 * i, 2);
    return c;
}

static void put_code(const row_family *f, uint8_t *x, size_t i, uint32_t c)
{
    if (f->code_size == 1) {
        x[i] = (uint8_t)c;
    } else {
        uint16_t h = (uint16_t)c;
        memcpy(x + 2 * i, &h, 2);
    }
}

typedef struct scratch {
    guarded in, scales;
    outbuf out;
    float *ref;
    uint32_t *want;
    uint8_t *codes; /* the case's input, copied into place for each placement */
    uint8_t *scale_codes;
} scratch;

/* Runs kernel k on `codes` (n codes) at every input placement and output offset. */
static void run_row_case(const row_family *f, const test_kernel *k, scratch *s, size_t n,
                         const char *label, bool all_placements)
{
    size_t bytes = n * f->code_size;
    for (size_t i = 0; i < n; i++)
        s->want[i] = f->expect(code_at(f, s->codes, i));
    call_row(f, f->kernels[0].fn, n, s->codes, s->ref);
    for (int place = 0; place < NPLACES; place++) {
        if (!all_placements && place != PLACE_END) continue;
        uint8_t *x = guarded_place(&s->in, bytes, f->code_size, place);
        memcpy(x, s->codes, bytes);
        for (size_t off = 0; off < 4; off++) {
            if (!all_placements && off != 0) continue;
            float *y = outbuf_prepare(&s->out, n, off);
            call_row(f, k->fn, n, x, y);
            char what[96];
            snprintf(what, sizeof what, "%s n=%zu in+%d out+%zu", label, n, place, off);
            compare(k->name, what, n, y, s->want, s->ref);
            size_t dmg = outbuf_damage(&s->out, n, off);
            CHECKF(dmg == 0, "%s %s: %zu guard floats overwritten", k->name, what, dmg);
        }
    }
}

static void test_row_kernel(const row_family *f, const test_kernel *k, scratch *s)
{
    /* Every code once, in order, then reversed so each code meets another lane and tail. */
    size_t ncodes = (size_t)1 << (8 * f->code_size);
    for (size_t i = 0; i < ncodes; i++)
        put_code(f, s->codes, i, (uint32_t)i);
    run_row_case(f, k, s, ncodes, "all codes", false);
    for (size_t i = 0; i < ncodes; i++)
        put_code(f, s->codes, i, (uint32_t)(ncodes - 1 - i));
    run_row_case(f, k, s, ncodes, "all codes reversed", false);

    for (size_t e = 0; e < COUNT(edge_sizes); e++) {
        size_t n = edge_sizes[e];
        for (size_t i = 0; i < n; i++)
            put_code(f, s->codes, i, (uint32_t)rng_next());
        run_row_case(f, k, s, n, "random", true);
    }
}

/* ---- MXFP4 ------------------------------------------------------------------------------ */

static void run_mxfp4_case(const test_kernel *k, scratch *s, size_t nblocks, const char *label,
                           bool all_placements)
{
    size_t n = 32 * nblocks;
    for (size_t b = 0; b < nblocks; b++) {
        for (size_t i = 0; i < 16; i++) {
            uint8_t q = s->codes[16 * b + i];
            s->want[32 * b + 2 * i] = expect_mxfp4(q & 0xF, s->scale_codes[b]);
            s->want[32 * b + 2 * i + 1] = expect_mxfp4(q >> 4, s->scale_codes[b]);
        }
    }
    mxfp4_kernels[0].fn.cvt_mxfp4_f32(nblocks, s->codes, s->scale_codes, s->ref);
    for (int place = 0; place < NPLACES; place++) {
        if (!all_placements && place != PLACE_END) continue;
        uint8_t *q = guarded_place(&s->in, 16 * nblocks, 1, place);
        uint8_t *sc = guarded_place(&s->scales, nblocks, 1, place);
        memcpy(q, s->codes, 16 * nblocks);
        memcpy(sc, s->scale_codes, nblocks);
        for (size_t off = 0; off < 4; off++) {
            if (!all_placements && off != 0) continue;
            float *y = outbuf_prepare(&s->out, n, off);
            k->fn.cvt_mxfp4_f32(nblocks, q, sc, y);
            char what[96];
            snprintf(what, sizeof what, "%s nblocks=%zu in+%d out+%zu", label, nblocks, place, off);
            compare(k->name, what, n, y, s->want, s->ref);
            size_t dmg = outbuf_damage(&s->out, n, off);
            CHECKF(dmg == 0, "%s %s: %zu guard floats overwritten", k->name, what, dmg);
        }
    }
}

static void test_mxfp4_kernel(const test_kernel *k, scratch *s)
{
    /* 4096 blocks: block 16*scale + h has that scale and bytes h<<4 | i (i = 0..15), so every
     * scale (0 and 0xFF included) meets every E2M1 code in both nibble positions. */
    for (size_t scale = 0; scale < 256; scale++) {
        for (size_t h = 0; h < 16; h++) {
            size_t b = 16 * scale + h;
            s->scale_codes[b] = (uint8_t)scale;
            for (size_t i = 0; i < 16; i++)
                s->codes[16 * b + i] = (uint8_t)(h << 4 | i);
        }
    }
    run_mxfp4_case(k, s, 4096, "all scales x codes", false);

    for (size_t e = 0; e < COUNT(edge_sizes); e++) {
        size_t nb = edge_sizes[e];
        for (size_t i = 0; i < 16 * nb; i++)
            s->codes[i] = (uint8_t)rng_next();
        /* Scales around 2^0 mostly, with the extremes and NaN mixed in. */
        static const uint8_t special[] = {0, 1, 2, 125, 126, 127, 128, 253, 254, 255};
        for (size_t b = 0; b < nb; b++) {
            uint64_t r = rng_next();
            s->scale_codes[b] =
                (r & 3) == 0 ? special[(r >> 8) % sizeof special] : (uint8_t)(110 + (r >> 16) % 30);
        }
        run_mxfp4_case(k, s, nb, "random", true);
    }
}

/* ---- Driver ------------------------------------------------------------------------------- */

/* Runs only what the allowed caps (this CPU, this build, MOE_ISA) permit; says what it skips. */
static bool runnable(const test_kernel *k, const moe_cpu_info *info)
{
    uint32_t missing = k->isa & ~moe_cpu_caps_mask(&info->allowed);
    if (missing == 0) {
        fprintf(stderr, "test %s\n", k->name);
        return true;
    }
    char need[96];
    moe_cpu_mask_format(missing, need, sizeof need);
    fprintf(stderr, "skip %s: needs %s, not allowed here (MOE_ISA cap %s)\n", k->name, need,
            moe_isa_level_name(info->cap));
    return false;
}

int main(void)
{
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, "moe_cpu_query: %s\n", moe_last_error());
        return 1;
    }

    scratch s;
    size_t max_codes = 4096 * 16; /* the largest input: MXFP4 4096 blocks, or 65536 bf16 */
    size_t max_out = 4096 * 32;
    guarded_init(&s.in, 2 * 65536);
    guarded_init(&s.scales, 4096);
    outbuf_init(&s.out, max_out);
    s.ref = malloc(max_out * sizeof(float));
    s.want = malloc(max_out * sizeof(uint32_t));
    s.codes = malloc(2 * 65536 > max_codes ? 2 * 65536 : max_codes);
    s.scale_codes = malloc(4096);
    REQUIRE(s.ref && s.want && s.codes && s.scale_codes);

    const row_family rows[] = {
        {"bf16", MOE_KERNEL_FAMILY_CVT_BF16_F32, 2, bf16_kernels, COUNT(bf16_kernels), expect_bf16},
        {"f16", MOE_KERNEL_FAMILY_CVT_F16_F32, 2, f16_kernels, COUNT(f16_kernels), expect_f16},
        {"e4m3", MOE_KERNEL_FAMILY_CVT_E4M3_F32, 1, e4m3_kernels, COUNT(e4m3_kernels), expect_e4m3},
    };
    for (size_t r = 0; r < COUNT(rows); r++) {
        check_registered(rows[r].family, rows[r].kernels, rows[r].nkernels);
        for (size_t i = 0; i < rows[r].nkernels; i++)
            if (runnable(&rows[r].kernels[i], &info))
                test_row_kernel(&rows[r], &rows[r].kernels[i], &s);
    }
    check_registered(MOE_KERNEL_FAMILY_CVT_MXFP4_F32, mxfp4_kernels, COUNT(mxfp4_kernels));
    for (size_t i = 0; i < COUNT(mxfp4_kernels); i++)
        if (runnable(&mxfp4_kernels[i], &info)) test_mxfp4_kernel(&mxfp4_kernels[i], &s);

    guarded_free(&s.in);
    guarded_free(&s.scales);
    free(s.out.base);
    free(s.ref);
    free(s.want);
    free(s.codes);
    free(s.scale_codes);
    return TEST_END();
}
