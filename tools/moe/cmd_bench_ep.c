/* cmd_bench_ep.c — `moe bench --ep`: one layer over MPI ranks, its steps timed, bytes sent. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"

#define PROG "moe bench"

#ifndef MOE_HAVE_MPI
int moe_cmd_bench_ep(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail(PROG, 1,
                    "--ep: this moe was built without MPI (CMake found none; install "
                    "libopenmpi-dev and openmpi-bin, then build again)");
}
#else
#include <limits.h>
#include <sys/resource.h>

#include "moe_mpi.h"

#define MAX_LIST 16
#define MAX_TOKENS 65536

static void help(void)
{
    printf("usage: mpirun -np N moe bench --ep --model DIR [--layer L] [--tokens LIST]\n"
           "               [--threads T] [--repeat R]\n"
           "\n"
           "Measures one layer run with expert parallelism over the ranks mpirun starts\n"
           "(docs/parallel.md): every rank packs its share of the routed experts (contiguous\n"
           "ranges) and holds an even share of each batch. Prints each rank's experts, packed\n"
           "bytes and peak resident memory, then per batch size the median forward (wall, on\n"
           "rank 0, between barriers) and the steps' medians on the slowest rank: route,\n"
           "dispatch, experts, return, combine; and the bytes sent between ranks per token.\n"
           "\n"
           "options:\n"
           "  --model DIR     a checkpoint (moe gen writes synthetic ones)\n"
           "  --layer L       the layer (default: the first MoE layer, else hash layer)\n"
           "  --tokens LIST   tokens per forward over all ranks (default 1,16,128,1024)\n"
           "  --threads T     worker threads per rank (default: the library's, the cores)\n"
           "  --repeat R      timed forwards per batch size, 1..1000 (default 10)\n"
           "  --help          this text\n"
           "\n"
           "Exit status: 0 done, 1 failed (one line on stderr per rank), 2 usage error.\n");
}

typedef struct ep_args {
    const char *model;
    int64_t layer, threads, repeat;
    int64_t tokens[MAX_LIST];
    int n_tokens;
} ep_args;

/* "1,16,128": each in [1, MAX_TOKENS]. */
static bool parse_tokens(cli_args *a, const char *text, ep_args *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    o->n_tokens = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (o->n_tokens == MAX_LIST) {
            cli_usage_error(a, "--tokens: at most %d sizes", MAX_LIST);
            return false;
        }
        if (!cli_int(a, "--tokens", p, 1, MAX_TOKENS, &o->tokens[o->n_tokens])) return false;
        o->n_tokens++;
    }
    if (o->n_tokens == 0) {
        cli_usage_error(a, "--tokens '%s' lists no size", text);
        return false;
    }
    return true;
}

static int parse_args(ep_args *o, int argc, char **argv)
{
    cli_args a;
    cli_args_init(&a, PROG, argc, argv);
    memset(o, 0, sizeof *o);
    o->layer = -1;
    o->repeat = 10;
    bool ep = false;
    const char *layer = NULL, *threads = NULL, *repeat = NULL, *tokens = NULL;
    const cli_value_option values[] = {{"--model", &o->model},
                                       {"--layer", &layer},
                                       {"--threads", &threads},
                                       {"--repeat", &repeat},
                                       {"--tokens", &tokens}};
    const cli_flag_option flags[] = {{"--ep", &ep}};
    int rc = cli_take_options(&a, flags, 1, values, sizeof values / sizeof values[0]);
    if (rc) return rc;
    if (!o->model) return cli_usage_error(&a, "--ep needs --model DIR (moe bench --ep --help)");
    if (layer && !cli_int(&a, "--layer", layer, 0, INT32_MAX, &o->layer)) return 2;
    if (threads && !cli_int(&a, "--threads", threads, 1, 4096, &o->threads)) return 2;
    if (repeat && !cli_int(&a, "--repeat", repeat, 1, 1000, &o->repeat)) return 2;
    if (tokens) return parse_tokens(&a, tokens, o) ? 0 : 2;
    const int64_t dflt[] = {1, 16, 128, 1024};
    o->n_tokens = 4;
    memcpy(o->tokens, dflt, sizeof dflt);
    return 0;
}

/* Every rank fails when one does; each prints one line. */
static int agreed(moe_status st, const char *what)
{
    st = moe_mpi_agree(MPI_COMM_WORLD, st);
    if (st == MOE_OK) return 0;
    fprintf(stderr, PROG ": %s: %s\n", what, moe_last_error());
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(n - 1) / 2];
}

/* The first MoE (else hash) layer, or the one asked for. */
static moe_status pick_layer(const moe_model *m, const ep_args *o, int *out)
{
    moe_model_info mi = {.size = sizeof mi};
    moe_status st = moe_model_get_info(m, &mi);
    if (st) return st;
    if (o->layer >= mi.n_layers)
        return moe_error(MOE_EINVAL, "--layer %" PRId64 " is out of range: the model has %d layers",
                         o->layer, mi.n_layers);
    if (o->layer >= 0) {
        *out = (int)o->layer;
        return MOE_OK;
    }
    for (int want = MOE_LAYER_MOE; want <= MOE_LAYER_HASH; want++)
        for (int i = 0; i < mi.n_layers; i++) {
            moe_layer_info li = {.size = sizeof li};
            if ((st = moe_model_get_layer_info(m, i, &li))) return st;
            if ((int)li.kind == want) {
                *out = i;
                return MOE_OK;
            }
        }
    return moe_error(MOE_EINVAL,
                     "every layer is dense: nothing to place (choose one with --layer)");
}

/* Each rank's experts, packed bytes and peak resident memory, printed by rank 0. */
static void print_ranks(const moe_layer *l, int rank, int n)
{
    moe_ep_info info = {.size = sizeof info};
    (void)moe_ep_get_info(l, &info);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mine[3] = {(double)info.n_owned, (double)info.packed_bytes, (double)ru.ru_maxrss * 1024};
    double *all = rank == 0 ? malloc((size_t)n * sizeof mine) : NULL;
    MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank != 0 || !all) return;
    printf("%-6s %8s %16s %14s\n", "rank", "experts", "packed bytes", "peak RSS MB");
    for (int r = 0; r < n; r++)
        printf("%-6d %8.0f %16.0f %14.1f\n", r, all[3 * r], all[3 * r + 1], all[3 * r + 2] / 1e6);
    free(all);
}

/* R forwards of T tokens spread evenly; rank 0 prints the medians. */
static int bench_tokens(const moe_layer *l, const ep_args *o, size_t t, int rank, int n)
{
    moe_layer_info li = {.size = sizeof li};
    (void)moe_layer_get_info(l, &li);
    const size_t h = (size_t)li.hidden_size;
    const size_t first = t * (size_t)rank / (size_t)n,
                 mine = t * (size_t)(rank + 1) / (size_t)n - first;
    float *x = malloc(mine * h * sizeof(float) + 4), *out = malloc(mine * h * sizeof(float) + 4);
    int64_t *tok = malloc(mine * sizeof(int64_t) + 8);
    const int reps = (int)o->repeat;
    double *wall = malloc((size_t)reps * sizeof(double)),
           *steps = malloc((size_t)reps * 5 * sizeof(double));
    moe_status st = x && out && tok && wall && steps
                        ? MOE_OK
                        : moe_error(MOE_ENOMEM, "the inputs of %zu tokens", mine);
    uint64_t sent = 0;
    for (size_t i = 0; x && i < mine * h; i++) /* deterministic values of unit size */
        x[i] = (float)((int)((first * h + i) * 2654435761u % 2001u) - 1000) / 1000.0f;
    for (size_t i = 0; tok && i < mine; i++)
        tok[i] = (int64_t)((first + i) * 7 % 1000);
    if (agreed(st, "allocating")) goto done;
    for (int r = -1; r < reps; r++) { /* r = -1: a warm-up */
        moe_mpi_stats s;
        const moe_mpi_forward_args a = {.size = sizeof a,
                                        .n_tokens = mine,
                                        .hidden_size = h,
                                        .hidden = x,
                                        .hidden_dtype = MOE_DTYPE_F32,
                                        .token_ids = li.kind == MOE_LAYER_HASH ? tok : NULL,
                                        .token_id_dtype = MOE_DTYPE_I64,
                                        .out = out,
                                        .stats = &s};
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        st = moe_mpi_forward(MPI_COMM_WORLD, l, &a);
        MPI_Barrier(MPI_COMM_WORLD);
        if (st) {
            fprintf(stderr, PROG ": layer %d: %s\n", li.index, moe_last_error());
            goto done;
        }
        if (r < 0) continue;
        wall[r] = MPI_Wtime() - t0;
        const double local[5] = {s.route_s, s.dispatch_s, s.experts_s, s.return_s, s.combine_s};
        MPI_Allreduce(local, steps + 5 * r, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        sent = s.bytes_sent;
    }
    uint64_t total = 0;
    MPI_Reduce(&sent, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double col[5], per[1000];
        for (int c = 0; c < 5; c++) {
            for (int r = 0; r < reps; r++)
                per[r] = steps[5 * r + c];
            col[c] = median(per, reps);
        }
        printf("%8zu %10.3f %9.3f %9.3f %9.3f %9.3f %9.3f %12.0f\n", t, median(wall, reps) * 1e3,
               col[0] * 1e3, col[1] * 1e3, col[2] * 1e3, col[3] * 1e3, col[4] * 1e3,
               (double)total / (double)t);
    }
done:
    free(x);
    free(out);
    free(tok);
    free(wall);
    free(steps);
    return st ? 1 : 0;
}

int moe_cmd_bench_ep(int argc, char **argv)
{
    ep_args o;
    const int prc = parse_args(&o, argc, argv);
    if (prc == -1) {
        help();
        return 0;
    }
    if (prc) return prc;
    MPI_Init(NULL, NULL);
    int rank = 0, n = 1, layer = -1, rc = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    moe_model *m = NULL;
    moe_layer *l = NULL;
    moe_status st = moe_model_open(o.model, NULL, &m);
    if (!st) st = pick_layer(m, &o, &layer);
    char what[600];
    snprintf(what, sizeof what, "--model %s", o.model);
    if (agreed(st, what)) goto done;
    const moe_layer_options lo = {.size = sizeof lo, .threads = (int)o.threads};
    st = moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, layer, &lo, NULL, 0, &l);
    if (st) {
        fprintf(stderr, PROG ": %s: %s\n", what, moe_last_error());
        goto done;
    }
    if (rank == 0) printf("layer %d of %s over %d rank%s\n", layer, o.model, n, n == 1 ? "" : "s");
    print_ranks(l, rank, n);
    if (rank == 0)
        printf("\n%8s %10s %9s %9s %9s %9s %9s %12s\n", "tokens", "forward ms", "route", "dispatch",
               "experts", "return", "combine", "sent B/token");
    rc = 0;
    for (int i = 0; i < o.n_tokens && !rc; i++)
        rc = bench_tokens(l, &o, (size_t)o.tokens[i], rank, n);
done:
    moe_layer_destroy(l);
    moe_model_close(m);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has printed before any exits */
    MPI_Finalize();
    return rc;
}
#endif
