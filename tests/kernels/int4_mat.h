/* int4_mat.h — INT4 expert kernel tests (q8 and tile recipes): one projection in the checkpoint
 * layout with its exact values, float64 dot products, and packing with the unpack round trip. */
#ifndef MOE_TEST_INT4_MAT_H
#define MOE_TEST_INT4_MAT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "expert_check.h"
#include "guarded.h"

/* ---- One projection in the checkpoint layout ------------------------------------------- */

typedef struct mat {
    int64_t rows, cols, group;
    uint8_t *codes;   /* [rows, cols/2]: the int32 words' bytes, element 2i in the low nibble */
    uint16_t *scales; /* [rows, cols/group] bf16 */
    uint16_t *bias16; /* bf16 bias codes, or NULL */
    double *wd, *bd;  /* every element's and bias's exact value */
} mat;

/* Scales as a symmetric quantiser writes them (amax / 7.5 of N(0, 0.02) weights, ~2^-7), some
 * negative (the format allows any finite scale), one in 16 zero (an all-zero group). */
static uint16_t random_scale(void)
{
    const unsigned r = (unsigned)(rnd() % 16);
    if (r == 0) return 0;
    const float v = (float)(0.004 + 0.01 * unit());
    return to_bf16(r == 1 ? -v : v);
}

static void mat_init(mat *m, int64_t rows, int64_t cols, int64_t group, bool bias)
{
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->cols = cols;
    m->group = group;
    const size_t nc = (size_t)(rows * cols / 2), ns = (size_t)(rows * (cols / group));
    m->codes = malloc(nc);
    m->scales = malloc(ns * 2);
    m->wd = malloc((size_t)(rows * cols) * sizeof(double));
    m->bd = calloc((size_t)rows, sizeof(double));
    REQUIRE(m->codes && m->scales && m->wd && m->bd);
    for (size_t i = 0; i < nc; i++)
        m->codes[i] = (uint8_t)rnd();
    for (size_t i = 0; i < ns; i++)
        m->scales[i] = random_scale();
    if (bias) m->bias16 = malloc((size_t)rows * 2);
    for (int64_t r = 0; r < rows; r++) {
        if (m->bias16)
            m->bias16[r] = to_bf16((float)(0.5 * gauss())), m->bd[r] = dec_bf16(m->bias16[r]);
        for (int64_t c = 0; c < cols; c++) {
            const uint8_t byte = m->codes[(size_t)(r * cols + c) / 2];
            const int u = c % 2 ? byte >> 4 : byte & 15;
            m->wd[r * cols + c] =
                (u - 8) * dec_bf16(m->scales[(size_t)(r * (cols / group) + c / group)]);
        }
    }
}

static void mat_free(mat *m)
{
    free(m->codes);
    free(m->scales);
    free(m->bias16);
    free(m->wd);
    free(m->bd);
}

static moe_weight_src mat_src(const mat *m)
{
    moe_weight_src s = {
        .data = m->codes,
        .dtype = MOE_DTYPE_I32,
        .rows = m->rows,
        .cols = m->cols,
        .row_stride = m->cols / 2,
        .col_stride = 1,
        .scale = m->scales,
        .scale_dtype = MOE_DTYPE_BF16,
        .block_rows = 1,
        .block_cols = (int)m->group,
        .scale_stride = m->cols / m->group,
        .bias = m->bias16,
        .bias_dtype = m->bias16 ? MOE_DTYPE_BF16 : MOE_DTYPE_INVALID,
        .bias_stride = 1,
    };
    return s;
}

static inline double dot_d(const mat *m, int64_t r, const double *x)
{
    return dot_exact(m->wd + r * m->cols, x, m->cols) + m->bd[r];
}

static inline double dot_f(const mat *m, int64_t r, const float *x)
{
    return dot_exact_f(m->wd + r * m->cols, x, m->cols) + m->bd[r];
}

/* ---- Packing, round trip ---------------------------------------------------------------- */

static void *pack_checked(const moe_expert_kernels *ks, const mat *a, const mat *b, guarded *g,
                          size_t *tb)
{
    const bool pair = b != NULL;
    const mat *src[2] = {a, b};
    moe_weight_dst d[2];
    for (int p = 0; p < (pair ? 2 : 1); p++) {
        const mat *m = src[p];
        d[p] = (moe_weight_dst){
            .data = malloc((size_t)(m->rows * m->cols / 2)),
            .dtype = MOE_DTYPE_I32,
            .rows = m->rows,
            .cols = m->cols,
            .scale = malloc((size_t)(m->rows * (m->cols / m->group)) * 2),
            .scale_dtype = MOE_DTYPE_BF16,
            .block_rows = 1,
            .block_cols = (int)m->group,
            .bias = m->bias16 ? malloc((size_t)m->rows * 2) : NULL,
            .bias_dtype = m->bias16 ? MOE_DTYPE_BF16 : MOE_DTYPE_INVALID,
        };
        REQUIRE(d[p].data && d[p].scale);
    }
    moe_weight_src sa = mat_src(a), sb = pair ? mat_src(b) : sa;
    void *dst = pack_unpack(ks, &sa, pair ? &sb : NULL, d, g, tb);
    for (int p = 0; p < (pair ? 2 : 1); p++) {
        const mat *m = src[p];
        CHECKF(!memcmp(d[p].data, m->codes, (size_t)(m->rows * m->cols / 2)),
               "%s: unpacked codes differ (%lld x %lld)", ks->name, (long long)m->rows,
               (long long)m->cols);
        CHECKF(!memcmp(d[p].scale, m->scales, (size_t)(m->rows * (m->cols / m->group)) * 2),
               "%s: unpacked scales differ (group %lld)", ks->name, (long long)m->group);
        if (m->bias16) CHECK(!memcmp(d[p].bias, m->bias16, (size_t)m->rows * 2));
        free(d[p].data);
        free(d[p].scale);
        free(d[p].bias);
    }
    return dst;
}

#endif
