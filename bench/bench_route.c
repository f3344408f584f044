/* bench_route.c — ns per token of routing: shipped models, ref vs selected, 1 and 2 threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe.h"
#include "route/router_internal.h"
#include "bench_util.h"

#define MAX_T 4096
#define SAMPLES 7
#define SAMPLE_NS 20000000.0 /* aim for 20 ms per sample: long enough to swamp the clock */
#define VOCAB 129280

typedef struct bench_model {
    const char *name;
    moe_route_method method;
    moe_score_func score;
    int e, k, g, tg;
    bool norm;
    float rsf;
} bench_model;

static const bench_model models[] = {
    {"DeepSeek-V3 (256/8, 8 groups keep 4)", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4,
     true, 2.5f},
    {"Kimi-K2 (384/8)", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 384, 8, 1, 1, true, 2.827f},
    {"Qwen3-30B-A3B (128/8)", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 128, 8, 1, 1, true, 1.0f},
    {"DeepSeek-V4-Flash score (256/6)", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1,
     true, 1.5f},
    {"DeepSeek-V4-Flash hash (256/6)", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true,
     1.5f},
    {"gpt-oss-120b (128/4)", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 128, 4, 1, 1, true, 1.0f},
};

static const size_t token_counts[] = {1, 32, 512, 4096};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double unit(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* The inputs of one model, shared by every run of it. */
typedef struct inputs {
    float *logits;   /* [MAX_T, e] */
    int64_t *tokens; /* [MAX_T] */
    int32_t *ids;    /* [MAX_T, k] */
    float *weights;  /* [MAX_T, k] */
    float bias[4096];
    int32_t *table; /* [VOCAB, k] */
} inputs;

static void make_inputs(const bench_model *m, inputs *in)
{
    in->logits = malloc((size_t)MAX_T * (size_t)m->e * sizeof *in->logits);
    in->tokens = malloc(MAX_T * sizeof *in->tokens);
    in->ids = malloc((size_t)MAX_T * (size_t)m->k * sizeof *in->ids);
    in->weights = malloc((size_t)MAX_T * (size_t)m->k * sizeof *in->weights);
    in->table = malloc((size_t)VOCAB * (size_t)m->k * sizeof *in->table);
    if (!in->logits || !in->tokens || !in->ids || !in->weights || !in->table) {
        fprintf(stderr, "bench_route: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)MAX_T * (size_t)m->e; i++)
        in->logits[i] = (float)(8.0 * unit() - 4.0);
    for (int i = 0; i < m->e; i++)
        in->bias[i] = (float)(2.0 * unit() - 1.0) + (m->score == MOE_SCORE_SQRTSOFTPLUS ? 8.0f : 0);
    for (int t = 0; t < MAX_T; t++)
        in->tokens[t] = (int64_t)(unit() * VOCAB);
    for (int64_t row = 0; row < VOCAB; row++)
        for (int j = 0; j < m->k; j++) /* distinct within the row: k consecutive ids */
            in->table[row * m->k + j] = (int32_t)((row * 7 + j) % m->e);
}

static void free_inputs(inputs *in)
{
    free(in->logits);
    free(in->tokens);
    free(in->ids);
    free(in->weights);
    free(in->table);
}

static moe_router *make_router(const bench_model *m, const inputs *in, const moe_cpu_caps *caps)
{
    moe_router_params p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.method = m->method;
    p.score = m->score;
    p.n_experts = m->e;
    p.top_k = m->k;
    p.n_group = m->g;
    p.topk_group = m->tg;
    p.norm_topk_prob = m->norm;
    p.routed_scaling_factor = m->rsf;
    if (m->method == MOE_ROUTE_NOAUX_TC) {
        p.correction_bias = in->bias;
        p.correction_bias_dtype = MOE_DTYPE_F32;
    }
    if (m->method == MOE_ROUTE_HASH) {
        p.tid2eid = in->table;
        p.tid2eid_dtype = MOE_DTYPE_I32;
        p.vocab_size = VOCAB;
    }
    moe_router *r = NULL;
    if (moe_router_create_caps(&p, caps, &r) != MOE_OK) {
        fprintf(stderr, "bench_route: %s: %s\n", m->name, moe_last_error());
        exit(1);
    }
    return r;
}

/* One thread's share: ITERS forwards of rows [first, first + n). */
typedef struct share {
    const moe_router *r;
    const inputs *in;
    const bench_model *m;
    size_t first, n;
    long iters;
    pthread_barrier_t *start, *done;
    bool quit;
} share;

static void run_share(const share *s)
{
    const size_t e = (size_t)s->m->e, k = (size_t)s->m->k;
    for (long i = 0; i < s->iters; i++)
        moe_router_forward(s->r, s->n, s->in->logits + s->first * e, s->in->tokens + s->first,
                           MOE_DTYPE_I64, s->in->ids + s->first * k, s->in->weights + s->first * k);
}

static void *worker(void *arg)
{
    share *s = arg;
    for (;;) {
        pthread_barrier_wait(s->start);
        if (s->quit) return NULL;
        run_share(s);
        pthread_barrier_wait(s->done);
    }
}

/* CPU time of the calling thread: the time the shared machine gave to other work (another
 * core's compile, a descheduling) is not counted. */
static double cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A figure: the medians of the thread CPU time and of the wall time per token. */
typedef struct figure {
    double cpu, wall;
} figure;

/* ns per token of routing T rows on THREADS threads (1 or 2). With two threads the wall time
 * covers both threads' rows (throughput) and the CPU time is the calling thread's half. */
static figure measure(const moe_router *r, const bench_model *m, const inputs *in, size_t t,
                      int threads)
{
    pthread_barrier_t start, done;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    pthread_barrier_init(&done, NULL, (unsigned)threads);
    const size_t half = threads == 2 ? t / 2 : t;
    share mine = {r, in, m, 0, half, 1, &start, &done, false};
    share other = {r, in, m, half, t - half, 1, &start, &done, false};
    pthread_t th;
    if (threads == 2 && pthread_create(&th, NULL, worker, &other) != 0) {
        fprintf(stderr, "bench_route: pthread_create failed\n");
        exit(1);
    }
    /* Calibrate the iteration count on one thread, then time SAMPLES runs. */
    double t0 = bench_now_ns();
    long iters = 0;
    do {
        run_share(&(share){r, in, m, 0, t, 1, NULL, NULL, false});
        iters++;
    } while (bench_now_ns() - t0 < SAMPLE_NS / 4);
    iters *= 4; /* about SAMPLE_NS for all T rows on one thread */
    mine.iters = other.iters = iters;
    double wall[SAMPLES], cpu[SAMPLES];
    for (int s = 0; s < SAMPLES; s++) {
        double begin = bench_now_ns(), cpu_begin = cpu_now_ns();
        if (threads == 2) pthread_barrier_wait(&start);
        run_share(&mine);
        cpu[s] = (cpu_now_ns() - cpu_begin) / ((double)iters * (double)mine.n);
        if (threads == 2) pthread_barrier_wait(&done);
        wall[s] = (bench_now_ns() - begin) / ((double)iters * (double)t);
    }
    if (threads == 2) {
        other.quit = true;
        pthread_barrier_wait(&start);
        pthread_join(th, NULL);
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&done);
    return (figure){bench_median(cpu, SAMPLES), bench_median(wall, SAMPLES)};
}

/* Usage: bench_route [SUBSTRING]: only the models whose name contains SUBSTRING. */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, "bench_route: %s\n", moe_last_error());
        return 1;
    }
    printf("bench_route: ns per token, medians of %d samples, CPU %s\n"
           "  1t: one thread, thread CPU time (wall time beside the selected kernels' figure);\n"
           "  2t: two threads on one router, wall time over all the tokens (throughput)\n",
           SAMPLES, info.brand[0] ? info.brand : "?");
    const moe_cpu_caps ref_caps = {0};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        const bench_model *m = &models[i];
        if (only && !strstr(m->name, only)) continue;
        inputs in;
        make_inputs(m, &in);
        moe_router *ref = make_router(m, &in, &ref_caps);
        moe_router *sel = make_router(m, &in, &info.allowed);
        printf("\n%s\n  selected: %s\n", m->name, moe_router_explain(sel));
        printf("  %6s | %10s %10s | %10s %12s %10s\n", "T", "ref 1t", "ref 2t", "sel 1t",
               "sel 1t wall", "sel 2t");
        for (size_t j = 0; j < sizeof token_counts / sizeof token_counts[0]; j++) {
            const size_t t = token_counts[j];
            const figure r1 = measure(ref, m, &in, t, 1), r2 = measure(ref, m, &in, t, 2);
            const figure s1 = measure(sel, m, &in, t, 1), s2 = measure(sel, m, &in, t, 2);
            printf("  %6zu | %10.1f %10.1f | %10.1f %12.1f %10.1f\n", t, r1.cpu, r2.wall, s1.cpu,
                   s1.wall, s2.wall);
            fflush(stdout);
        }
        moe_router_destroy(ref);
        moe_router_destroy(sel);
        free_inputs(&in);
    }
    return 0;
}
