/* test_dtype_random.c — f32 -> format on millions of f32 patterns vs an independent nearest. */
#include <stdio.h>

#include "test_dtype_formats.h"

/*
 * The reference for the 8- and 4-bit formats searches the sorted table of decoded values in
 * double (table_nearest); for bf16 and f16 it scales to the quantum of the input's binade and
 * rounds with rint (rint_nearest). Neither shares code with the library.
 */

#define RANDOM_UNIFORM (1u << 20)  /* all 32 bits random: mostly far out of range */
#define RANDOM_IN_RANGE (1u << 20) /* exponent within the format's range, and a bit around it */
#define MAX_REPORTS 8

typedef struct tally {
    long checked, wrong;
} tally;

static void check_one(const fmt_table *t, uint32_t u, tally *tl)
{
    const fmt_desc *f = t->fmt;
    float x = float_of(u);
    unsigned code = f->encode(x);
    int ok;
    if (isnan(x)) {
        ok = nan_result_ok(f, code, (u >> 31) != 0);
    } else if (f->ncodes == 65536) {
        double want = rint_nearest(f, t, x), got = f->ref(code);
        ok = got == want && (signbit(got) != 0) == (signbit(want) != 0);
    } else {
        ok = code == table_nearest(t, x);
    }
    tl->checked++;
    if (ok) return;
    if (tl->wrong++ < MAX_REPORTS)
        fprintf(stderr, "%s: f32 0x%08X (%a) -> code 0x%X\n", f->name, u, (double)x, code);
}

/* Every sign and exponent and the top 7 mantissa bits, with the low 16 bits set to the
 * patterns that sit on or next to bf16 rounding boundaries. */
static void test_top16(const fmt_table *t, tally *tl)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (size_t j = 0; j < sizeof lows / sizeof lows[0]; j++)
            check_one(t, hi << 16 | lows[j], tl);
}

/* f32 bits with a random sign and mantissa and an exponent from [lo_e, hi_e] (unbiased;
 * clamped to the f32 range, where exponent field 0 gives an f32 subnormal). A quarter of
 * them keep only 12 mantissa bits, which lands many on or near midpoints. */
static uint32_t random_in_range(uint64_t *rng, int lo_e, int hi_e)
{
    uint64_t r = rng_next(rng);
    int e = lo_e + (int)((r >> 32) % (uint64_t)(hi_e - lo_e + 1)) + 127;
    if (e < 0) e = 0;
    if (e > 254) e = 254;
    uint32_t man = (uint32_t)r & 0x7FFFFFu;
    if (((r >> 24) & 3u) == 0) man &= 0x7FF800u;
    return ((uint32_t)(r >> 63) << 31) | ((uint32_t)e << 23) | man;
}

static void test_random(const fmt_table *t, tally *tl)
{
    uint64_t rng = 0x6D6F652D64747970ull; /* fixed: the same inputs on every run */
    for (uint32_t i = 0; i < RANDOM_UNIFORM; i++)
        check_one(t, (uint32_t)rng_next(&rng), tl);

    double smallest = 0, max = t->v[t->n - 1];
    for (unsigned i = 0; i < t->n; i++)
        if (t->v[i] > 0) {
            smallest = t->v[i];
            break;
        }
    int e_small, e_max;
    (void)frexp(smallest, &e_small);
    (void)frexp(max, &e_max);
    for (uint32_t i = 0; i < RANDOM_IN_RANGE; i++)
        check_one(t, random_in_range(&rng, e_small - 4, e_max + 2), tl);
}

int main(void)
{
    for (size_t i = 0; i < N_FORMATS; i++) {
        fmt_table t = table_build(ALL_FORMATS[i]);
        tally tl = {0, 0};
        test_top16(&t, &tl);
        test_random(&t, &tl);
        fprintf(stderr, "%s: %ld inputs checked\n", ALL_FORMATS[i]->name, tl.checked);
        CHECKF(tl.wrong == 0, "%s: %ld of %ld inputs rounded wrongly", ALL_FORMATS[i]->name,
               tl.wrong, tl.checked);
        table_free(&t);
    }
    return TEST_END();
}
