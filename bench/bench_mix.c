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

/* The 48 FMAs of STEPS steps with nothing loaded: weights w0..w3, two activations. */
MIX_TARGET static float loop_fma(const float *const *x, const unsigned char *w, size_t second)
{
    (void)second;
    __m512 a[M], b[M], xs[2];
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 64);
    const __m512 w2 = _mm512_loadu_ps(w + 128), w3 = _mm512_loadu_ps(w + 192);
    xs[0] = _mm512_set1_ps(x[0][0]);
    xs[1] = _mm512_set1_ps(x[1][0]);
    UNROLL
    for (int i = 0; i < M; i++) { /* each chain from its own value, so none merge */
        a[i] = _mm512_set1_ps(0.01f * (float)i);
        b[i] = _mm512_set1_ps(0.01f * (float)(i + M));
    }
    for (size_t s = 0; s < STEPS; s++) {
        UNROLL
        for (int i = 0; i < M; i++) {
            const __m512 x0 = xs[0], x1 = xs[1];
            a[i] = _mm512_fmadd_ps(w0, x0, a[i]);
            b[i] = _mm512_fmadd_ps(w2, x0, b[i]);
            a[i] = _mm512_fmadd_ps(w1, x1, a[i]);
            b[i] = _mm512_fmadd_ps(w3, x1, b[i]);
        }
    }
    __m512 t = _mm512_setzero_ps();
    UNROLL
    for (int i = 0; i < M; i++)
        t = _mm512_add_ps(t, _mm512_add_ps(a[i], b[i]));
    return _mm512_reduce_add_ps(t);
}

/* The bf16 pair dword vector at p as its even-k and odd-k f32 weights. */
static inline __attribute__((always_inline, target("avx512f,avx512bw"))) void
widen(const unsigned char *p, __m512 *even, __m512 *odd)
{
    const __m512i l = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(l, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The steps with the weights widened from the two streams (gate at w, up `second` bytes on);
 * with BCAST the activations broadcast from the token rows, else held in registers. */
#define MIX_LOOP(name, BCAST, PF)                                                                  \
    MIX_TARGET static float name(const float *const *x, const unsigned char *w, size_t second)     \
    {                                                                                              \
        __m512 a[M], b[M];                                                                         \
        const __m512 xs0 = _mm512_set1_ps(x[0][0]), xs1 = _mm512_set1_ps(x[1][0]);                 \
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
            __m512 g0, g1, u0, u1;                                                                 \
            widen(w, &g0, &g1);                                                                    \
            widen(w + second, &u0, &u1);                                                           \
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
MIX_LOOP(loop_widen, 0, 0)
MIX_LOOP(loop_bcast, 1, 0)
MIX_LOOP(loop_prefetch, 1, 1)
#endif

typedef float mix_loop(const float *const *x, const unsigned char *w, size_t second);

static volatile float mix_sink;

/* GFLOP/s of `calls` calls of f, or with f NULL of the kernel's gate/up (tile) or, with tile
 * NULL, its down (down_tile): the best of 7. */
static double mix_gflops(mix_loop *f, const moe_expert_kernels *ks, const float *const *x,
                         const unsigned char *w, size_t second, const unsigned char *tile,
                         const unsigned char *down_tile, float *h, long calls)
{
    const moe_act_params act = {0, 0, 0};
    double t[7];
    for (int r = 0; r < 7; r++) {
        const double t0 = bench_now_ns();
        for (long c = 0; c < calls; c++) {
            if (f)
                mix_sink = f(x, w, second);
            else if (tile)
                ks->gateup(M, K, (const void *const *)x, tile, &act, h, 16, 16);
            else
                ks->down(M, K, (const void *const *)x, down_tile, h, 16, 16);
        }
        t[r] = bench_now_ns() - t0;
    }
    return (f || tile ? FLOPS_PER_CALL : FLOPS_PER_CALL / 2) * (double)calls / bench_min(t, 7);
}

/* The registered AVX-512 bf16 set of the f32 recipe, or NULL. */
static const moe_expert_kernels *bf16_set(void)
{
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    for (size_t r = 0; r < count; r++)
        if (reg[r].family == MOE_KERNEL_FAMILY_EXPERT_BF16_F32 &&
            strcmp(reg[r].fn.expert_set->name, "moe_expert_bf16_f32_12x16__avx512") == 0)
            return reg[r].fn.expert_set;
    return NULL;
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
    const moe_expert_kernels *ks = bf16_set();
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) return 1;
    if (!BENCH_X86 || !ks || (ks->isa & ~moe_cpu_caps_mask(&info.allowed)) != 0) {
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
            g4[v] = mix_gflops(loops[v], ks, x, w, stream, tile, down, h, calls);
#endif
        g4[4] = mix_gflops(NULL, ks, x, w, stream, tile, down, h, calls);
        g4[5] = mix_gflops(NULL, ks, x, w, stream, NULL, down, h, calls);
        printf("%-6d %8.1f", r + 1, peak);
        for (int v = 0; v < 6; v++)
            printf(" %7.1f (%.2f)", g4[v], g4[v] / peak);
        printf("\n");
    }
    free(wb);
    free(xb);
    free(h);
    free(tile);
    free(down);
    return 0;
}
