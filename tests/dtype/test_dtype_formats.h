/* test_dtype_formats.h — independent double-precision references for the number-format tests. */
#ifndef MOE_TEST_DTYPE_FORMATS_H
#define MOE_TEST_DTYPE_FORMATS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype/dtype.h"
#include "test.h"

/*
 * Nothing here calls the conversions under test to compute an expectation: values come from
 * the textbook definition of each format (ldexp of its fields), and "nearest" is decided by
 * comparing against exact midpoints of those values in double.
 */

#define NO_CODE 0xFFFFFFFFu

static inline uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A sign / exponent / mantissa code with an implicit 1 and subnormals, read from its fields:
 * (1 + m / 2^M) × 2^(e - B), or (m / 2^M) × 2^(1 - B) when e == 0. */
static inline double ref_fields(unsigned code, int ebits, int mbits, int bias)
{
    unsigned s = (code >> (ebits + mbits)) & 1u;
    unsigned e = (code >> mbits) & ((1u << ebits) - 1u);
    unsigned m = code & ((1u << mbits) - 1u);
    double frac = ldexp((double)m, -mbits);
    double v = e == 0 ? ldexp(frac, 1 - bias) : ldexp(1.0 + frac, (int)e - bias);
    return s ? -v : v;
}

/* IEEE-style top exponent (bf16, f16, E5M2): mantissa 0 is Inf, anything else NaN. */
static inline double ref_ieee(unsigned code, int ebits, int mbits, int bias)
{
    unsigned s = (code >> (ebits + mbits)) & 1u;
    unsigned e = (code >> mbits) & ((1u << ebits) - 1u);
    unsigned m = code & ((1u << mbits) - 1u);
    if (e == (1u << ebits) - 1u) {
        double special = m == 0 ? INFINITY : NAN;
        return s ? -special : special;
    }
    return ref_fields(code, ebits, mbits, bias);
}

static inline double ref_bf16(unsigned code) { return ref_ieee(code, 8, 7, 127); }
static inline double ref_f16(unsigned code) { return ref_ieee(code, 5, 10, 15); }
static inline double ref_e5m2(unsigned code) { return ref_ieee(code, 5, 2, 15); }

static inline double ref_e4m3(unsigned code)
{
    if ((code & 0x7Fu) == 0x7Fu) return (code & 0x80u) ? -NAN : NAN; /* S.1111.111 only */
    return ref_fields(code, 4, 3, 7);
}

static inline double ref_e2m1(unsigned code) { return ref_fields(code & 0xFu, 2, 1, 1); }

static inline double ref_e8m0(unsigned code)
{
    return code == 0xFFu ? NAN : ldexp(1.0, (int)code - 127);
}

static inline double ref_int4(unsigned code)
{
    code &= 0xFu;
    return code < 8 ? (double)code : (double)code - 16.0;
}

static inline double ref_uint4(unsigned code) { return (double)(code & 0xFu) - 8.0; }

/* Uniform wrappers around the functions under test. */
static inline float dec_bf16(unsigned c) { return moe_bf16_to_f32((uint16_t)c); }
static inline float dec_f16(unsigned c) { return moe_f16_to_f32((uint16_t)c); }
static inline float dec_e4m3(unsigned c) { return moe_e4m3_to_f32((uint8_t)c); }
static inline float dec_e5m2(unsigned c) { return moe_e5m2_to_f32((uint8_t)c); }
static inline float dec_e2m1(unsigned c) { return moe_e2m1_to_f32((uint8_t)c); }
static inline float dec_e8m0(unsigned c) { return moe_e8m0_to_f32((uint8_t)c); }
static inline float dec_int4(unsigned c) { return (float)moe_int4_to_i8((uint8_t)c); }
static inline float dec_uint4(unsigned c) { return (float)moe_uint4_to_i8((uint8_t)c); }

static inline unsigned enc_bf16(float x) { return moe_f32_to_bf16(x); }
static inline unsigned enc_f16(float x) { return moe_f32_to_f16(x); }
static inline unsigned enc_e4m3(float x) { return moe_f32_to_e4m3(x); }
static inline unsigned enc_e5m2(float x) { return moe_f32_to_e5m2(x); }
static inline unsigned enc_e2m1(float x) { return moe_f32_to_e2m1(x); }
static inline unsigned enc_e8m0(float x) { return moe_f32_to_e8m0(x); }
static inline unsigned enc_int4(float x) { return moe_f32_to_int4(x); }
static inline unsigned enc_uint4(float x) { return moe_f32_to_uint4(x); }

typedef struct fmt_desc {
    const char *name;
    unsigned ncodes;
    double (*ref)(unsigned code); /* NaN for NaN codes, ±Inf for Inf codes */
    float (*decode)(unsigned code);
    unsigned (*encode)(float x);
    /* Overflow: 1 = IEEE (rounds to ±Inf from the midpoint between max and next_up on),
     * 0 = saturate to the largest / smallest finite value. */
    int has_inf;
    double next_up;    /* the value the code after the largest finite one would have */
    int mbits;         /* for the rint reference: mantissa bits, smallest normal exponent */
    int emin;          /* (only meaningful for the sign/exponent/mantissa formats) */
    int unsigned_only; /* E8M0: a value below zero is NaN */
    unsigned nan_code; /* NaN input -> this code; NO_CODE: a NaN with the input's sign */
} fmt_desc;

static const fmt_desc FMT_BF16 = {"bf16",  65536, ref_bf16, dec_bf16, enc_bf16, 1,
                                  0x1p128, 7,     -126,     0,        NO_CODE};
static const fmt_desc FMT_F16 = {"f16",   65536, ref_f16, dec_f16, enc_f16, 1,
                                 65536.0, 10,    -14,     0,       NO_CODE};
static const fmt_desc FMT_E4M3 = {"e4m3", 256, ref_e4m3, dec_e4m3, enc_e4m3, 0,
                                  480.0,  3,   -6,       0,        NO_CODE};
static const fmt_desc FMT_E5M2 = {"e5m2",  256, ref_e5m2, dec_e5m2, enc_e5m2, 1,
                                  65536.0, 2,   -14,      0,        NO_CODE};
static const fmt_desc FMT_E2M1 = {"e2m1", 16, ref_e2m1, dec_e2m1, enc_e2m1, 0, 8.0, 1, 0, 0, 0x0};
static const fmt_desc FMT_E8M0 = {"e8m0",  256, ref_e8m0, dec_e8m0, enc_e8m0, 0,
                                  0x1p128, 0,   -127,     1,        0xFF};
static const fmt_desc FMT_INT4 = {"int4", 16, ref_int4, dec_int4, enc_int4, 0, 8.0, 0, 0, 0, 0x0};
static const fmt_desc FMT_UINT4 = {"uint4", 16, ref_uint4, dec_uint4, enc_uint4, 0,
                                   8.0,     0,  0,         0,         0x8};

static const fmt_desc *const ALL_FORMATS[] = {&FMT_BF16, &FMT_F16,  &FMT_E4M3, &FMT_E5M2,
                                              &FMT_E2M1, &FMT_E8M0, &FMT_INT4, &FMT_UINT4};
#define N_FORMATS (sizeof ALL_FORMATS / sizeof ALL_FORMATS[0])

/* The finite values of a format, sorted, each once (+0 stands for both zeros), with codes. */
typedef struct fmt_table {
    const fmt_desc *fmt;
    unsigned n;
    double *v;
    unsigned *code;
    unsigned neg_zero; /* the -0 code, or NO_CODE */
    unsigned pos_inf, neg_inf;
} fmt_table;

static const double *sort_values_;
static inline int cmp_by_value(const void *a, const void *b)
{
    double x = sort_values_[*(const unsigned *)a], y = sort_values_[*(const unsigned *)b];
    return (x > y) - (x < y);
}

static inline fmt_table table_build(const fmt_desc *fmt)
{
    fmt_table t = {fmt, 0, NULL, NULL, NO_CODE, NO_CODE, NO_CODE};
    double *all = malloc(fmt->ncodes * sizeof *all);
    unsigned *idx = malloc(fmt->ncodes * sizeof *idx);
    t.v = malloc(fmt->ncodes * sizeof *t.v);
    t.code = malloc(fmt->ncodes * sizeof *t.code);
    REQUIRE(all && idx && t.v && t.code);
    unsigned m = 0;
    for (unsigned c = 0; c < fmt->ncodes; c++) {
        double v = all[c] = fmt->ref(c);
        if (isnan(v)) continue;
        if (isinf(v)) {
            *(v > 0 ? &t.pos_inf : &t.neg_inf) = c;
            continue;
        }
        if (v == 0 && signbit(v)) {
            t.neg_zero = c;
            continue;
        }
        idx[m++] = c;
    }
    sort_values_ = all;
    qsort(idx, m, sizeof *idx, cmp_by_value);
    for (unsigned i = 0; i < m; i++) {
        t.v[i] = all[idx[i]];
        t.code[i] = idx[i];
        if (i > 0) REQUIRE(t.v[i] > t.v[i - 1]);
    }
    t.n = m;
    free(all);
    free(idx);
    return t;
}

static inline void table_free(fmt_table *t)
{
    free(t->v);
    free(t->code);
    t->v = NULL;
    t->code = NULL;
}

/* The code of table entry i for an input with sign `neg` (zero keeps the input's sign). */
static inline unsigned table_code(const fmt_table *t, unsigned i, int neg)
{
    if (t->v[i] == 0 && neg && t->neg_zero != NO_CODE) return t->neg_zero;
    return t->code[i];
}

/* The expected code for a non-NaN x: the nearest finite value by exact comparison with the
 * midpoints, ties to the even code, overflow to Inf or saturation as the format says. */
static inline unsigned table_nearest(const fmt_table *t, double x)
{
    const fmt_desc *f = t->fmt;
    int neg = signbit(x) != 0;
    if (f->unsigned_only && x < 0) return f->nan_code;
    double lo = t->v[0], hi = t->v[t->n - 1];
    if (x > hi) {
        if (f->has_inf && x >= (hi + f->next_up) / 2) return t->pos_inf;
        return t->code[t->n - 1];
    }
    if (x < lo) {
        if (f->has_inf && x <= (lo - f->next_up) / 2) return t->neg_inf;
        return t->code[0];
    }
    unsigned a = 0, b = t->n - 1; /* invariant: v[a] <= x <= v[b] */
    while (b - a > 1) {
        unsigned mid = a + (b - a) / 2;
        if (t->v[mid] <= x)
            a = mid;
        else
            b = mid;
    }
    if (t->v[a] == x) return table_code(t, a, neg);
    if (t->v[b] == x) return table_code(t, b, neg);
    double mid = (t->v[a] + t->v[b]) / 2; /* exact: neighbours of a narrow format */
    if (x < mid) return table_code(t, a, neg);
    if (x > mid) return table_code(t, b, neg);
    return table_code(t, (t->code[a] & 1u) == 0 ? a : b, neg);
}

/* The expected value for a non-NaN x in a sign/exponent/mantissa format, by scaling to the
 * quantum of x's binade and rounding with rint (the default rounding mode is to nearest,
 * ties to even). */
static inline double rint_nearest(const fmt_desc *f, const fmt_table *t, double x)
{
    double max = t->v[t->n - 1];
    double ax = fabs(x);
    if (isinf(ax)) return f->has_inf ? x : copysign(max, x);
    if (ax == 0) return x;
    int e;
    (void)frexp(ax, &e); /* ax in [2^(e-1), 2^e) */
    e -= 1;
    if (e < f->emin) e = f->emin;
    double quantum = ldexp(1.0, e - f->mbits);
    double r = rint(ax / quantum) * quantum;
    if (r > max) r = f->has_inf ? INFINITY : max;
    return copysign(r, x);
}

/* Whether code is what a NaN input with sign `neg` must become. */
static inline int nan_result_ok(const fmt_desc *f, unsigned code, int neg)
{
    if (f->nan_code != NO_CODE) return code == f->nan_code;
    double v = f->ref(code);
    return isnan(v) && (signbit(v) != 0) == neg;
}

/* splitmix64: a fixed, portable sequence, so every run checks the same inputs. */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
