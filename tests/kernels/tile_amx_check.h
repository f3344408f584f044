/* tile_amx_check.h — the tile recipe's AMX kernel tests (bf16, FP8): token rows, output checks, the
 * tile state. */
#ifndef MOE_TEST_TILE_AMX_CHECK_H
#define MOE_TEST_TILE_AMX_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "act_d.h"
#include "guarded.h"
#include "xorshift.h"

#define ROWS 16
#define CHUNK 32
#ifndef MAXM
#define MAXM 32 /* tokens per call tested: every m up to the set's MR */
#endif
#define MAXK 4096
#define WANT_LD (ROWS * 8) /* expected outputs per token: up to 8 tiles */
#define HS_PAD 5           /* outputs past the tiles' in each row, which must stay untouched */
#define H_SENTINEL 0xDEADu
#define Y_SENTINEL 0xFFFFFFFFu

/* Outputs compared bit for bit, and against float64 (each test counts its own). */
static long n_compared, n_bound;

static inline uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline bool is_nan_bf16(uint16_t c) { return (c & 0x7FFFu) > 0x7F80u; }

/* ---- Token rows ---------------------------------------------------------------------------
 * MAXM rows of k codes in one mapping whose next page is inaccessible, placed three ways:
 * PANEL (token i at row i, stride k + 3 codes), REVERSED (token i at row MAXM - 1 - i: a
 * negative stride) and SCATTERED (uneven gaps, shuffled). In each the row that lies last ends
 * exactly at the inaccessible page. */
enum { PANEL, REVERSED, SCATTERED, N_LAYOUTS };
static const char *const layout_names[N_LAYOUTS] = {"panel", "reversed panel", "scattered"};

typedef struct rows_map {
    guarded g;
    const uint16_t *x[MAXM];
} rows_map;

/* Token i's k codes from src[i]. */
static inline void rows_place(rows_map *R, int layout, size_t k, const uint16_t (*src)[MAXK],
                              uint64_t *s)
{
    size_t off[MAXM], end = 0;
    for (size_t i = 0; i < MAXM; i++) {
        if (layout == SCATTERED)
            off[i] = (i * 13 + 5) % MAXM * (k + 40) + xorshift64(s) % 37;
        else
            off[i] = (layout == REVERSED ? MAXM - 1 - i : i) * (k + 3);
        if (off[i] + k > end) end = off[i] + k;
    }
    uint16_t *base = guarded_alloc(&R->g, end * 2);
    for (size_t i = 0; i < MAXM; i++) {
        memcpy(base + off[i], src[i], k * 2);
        R->x[i] = base + off[i];
    }
}

static inline void rows_free(rows_map *R) { guarded_free(&R->g); }

/* The kernels' outputs of m tokens, ld apart (gate/up: bf16 codes h; down: f32 y), against
 * want (WANT_LD apart) for the first cols of each row, every other element of MAXM rows still
 * its sentinel; NaN matches NaN. At most three mismatches are printed after label. */
static inline long compare_out(int np, const uint16_t *h, const float *y, size_t ld, size_t m,
                               size_t cols, const uint16_t *want_h, const float *want_y,
                               const char *label)
{
    long bad = 0;
    for (size_t i = 0; i < MAXM; i++)
        for (size_t n = 0; n < ld; n++) {
            const bool out = i < m && n < cols;
            uint32_t got, w;
            bool ok;
            if (np == 2) {
                got = h[i * ld + n];
                w = out ? want_h[i * WANT_LD + n] : H_SENTINEL;
                ok = got == w || (out && is_nan_bf16((uint16_t)got) && is_nan_bf16((uint16_t)w));
            } else {
                got = bits(y[i * ld + n]);
                w = out ? bits(want_y[i * WANT_LD + n]) : Y_SENTINEL;
                ok = got == w || (out && isnan(y[i * ld + n]) && isnan(want_y[i * WANT_LD + n]));
            }
            n_compared += out;
            if (!ok && bad++ < 3)
                fprintf(stderr, "%s m=%zu: %s[%zu][%zu] %x, want %x\n", label, m,
                        np == 2 ? "h" : "y", i, n, got, w);
        }
    return bad;
}

/* Fills the MAXM × ld outputs of np's kind with their sentinel. */
static inline void fill_sentinels(int np, uint16_t *h, float *y, size_t ld)
{
    for (size_t i = 0; i < MAXM * ld; i++)
        if (np == 2)
            h[i] = H_SENTINEL;
        else
            memcpy(&y[i], &(uint32_t){Y_SENTINEL}, 4);
}

#ifdef MOE_COMPILED_AVX512AMXBF16
/* Whether the tile data is in use (XINUSE bit 18, XGETBV with ECX = 1): the kernels release
 * the tiles before returning, so the OS need not save them. */
static inline bool tiles_in_use(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    (void)hi;
    return (lo >> 18) & 1;
}
#endif

#endif
