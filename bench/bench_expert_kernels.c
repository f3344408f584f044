/* bench_expert_kernels.c — the expert kernel sets alone: decode GB/s and prefill GFLOP/s against
 * the machine's read bandwidth and instruction peaks, measured in the same run. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "kernels/expert.h"
#include "select/kernel.h"

/*
 * One thread, DeepSeek-V3 expert shape (hidden H = 7168, intermediate I = 2048), every kernel
 * set this CPU allows (the references only with --ref, and then decode only: they are slow).
 *
 *  decode:  m = 1. The packed experts (gate/up tiles, then down tiles) of enough experts to
 *           exceed twice the last-level cache are run one after the other, so every byte comes
 *           from memory, as in a model whose experts do not fit in cache. Figure: packed bytes
 *           per second, and its ratio to a STREAM-like 1-thread read measured just before
 *           each pass (median of the per-pass ratios).
 *  prefill: 512 tokens of one expert in chunks of MR, tiles in groups of about 1 MiB: each
 *           group runs all chunks while it sits in L2 (prefill_expert). Figure: GFLOP/s
 *           (2·M·N·K per projection), beside the 1-thread peak of the recipe's instruction
 *           (vfmadd231ps zmm or ymm, vdpbf16ps zmm) from a register-only loop of the same run.
 *
 * MXFP4 (Q8 recipe), after the above, for two expert shapes: gpt-oss-20b (H = I = 2880) and
 * DeepSeek-V4-Flash (H = 4096, I = 2048). Decode as above (experts past twice the LLC, m = 1),
 * its figure over the packed bytes (4.25 bits per weight); each token's x row is prepared
 * once, and the h rows between the phases are prepared inside the timing (prepare_act is part
 * of the recipe's cost). Prefill: 512 tokens of one expert as above; GOP/s at 2 ops per
 * multiply-add, beside the 1-thread vpdpbusd zmm peak (64 multiply-adds per instruction) or,
 * for the sets without VNNI, vpmaddubsw's (ymm: 32, zmm: 64 multiply-adds).
 *
 * Times are CLOCK_THREAD_CPUTIME_ID (the machine is shared: CPU time of this thread is what the
 * kernel cost), medians of several passes. Usage: bench_expert_kernels [--ref] [--quick]
 * [--mxfp4] (only the MXFP4 part).
 */

#define H 7168
#define I 2048
#define PREFILL_T 512

static double thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- Instruction peaks: independent chains that start from different values, so no
 * compiler can merge them (the chains of bench_util.h start equal, and GCC folds them). ---- */

#if BENCH_X86
#define CHAINS 12
__attribute__((target("avx2,fma"))) static float peak_fma_ymm(uint64_t iters)
{
    __m256 a[CHAINS];
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm256_set1_ps(1.0f + (float)c * 0x1p-10f);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm256_fmadd_ps(a[c], x, y);
    float s = 0, t[8];
    for (int c = 0; c < CHAINS; c++) {
        _mm256_storeu_ps(t, a[c]);
        s += t[0];
    }
    return s;
}

__attribute__((target("avx512f"))) static float peak_fma_zmm(uint64_t iters)
{
    __m512 a[CHAINS];
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_ps(1.0f + (float)c * 0x1p-10f);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_fmadd_ps(a[c], x, y);
    float s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_ps(a[c]);
    return s;
}

__attribute__((target("avx512f,avx512bf16"))) static float peak_dpbf16(uint64_t iters)
{
    __m512 a[CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80); /* 2^-10: sums stay small */
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_ps((float)c);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_dpbf16_ps(a[c], x, x);
    float s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_ps(a[c]);
    return s;
}
/* Integer peaks: 12 chains of vpdpbusd (zmm) or vpmaddubsw + vpaddw (the kernels' pair), each
 * from its own start value, as above. vpmaddubsw has no accumulator, so its chain feeds the
 * accumulator back as the unsigned operand (else the compiler hoists the product out of the
 * loop); the chain is then 6 cycles long, and 12 chains still cover two per cycle. */
__attribute__((target("avx512f,avx512vnni"))) static float peak_dpbusd(uint64_t iters)
{
    __m512i a[CHAINS];
    const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_epi32(c);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_dpbusd_epi32(a[c], x, y);
    int64_t s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_epi32(a[c]);
    return (float)s;
}

__attribute__((target("avx2"))) static float peak_maddubs_ymm(uint64_t iters)
{
    __m256i a[CHAINS];
    const __m256i y = _mm256_set1_epi8(-2);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm256_set1_epi16((short)c);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm256_add_epi16(a[c], _mm256_maddubs_epi16(a[c], y));
    int s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm256_extract_epi16(a[c], 0);
    return (float)s;
}

__attribute__((target("avx512f,avx512bw"))) static float peak_maddubs_zmm(uint64_t iters)
{
    __m512i a[CHAINS];
    const __m512i y = _mm512_set1_epi8(-2);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_epi16((short)c);
    for (uint64_t i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_add_epi16(a[c], _mm512_maddubs_epi16(a[c], y));
    int64_t s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_epi32(a[c]);
    return (float)s;
}
#endif

static volatile float sink;

/* GB/s of one plain read of the whole buffer (bench_util.h's widest loads), timed like the
 * kernels (thread CPU time), so both sides of the ratio count the same thing. */
static double read_floor(const bench_buffer *b)
{
    double t0 = thread_ns();
    bench_sink = bench_read(b->p, b->bytes);
    return (double)b->bytes / (thread_ns() - t0);
}

/* GFLOP/s (GOP/s) of one thread: insn 0 fma ymm (16 flops), 1 fma zmm (32), 2 vdpbf16ps zmm
 * (64), 3 vpdpbusd zmm (64 multiply-adds: 128 ops), 4 vpmaddubsw ymm (+ vpaddw: 32
 * multiply-adds, 64 ops), 5 vpmaddubsw zmm (+ vpaddw: 128 ops). */
static double peak_gflops(int insn)
{
#if BENCH_X86
    static const double flops[] = {16, 32, 64, 128, 64, 128};
    const uint64_t iters = 4000000;
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = thread_ns();
        switch (insn) {
        case 0: sink = peak_fma_ymm(iters); break;
        case 1: sink = peak_fma_zmm(iters); break;
        case 2: sink = peak_dpbf16(iters); break;
        case 3: sink = peak_dpbusd(iters); break;
        case 4: sink = peak_maddubs_ymm(iters); break;
        default: sink = peak_maddubs_zmm(iters); break;
        }
        t[r] = thread_ns() - t0;
    }
    return (double)CHAINS * flops[insn] * (double)iters / bench_median(t, 7);
#else
    (void)insn;
    return 0;
#endif
}

/* ---- Packed experts ----------------------------------------------------------------------- */

typedef struct packed {
    unsigned char *p;
    size_t gateup_tb, down_tb, gateup_bytes, expert_bytes;
    int n;
} packed;

static uint64_t rng = 0x1234567ull;

static int pack_experts(const moe_expert_kernels *ks, int n, packed *out)
{
    const int gt = I / MOE_EXPERT_NR, dt = H / MOE_EXPERT_NR;
    out->gateup_tb = ks->gateup_tile_bytes(H);
    out->down_tb = ks->down_tile_bytes(I);
    out->gateup_bytes = out->gateup_tb * (size_t)gt;
    out->expert_bytes = out->gateup_bytes + out->down_tb * (size_t)dt;
    out->n = n;
    out->p = aligned_alloc(4096, out->expert_bytes * (size_t)n);
    const bool fp8 = ks->format == MOE_EXPERT_FMT_FP8_BLOCK;
    const size_t es = fp8 ? 1 : 2, nw = (size_t)H * I;
    unsigned char *w[3];
    float *sc = malloc(sizeof(float) * 16 * 56 * 3);
    for (int j = 0; j < 3; j++)
        w[j] = malloc(nw * es);
    if (!out->p || !sc || !w[0] || !w[1] || !w[2]) return -1;
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < nw; i++) {
            uint64_t r = bench_rand(&rng);
            if (fp8) {
                w[j][i] = (unsigned char)(r % 0x7F) | (unsigned char)(r >> 32 & 0x80);
            } else {
                uint16_t c = (uint16_t)(0x3C00 + (r & 0x3FF)) | (uint16_t)(r >> 32 & 0x8000);
                memcpy(w[j] + 2 * i, &c, 2);
            }
        }
    for (int i = 0; i < 16 * 56 * 3; i++)
        sc[i] = 1e-3f;
    const moe_dtype wd = fp8 ? MOE_DTYPE_F8_E4M3 : MOE_DTYPE_BF16;
    moe_weight_src g = {.data = w[0],
                        .dtype = wd,
                        .rows = I,
                        .cols = H,
                        .row_stride = H,
                        .col_stride = 1,
                        .scale = sc,
                        .scale_dtype = MOE_DTYPE_F32,
                        .block_rows = 128,
                        .block_cols = 128};
    moe_weight_src u = g, d = g;
    u.data = w[1];
    d.data = w[2];
    d.rows = H;
    d.cols = I;
    d.row_stride = I;
    moe_status st = ks->pack_gateup(&g, &u, out->p);
    if (!st) st = ks->pack_down(&d, out->p + out->gateup_bytes);
    for (int e = 1; e < n && !st; e++)
        memcpy(out->p + out->expert_bytes * (size_t)e, out->p, out->expert_bytes);
    for (int j = 0; j < 3; j++)
        free(w[j]);
    free(sc);
    if (st) fprintf(stderr, "pack %s: %s\n", ks->name, moe_last_error());
    return st ? -1 : 0;
}

/* ---- The two phases of one expert for m tokens ------------------------------------------- */

typedef struct acts {
    void *x[PREFILL_T], *h[PREFILL_T];
    float *y;
    unsigned char *xbuf, *hbuf;
} acts;

static int acts_init(acts *a, size_t es)
{
    a->xbuf = aligned_alloc(64, (size_t)PREFILL_T * H * es);
    a->hbuf = aligned_alloc(64, (size_t)PREFILL_T * I * es);
    a->y = aligned_alloc(64, (size_t)PREFILL_T * H * sizeof(float));
    if (!a->xbuf || !a->hbuf || !a->y) return -1;
    for (size_t i = 0; i < (size_t)PREFILL_T * H; i++) {
        float v = (float)(bench_gauss(&rng) * 0.5);
        if (es == 4) memcpy(a->xbuf + 4 * i, &v, 4);
        uint32_t u;
        memcpy(&u, &v, 4);
        uint16_t c = (uint16_t)(u >> 16);
        if (es == 2) memcpy(a->xbuf + 2 * i, &c, 2);
    }
    memset(a->hbuf, 0, (size_t)PREFILL_T * I * es);
    for (int t = 0; t < PREFILL_T; t++) {
        a->x[t] = a->xbuf + (size_t)t * H * es;
        a->h[t] = a->hbuf + (size_t)t * I * es;
    }
    return 0;
}

static void acts_free(acts *a)
{
    free(a->xbuf);
    free(a->hbuf);
    free(a->y);
}

static const moe_act_params act = {.kind = 0, .limit = 0, .alpha = 0};

/* Decode: every tile once, one token. */
static void decode_expert(const moe_expert_kernels *ks, const packed *pk, int e, acts *a, size_t es)
{
    const unsigned char *base = pk->p + pk->expert_bytes * (size_t)e;
    for (int t = 0; t < I / MOE_EXPERT_NR; t++)
        ks->gateup(1, H, (const void *const *)a->x, base + pk->gateup_tb * (size_t)t, &act,
                   a->hbuf + (size_t)t * MOE_EXPERT_NR * es, I, MOE_EXPERT_NR);
    base += pk->gateup_bytes;
    for (int t = 0; t < H / MOE_EXPERT_NR; t++)
        ks->down(1, I, (const void *const *)a->h, base + pk->down_tb * (size_t)t,
                 a->y + (size_t)t * MOE_EXPERT_NR, H, MOE_EXPERT_NR);
}

/* Prefill: tiles in groups that, with one chunk of activations, fill about 1.5 MiB of the
 * 2 MiB L2; each group runs all chunks of MR tokens while its tiles sit in L2, and each
 * chunk's activations, loaded once, serve the group's tiles. This is the blocking the engine
 * should use (src/experts/). */
static int group_of(size_t tile_bytes, size_t chunk_bytes)
{
    const size_t budget = (size_t)3 << 19;
    size_t g = chunk_bytes < budget ? (budget - chunk_bytes) / tile_bytes : 0;
    return g < 1 ? 1 : (int)g;
}

static void prefill_expert(const moe_expert_kernels *ks, const packed *pk, acts *a, size_t es)
{
    const size_t mr = (size_t)ks->mr;
    const int gg = group_of(pk->gateup_tb, mr * H * es), gd = group_of(pk->down_tb, mr * I * es);
    for (int t0 = 0; t0 < I / MOE_EXPERT_NR; t0 += gg)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            size_t m = PREFILL_T - c < mr ? PREFILL_T - c : mr;
            for (int t = t0; t < t0 + gg && t < I / MOE_EXPERT_NR; t++)
                ks->gateup(m, H, (const void *const *)&a->x[c], pk->p + pk->gateup_tb * (size_t)t,
                           &act, a->hbuf + (c * I + (size_t)t * MOE_EXPERT_NR) * es, I,
                           MOE_EXPERT_NR);
        }
    for (int t0 = 0; t0 < H / MOE_EXPERT_NR; t0 += gd)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            size_t m = PREFILL_T - c < mr ? PREFILL_T - c : mr;
            for (int t = t0; t < t0 + gd && t < H / MOE_EXPERT_NR; t++)
                ks->down(m, I, (const void *const *)&a->h[c],
                         pk->p + pk->gateup_bytes + pk->down_tb * (size_t)t,
                         a->y + c * H + (size_t)t * MOE_EXPERT_NR, H, MOE_EXPERT_NR);
        }
}

static int peak_insn(const moe_expert_kernels *ks)
{
    if (ks->recipe == MOE_RECIPE_Q8)
        return ks->isa == MOE_REQ_AVX512VNNI ? 3 : ks->isa == MOE_REQ_AVX2 ? 4 : 5;
    if (ks->recipe == MOE_RECIPE_BF16) return 2;
    return ks->isa == MOE_REQ_AVX2 ? 0 : 1;
}

static const char *insn_name(int insn)
{
    static const char *names[] = {"fma ymm",  "fma zmm",        "vdpbf16ps",
                                  "vpdpbusd", "vpmaddubsw ymm", "vpmaddubsw zmm"};
    return names[insn];
}

/* ---- MXFP4 experts (Q8 recipe) ------------------------------------------------------------ */

typedef struct mx_shape {
    const char *name;
    int h, i;
} mx_shape;

static const mx_shape mx_shapes[] = {{"gpt-oss-20b", 2880, 2880}, {"DeepSeek-V4-Flash", 4096, 2048}};

/* n copies of one random expert of shape sh (codes uniform, scales 2^-7..2^-4, biases). */
static int mx_pack_experts(const moe_expert_kernels *ks, const mx_shape *sh, int n, packed *out)
{
    const int NH = sh->h, NI = sh->i;
    out->gateup_tb = ks->gateup_tile_bytes(NH);
    out->down_tb = ks->down_tile_bytes(NI);
    out->gateup_bytes = out->gateup_tb * (size_t)((NI + 15) / 16);
    out->expert_bytes = out->gateup_bytes + out->down_tb * (size_t)((NH + 15) / 16);
    out->n = n;
    out->p = aligned_alloc(4096, (out->expert_bytes * (size_t)n + 4095) & ~(size_t)4095);
    const size_t nw = (size_t)NH * NI;
    unsigned char *w[3], *sc[3];
    float *bias = malloc(sizeof(float) * (size_t)(NH > NI ? NH : NI));
    int ok = out->p && bias;
    for (int j = 0; j < 3; j++) {
        w[j] = malloc(nw / 2);
        sc[j] = malloc(nw / 32);
        ok = ok && w[j] && sc[j];
    }
    if (!ok) return -1;
    for (int j = 0; j < 3; j++) {
        for (size_t i = 0; i < nw / 2; i++)
            w[j][i] = (unsigned char)bench_rand(&rng);
        for (size_t i = 0; i < nw / 32; i++)
            sc[j][i] = (unsigned char)(120 + bench_rand(&rng) % 4);
    }
    for (int i = 0; i < (NH > NI ? NH : NI); i++)
        bias[i] = (float)(0.1 * bench_gauss(&rng));
    moe_weight_src g = {.data = w[0],
                        .dtype = MOE_DTYPE_F4_E2M1,
                        .rows = NI,
                        .cols = NH,
                        .row_stride = NH / 2,
                        .col_stride = 1,
                        .scale = sc[0],
                        .scale_dtype = MOE_DTYPE_F8_E8M0,
                        .block_rows = 1,
                        .block_cols = 32,
                        .scale_stride = NH / 32,
                        .bias = bias,
                        .bias_dtype = MOE_DTYPE_F32,
                        .bias_stride = 1};
    moe_weight_src u = g, d = g;
    u.data = w[1];
    u.scale = sc[1];
    d.data = w[2];
    d.scale = sc[2];
    d.rows = NH;
    d.cols = NI;
    d.row_stride = NI / 2;
    d.scale_stride = NI / 32;
    moe_status st = ks->pack_gateup(&g, &u, out->p);
    if (!st) st = ks->pack_down(&d, out->p + out->gateup_bytes);
    for (int e = 1; e < n && !st; e++)
        memcpy(out->p + out->expert_bytes * (size_t)e, out->p, out->expert_bytes);
    for (int j = 0; j < 3; j++) {
        free(w[j]);
        free(sc[j]);
    }
    free(bias);
    if (st) fprintf(stderr, "pack %s: %s\n", ks->name, moe_last_error());
    return st ? -1 : 0;
}

/* The activations of the MXFP4 bench: x prepared once (k = NH) per token; h in f32 and its
 * prepared rows (k = NI), written by the phases. */
typedef struct mx_acts {
    const void *xq[PREFILL_T], *hq[PREFILL_T];
    unsigned char *xbuf, *hqbuf;
    float *h, *y;
    size_t xrow, hrow;
} mx_acts;

static int mx_acts_init(mx_acts *a, const moe_expert_kernels *ks, const mx_shape *sh)
{
    a->xrow = ks->act_row_bytes(sh->h);
    a->hrow = ks->act_row_bytes(sh->i);
    a->xbuf = aligned_alloc(64, (size_t)PREFILL_T * a->xrow);
    a->hqbuf = aligned_alloc(64, (size_t)PREFILL_T * a->hrow);
    a->h = aligned_alloc(64, (size_t)PREFILL_T * (size_t)sh->i * sizeof(float));
    a->y = aligned_alloc(64, (size_t)PREFILL_T * (size_t)sh->h * sizeof(float));
    float *x = malloc((size_t)sh->h * sizeof(float));
    if (!a->xbuf || !a->hqbuf || !a->h || !a->y || !x) return -1;
    for (int t = 0; t < PREFILL_T; t++) {
        for (int j = 0; j < sh->h; j++)
            x[j] = (float)(bench_gauss(&rng) * 0.5);
        ks->prepare_act((size_t)sh->h, x, a->xbuf + (size_t)t * a->xrow);
        a->xq[t] = a->xbuf + (size_t)t * a->xrow;
        a->hq[t] = a->hqbuf + (size_t)t * a->hrow;
    }
    memset(a->h, 0, (size_t)PREFILL_T * (size_t)sh->i * sizeof(float));
    free(x);
    return 0;
}

static void mx_acts_free(mx_acts *a)
{
    free(a->xbuf);
    free(a->hqbuf);
    free(a->h);
    free(a->y);
}

static const moe_act_params mx_act = {.kind = 2, .limit = 7.0f, .alpha = 1.702f};

/* Decode of expert e: gate/up tiles, the h row prepared, down tiles; one token. */
static void mx_decode_expert(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                             int e, mx_acts *a)
{
    const unsigned char *base = pk->p + pk->expert_bytes * (size_t)e;
    for (int t = 0; t < sh->i / 16; t++)
        ks->gateup(1, (size_t)sh->h, a->xq, base + pk->gateup_tb * (size_t)t, &mx_act,
                   a->h + (size_t)t * 16, (size_t)sh->i, 16);
    ks->prepare_act((size_t)sh->i, a->h, a->hqbuf);
    base += pk->gateup_bytes;
    for (int t = 0; t < sh->h / 16; t++)
        ks->down(1, (size_t)sh->i, a->hq, base + pk->down_tb * (size_t)t, a->y + (size_t)t * 16,
                 (size_t)sh->h, 16);
}

/* Prefill of one expert: gate/up in tile groups over chunks of MR tokens (as prefill_expert),
 * every h row prepared, then down likewise. */
static void mx_prefill_expert(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                              mx_acts *a)
{
    const size_t mr = (size_t)ks->mr, NH = (size_t)sh->h, NI = (size_t)sh->i;
    const int gg = group_of(pk->gateup_tb, mr * a->xrow), gd = group_of(pk->down_tb, mr * a->hrow);
    const int gt = (int)(NI / 16), dt = (int)(NH / 16);
    for (int t0 = 0; t0 < gt; t0 += gg)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            size_t m = PREFILL_T - c < mr ? PREFILL_T - c : mr;
            for (int t = t0; t < t0 + gg && t < gt; t++)
                ks->gateup(m, NH, &a->xq[c], pk->p + pk->gateup_tb * (size_t)t, &mx_act,
                           a->h + c * NI + (size_t)t * 16, NI, 16);
        }
    for (size_t c = 0; c < PREFILL_T; c++)
        ks->prepare_act(NI, a->h + c * NI, a->hqbuf + c * a->hrow);
    for (int t0 = 0; t0 < dt; t0 += gd)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            size_t m = PREFILL_T - c < mr ? PREFILL_T - c : mr;
            for (int t = t0; t < t0 + gd && t < dt; t++)
                ks->down(m, NI, &a->hq[c], pk->p + pk->gateup_bytes + pk->down_tb * (size_t)t,
                         a->y + c * NH + (size_t)t * 16, NH, 16);
        }
}

static int mx_bench_set(const moe_expert_kernels *ks, const mx_shape *sh, const bench_buffer *buf,
                        size_t llc, const double *peak, bool quick)
{
    const size_t one = ks->gateup_tile_bytes(sh->h) * (size_t)(sh->i / 16) +
                       ks->down_tile_bytes(sh->i) * (size_t)(sh->h / 16);
    int n = (int)((2 * llc + one - 1) / one);
    if (n < 2) n = 2;
    packed pk;
    mx_acts a;
    if (mx_pack_experts(ks, sh, n, &pk) || mx_acts_init(&a, ks, sh)) return -1;
    const int passes = quick ? 3 : 7;
    double t[8], ratio[8];
    mx_decode_expert(ks, sh, &pk, 0, &a);
    for (int p = 0; p < passes; p++) {
        double rd = read_floor(buf);
        double t0 = thread_ns();
        for (int e = 0; e < n; e++)
            mx_decode_expert(ks, sh, &pk, e, &a);
        t[p] = thread_ns() - t0;
        ratio[p] = (double)pk.expert_bytes * n / t[p] / rd;
    }
    const double dec = (double)pk.expert_bytes * n / bench_median(t, passes);
    const double dec_ratio = bench_median(ratio, passes);
    const int insn = peak_insn(ks);
    if (ks->isa == MOE_REQ_SCALAR) {
        printf("%-40s %-18s %9.2f %5.0f%% %10s %6s %s\n", ks->name, sh->name, dec,
               100 * dec_ratio, "-", "-", "-");
    } else {
        const int reps = quick ? 1 : 3;
        const double ops = 2.0 * PREFILL_T * 3.0 * (double)sh->h * (double)sh->i;
        mx_prefill_expert(ks, sh, &pk, &a);
        for (int p = 0; p < reps; p++) {
            double t0 = thread_ns();
            mx_prefill_expert(ks, sh, &pk, &a);
            t[p] = thread_ns() - t0;
        }
        const double pre = ops / bench_median(t, reps);
        printf("%-40s %-18s %9.2f %5.0f%% %10.1f %5.0f%% %s\n", ks->name, sh->name, dec,
               100 * dec_ratio, pre, peak[insn] > 0 ? 100 * pre / peak[insn] : 0.0,
               insn_name(insn));
    }
    fflush(stdout);
    mx_acts_free(&a);
    free(pk.p);
    return 0;
}

int main(int argc, char **argv)
{
    bool with_ref = false, quick = false, only_mx = false;
    for (int i = 1; i < argc; i++) {
        with_ref = with_ref || !strcmp(argv[i], "--ref");
        quick = quick || !strcmp(argv[i], "--quick");
        only_mx = only_mx || !strcmp(argv[i], "--mxfp4");
    }
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) return 1;
    const uint32_t allowed = moe_cpu_caps_mask(&info.allowed);

    bench_buffer buf;
    if (bench_buffer_init(&buf)) return 1;
    double rt[7];
    read_floor(&buf); /* page tables warm */
    for (int r = 0; r < 7; r++)
        rt[r] = read_floor(&buf);
    const double read_gbs = bench_median(rt, 7);
    const size_t llc = bench_llc_bytes();
    double peak[6] = {0, 0, 0, 0, 0, 0};
    if (allowed & MOE_FEAT_AVX2) peak[0] = peak_gflops(0), peak[4] = peak_gflops(4);
    if (allowed & MOE_FEAT_AVX512) peak[1] = peak_gflops(1), peak[5] = peak_gflops(5);
    if (allowed & MOE_FEAT_AVX512_BF16) peak[2] = peak_gflops(2);
    if (allowed & MOE_FEAT_AVX512_VNNI) peak[3] = peak_gflops(3);
    printf("# 1 thread; read %.2f GB/s; peaks: fma ymm %.1f, fma zmm %.1f, vdpbf16ps %.1f "
           "GFLOP/s; vpdpbusd %.1f, vpmaddubsw ymm %.1f, zmm %.1f GOP/s; LLC %zu MiB\n",
           read_gbs, peak[0], peak[1], peak[2], peak[3], peak[4], peak[5], llc >> 20);
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    if (only_mx) goto mxfp4;
    printf("# DeepSeek-V3 expert H=%d I=%d; decode m=1 streaming; prefill T=%d in chunks of MR\n",
           H, I, PREFILL_T);
    printf("%-40s %9s %6s %10s %6s %s\n", "kernel set", "dec GB/s", "%read", "pre GF/s", "%peak",
           "peak of");

    for (size_t r = 0; r < count; r++) {
        const moe_kernel *k = &reg[r];
        if (k->family < MOE_KERNEL_FAMILY_EXPERT_BF16_F32 ||
            k->family > MOE_KERNEL_FAMILY_EXPERT_FP8_BF16)
            continue;
        const moe_expert_kernels *ks = k->fn.expert_set;
        if ((ks->isa & ~allowed) != 0) continue;
        if (ks->isa == MOE_REQ_SCALAR && !with_ref) continue;
        const size_t es = ks->recipe == MOE_RECIPE_BF16 ? 2 : 4;
        packed pk;
        const size_t one = ks->gateup_tile_bytes(H) * (I / 16) + ks->down_tile_bytes(I) * (H / 16);
        int n = (int)((2 * llc + one - 1) / one);
        if (n < 2) n = 2;
        acts a;
        if (pack_experts(ks, n, &pk) || acts_init(&a, es)) return 1;

        /* Decode: passes over all n experts, so each pass streams 2 LLCs from memory. Each
         * pass follows a pass of the read floor, and the ratio is taken pass by pass: on a
         * shared machine the bandwidth drifts between passes far more than within one. */
        const int passes = quick ? 3 : 7;
        double t[8], ratio[8];
        decode_expert(ks, &pk, 0, &a, es);
        for (int p = 0; p < passes; p++) {
            double rd = read_floor(&buf);
            double t0 = thread_ns();
            for (int e = 0; e < n; e++)
                decode_expert(ks, &pk, e, &a, es);
            t[p] = thread_ns() - t0;
            ratio[p] = (double)pk.expert_bytes * n / t[p] / rd;
        }
        const double dec = (double)pk.expert_bytes * n / bench_median(t, passes);
        const double dec_ratio = bench_median(ratio, passes);

        const int insn = peak_insn(ks);
        if (ks->isa == MOE_REQ_SCALAR) {
            printf("%-40s %9.2f %5.0f%% %10s %6s %s\n", ks->name, dec, 100 * dec_ratio, "-", "-",
                   "-");
        } else {
            /* Prefill: one expert, tiles reused across chunks. */
            const int reps = quick ? 1 : 3;
            const double flops = 2.0 * PREFILL_T * ((double)2 * I * H + (double)H * I);
            prefill_expert(ks, &pk, &a, es);
            for (int p = 0; p < reps; p++) {
                double t0 = thread_ns();
                prefill_expert(ks, &pk, &a, es);
                t[p] = thread_ns() - t0;
            }
            const double pre = flops / bench_median(t, reps);
            printf("%-40s %9.2f %5.0f%% %10.1f %5.0f%% %s\n", ks->name, dec, 100 * dec_ratio, pre,
                   peak[insn] > 0 ? 100 * pre / peak[insn] : 0.0, insn_name(insn));
        }
        fflush(stdout);
        acts_free(&a);
        free(pk.p);
    }
mxfp4:
    printf("# MXFP4, Q8 recipe: decode m=1 streaming (GB/s of packed bytes); prefill T=%d "
           "(GOP/s, 2 per multiply-add)\n",
           PREFILL_T);
    printf("%-40s %-18s %9s %6s %10s %6s %s\n", "kernel set", "shape", "dec GB/s", "%read",
           "pre GOP/s", "%peak", "peak of");
    for (size_t r = 0; r < count; r++) {
        const moe_kernel *k = &reg[r];
        if (k->family != MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8) continue;
        const moe_expert_kernels *ks = k->fn.expert_set;
        if ((ks->isa & ~allowed) != 0) continue;
        if (ks->isa == MOE_REQ_SCALAR && !with_ref) continue;
        for (size_t sh = 0; sh < sizeof mx_shapes / sizeof mx_shapes[0]; sh++)
            if (mx_bench_set(ks, &mx_shapes[sh], &buf, llc, peak, quick)) return 1;
    }
    bench_buffer_free(&buf);
    return 0;
}
