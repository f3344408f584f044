/* bench_mix.c — the f32 recipe's bf16 gate/up step on one core with everything in L1: what its
 * instruction mix leaves of the FMA peak, beside the kernel itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels/expert.h"
#include "select/kernel.h"

/*
 * One thread, K = 256: a gate/up tile of 16 KB and 12 token rows of 1 KB, all in L1. A step is
 * one k-pair of the AVX-512 bf16 set's gate/up loop (kernels/avx512/expert_f32.c) at its 12
 * tokens: 48 FMAs (12 tokens × gate and up × the pair's two k) into 24 accumulators, each
 * accumulator's two in k order. Four loops, each adding one part of that step, then the kernel:
 *   fma        the 48 FMAs alone, the weights and two activations held in registers
 *   +widen     the weights widened each step from the tile's two bf16 streams (two 64-byte
 *              loads, two shifts, two masks), the activations still in registers
 *   +bcast     the activations broadcast from the 12 token rows each step (24 broadcast
 *              loads): the whole step
 *   +prefetch  with the kernel's prefetches (each stream's line 8 KB ahead into L2 and 2 KB
 *              ahead into L1; here they find their lines in L1)
 *   kernel     moe_expert_bf16_f32_12x16__avx512's gate/up entry at m = 12 on a packed tile:
 *              the step with its prefetches, the epilogue and the call
 *   down       the same set's down entry at m = 12 on a down tile of the same K (16 output
 *              rows; per step each token's even and odd pair chains: 4 broadcasts per 4 FMAs)
 * Then FP8 weights at 8 tokens, the most the FP8 sets' direct path takes, where each call
 * decodes the codes in registers: the gate/up entry of each AVX-512 FP8 set beside the bf16 set's
 * at 8 tokens (the same FMAs and broadcasts; a decode instead of a widening).
 * Each as GFLOP/s (2 per multiply-add) and as a fraction of the vfmadd231ps zmm peak of the same
 * run (bench_util.h's 12-chain register loop); the best of 7 passes of 20000 calls, 3 rounds.
 * Where a kernel's prefill (bench_expert_kernels) sits near "+prefetch", the recipe's
 * instruction mix on this core bounds it, not the kernel's code. Needs the AVX-512 level (says
 * so and exits 0 where the CPU or MOE_ISA lacks it). Usage: bench_mix [--rounds N] (default 3).
 */

#define K 256
#define M 12
#define STEPS (K / 2)
#define FLOPS_PER_CALL (2.0 * M * 16 * 2 * K) /* gate and up: 16 rows each */

#if BENCH_X86
#define MIX_TARGET __attribute__((target("avx512f,avx512bw"), noinline))
#define UNROLL _Pragma("GCC unroll 16")

/* The bf16 pair dword vector at p as its even-k and odd-k f32 weights. */
static inline __attribute__((always_inline, target("avx512f,avx512bw"))) void
widen(const unsigned char *p, __m512 *even, __m512 *odd)
{
    const __m512i l = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(l, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* STEPS steps of 48 FMAs: with WIDEN the weights widened each step from the two streams (gate
 * at w, up `second` bytes on), else four f32 vectors loaded once; with BCAST the activations
 * broadcast from the token rows, else two held in registers; with PF the kernels' prefetches
 * (kernels/avx512/expert_f32_common.h: 8 KB ahead into L2, 2 KB into L1). Each chain starts
 * from its own value, so the compiler merges none. */
#define MIX_LOOP(name, WIDEN, BCAST, PF)                                                           \
    MIX_TARGET static float name(const float *const *x, const unsigned char *w, size_t second)     \
    {                                                                                              \
        __m512 a[M], b[M];                                                                         \
        const __m512 xs0 = _mm512_set1_ps(x[0][0]), xs1 = _mm512_set1_ps(x[1][0]);                 \
        __m512 g0 = _mm512_loadu_ps(w), g1 = _mm512_loadu_ps(w + 64);                              \
        __m512 u0 = _mm512_loadu_ps(w + 128), u1 = _mm512_loadu_ps(w + 192);                       \
        UNROLL                                                                                     \
        for (int i = 0; i < M; i++) {                                                              \
            a[i] = _mm512_set1_ps(0.01f * (float)i);                                               \
            b[i] = _mm512_set1_ps(0.01f * (float)(i + M));                                         \
        }                                                                                          \
        for (size_t s = 0; s < STEPS; s++, w += 64) {                                              \
            if (PF) {                                                                              \
                _mm_prefetch((const char *)w + 8192, _MM_HINT_T1);                                 \
                _mm_prefetch((const char *)w + 2048, _MM_HINT_T0);                                 \
                _mm_prefetch((const char *)w + second + 8192, _MM_HINT_T1);                        \
                _mm_prefetch((const char *)w + second + 2048, _MM_HINT_T0);                        \
            }                                                                                      \
            if (WIDEN) {                                                                           \
                widen(w, &g0, &g1);                                                                \
                widen(w + second, &u0, &u1);                                                       \
            }                                                                                      \
            UNROLL                                                                                 \
            for (int i = 0; i < M; i++) {                                                          \
                const __m512 x0 = BCAST ? _mm512_set1_ps(x[i][2 * s]) : xs0;                       \
                const __m512 x1 = BCAST ? _mm512_set1_ps(x[i][2 * s + 1]) : xs1;                   \
                a[i] = _mm512_fmadd_ps(g0, x0, a[i]);                                              \
                b[i] = _mm512_fmadd_ps(u0, x0, b[i]);                                              \
                a[i] = _mm512_fmadd_ps(g1, x1, a[i]);                                              \
                b[i] = _mm512_fmadd_ps(u1, x1, b[i]);                                              \
            }                                                                                      \
        }                                                                                          \
        __m512 t = _mm512_setzero_ps();                                                            \
        UNROLL                                                                                     \
        for (int i = 0; i < M; i++)                                                                \
            t = _mm512_add_ps(t, _mm512_add_ps(a[i], b[i]));                                       \
        return _mm512_reduce_add_ps(t);                                                            \
    }
MIX_LOOP(loop_fma, 0, 0, 0)
MIX_LOOP(loop_widen, 1, 0, 0)
MIX_LOOP(loop_bcast, 1, 1, 0)
MIX_LOOP(loop_prefetch, 1, 1, 1)
#endif

typedef float mix_loop(const float *const *x, const unsigned char *w, size_t second);

static volatile float mix_sink;

/* GFLOP/s of `calls` calls of f: the best of 7. */
static double loop_gflops(mix_loop *f, const float *const *x, const unsigned char *w, size_t second,
                          long calls)
{
    double t[7];
    for (int r = 0; r < 7; r++) {
        const double t0 = bench_now_ns();
        for (long c = 0; c < calls; c++)
            mix_sink = f(x, w, second);
        t[r] = bench_now_ns() - t0;
    }
    return FLOPS_PER_CALL * (double)calls / bench_min(t, 7);
}

/* GFLOP/s of `calls` calls of the set's gate/up (gate/up tile g) or down (down tile d, g NULL)
 * at m tokens: the best of 7. */
static double kernel_gflops(const moe_expert_kernels *ks, size_t m, const float *const *x,
                            const unsigned char *g, const unsigned char *d, float *h, long calls)
{
    const moe_act_params act = {0, 0, 0};
    double t[7];
    for (int r = 0; r < 7; r++) {
        const double t0 = bench_now_ns();
        for (long c = 0; c < calls; c++) {
            if (g)
                ks->gateup(m, K, (const void *const *)x, g, &act, h, 16, 16);
            else
                ks->down(m, K, (const void *const *)x, d, h, 16, 16);
        }
        t[r] = bench_now_ns() - t0;
    }
    return 2.0 * (double)m * 16 * (g ? 2 : 1) * K * (double)calls / bench_min(t, 7);
}

/* The registered expert set of that name where this CPU and MOE_ISA allow it, or NULL. */
static const moe_expert_kernels *allowed_set(const char *name, uint32_t allowed)
{
    const moe_kernel *k = moe_kernel_find(name);
    if (!k || k->family < MOE_KERNEL_FAMILY_EXPERT_BF16_F32 ||
        k->family > MOE_KERNEL_FAMILY_EXPERT_FP8_BF16)
        return NULL;
    return (k->fn.expert_set->isa & ~allowed) == 0 ? k->fn.expert_set : NULL;
}

/* One FP8 gate/up tile of 16 rows per projection over K, codes uniform over the non-NaN ones,
 * block scales 1/1024, packed by ks into a new buffer (NULL on failure). */
static unsigned char *fp8_tile(const moe_expert_kernels *ks, uint64_t *rng)
{
    unsigned char *codes = malloc(2 * 16 * K), *tile;
    float sc[K / 128];
    for (int i = 0; i < K / 128; i++)
        sc[i] = 0x1p-10f;
    tile = aligned_alloc(64, (ks->gateup_tile_bytes(K) + 63) & ~(size_t)63);
    if (!codes || !tile) {
        free(codes);
        free(tile);
        return NULL;
    }
    for (size_t i = 0; i < 2 * 16 * K; i++) {
        const uint64_t r = bench_rand(rng);
        codes[i] = (unsigned char)(r % 0x7F) | (unsigned char)(r >> 32 & 0x80);
    }
    moe_weight_src g = {.data = codes,
                        .dtype = MOE_DTYPE_F8_E4M3,
                        .rows = 16,
                        .cols = K,
                        .row_stride = K,
                        .col_stride = 1,
                        .scale = sc,
                        .scale_dtype = MOE_DTYPE_F32,
                        .block_rows = 128,
                        .block_cols = 128};
    moe_weight_src u = g;
    u.data = codes + 16 * K;
    const moe_status st = ks->pack_gateup(&g, &u, tile);
    free(codes);
    if (st != MOE_OK) {
        free(tile);
        return NULL;
    }
    return tile;
}

/* FP8 weights at 8 tokens (the direct path's most, its weights decoded in registers each
 * call) against the bf16 set at 8: the same FMAs and broadcasts, a decode instead of a widening.
 * Gate/up in L1, each allowed AVX-512 FP8 set of the f32 recipe, as fractions of the peak. */
static void fp8_rounds(const moe_expert_kernels *b16, uint32_t allowed, const float *const *x,
                       const unsigned char *b16_tile, float *h, int rounds, uint64_t *rng)
{
    static const char *const names[] = {"moe_expert_fp8_f32_32x16__avx512",
                                        "moe_expert_fp8_f32_32x16__avx512vbmi"};
    const moe_expert_kernels *sets[2];
    unsigned char *tiles[2];
    for (int i = 0; i < 2; i++) {
        sets[i] = allowed_set(names[i], allowed);
        tiles[i] = sets[i] ? fp8_tile(sets[i], rng) : NULL;
    }
    printf("# gate/up at 8 tokens, in L1: bf16 (widened) and FP8 (decoded in registers)\n");
    printf("%-6s %8s %14s", "round", "peak", "bf16");
    for (int i = 0; i < 2; i++)
        if (tiles[i]) printf(" %14s", strstr(names[i], "vbmi") ? "fp8 vbmi" : "fp8");
    printf("\n");
    const long calls = 20000;
    for (int r = 0; r < rounds; r++) {
        const double peak = bench_peak_gflops(BENCH_FMA_ZMM, 1, 7);
        const double gb = kernel_gflops(b16, 8, x, b16_tile, NULL, h, calls);
        printf("%-6d %8.1f %7.1f (%.2f)", r + 1, peak, gb, gb / peak);
        for (int i = 0; i < 2; i++)
            if (tiles[i]) {
                const double g = kernel_gflops(sets[i], 8, x, tiles[i], NULL, h, calls);
                printf(" %7.1f (%.2f)", g, g / peak);
            }
        printf("\n");
    }
    for (int i = 0; i < 2; i++)
        free(tiles[i]);
}

int main(int argc, char **argv)
{
    int rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_mix [--rounds N]\n");
            return 2;
        }
    }
    /* The set where this CPU runs it and MOE_ISA allows it (its level includes the loops'). */
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) return 1;
    const uint32_t allowed = moe_cpu_caps_mask(&info.allowed);
    const moe_expert_kernels *ks = allowed_set("moe_expert_bf16_f32_12x16__avx512", allowed);
    if (!BENCH_X86 || !ks) {
        printf("# bench_mix: needs AVX-512 (the AVX-512 bf16 set) allowed here; skipped\n");
        return 0;
    }
    /* Weights: bf16 in [1/128, 1/64) (no subnormal products), the two streams back to back;
     * activations 0.25 and up; the tile packed from the same weights. */
    const size_t stream = (size_t)STEPS * 64;
    uint16_t *wb = aligned_alloc(64, 2 * stream);
    float *xb = aligned_alloc(64, sizeof(float) * M * K), *h = aligned_alloc(64, 64 * M);
    unsigned char *tile = aligned_alloc(64, (ks->gateup_tile_bytes(K) + 63) & ~(size_t)63);
    unsigned char *down = aligned_alloc(64, (ks->down_tile_bytes(K) + 63) & ~(size_t)63);
    if (!wb || !xb || !h || !tile || !down) return 1;
    uint64_t rng = 42;
    for (size_t i = 0; i < stream; i++)
        wb[i] = (uint16_t)(0x3C00 + (bench_rand(&rng) & 0x3FF));
    for (size_t i = 0; i < (size_t)M * K; i++)
        xb[i] = 0.25f + (float)bench_unit(&rng);
    const float *x[M];
    for (int i = 0; i < M; i++)
        x[i] = xb + (size_t)i * K;
    moe_weight_src g = {.data = wb,
                        .dtype = MOE_DTYPE_BF16,
                        .rows = 16,
                        .cols = K,
                        .row_stride = K,
                        .col_stride = 1};
    moe_weight_src u = g;
    u.data = wb + 16 * K;
    if (ks->pack_gateup(&g, &u, tile) != MOE_OK || ks->pack_down(&g, down) != MOE_OK) return 1;
    const unsigned char *w = (const unsigned char *)wb;

    printf("# 1 thread, K = %d, %d tokens, all in L1: GFLOP/s and the fraction of the "
           "vfmadd231ps zmm peak\n",
           K, M);
    printf("%-6s %8s %14s %14s %14s %14s %14s %14s\n", "round", "peak", "fma", "+widen", "+bcast",
           "+prefetch", "kernel", "down");
    const long calls = 20000;
    for (int r = 0; r < rounds; r++) {
        const double peak = bench_peak_gflops(BENCH_FMA_ZMM, 1, 7);
        double g4[6] = {0};
#if BENCH_X86
        mix_loop *loops[4] = {loop_fma, loop_widen, loop_bcast, loop_prefetch};
        for (int v = 0; v < 4; v++)
            g4[v] = loop_gflops(loops[v], x, w, stream, calls);
#endif
        g4[4] = kernel_gflops(ks, M, x, tile, NULL, h, calls);
        g4[5] = kernel_gflops(ks, M, x, NULL, down, h, calls);
        printf("%-6d %8.1f", r + 1, peak);
        for (int v = 0; v < 6; v++)
            printf(" %7.1f (%.2f)", g4[v], g4[v] / peak);
        printf("\n");
    }
    fp8_rounds(ks, allowed, x, tile, h, rounds, &rng);
    free(wb);
    free(xb);
    free(h);
    free(tile);
    free(down);
    return 0;
}
