/* bench_expert_kernels.c — the expert kernel sets alone: decode GB/s and prefill GFLOP/s against
 * the machine's read bandwidth and instruction peaks, measured in the same run. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE for the flush buffer (bench/bench_util.h) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "bench_util.h"
#include "dtype/dtype.h"
#include "experts/experts.h"
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
 *           each pass (median of the per-pass ratios), in the read pattern of bench_util.h
 *           that read fastest at the start of the run. Each phase's tiles in the calls the
 *           engine makes (stream_expert): one call of the multi-tile entry where the set
 *           takes one token there, else tile by tile. A second line splits the figure by
 *           phase (gate/up, down: their tiles differ in size, DeepSeek-V3 FP8 230 KB / 33 KB).
 *  prefill: 512 tokens of one expert in chunks of MR, tiles in groups of about 1 MiB: each
 *           group runs all chunks while it sits in L2 (prefill_expert). Figure: GFLOP/s
 *           (2·M·N·K per projection), beside the 1-thread peak of the recipe's instruction
 *           (vfmadd231ps zmm or ymm, vdpbf16ps zmm) from a register-only loop of the same run.
 *
 * MXFP4 (Q8 recipe), after the above, for two expert shapes: gpt-oss-20b (H = I = 2880) and
 * DeepSeek-V4-Flash (H = 4096, I = 2048), on --threads N threads (each its share of every
 * phase's tiles). Decode at T = 1, 4, 16 tokens per expert as above (experts past twice the
 * LLC), over the packed bytes (4.25 bits per weight) and as a fraction of the read floor
 * measured before each pass (in the pattern that read fastest on those threads); each token's
 * x row is prepared once, the h rows between the phases inside the timing (prepare_act is part
 * of the recipe's cost). Prefill at T = 128, 512 tokens of one expert as above; GOP/s at 2 ops
 * per multiply-add, as a fraction of the peak of the set's instruction: vpdpbusd zmm (64
 * multiply-adds per instruction) or ymm (AVX-VNNI: 32), or for the sets without VNNI
 * vpmaddubsw (ymm: 32, zmm: 64). The tile recipe's MXFP4 sets run beside them on bf16 x and
 * h rows (rounded once, outside the timing, as the layer rounds x once per forward), against
 * tdpbf16ps's peak (AMX-BF16) or the FMA's. The INT4 sets of both recipes (q8: the q8
 * recipe's units, f32 group scales; tile: the INT4 tile pairs) join this part at Kimi-K2's
 * expert shape (H = 7168, I = 2048), group 32, bf16 scales; their decode counts their packed
 * bytes (5 bits per weight).
 *
 * Peaks are bench_util.h's register-only loops (12 chains, each from its own start value).
 * Times are CLOCK_THREAD_CPUTIME_ID on one thread (the machine is shared: CPU time of this
 * thread is what the kernel cost), wall time on more, medians of several passes.
 *
 * --mid adds, per bf16/FP8 set, the mid batch: m = 1..32 tokens per expert streaming from
 * memory (every tile once, in calls of at most MR tokens), as a fraction of the floor
 * max(bytes / read, flops / peak) — where an engine falls between its vector and its
 * prefill path — and the same calls over tiles that stay in L2, as a fraction of the peak:
 * where the two agree, the core bounds the mid batch, not the memory stream. Usage:
 * bench_expert_kernels [--ref] [--quick] [--mid] [--mxfp4] (only the MXFP4 part) [--threads N]
 * (the MXFP4 part; default 1) [--set TEXT] (only the sets whose name contains TEXT) [--huge]
 * (the packed experts in 2 MiB pages; below). */

#define H 7168
#define I 2048
#define PREFILL_T 512

static double thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One thread is timed in its CPU time (the machine is shared); more threads in wall time. */
static double clock_ns(int threads) { return threads == 1 ? thread_ns() : bench_now_ns(); }

/* The read patterns (bench_util.h) of the per-pass floors: the ones that read fastest at the
 * start of the run on one thread (main) and on the MXFP4 part's threads (mx_bench), as `moe
 * bench` takes the fastest of them. */
static int read_pattern, mx_pattern;

/* --huge: the packed experts in 2 MiB pages where the system gives them, as the library
 * allocates them (moe_malloc_huge); without it in the system's default pages (4 KiB under
 * THP "madvise" or "never"), where one stream per core reads slower and the kernels that
 * read two (the bf16 tiles' two halves, MXFP4 decode's tile pairs) gain more. */
static int huge_pages;

/* The read floor beside each pass: GB/s of one read of the whole buffer on THREADS threads
 * in PATTERN, timed like the kernels, so both sides of the ratio count the same thing. */
static double read_floor(const bench_buffer *b, int threads, int pattern)
{
    const double t0 = clock_ns(threads);
    bench_read_shares(b, threads, pattern);
    return (double)bench_shares_bytes(b, threads) / (clock_ns(threads) - t0);
}

/* GFLOP/s (GOP/s for the integer instructions) of one thread: bench_util.h's loop of insn
 * (12 independent chains, each from its own start value), timed in thread CPU time as the
 * kernels are; the median of 7 runs. 0 when the CPU lacks the instruction. */
static double peak_gflops(bench_insn insn)
{
    if (!bench_insn_supported(insn)) return 0;
    const uint64_t iters = 4000000;
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = thread_ns();
        bench_insn_loop(insn, iters);
        t[r] = thread_ns() - t0;
    }
    return 12.0 * bench_insn_flops(insn) * (double)iters / bench_median(t, 7);
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
    out->p = bench_alloc_pages(out->expert_bytes * (size_t)n, huge_pages);
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

/* Gate/up tiles [t0, t0 + n) of the tiles at base for the m tokens from token c: one call of
 * the set's multi-tile entry where the engine makes one (moe_expert_uses_tiles), else
 * tile by tile. */
static void gateup_calls(const moe_expert_kernels *ks, const packed *pk, const unsigned char *base,
                         acts *a, size_t es, size_t c, size_t m, int t0, int n)
{
    float *h = (float *)(void *)(a->hbuf + (c * I + (size_t)t0 * MOE_EXPERT_NR) * es);
    if (moe_expert_uses_tiles(ks, true, m)) {
        ks->gateup_tiles(m, H, (const void *const *)&a->x[c], base + pk->gateup_tb * (size_t)t0,
                         (size_t)n, &act, h, I, MOE_EXPERT_NR);
        return;
    }
    for (int t = t0; t < t0 + n; t++)
        ks->gateup(m, H, (const void *const *)&a->x[c], base + pk->gateup_tb * (size_t)t, &act,
                   a->hbuf + (c * I + (size_t)t * MOE_EXPERT_NR) * es, I, MOE_EXPERT_NR);
}

/* The same for down tiles [t0, t0 + n) of the down tiles at base. */
static void down_calls(const moe_expert_kernels *ks, const packed *pk, const unsigned char *base,
                       acts *a, size_t c, size_t m, int t0, int n)
{
    if (moe_expert_uses_tiles(ks, false, m)) {
        ks->down_tiles(m, I, (const void *const *)&a->h[c], base + pk->down_tb * (size_t)t0,
                       (size_t)n, a->y + c * H + (size_t)t0 * MOE_EXPERT_NR, H, MOE_EXPERT_NR);
        return;
    }
    for (int t = t0; t < t0 + n; t++)
        ks->down(m, I, (const void *const *)&a->h[c], base + pk->down_tb * (size_t)t,
                 a->y + c * H + (size_t)t * MOE_EXPERT_NR, H, MOE_EXPERT_NR);
}

/* The first gt gate/up and dt down tiles of expert e for m tokens, in calls of at most MR
 * tokens, each run of tiles read once for all of them: all tiles in one run for m ≤ MR, else
 * runs of 4 tiles through a multi-tile entry and single tiles without (the engine's runs, but
 * for the L2-sized runs of the sets without one, which read each tile once all the same).
 * phase_ns (NULL: not timed): the thread time of the gate/up and the down calls added. */
static void expert_tiles(const moe_expert_kernels *ks, const packed *pk, int e, acts *a, size_t es,
                         size_t m, int gt, int dt, double *phase_ns)
{
    const double t0 = phase_ns ? thread_ns() : 0;
    const size_t mr = (size_t)ks->mr;
    const bool multi = moe_expert_uses_tiles(ks, true, mr) || moe_expert_uses_tiles(ks, false, mr);
    const int run = m <= mr ? (gt > dt ? gt : dt) : multi ? 4 : 1;
    const unsigned char *base = pk->p + pk->expert_bytes * (size_t)e;
    for (int j = 0; j < gt; j += run)
        for (size_t c = 0; c < m; c += mr)
            gateup_calls(ks, pk, base, a, es, c, m - c < mr ? m - c : mr, j,
                         gt - j < run ? gt - j : run);
    const double t1 = phase_ns ? thread_ns() : 0;
    for (int j = 0; j < dt; j += run)
        for (size_t c = 0; c < m; c += mr)
            down_calls(ks, pk, base + pk->gateup_bytes, a, c, m - c < mr ? m - c : mr, j,
                       dt - j < run ? dt - j : run);
    if (phase_ns) {
        phase_ns[0] += t1 - t0;
        phase_ns[1] += thread_ns() - t1;
    }
}

/* Every tile of expert e once from memory for m tokens (phase_ns: as expert_tiles). */
static void stream_expert(const moe_expert_kernels *ks, const packed *pk, int e, acts *a, size_t es,
                          size_t m, double *phase_ns)
{
    expert_tiles(ks, pk, e, a, es, m, I / MOE_EXPERT_NR, H / MOE_EXPERT_NR, phase_ns);
}

/* The decode passes' GB/s of each phase over its total thread time: a phase whose tiles are
 * small reads slower where the kernel's cost per tile, or per block in it, shows. */
static void print_phases(const packed *pk, int n, int passes, const double *phase_ns)
{
    const double reads = (double)n * passes;
    const size_t down_bytes = pk->expert_bytes - pk->gateup_bytes;
    printf("%-40s decode by phase: gate/up %.2f GB/s (%.1f KB tiles), down %.2f GB/s (%.1f KB "
           "tiles)\n",
           "", (double)pk->gateup_bytes * reads / phase_ns[0], pk->gateup_tb / 1024.0,
           (double)down_bytes * reads / phase_ns[1], pk->down_tb / 1024.0);
}

static const size_t mid_m[] = {1, 2, 4, 8, 9, 16, 32}; /* 9: one past a full group */
#define MID_COUNT (sizeof mid_m / sizeof mid_m[0])

/* The fraction of the floor max(bytes / read, flops / peak) at each m of mid_m, passes over
 * all n experts (each pass after a read-floor pass, ratios taken pass by pass; medians). */
static void mid_batch(const moe_expert_kernels *ks, const packed *pk, acts *a, size_t es,
                      const bench_buffer *buf, double peak, int passes, double *eff)
{
    for (size_t j = 0; j < MID_COUNT; j++) {
        const size_t m = mid_m[j];
        const double flops = 2.0 * (double)m * 3.0 * H * I * pk->n;
        const double bytes = (double)pk->expert_bytes * pk->n;
        double ratio[8];
        stream_expert(ks, pk, 0, a, es, m, NULL);
        for (int p = 0; p < passes; p++) {
            const double rd = read_floor(buf, 1, read_pattern), t0 = thread_ns();
            for (int e = 0; e < pk->n; e++)
                stream_expert(ks, pk, e, a, es, m, NULL);
            const double ns = thread_ns() - t0, mem = bytes / rd, fl = flops / peak;
            ratio[p] = (mem > fl ? mem : fl) / ns;
        }
        eff[j] = bench_median(ratio, passes);
    }
}

/* The fraction of the instruction peak at each m of mid_m with the tiles in L2 (expert_tiles
 * of expert 0 over half of moe_expert_run_bytes() of gate/up tiles and as much of down
 * tiles, repeated for about 20 ms; medians of passes): what the kernel computes when memory
 * costs nothing, so beside mid_batch it says whether the core or the stream bounds it. */
static void mid_hot(const moe_expert_kernels *ks, const packed *pk, acts *a, size_t es, double peak,
                    int passes, double *eff)
{
    const size_t half = moe_expert_run_bytes() / 2;
    int gt = (int)(half / pk->gateup_tb), dt = (int)(half / pk->down_tb);
    if (gt < 1) gt = 1;
    if (dt < 1) dt = 1;
    if (gt > I / MOE_EXPERT_NR) gt = I / MOE_EXPERT_NR;
    if (dt > H / MOE_EXPERT_NR) dt = H / MOE_EXPERT_NR;
    for (size_t j = 0; j < MID_COUNT; j++) {
        const size_t m = mid_m[j];
        const double flops =
            2.0 * (double)m * MOE_EXPERT_NR * ((double)gt * 2 * H + (double)dt * I);
        double t[8];
        expert_tiles(ks, pk, 0, a, es, m, gt, dt, NULL);
        const double t1 = thread_ns();
        expert_tiles(ks, pk, 0, a, es, m, gt, dt, NULL);
        const double one = thread_ns() - t1;
        const int reps = one > 0 && one < 2e7 ? (int)(2e7 / one) + 1 : 1;
        for (int p = 0; p < passes; p++) {
            const double t0 = thread_ns();
            for (int r = 0; r < reps; r++)
                expert_tiles(ks, pk, 0, a, es, m, gt, dt, NULL);
            t[p] = thread_ns() - t0;
        }
        eff[j] = flops * reps / bench_median(t, passes) / peak;
    }
}

/* Prefill: tiles in groups that, with one chunk of activations, fill moe_expert_run_bytes()
 * (3/4 of the L2); each group runs all chunks of MR tokens while its tiles sit in L2, and each
 * chunk's activations, loaded once, serve the group's tiles: the engine's runs of tiles
 * (src/experts/engine.c). */
static int group_of(size_t tile_bytes, size_t chunk_bytes)
{
    const size_t budget = moe_expert_run_bytes();
    size_t g = chunk_bytes < budget ? (budget - chunk_bytes) / tile_bytes : 0;
    return g < 1 ? 1 : (int)g;
}

static void prefill_expert(const moe_expert_kernels *ks, const packed *pk, acts *a, size_t es)
{
    const size_t mr = (size_t)ks->mr;
    const int gg = group_of(pk->gateup_tb, mr * H * es), gd = group_of(pk->down_tb, mr * I * es);
    for (int t0 = 0; t0 < I / MOE_EXPERT_NR; t0 += gg)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            const int n = I / MOE_EXPERT_NR - t0 < gg ? I / MOE_EXPERT_NR - t0 : gg;
            gateup_calls(ks, pk, pk->p, a, es, c, PREFILL_T - c < mr ? PREFILL_T - c : mr, t0, n);
        }
    for (int t0 = 0; t0 < H / MOE_EXPERT_NR; t0 += gd)
        for (size_t c = 0; c < PREFILL_T; c += mr) {
            const int n = H / MOE_EXPERT_NR - t0 < gd ? H / MOE_EXPERT_NR - t0 : gd;
            down_calls(ks, pk, pk->p + pk->gateup_bytes, a, c,
                       PREFILL_T - c < mr ? PREFILL_T - c : mr, t0, n);
        }
}

static bench_insn peak_insn(const moe_expert_kernels *ks)
{
    if (ks->recipe == MOE_RECIPE_Q8)
        return ks->isa == MOE_REQ_AVX512AMX    ? BENCH_TDPBSSD_K32
               : ks->isa == MOE_REQ_AVX512VNNI ? BENCH_DPBUSD_ZMM
               : ks->isa == MOE_REQ_AVXVNNI    ? BENCH_DPBUSD_YMM
               : ks->isa == MOE_REQ_AVX2       ? BENCH_MADDUBS_YMM
                                               : BENCH_MADDUBS_ZMM;
    /* The bf16 recipe below AVX512-BF16 runs two FMAs per pair step: the FMA's peak. */
    if (ks->recipe == MOE_RECIPE_BF16 && ks->isa == MOE_REQ_AVX512BF16) return BENCH_DPBF16_ZMM;
    /* The tile recipe's AMX sets: tdpbf16ps; below it two FMA chains per chunk. */
    if (ks->recipe == MOE_RECIPE_TILE && ks->isa == MOE_REQ_AVX512AMXBF16) return BENCH_TDPBF16PS;
    return ks->isa == MOE_REQ_AVX2 ? BENCH_FMA_YMM : BENCH_FMA_ZMM;
}

/* ---- MXFP4 experts (Q8 and tile recipes) ------------------------------------------------------ */

typedef struct mx_shape {
    const char *name;
    int h, i;
} mx_shape;

static const mx_shape mx_shapes[] = {{"gpt-oss-20b", 2880, 2880},
                                     {"DeepSeek-V4-Flash", 4096, 2048}};
static const mx_shape int4_shapes[] = {{"Kimi-K2", 7168, 2048}};

/* n copies of one random expert of shape sh (codes uniform, scales 2^-7..2^-4, biases). */
static int mx_pack_experts(const moe_expert_kernels *ks, const mx_shape *sh, int n, packed *out)
{
    const int NH = sh->h, NI = sh->i;
    out->gateup_tb = ks->gateup_tile_bytes(NH);
    out->down_tb = ks->down_tile_bytes(NI);
    out->gateup_bytes = out->gateup_tb * (size_t)((NI + 15) / 16);
    out->expert_bytes = out->gateup_bytes + out->down_tb * (size_t)((NH + 15) / 16);
    out->n = n;
    out->p = bench_alloc_pages(out->expert_bytes * (size_t)n, huge_pages);
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
    /* INT4: bf16 group scales (two bytes each, group 32) instead of E8M0 bytes. */
    const bool int4 = ks->format == MOE_EXPERT_FMT_INT4_GROUP;
    for (int j = 0; j < 3 && int4; j++) {
        free(sc[j]);
        sc[j] = malloc(nw / 16);
        if (!sc[j]) return -1;
    }
    for (int j = 0; j < 3; j++) {
        for (size_t i = 0; i < nw / 2; i++)
            w[j][i] = (unsigned char)bench_rand(&rng);
        for (size_t i = 0; i < nw / 32; i++) {
            if (!int4) {
                sc[j][i] = (unsigned char)(120 + bench_rand(&rng) % 4);
                continue;
            }
            const uint16_t s = (uint16_t)(0x3B80 + bench_rand(&rng) % 128); /* bf16 ~ 0.004-0.008 */
            memcpy(sc[j] + 2 * i, &s, 2);
        }
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
    if (int4) {
        g.dtype = MOE_DTYPE_I32;
        g.scale_dtype = MOE_DTYPE_BF16;
    }
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

/* The activations of the MXFP4 bench. Q8: x prepared once (k = NH) per token; h in f32 and its
 * prepared rows (k = NI), written by the phases. Tile: x and h bf16 rows (h written by gate/up
 * in place of the f32 rows, read by down as they are). */
typedef struct mx_acts {
    const void *xq[PREFILL_T], *hq[PREFILL_T];
    unsigned char *xbuf, *hqbuf;
    float *h, *y;
    size_t xrow, hrow;
    bool tile;
} mx_acts;

static int mx_acts_init(mx_acts *a, const moe_expert_kernels *ks, const mx_shape *sh)
{
    a->tile = ks->recipe == MOE_RECIPE_TILE;
    a->xrow = a->tile ? (size_t)sh->h * 2 : ks->act_row_bytes(sh->h);
    a->hrow = a->tile ? (size_t)sh->i * 2 : ks->act_row_bytes(sh->i);
    a->xbuf = aligned_alloc(64, (size_t)PREFILL_T * a->xrow);
    a->hqbuf = aligned_alloc(64, (size_t)PREFILL_T * a->hrow);
    a->h = aligned_alloc(64, (size_t)PREFILL_T * (size_t)sh->i * sizeof(float));
    a->y = aligned_alloc(64, (size_t)PREFILL_T * (size_t)sh->h * sizeof(float));
    float *x = malloc((size_t)sh->h * sizeof(float));
    if (!a->xbuf || !a->hqbuf || !a->h || !a->y || !x) return -1;
    for (int t = 0; t < PREFILL_T; t++) {
        unsigned char *row = a->xbuf + (size_t)t * a->xrow;
        for (int j = 0; j < sh->h; j++)
            x[j] = (float)(bench_gauss(&rng) * 0.5);
        if (a->tile)
            for (int j = 0; j < sh->h; j++)
                ((uint16_t *)row)[j] = moe_f32_to_bf16(x[j]);
        else
            ks->prepare_act((size_t)sh->h, x, row);
        a->xq[t] = row;
        a->hq[t] = a->hqbuf + (size_t)t * a->hrow;
    }
    memset(a->h, 0, (size_t)PREFILL_T * (size_t)sh->i * sizeof(float));
    memset(a->hqbuf, 0, (size_t)PREFILL_T * a->hrow);
    free(x);
    return 0;
}

/* Where gate/up writes token c's outputs of tile t: the f32 h rows (Q8), the bf16 rows (tile). */
static void *mx_h_at(const mx_acts *a, size_t NI, size_t c, size_t t)
{
    if (a->tile) return (uint16_t *)a->hqbuf + c * NI + t * 16;
    return a->h + c * NI + t * 16;
}

static void mx_acts_free(mx_acts *a)
{
    free(a->xbuf);
    free(a->hqbuf);
    free(a->h);
    free(a->y);
}

static const moe_act_params mx_act = {.kind = 2, .limit = 7.0f, .alpha = 1.702f};

/* Tiles [lo, hi) of one phase of expert base for T tokens: groups of tiles that fit in L2
 * beside one chunk of activations, each group over all chunks of MR tokens (as
 * prefill_expert; with T ≤ MR, one chunk and the tiles in order); a group is one call of the
 * set's multi-tile entry when it has one (as the engine calls it). */
static void mx_gateup_phase(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                            const unsigned char *base, mx_acts *a, size_t T, int lo, int hi)
{
    const size_t mr = (size_t)ks->mr, NH = (size_t)sh->h, NI = (size_t)sh->i;
    const int gg = group_of(pk->gateup_tb, mr * a->xrow);
    for (int t0 = lo; t0 < hi; t0 += gg)
        for (size_t c = 0; c < T; c += mr) {
            const size_t m = T - c < mr ? T - c : mr;
            const int n = hi - t0 < gg ? hi - t0 : gg;
            if (ks->gateup_tiles)
                ks->gateup_tiles(m, NH, &a->xq[c], base + pk->gateup_tb * (size_t)t0, (size_t)n,
                                 &mx_act, mx_h_at(a, NI, c, (size_t)t0), NI, 16);
            else
                for (int t = t0; t < t0 + n; t++)
                    ks->gateup(m, NH, &a->xq[c], base + pk->gateup_tb * (size_t)t, &mx_act,
                               mx_h_at(a, NI, c, (size_t)t), NI, 16);
        }
}

static void mx_down_phase(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                          const unsigned char *base, mx_acts *a, size_t T, int lo, int hi)
{
    const size_t mr = (size_t)ks->mr, NH = (size_t)sh->h, NI = (size_t)sh->i;
    const int gd = group_of(pk->down_tb, mr * a->hrow);
    const unsigned char *down = base + pk->gateup_bytes;
    for (int t0 = lo; t0 < hi; t0 += gd)
        for (size_t c = 0; c < T; c += mr) {
            const size_t m = T - c < mr ? T - c : mr;
            const int n = hi - t0 < gd ? hi - t0 : gd;
            if (ks->down_tiles)
                ks->down_tiles(m, NI, &a->hq[c], down + pk->down_tb * (size_t)t0, (size_t)n,
                               a->y + c * NH + (size_t)t0 * 16, NH, 16);
            else
                for (int t = t0; t < t0 + n; t++)
                    ks->down(m, NI, &a->hq[c], down + pk->down_tb * (size_t)t,
                             a->y + c * NH + (size_t)t * 16, NH, 16);
        }
}

/* Expert e for T tokens on `threads` threads, each with its contiguous share of the tiles:
 * gate/up, the T h rows prepared (Q8: prepare_act is part of the recipe's cost), down. */
static void mx_expert(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk, int e,
                      mx_acts *a, size_t T, int threads)
{
    const unsigned char *base = pk->p + pk->expert_bytes * (size_t)e;
    const int gt = sh->i / 16, dt = sh->h / 16;
#pragma omp parallel num_threads(threads)
    {
        const int id = omp_get_thread_num(), nt = omp_get_num_threads();
        mx_gateup_phase(ks, sh, pk, base, a, T, gt * id / nt, gt * (id + 1) / nt);
#pragma omp barrier
#pragma omp for schedule(static)
        for (size_t c = 0; c < (a->tile ? 0 : T); c++)
            ks->prepare_act((size_t)sh->i, a->h + c * (size_t)sh->i, a->hqbuf + c * a->hrow);
        mx_down_phase(ks, sh, pk, base, a, T, dt * id / nt, dt * (id + 1) / nt);
    }
}

static const size_t mx_decode_t[] = {1, 4, 16};
static const size_t mx_prefill_t[] = {128, 512};

/* Decode at T tokens per expert: passes over n experts (2 LLCs, so every byte comes from
 * memory), each after a pass of the read floor; the median of the per-pass ratios of packed
 * bytes per second to the floor. Returns GB/s and sets *ratio. */
static double mx_decode(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                        mx_acts *a, size_t T, const bench_buffer *buf, int threads, int passes,
                        double *ratio)
{
    double t[8], r[8];
    mx_expert(ks, sh, pk, 0, a, T, threads);
    for (int p = 0; p < passes; p++) {
        const double rd = read_floor(buf, threads, mx_pattern);
        const double t0 = clock_ns(threads);
        for (int e = 0; e < pk->n; e++)
            mx_expert(ks, sh, pk, e, a, T, threads);
        t[p] = clock_ns(threads) - t0;
        r[p] = (double)pk->expert_bytes * pk->n / t[p] / rd;
    }
    *ratio = bench_median(r, passes);
    return (double)pk->expert_bytes * pk->n / bench_median(t, passes);
}

/* The peak of insn on `threads` threads, timed like the kernels: one run of about 0.1 s. */
static double mx_peak(bench_insn insn, int threads)
{
    const uint64_t iters = 2000000;
    const double t0 = clock_ns(threads);
#pragma omp parallel num_threads(threads)
    bench_insn_loop(insn, iters);
    return 12.0 * bench_insn_flops(insn) * (double)iters * threads / (clock_ns(threads) - t0);
}

/* Prefill at T tokens of one expert (its tiles reused from L2): GOP/s, 2 per multiply-add,
 * and in *ratio the median of the per-repetition ratios to the peak of insn measured just
 * before each (the clock of a shared machine drifts between runs as the bandwidth does). */
static double mx_prefill(const moe_expert_kernels *ks, const mx_shape *sh, const packed *pk,
                         mx_acts *a, size_t T, int threads, int reps, bench_insn insn,
                         double *ratio)
{
    double t[8], r[8];
    const double ops = 2.0 * (double)T * 3.0 * (double)sh->h * (double)sh->i;
    mx_expert(ks, sh, pk, 0, a, T, threads);
    for (int p = 0; p < reps; p++) {
        const double peak = mx_peak(insn, threads);
        const double t0 = clock_ns(threads);
        mx_expert(ks, sh, pk, 0, a, T, threads);
        t[p] = clock_ns(threads) - t0;
        r[p] = peak > 0 ? ops / t[p] / peak : 0;
    }
    *ratio = bench_median(r, reps);
    return ops / bench_median(t, reps);
}

/* One table row: a set at a shape, decode T = 1, 4, 16 (GB/s, fraction of the floor) and
 * prefill T = 128, 512 (GOP/s, fraction of the peak of the set's instruction). The reference
 * only decodes T = 1 (it is slow). */
static int mx_bench_set(const moe_expert_kernels *ks, const mx_shape *sh, const bench_buffer *buf,
                        size_t llc, int threads, bool quick)
{
    const size_t one = ks->gateup_tile_bytes(sh->h) * (size_t)(sh->i / 16) +
                       ks->down_tile_bytes(sh->i) * (size_t)(sh->h / 16);
    int n = (int)((2 * llc + one - 1) / one);
    if (n < 2) n = 2;
    packed pk;
    mx_acts a;
    if (mx_pack_experts(ks, sh, n, &pk) || mx_acts_init(&a, ks, sh)) return -1;
    const bool ref = ks->isa == MOE_REQ_SCALAR;
    const int passes = quick ? 3 : 7, reps = quick ? 1 : 3;
    printf("%-38s %-17s", ks->name, sh->name);
    for (size_t i = 0; i < sizeof mx_decode_t / sizeof mx_decode_t[0]; i++) {
        if (ref && i > 0) {
            printf(" %14s", "-");
            continue;
        }
        double ratio;
        const double gbs = mx_decode(ks, sh, &pk, &a, mx_decode_t[i], buf, threads, passes, &ratio);
        printf(" %6.2f %6.2f", gbs, ratio);
        fflush(stdout);
    }
    const bench_insn insn = peak_insn(ks);
    for (size_t i = 0; i < sizeof mx_prefill_t / sizeof mx_prefill_t[0]; i++) {
        if (ref) {
            printf(" %14s", "-");
            continue;
        }
        double ratio;
        const double gops =
            mx_prefill(ks, sh, &pk, &a, mx_prefill_t[i], threads, reps, insn, &ratio);
        printf(" %6.1f %6.2f", gops, ratio);
        fflush(stdout);
    }
    printf("  %s\n", ref ? "-" : bench_insn_name(insn));
    fflush(stdout);
    mx_acts_free(&a);
    free(pk.p);
    return 0;
}

/* The MXFP4 table on `threads` threads: its floors (the peaks on that many threads), then a
 * row per allowed set and shape. */
static int mx_bench(const moe_kernel *reg, size_t count, uint32_t allowed, const bench_buffer *buf,
                    size_t llc, const double *peak1, int threads, bool with_ref, bool quick,
                    const char *only_set)
{
    double peak[BENCH_INSN_COUNT_];
    for (int i = 0; i < BENCH_INSN_COUNT_; i++)
        peak[i] = peak1[i] > 0 && threads > 1 ? mx_peak((bench_insn)i, threads) : peak1[i];
    (void)bench_stream_read_pattern(buf, threads, 2, &mx_pattern);
    printf("# MXFP4 and INT4 (Q8 and tile recipes), %d thread(s): read %.2f GB/s (%s); peaks "
           "vpdpbusd zmm %.1f, ymm %.1f, vpmaddubsw ymm %.1f, zmm %.1f, tdpbssd k32 %.1f, "
           "tdpbf16ps %.1f, fma zmm %.1f GOP/s\n",
           threads, read_floor(buf, threads, mx_pattern), bench_read_pattern_name(mx_pattern),
           peak[BENCH_DPBUSD_ZMM], peak[BENCH_DPBUSD_YMM], peak[BENCH_MADDUBS_YMM],
           peak[BENCH_MADDUBS_ZMM], peak[BENCH_TDPBSSD_K32], peak[BENCH_TDPBF16PS],
           peak[BENCH_FMA_ZMM]);
    printf("# decode T=1,4,16: GB/s of packed bytes and fraction of the read floor; prefill "
           "T=128,512: GOP/s and fraction of the peak (both measured beside each pass)\n");
    printf("%-38s %-17s %14s %14s %14s %14s %14s  %s\n", "kernel set", "shape", "T=1", "T=4",
           "T=16", "T=128", "T=512", "peak of");
    for (size_t r = 0; r < count; r++) {
        const moe_kernel *k = &reg[r];
        const bool int4 = k->family == MOE_KERNEL_FAMILY_EXPERT_INT4_Q8 ||
                          k->family == MOE_KERNEL_FAMILY_EXPERT_INT4_TILE;
        if (k->family != MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8 &&
            k->family != MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE && !int4)
            continue;
        const moe_expert_kernels *ks = k->fn.expert_set;
        if ((ks->isa & ~allowed) != 0) continue;
        if (ks->isa == MOE_REQ_SCALAR && !with_ref) continue;
        if (only_set && !strstr(ks->name, only_set)) continue;
        const mx_shape *shapes = int4 ? int4_shapes : mx_shapes;
        const size_t ns = int4 ? sizeof int4_shapes / sizeof int4_shapes[0]
                               : sizeof mx_shapes / sizeof mx_shapes[0];
        for (size_t sh = 0; sh < ns; sh++)
            if (mx_bench_set(ks, &shapes[sh], buf, llc, threads, quick)) return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bool with_ref = false, quick = false, only_mx = false, mid = false;
    int threads = 1;
    const char *only_set = NULL;
    static const char usage[] = "usage: bench_expert_kernels [--ref] [--quick] [--mid] [--mxfp4] "
                                "[--threads N] [--set TEXT] [--huge]\n";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ref")) {
            with_ref = true;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--mxfp4")) {
            only_mx = true;
        } else if (!strcmp(argv[i], "--mid")) {
            mid = true;
        } else if (!strcmp(argv[i], "--huge")) {
            huge_pages = true;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            only_set = argv[++i];
        } else { /* --help, or anything else: the usage, and no run */
            fputs(usage, strcmp(argv[i], "--help") ? stderr : stdout);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "bench_expert_kernels: --threads must be 1..64\n");
        return 2;
    }
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) return 1;
    const uint32_t allowed = moe_cpu_caps_mask(&info.allowed);

    bench_buffer buf;
    if (bench_buffer_init(&buf)) return 1;
    double rt[7];
    (void)bench_stream_read_pattern(&buf, 1, 2, &read_pattern);
    for (int r = 0; r < 7; r++)
        rt[r] = read_floor(&buf, 1, read_pattern);
    const double read_gbs = bench_median(rt, 7);
    const size_t llc = bench_llc_bytes();
    /* The features each instruction needs, so MOE_ISA masks the peaks as it masks the sets. */
    static const uint32_t needs[BENCH_INSN_COUNT_] = {MOE_FEAT_AVX2,
                                                      MOE_FEAT_AVX512,
                                                      MOE_FEAT_AVX512 | MOE_FEAT_AVX512_BF16,
                                                      MOE_FEAT_AVX512 | MOE_FEAT_AVX512_VNNI,
                                                      MOE_FEAT_AVX2,
                                                      MOE_FEAT_AVX512,
                                                      MOE_FEAT_AVX2 | MOE_FEAT_AVX_VNNI,
                                                      MOE_FEAT_AVX512 | MOE_FEAT_AMX_INT8,
                                                      MOE_FEAT_AVX512 | MOE_FEAT_AVX512_BF16 |
                                                          MOE_FEAT_AMX_BF16};
    double peak[BENCH_INSN_COUNT_];
    for (int i = 0; i < BENCH_INSN_COUNT_; i++)
        peak[i] = (allowed & needs[i]) == needs[i] ? peak_gflops((bench_insn)i) : 0;
    printf("# 1 thread; read %.2f GB/s (%s); peaks: fma ymm %.1f, fma zmm %.1f, vdpbf16ps %.1f, "
           "tdpbf16ps %.1f GFLOP/s; vpdpbusd %.1f, ymm %.1f, vpmaddubsw ymm %.1f, zmm %.1f GOP/s; "
           "LLC %zu MiB\n",
           read_gbs, bench_read_pattern_name(read_pattern), peak[BENCH_FMA_YMM],
           peak[BENCH_FMA_ZMM], peak[BENCH_DPBF16_ZMM], peak[BENCH_TDPBF16PS], peak[BENCH_DPBUSD_ZMM],
           peak[BENCH_DPBUSD_YMM], peak[BENCH_MADDUBS_YMM], peak[BENCH_MADDUBS_ZMM], llc >> 20);
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    if (only_mx) goto mxfp4;
    printf("# DeepSeek-V3 expert H=%d I=%d; decode m=1 streaming; prefill T=%d in chunks of MR\n",
           H, I, PREFILL_T);
    printf("%-40s %9s %6s %10s %6s %s\n", "kernel set", "dec GB/s", "%read", "pre GF/s", "%peak",
           "peak of");

    for (size_t r = 0; r < count; r++) {
        const moe_kernel *k = &reg[r];
        if ((k->family < MOE_KERNEL_FAMILY_EXPERT_BF16_F32 ||
             k->family > MOE_KERNEL_FAMILY_EXPERT_FP8_BF16) &&
            k->family != MOE_KERNEL_FAMILY_EXPERT_BF16_TILE &&
            k->family != MOE_KERNEL_FAMILY_EXPERT_FP8_TILE)
            continue;
        const moe_expert_kernels *ks = k->fn.expert_set;
        if ((ks->isa & ~allowed) != 0) continue;
        if (ks->isa == MOE_REQ_SCALAR && !with_ref) continue;
        if (only_set && !strstr(ks->name, only_set)) continue;
        const size_t es = moe_recipe_bf16_rows(ks->recipe) ? 2 : 4;
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
        double t[8], ratio[8], phase_ns[2] = {0, 0};
        stream_expert(ks, &pk, 0, &a, es, 1, NULL);
        for (int p = 0; p < passes; p++) {
            double rd = read_floor(&buf, 1, read_pattern);
            double t0 = thread_ns();
            for (int e = 0; e < n; e++)
                stream_expert(ks, &pk, e, &a, es, 1, phase_ns);
            t[p] = thread_ns() - t0;
            ratio[p] = (double)pk.expert_bytes * n / t[p] / rd;
        }
        const double dec = (double)pk.expert_bytes * n / bench_median(t, passes);
        const double dec_ratio = bench_median(ratio, passes);

        const bench_insn insn = peak_insn(ks);
        if (ks->isa == MOE_REQ_SCALAR) {
            printf("%-40s %9.2f %5.0f%% %10s %6s %s\n", ks->name, dec, 100 * dec_ratio, "-", "-",
                   "-");
            print_phases(&pk, n, passes, phase_ns);
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
                   peak[insn] > 0 ? 100 * pre / peak[insn] : 0.0, bench_insn_name(insn));
            print_phases(&pk, n, passes, phase_ns);
            if (mid) {
                double eff[MID_COUNT];
                mid_batch(ks, &pk, &a, es, &buf, peak[insn], passes, eff);
                printf("%-40s mid batch, fraction of max(bytes/read, flops/peak) at m =", "");
                for (size_t j = 0; j < MID_COUNT; j++)
                    printf(" %zu: %.2f", mid_m[j], eff[j]);
                putchar('\n');
                mid_hot(ks, &pk, &a, es, peak[insn], passes, eff);
                printf("%-40s tiles in L2, fraction of flops/peak at m =", "");
                for (size_t j = 0; j < MID_COUNT; j++)
                    printf(" %zu: %.2f", mid_m[j], eff[j]);
                putchar('\n');
            }
        }
        fflush(stdout);
        acts_free(&a);
        free(pk.p);
    }
mxfp4:
    if (mx_bench(reg, count, allowed, &buf, llc, peak, threads, with_ref, quick, only_set))
        return 1;
    bench_buffer_free(&buf);
    return 0;
}
