/* bench_shared_cores.c — a layer's forward while other work keeps cores busy: one thread, all,
 * watched. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE for the flush buffer (bench/bench_util.h) */
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moe.h"
#include "bench_util.h"
#include "layer/layer_internal.h"

/*
 * Usage: bench_shared_cores [--model DIR [--layer L]] [--tokens T] [--busy N] [--seconds S]
 *
 * The layer: layer L (default 0) of the model folder DIR, or by default gpt-oss-20b's MoE
 * block (hidden 2880, 32 MXFP4 experts of I 2880, top-4), written by `moe gen` (the binary
 * next to this one) into a temporary folder removed at the end. Three layers of it: one thread; all
 * cores with fixed_threads (every forward on every thread, libmoe before it watched its threads);
 * all cores watched (the default: fewer threads while the cores are shared, layer_team.h). Each
 * runs T-token forwards back to back for S seconds (default 3) twice: on a quiet machine, then with
 * N spinning threads (default 1: one of two cores busy, as PyTorch's threads or another process
 * would keep it). Reported per layer and load: the median and the mean ms per forward (the mean
 * counts the watched layer's probes), the mean as a multiple of the one-thread layer's mean under
 * the same load, and for the watched layer the share of its forwards that began on fewer threads
 * than all (read from the layer's team, layer_team.h); first, what one read of a thread's
 * run-queue wait costs (the watch makes two per thread per forward). Target (issue 29): with
 * one of two cores busy, the watched all-cores forward no slower than 1.3× the one-thread
 * forward.
 */

extern char **environ;

static atomic_int spin_stop;

static void *spin(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
        x++;
    return NULL;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_shared_cores: %s\n", what);
    exit(1);
}

static void gen(const char *argv0, const char *dir)
{
    char moe[4096];
    const char *slash = strrchr(argv0, '/');
    snprintf(moe, sizeof moe, "%.*s/moe", slash ? (int)(slash - argv0) : 1, slash ? argv0 : ".");
    char *args[] = {moe,         "gen",      "--family", "gpt_oss",  "--out",
                    (char *)dir, "--layers", "1",        "--hidden", "2880",
                    "--experts", "32",       "--topk",   "4",        "--intermediate",
                    "2880",      "--dtype",  "mxfp4",    NULL};
    pid_t pid;
    int status;
    if (posix_spawn(&pid, moe, NULL, NULL, args, environ) != 0) die("cannot start moe gen");
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        die("moe gen failed");
}

/* What the watch pays per read of a thread's run-queue wait (two per thread per forward):
 * the median of 15 passes of 1000 reads, in µs. */
static double wait_read_us(void)
{
    double t[15];
    volatile long long sink = 0;
    for (int r = 0; r < 15; r++) {
        const double t0 = bench_now_ns();
        for (int i = 0; i < 1000; i++)
            sink += moe_team_waited_ns();
        t[r] = (bench_now_ns() - t0) / 1000 / 1e3;
    }
    (void)sink;
    return bench_median(t, 15);
}

typedef struct result {
    double median_ms, mean_ms;
    double fewer; /* the share of forwards begun on fewer threads than the layer's */
} result;

static result time_layer(const moe_layer *l, size_t t, size_t h, const float *x, float *y, void *ws,
                         size_t ws_size, double seconds)
{
    static double ms[100000];
    moe_forward_args a = {.size = sizeof a,
                          .n_tokens = t,
                          .hidden_size = h,
                          .hidden = x,
                          .hidden_dtype = MOE_DTYPE_F32,
                          .out = y,
                          .workspace = ws,
                          .workspace_size = ws_size};
    for (int w = 0; w < 3; w++)
        if (moe_layer_forward(l, &a) != MOE_OK) die(moe_last_error());
    const double start = bench_now_ns();
    int n = 0, fewer = 0;
    while (n < 100000 && bench_now_ns() - start < seconds * 1e9) {
        fewer += moe_team_size(l->team, moe_team_now_ns()) < l->team->full;
        const double t0 = bench_now_ns();
        if (moe_layer_forward(l, &a) != MOE_OK) die(moe_last_error());
        ms[n++] = (bench_now_ns() - t0) / 1e6;
    }
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += ms[i];
    result r = {0, sum / n, (double)fewer / n};
    r.median_ms = bench_median(ms, n);
    return r;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int layer = 0;
    size_t tokens = 1;
    int busy = 1;
    double seconds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--layer"))
            layer = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens"))
            tokens = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--busy"))
            busy = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else
            die("usage: bench_shared_cores [--model DIR [--layer L]] [--tokens T] [--busy N] "
                "[--seconds S]");
    }
    if (tokens < 1 || tokens > 4096 || busy < 0 || busy > 64 || !(seconds > 0))
        die("--tokens 1..4096, --busy 0..64, --seconds > 0");
    char tmp[] = "/tmp/moe_bench_shared_XXXXXX", path[4200];
    if (!dir) {
        if (!mkdtemp(tmp)) die("mkdtemp");
        snprintf(path, sizeof path, "%s/gpt-oss-20b", tmp);
        gen(argv[0], path);
        dir = path;
    }
    moe_model *m;
    if (moe_model_open(dir, NULL, &m) != MOE_OK) die(moe_last_error());
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *names[3] = {"1 thread", "all, fixed", "all, watched"};
    moe_layer *layers[3];
    for (int i = 0; i < 3; i++) {
        moe_layer_options o = {
            .size = sizeof o, .threads = i == 0 ? 1 : cores, .fixed_threads = i < 2};
        if (moe_layer_create(m, layer, &o, &layers[i]) != MOE_OK) die(moe_last_error());
    }
    moe_model_info mi = {.size = sizeof mi};
    if (moe_model_get_info(m, &mi) != MOE_OK) die(moe_last_error());
    const size_t h = (size_t)mi.hidden_size, ws_size = moe_layer_workspace_size(layers[0], tokens);
    float *x = malloc(tokens * h * sizeof *x), *y = malloc(tokens * h * sizeof *y);
    void *ws = aligned_alloc(64, (ws_size + 63) / 64 * 64);
    if (!x || !y || !ws) die("out of memory");
    uint64_t s = 1;
    for (size_t i = 0; i < tokens * h; i++)
        x[i] = (float)bench_gauss(&s);
    printf("one read of the run-queue wait (the watch, two per thread per forward): %.2f µs\n",
           wait_read_us());
    printf("%s layer %d (%s), T = %zu, %d cores, %.1f s per cell\n", dir, layer, mi.family, tokens,
           cores, seconds);
    printf("%-14s %-6s %10s %10s %12s %8s\n", "layer", "busy", "median ms", "mean ms",
           "mean / 1 thr", "fewer");
    for (int load = 0; load < 2; load++) {
        const int spinners = load ? busy : 0;
        pthread_t th[64];
        atomic_store(&spin_stop, 0);
        for (int i = 0; i < spinners; i++)
            if (pthread_create(&th[i], NULL, spin, NULL)) die("pthread_create");
        result r[3];
        for (int i = 0; i < 3; i++) {
            r[i] = time_layer(layers[i], tokens, h, x, y, ws, ws_size, seconds);
            printf("%-14s %-6d %10.3f %10.3f %12.2f", names[i], spinners, r[i].median_ms,
                   r[i].mean_ms, r[i].mean_ms / r[0].mean_ms);
            if (i == 2)
                printf(" %7.1f%%\n", 100 * r[i].fewer);
            else
                printf(" %8s\n", "-");
        }
        atomic_store(&spin_stop, 1);
        for (int i = 0; i < spinners; i++)
            pthread_join(th[i], NULL);
    }
    for (int i = 0; i < 3; i++)
        moe_layer_destroy(layers[i]);
    moe_model_close(m);
    free(x);
    free(y);
    free(ws);
    if (dir == path) {
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0) fprintf(stderr, "bench_shared_cores: could not remove %s\n", tmp);
    }
    return 0;
}
