/* expert_pack.c — packing (with validation) and unpacking of the expert tiles, all layouts. */
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_src_check.h"

/*
 * Portable C shared by every kernel set that reads a layout: the layout belongs to the format
 * and recipe, not to the ISA (kernels/ref/expert_layout.h). Packing checks everything first
 * and writes after, so a rejected source leaves dst untouched; messages name the projection
 * ("gate", "up", "down"), and the engine prepends the tensor. Tiles whose rows are
 * contiguous (col_stride 1, all 16 rows inside the matrix) are read as 16 or 32 plain
 * streams; the rest (transposed sources such as gpt-oss bf16, edge tiles, the K padding) go
 * one element at a time through the strides.
 */

/* The layouts: bf16 pairs, then FP8 in each code order: FMT_FP8 + MOE_XL_FP8_<order>, then
 * f32 pairs, then tile pairs (kernels/ref/expert_layout.h). */
#define FMT_BF16 0
#define FMT_FP8 1
#define FMT_FP8P (FMT_FP8 + MOE_XL_FP8_PAIRS)
#define FMT_FP8G (FMT_FP8 + MOE_XL_FP8_GROUPS)
#define FMT_F32 4
#define FMT_TILE 5
/* The layouts of bf16 codes, in 64-byte pair lines. */
#define PAIRS16(fmt) ((fmt) == FMT_BF16 || (fmt) == FMT_TILE)
/* The layouts without scales, whose weights are plain floats. */
#define PLAIN(fmt) (PAIRS16(fmt) || (fmt) == FMT_F32)
#define NR MOE_XL_NR

/* The largest scale a packed FP8 tile carries: scale · 2^8 must stay finite in f32. */
#define MAX_SCALE 0x1p120f

static const char *const proj_names[2][2] = {{"down", "down"}, {"gate", "up"}};

/* ---- Tile sizes ---------------------------------------------------------------------- */

static size_t tile_bytes(int fmt, int64_t k, int np)
{
    if (k < 1 || k > MOE_EXPERT_MAX_K) return 0;
    const size_t kpad = (size_t)moe_xl_kpad(k);
    if (fmt == FMT_BF16) return moe_xl_bf16_weights(np) + kpad / 2 * moe_xl_bf16_pair_bytes(np);
    if (fmt == FMT_TILE)
        return moe_xl_bf16_weights(np) + moe_xl_tile_pairs(k) * moe_xl_bf16_pair_bytes(np);
    if (fmt == FMT_F32) return moe_xl_bf16_weights(np) + kpad / 2 * (size_t)np * MOE_XL_F32_LINE;
    const size_t codes = kpad * moe_xl_fp8_step_bytes(np);
    return moe_xl_fp8_codes(k, np) + ((codes + 63) & ~(size_t)63);
}

size_t moe_xl_bf16_gateup_bytes(int64_t k) { return tile_bytes(FMT_BF16, k, 2); }
size_t moe_xl_bf16_down_bytes(int64_t k) { return tile_bytes(FMT_BF16, k, 1); }
size_t moe_xl_fp8_gateup_bytes(int64_t k) { return tile_bytes(FMT_FP8, k, 2); }
size_t moe_xl_fp8_down_bytes(int64_t k) { return tile_bytes(FMT_FP8, k, 1); }
size_t moe_xl_f32_gateup_bytes(int64_t k) { return tile_bytes(FMT_F32, k, 2); }
size_t moe_xl_f32_down_bytes(int64_t k) { return tile_bytes(FMT_F32, k, 1); }
size_t moe_xl_tile_gateup_bytes(int64_t k) { return tile_bytes(FMT_TILE, k, 2); }
size_t moe_xl_tile_down_bytes(int64_t k) { return tile_bytes(FMT_TILE, k, 1); }

/* ---- Reading the sources ------------------------------------------------------------- */

static size_t dtype_bytes(moe_dtype d) { return moe_dtype_bits(d) / 8; }

static bool is_scale_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_F32 || d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F8_E8M0 || d == MOE_DTYPE_U8;
}

/* The element's address; offsets were checked to fit in int64 by check_span. */
static const unsigned char *at(const void *base, int64_t r, int64_t rs, int64_t c, int64_t cs,
                               size_t es)
{
    return (const unsigned char *)base + (r * rs + c * cs) * (int64_t)es;
}

static float load_float(const unsigned char *p, moe_dtype d)
{
    if (d == MOE_DTYPE_F32) {
        float f;
        memcpy(&f, p, sizeof f);
        return f;
    }
    if (d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F16) {
        uint16_t c;
        memcpy(&c, p, sizeof c);
        return d == MOE_DTYPE_BF16 ? moe_bf16_to_f32(c) : moe_f16_to_f32(c);
    }
    return moe_e8m0_to_f32(*p); /* F8_E8M0 and U8 */
}

static void store_float(unsigned char *p, moe_dtype d, float v)
{
    if (d == MOE_DTYPE_F32) {
        memcpy(p, &v, sizeof v);
    } else if (d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F16) {
        uint16_t c = d == MOE_DTYPE_BF16 ? moe_f32_to_bf16(v) : moe_f32_to_f16(v);
        memcpy(p, &c, sizeof c);
    } else {
        *p = moe_f32_to_e8m0(v);
    }
}

/* The weight code at (r, c), or 0 (the value +0) outside the matrix: the padding. */
static uint32_t code_at(const moe_weight_src *s, int64_t r, int64_t c, size_t es)
{
    if (r >= s->rows || c >= s->cols) return 0;
    const unsigned char *p = at(s->data, r, s->row_stride, c, s->col_stride, es);
    if (es == 1) return *p;
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static float bias_at(const moe_weight_src *s, int64_t r)
{
    if (!s->bias || r >= s->rows) return 0.0f;
    return load_float(at(s->bias, r, s->bias_stride, 0, 0, dtype_bytes(s->bias_dtype)),
                      s->bias_dtype);
}

static int64_t scale_cols(int64_t cols) { return (cols + MOE_XL_KB - 1) / MOE_XL_KB; }
static int64_t scale_rows(int64_t rows, int block_rows)
{
    return (rows + block_rows - 1) / block_rows;
}

static float scale_at(const moe_weight_src *s, int64_t br, int64_t bc)
{
    const int64_t ncols = scale_cols(s->cols);
    return load_float(at(s->scale, br, ncols, bc, 1, dtype_bytes(s->scale_dtype)), s->scale_dtype);
}

/* ---- Validation ---------------------------------------------------------------------- */

static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

/* |offset| of the farthest element, in bytes, must fit in int64 (strides may be negative). */
static moe_status check_span(int64_t rows, int64_t rs, int64_t cols, int64_t cs, size_t es,
                             const char *what, const char *part)
{
    int64_t a, b, sum, bytes;
    if (rs == INT64_MIN || cs == INT64_MIN || __builtin_mul_overflow(abs64(rs), rows - 1, &a) ||
        __builtin_mul_overflow(abs64(cs), cols - 1, &b) || __builtin_add_overflow(a, b, &sum) ||
        __builtin_mul_overflow(sum, (int64_t)es, &bytes))
        return moe_error(MOE_EOVERFLOW,
                         "%s: the %s strides (%lld, %lld) over [%lld, %lld] overflow 64 bits", what,
                         part, (long long)rs, (long long)cs, (long long)rows, (long long)cols);
    return MOE_OK;
}

static moe_status check_src(const moe_weight_src *s, int fmt, const char *what)
{
    moe_status st = moe_expert_src_check_shape(s, what);
    if (st) return st;
    if (fmt == FMT_F32 && s->dtype != MOE_DTYPE_F32 && s->dtype != MOE_DTYPE_F16)
        return moe_error(MOE_EDTYPE, "%s: weight dtype %s; the f32 expert kernels read f32 or f16",
                         what, moe_dtype_name(s->dtype));
    const moe_dtype want = PAIRS16(fmt) ? MOE_DTYPE_BF16 : MOE_DTYPE_F8_E4M3;
    if (fmt != FMT_F32 && s->dtype != want)
        return moe_error(MOE_EDTYPE, "%s: weight dtype %s; the %s expert kernels read %s", what,
                         moe_dtype_name(s->dtype), PAIRS16(fmt) ? "bf16" : "FP8",
                         moe_dtype_name(want));
    st = check_span(s->rows, s->row_stride, s->cols, s->col_stride, dtype_bytes(s->dtype), what,
                    "weight");
    if (st) return st;
    if (s->bias) {
        st = moe_expert_check_bias_dtype(s->bias_dtype, what);
        if (st) return st;
        st = check_span(s->rows, s->bias_stride, 1, 0, dtype_bytes(s->bias_dtype), what, "bias");
        if (st) return st;
    }
    if (PLAIN(fmt)) return MOE_OK;
    if (!s->scale) return moe_error(MOE_EINVAL, "%s: the FP8 block scales are NULL", what);
    if (!is_scale_dtype(s->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not f32, bf16 or f8_e8m0", what,
                         moe_dtype_name(s->scale_dtype));
    if (s->block_cols != MOE_XL_KB || s->block_rows < NR || s->block_rows % NR != 0)
        return moe_error(MOE_EUNSUPPORTED,
                         "%s: scale block [%d, %d]; the FP8 kernels take [16·j, 128] (128 along K)",
                         what, s->block_rows, s->block_cols);
    return MOE_OK;
}

/* Whether any of the n codes at row is a NaN (low 7 bits all ones), 8 at a time: with the
 * sign bits cleared, adding 1 to each byte carries into its top bit only from 0x7F. */
static bool any_nan_code(const unsigned char *row, int64_t n)
{
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7Full, ones = 0x0101010101010101ull;
    uint64_t top = 0;
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        uint64_t w;
        memcpy(&w, row + c, sizeof w);
        top |= (w & low7) + ones;
    }
    bool nan = (top & ~low7) != 0;
    for (; c < n; c++)
        nan |= (row[c] & 0x7Fu) == 0x7Fu;
    return nan;
}

/* Every code and scale of an FP8 source: no NaN code (the kernels decode codes with integer
 * tricks that have no NaN), no scale the tile cannot carry. */
static moe_status check_fp8_values(const moe_weight_src *s, const char *what)
{
    for (int64_t r = 0; r < s->rows; r++) {
        /* A contiguous row without NaN (the rule) is scanned as words; otherwise, or to find
         * the code to name, code by code. */
        if (s->col_stride == 1 && !any_nan_code(at(s->data, r, s->row_stride, 0, 1, 1), s->cols))
            continue;
        for (int64_t c = 0; c < s->cols; c++) {
            uint32_t code = code_at(s, r, c, 1);
            if ((code & 0x7Fu) == 0x7Fu)
                return moe_error(MOE_EVALUE, "%s: NaN E4M3 code 0x%02X at row %lld, col %lld", what,
                                 code, (long long)r, (long long)c);
        }
    }
    const int64_t nbr = scale_rows(s->rows, s->block_rows), nbc = scale_cols(s->cols);
    for (int64_t br = 0; br < nbr; br++)
        for (int64_t bc = 0; bc < nbc; bc++) {
            float v = scale_at(s, br, bc);
            if (!(v > 0.0f) || !(v < MAX_SCALE))
                return moe_error(MOE_EVALUE,
                                 "%s: block scale %g at block (%lld, %lld) is not in (0, 2^120)",
                                 what, (double)v, (long long)br, (long long)bc);
        }
    return MOE_OK;
}

/* One or two projections of one format, checked together. */
static moe_status check_all(const moe_weight_src *const *src, int np, int fmt)
{
    for (int p = 0; p < np; p++) {
        const char *what = proj_names[np - 1][p];
        moe_status st = check_src(src[p], fmt, what);
        if (st) return st;
    }
    if (np == 2 && (src[0]->rows != src[1]->rows || src[0]->cols != src[1]->cols))
        return moe_error(MOE_ESHAPE, "gate [%lld, %lld] and up [%lld, %lld] differ in shape",
                         (long long)src[0]->rows, (long long)src[0]->cols, (long long)src[1]->rows,
                         (long long)src[1]->cols);
    if (PLAIN(fmt)) return MOE_OK;
    for (int p = 0; p < np; p++) {
        moe_status st = check_fp8_values(src[p], proj_names[np - 1][p]);
        if (st) return st;
    }
    return MOE_OK;
}

/* ---- Packing ------------------------------------------------------------------------- */

static void pack_bias(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    float b[2 * NR];
    for (int p = 0; p < np; p++)
        for (int n = 0; n < NR; n++)
            b[p * NR + n] = bias_at(src[p], r0 + n);
    memcpy(tile, b, moe_xl_bias_bytes(np));
}

/* Row n of projection p as a contiguous run of K codes (col_stride 1), when all 16 rows of
 * the tile are inside the matrix: the common layout, read as plain streams. NULL otherwise. */
static bool contiguous_rows(const moe_weight_src *const *src, int np, int64_t r0, size_t es,
                            const unsigned char *rows[2][NR])
{
    for (int p = 0; p < np; p++) {
        if (src[p]->col_stride != 1 || r0 + NR > src[p]->rows) return false;
        for (int n = 0; n < NR; n++)
            rows[p][n] = at(src[p]->data, r0 + n, src[p]->row_stride, 0, 1, es);
    }
    return true;
}

/* Where pair q of projection p starts after the bias, in the bf16 pairs (fmt FMT_BF16) or
 * the tile pairs (FMT_TILE). */
static size_t pair16_at(int fmt, int np, int64_t k, int p, size_t q)
{
    return fmt == FMT_TILE ? moe_xl_tile_pair_at(k, p, q) : moe_xl_bf16_pair_at(np, k, p, q);
}

/* The bf16 pairs or the tile pairs (fmt): the same 64-byte lines, in their own order and
 * over their own padded K. */
static void pack_bf16_tile(const moe_weight_src *const *src, int np, int fmt, int64_t r0,
                           unsigned char *tile)
{
    const int64_t k = src[0]->cols;
    const int64_t kpad = fmt == FMT_TILE ? 2 * (int64_t)moe_xl_tile_pairs(k) : moe_xl_kpad(k);
    unsigned char *w = tile + moe_xl_bf16_weights(np);
    const unsigned char *rows[2][NR];
    pack_bias(src, np, r0, tile);
    int64_t q = 0;
    if (contiguous_rows(src, np, r0, 2, rows))
        for (; q < k / 2; q++) /* whole pairs inside the rows: one 4-byte load each */
            for (int p = 0; p < np; p++) {
                unsigned char *d = w + pair16_at(fmt, np, k, p, (size_t)q);
                for (int n = 0; n < NR; n++)
                    memcpy(d + 4 * n, rows[p][n] + 4 * q, 4);
            }
    for (; q < kpad / 2; q++)
        for (int p = 0; p < np; p++) {
            uint32_t d[NR];
            for (int n = 0; n < NR; n++)
                d[n] = code_at(src[p], r0 + n, 2 * q, 2) | code_at(src[p], r0 + n, 2 * q + 1, 2)
                                                               << 16;
            memcpy(w + pair16_at(fmt, np, k, p, (size_t)q), d, sizeof d);
        }
}

/* The f32 value of weight (r, c) (F32, or F16 widened exactly), or +0 outside the matrix. */
static float f32_weight_at(const moe_weight_src *s, int64_t r, int64_t c)
{
    if (r >= s->rows || c >= s->cols) return 0.0f;
    return load_float(at(s->data, r, s->row_stride, c, s->col_stride, dtype_bytes(s->dtype)),
                      s->dtype);
}

/* The f32 pairs: line q of projection p holds the 16 rows at k = 2q, then at 2q + 1. F32
 * weights are copied (their bits, NaN payloads included); F16 weights are widened exactly. */
static void pack_f32_tile(const moe_weight_src *const *src, int np, int64_t r0, unsigned char *tile)
{
    const int64_t k = src[0]->cols, kpad = moe_xl_kpad(k);
    unsigned char *w = tile + moe_xl_bf16_weights(np);
    pack_bias(src, np, r0, tile);
    for (int p = 0; p < np; p++) {
        const moe_weight_src *s = src[p];
        const unsigned char *rows[2][NR] = {{NULL}}; /* set by contiguous_rows when fast */
        const bool f32 = s->dtype == MOE_DTYPE_F32;
        const moe_weight_src *one[1] = {s};
        const bool fast = contiguous_rows(one, 1, r0, dtype_bytes(s->dtype), rows);
        for (int64_t kk = 0; kk < kpad; kk++) {
            unsigned char *d = w + moe_xl_f32_pair_at(np, k, p, (size_t)(kk / 2)) +
                               (size_t)(kk & 1) * (MOE_XL_F32_LINE / 2);
            if (fast && kk < k && f32) {
                for (int n = 0; n < NR; n++)
                    memcpy(d + 4 * n, rows[0][n] + 4 * kk, 4);
                continue;
            }
            float v[NR];
            for (int n = 0; n < NR; n++)
                v[n] = f32_weight_at(s, r0 + n, kk);
            memcpy(d, v, sizeof v);
        }
    }
}

/* Exchanges the bits of m << s in *a with the bits of m in *b. */
static inline void swap_masked(uint64_t *a, uint64_t *b, int s, uint64_t m)
{
    const uint64_t t = ((*a >> s) ^ *b) & m;
    *b ^= t;
    *a ^= t << s;
}

/* x[r] byte c becomes x[c] byte r: an 8 × 8 byte transpose in three rounds of swaps
 * (bytes in 2 × 2 blocks, then 2-byte pairs, then 4-byte halves). */
static inline void transpose8x8(uint64_t x[8])
{
    const uint64_t m1 = 0x00FF00FF00FF00FFull, m2 = 0x0000FFFF0000FFFFull, m4 = 0xFFFFFFFFull;
    swap_masked(&x[0], &x[1], 8, m1);
    swap_masked(&x[2], &x[3], 8, m1);
    swap_masked(&x[4], &x[5], 8, m1);
    swap_masked(&x[6], &x[7], 8, m1);
    swap_masked(&x[0], &x[2], 16, m2);
    swap_masked(&x[1], &x[3], 16, m2);
    swap_masked(&x[4], &x[6], 16, m2);
    swap_masked(&x[5], &x[7], 16, m2);
    swap_masked(&x[0], &x[4], 32, m4);
    swap_masked(&x[1], &x[5], 32, m4);
    swap_masked(&x[2], &x[6], 32, m4);
    swap_masked(&x[3], &x[7], 32, m4);
}

/* The 4 bytes of x at the even bytes of a word (byte i to byte 2i). */
static inline uint64_t spread4(uint64_t x)
{
    x &= 0xFFFFFFFFull;
    x = (x | x << 16) & 0x0000FFFF0000FFFFull;
    return (x | x << 8) & 0x00FF00FF00FF00FFull;
}

/* One 64-byte group in the groups order from its four k-major vectors, as words: w[2v + h]
 * holds rows 8h..8h+7 of vector v. Rows 4a..4a+3 of vectors 2b and 2b + 1 interleave at
 * byte 16a + 8b (kernels/ref/expert_layout.h). */
static void store_group(const uint64_t w[8], unsigned char *dst)
{
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++) {
            const int sh = 32 * (a % 2);
            const uint64_t even = w[2 * (2 * b) + a / 2] >> sh;
            const uint64_t odd = w[2 * (2 * b + 1) + a / 2] >> sh;
            const uint64_t v = spread4(even) | spread4(odd) << 8;
            memcpy(dst + 16 * a + 8 * b, &v, 8);
        }
}

/* Contiguous rows, k in [0, k8) (k8 a multiple of 8): each 8 k of 8 rows read as 8 words and
 * transposed into the k-major order, which the groups order interleaves word by word and the
 * pairs order byte by byte (each order is a permutation within the k-major 64-byte groups). */
static void pack_fp8_rows(const unsigned char *const rows[2][NR], int np, int64_t k8, int order,
                          unsigned char *codes)
{
    const size_t step = moe_xl_fp8_step_bytes(np);
    unsigned char perm[64]; /* the pairs order: where each k-major byte of a group goes */
    if (order == MOE_XL_FP8_PAIRS)
        for (size_t kk = 0; kk < 64 / step; kk++)
            for (int p = 0; p < np; p++)
                for (int n = 0; n < NR; n++)
                    perm[kk * step + (size_t)p * NR + (size_t)n] =
                        (unsigned char)moe_xl_fp8_code_at(order, np, kk, p, (size_t)n);
    uint64_t kw[8 * 2 * 2]; /* 8 k in the k-major order, as words: whole groups */
    for (int64_t k0 = 0; k0 < k8; k0 += 8) {
        for (int p = 0; p < np; p++)
            for (int h = 0; h < 2; h++) {
                uint64_t x[8];
                for (int r = 0; r < 8; r++)
                    memcpy(&x[r], rows[p][8 * h + r] + k0, 8);
                transpose8x8(x);
                for (int j = 0; j < 8; j++)
                    kw[(j * np + p) * 2 + h] = x[j];
            }
        unsigned char *dst = codes + (size_t)k0 * step;
        const size_t bytes = 8 * step;
        if (order == MOE_XL_FP8_KMAJOR) {
            memcpy(dst, kw, bytes);
        } else if (order == MOE_XL_FP8_GROUPS) {
            for (size_t g = 0; g < bytes / 64; g++)
                store_group(kw + 8 * g, dst + 64 * g);
        } else {
            const unsigned char *km = (const unsigned char *)kw;
            for (size_t g = 0; g < bytes; g += 64)
                for (size_t i = 0; i < 64; i++)
                    dst[g + perm[i]] = km[g + i];
        }
    }
}

static void pack_fp8_tile(const moe_weight_src *const *src, int np, int64_t r0, int order,
                          unsigned char *tile)
{
    const int64_t k = src[0]->cols, kpad = moe_xl_kpad(k), nb = moe_xl_nblocks(k);
    pack_bias(src, np, r0, tile);
    /* The scale area, padding included, so the tile's bytes are all defined. */
    unsigned char *sc = tile + moe_xl_bias_bytes(np);
    memset(sc, 0, moe_xl_fp8_scale_bytes(k, np));
    for (int64_t b = 0; b < nb; b++)
        for (int p = 0; p < np; p++) {
            float s = scale_at(src[p], r0 / src[p]->block_rows, b) * MOE_XL_FP8_SCALE_FOLD;
            memcpy(sc + ((size_t)b * (size_t)np + (size_t)p) * sizeof s, &s, sizeof s);
        }
    unsigned char *codes = tile + moe_xl_fp8_codes(k, np);
    /* Zeros past kpad to the 64-byte boundary, first: in the groups order the last group's
     * padding lies between its codes. */
    const size_t used = (size_t)kpad * moe_xl_fp8_step_bytes(np), last = used & ~(size_t)63;
    memset(codes + last, 0, ((used + 63) & ~(size_t)63) - last);
    const unsigned char *rows[2][NR];
    int64_t kk = 0;
    if (contiguous_rows(src, np, r0, 1, rows)) {
        kk = k & ~(int64_t)7;
        pack_fp8_rows(rows, np, kk, order, codes);
    }
    for (; kk < kpad; kk++) /* the rest, the padding, and strided or edge tiles */
        for (int p = 0; p < np; p++)
            for (int n = 0; n < NR; n++)
                codes[moe_xl_fp8_code_at(order, np, (size_t)kk, p, (size_t)n)] =
                    (unsigned char)code_at(src[p], r0 + n, kk, 1);
}

static moe_status pack(const moe_weight_src *const *src, int np, int fmt, void *dst)
{
    if (!dst) return moe_error(MOE_EINVAL, "%s: the destination is NULL", proj_names[np - 1][0]);
    moe_status st = check_all(src, np, fmt);
    if (st) return st;
    const int64_t rows = src[0]->rows, k = src[0]->cols;
    const size_t tb = tile_bytes(fmt, k, np);
    for (int64_t t = 0; t < (rows + NR - 1) / NR; t++) {
        unsigned char *tile = (unsigned char *)dst + (size_t)t * tb;
        if (PAIRS16(fmt))
            pack_bf16_tile(src, np, fmt, t * NR, tile);
        else if (fmt == FMT_F32)
            pack_f32_tile(src, np, t * NR, tile);
        else
            pack_fp8_tile(src, np, t * NR, fmt - FMT_FP8, tile);
    }
    return MOE_OK;
}

/* ---- Unpacking ----------------------------------------------------------------------- */

static moe_status check_dst(const moe_weight_dst *d, int fmt, const char *what)
{
    if (!d || !d->data) return moe_error(MOE_EINVAL, "%s: the destination is NULL", what);
    if (d->rows < 1 || d->cols < 1 || d->cols > MOE_EXPERT_MAX_K)
        return moe_error(MOE_ESHAPE, "%s: destination shape [%lld, %lld]", what, (long long)d->rows,
                         (long long)d->cols);
    const moe_dtype want = PAIRS16(fmt) ? MOE_DTYPE_BF16 : MOE_DTYPE_F8_E4M3;
    if (fmt == FMT_F32 && d->dtype != MOE_DTYPE_F32 && d->dtype != MOE_DTYPE_F16)
        return moe_error(MOE_EDTYPE, "%s: destination dtype %s; this layout holds f32 (or f16)",
                         what, moe_dtype_name(d->dtype));
    if (fmt != FMT_F32 && d->dtype != want)
        return moe_error(MOE_EDTYPE, "%s: destination dtype %s; this layout holds %s", what,
                         moe_dtype_name(d->dtype), moe_dtype_name(want));
    if (d->bias) {
        const moe_status st = moe_expert_check_bias_dtype(d->bias_dtype, what);
        if (st) return st;
    }
    if (PLAIN(fmt)) return MOE_OK;
    if (!d->scale) return moe_error(MOE_EINVAL, "%s: the scale destination is NULL", what);
    if (!is_scale_dtype(d->scale_dtype))
        return moe_error(MOE_EDTYPE, "%s: scale dtype %s is not f32, bf16 or f8_e8m0", what,
                         moe_dtype_name(d->scale_dtype));
    if (d->block_cols != MOE_XL_KB || d->block_rows < NR || d->block_rows % NR != 0)
        return moe_error(MOE_EUNSUPPORTED, "%s: scale block [%d, %d]", what, d->block_rows,
                         d->block_cols);
    return MOE_OK;
}

/* The code of projection p at (r, c) in packed tiles of tile_bytes tb. */
static uint32_t packed_code(const unsigned char *packed, int fmt, int np, int p, size_t tb,
                            int64_t k, int64_t r, int64_t c)
{
    const unsigned char *tile = packed + (size_t)(r / NR) * tb;
    const size_t n = (size_t)(r % NR);
    uint32_t d;
    if (fmt == FMT_F32) { /* the f32 bits */
        memcpy(&d,
               tile + moe_xl_bf16_weights(np) + moe_xl_f32_pair_at(np, k, p, (size_t)(c / 2)) +
                   (size_t)(c % 2) * (MOE_XL_F32_LINE / 2) + n * 4,
               sizeof d);
        return d;
    }
    if (!PAIRS16(fmt))
        return tile[moe_xl_fp8_codes(k, np) +
                    moe_xl_fp8_code_at(fmt - FMT_FP8, np, (size_t)c, p, n)];
    memcpy(&d, tile + moe_xl_bf16_weights(np) + pair16_at(fmt, np, k, p, (size_t)(c / 2)) + n * 4,
           sizeof d);
    return c % 2 ? d >> 16 : d & 0xFFFFu;
}

static void unpack_one(const unsigned char *packed, int fmt, int np, int p, const moe_weight_dst *d)
{
    const int64_t k = d->cols;
    const size_t tb = tile_bytes(fmt, k, np), es = dtype_bytes(d->dtype);
    unsigned char *out = d->data;
    for (int64_t r = 0; r < d->rows; r++)
        for (int64_t c = 0; c < k; c++) {
            uint32_t code = packed_code(packed, fmt, np, p, tb, k, r, c);
            unsigned char *o = out + (size_t)(r * k + c) * es;
            if (fmt == FMT_F32) { /* f32 bits; to f16 exactly for weights packed from f16 */
                float f;
                memcpy(&f, &code, sizeof f);
                store_float(o, d->dtype, f);
            } else if (es == 1) {
                *o = (unsigned char)code;
            } else {
                uint16_t v = (uint16_t)code;
                memcpy(o, &v, sizeof v);
            }
        }
    if (d->bias) {
        const size_t bs = dtype_bytes(d->bias_dtype);
        for (int64_t r = 0; r < d->rows; r++) {
            float b;
            memcpy(&b, packed + (size_t)(r / NR) * tb + ((size_t)p * NR + (size_t)(r % NR)) * 4,
                   sizeof b);
            store_float((unsigned char *)d->bias + (size_t)r * bs, d->bias_dtype, b);
        }
    }
    if (PLAIN(fmt)) return;
    const int64_t nbr = scale_rows(d->rows, d->block_rows), nbc = scale_cols(k);
    const size_t ss = dtype_bytes(d->scale_dtype);
    for (int64_t br = 0; br < nbr; br++)
        for (int64_t bc = 0; bc < nbc; bc++) {
            const unsigned char *tile = packed + (size_t)(br * d->block_rows / NR) * tb;
            float s;
            memcpy(&s, tile + moe_xl_bias_bytes(np) + ((size_t)bc * (size_t)np + (size_t)p) * 4,
                   sizeof s);
            store_float((unsigned char *)d->scale + (size_t)(br * nbc + bc) * ss, d->scale_dtype,
                        s / MOE_XL_FP8_SCALE_FOLD);
        }
}

static moe_status unpack(const void *packed, const moe_weight_dst *const *dst, int np, int fmt)
{
    if (!packed) return moe_error(MOE_EINVAL, "unpack: the packed bytes are NULL");
    for (int p = 0; p < np; p++) {
        moe_status st = check_dst(dst[p], fmt, proj_names[np - 1][p]);
        if (st) return st;
    }
    if (np == 2 && (dst[0]->rows != dst[1]->rows || dst[0]->cols != dst[1]->cols))
        return moe_error(MOE_ESHAPE, "unpack: gate and up destinations differ in shape");
    for (int p = 0; p < np; p++)
        unpack_one(packed, fmt, np, p, dst[p]);
    return MOE_OK;
}

/* The four entry points of layout L (kernels/ref/expert_layout.h declares them): pack and unpack
 * of gate/up and of down in the layout fmt. */
#define LAYOUT_ENTRIES(L, fmt)                                                                     \
    moe_status moe_xl_##L##_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up,      \
                                        void *dst)                                                 \
    {                                                                                              \
        const moe_weight_src *src[2] = {gate, up};                                                 \
        return pack(src, 2, fmt, dst);                                                             \
    }                                                                                              \
    moe_status moe_xl_##L##_pack_down(const moe_weight_src *down, void *dst)                       \
    {                                                                                              \
        return pack(&down, 1, fmt, dst);                                                           \
    }                                                                                              \
    moe_status moe_xl_##L##_unpack_gateup(const void *packed, const moe_weight_dst *gate,          \
                                          const moe_weight_dst *up)                                \
    {                                                                                              \
        const moe_weight_dst *dst[2] = {gate, up};                                                 \
        return unpack(packed, dst, 2, fmt);                                                        \
    }                                                                                              \
    moe_status moe_xl_##L##_unpack_down(const void *packed, const moe_weight_dst *down)            \
    {                                                                                              \
        return unpack(packed, &down, 1, fmt);                                                      \
    }

LAYOUT_ENTRIES(bf16, FMT_BF16)
LAYOUT_ENTRIES(f32, FMT_F32)
LAYOUT_ENTRIES(tile, FMT_TILE)
LAYOUT_ENTRIES(fp8, FMT_FP8)
LAYOUT_ENTRIES(fp8p, FMT_FP8P)
LAYOUT_ENTRIES(fp8g, FMT_FP8G)
