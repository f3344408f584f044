/* engine.c — the forward of the expert groups: work items over (expert, N-tiles), combine. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "experts/experts.h"

/* About this many work items per thread let a dynamic schedule even out experts with more
 * rows than others, while an item still covers enough tiles to be worth scheduling. */
#define ITEMS_PER_THREAD 4

/* The combine works on this many columns at a time, in a stack array that stays in L1. */
#define COMBINE_CHUNK 256

/* The rows one expert of a group computes: rows first .. first + n - 1 of the h and y buffers,
 * for tokens token[first + i] (routed) or first + i (always-on: token = NULL). */
typedef struct span {
    int e;
    int copy; /* the packed expert that runs it (moe_expert_copy) */
    size_t first, n;
    const size_t *token;
} span;

static span span_of(const moe_experts_job *job, bool routed, size_t a)
{
    span s;
    if (!routed) {
        s.e = s.copy = 0;
        s.first = 0;
        s.n = job->n_tokens;
        s.token = NULL;
        return s;
    }
    const moe_route_plan *p = &job->ws.plan;
    s.e = p->active[a];
    s.copy = moe_expert_copy(job->routed, s.e, a);
    s.first = p->offset[s.e];
    s.n = p->offset[s.e + 1] - s.first;
    s.token = p->token;
    return s;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Tiles per work item: ITEMS_PER_THREAD items per thread over all spans, whole experts at
 * most. Every thread computes the same value, as the work-sharing loop requires. */
static int64_t tiles_per_item(int64_t tiles, size_t n_spans)
{
    const int64_t want = (int64_t)omp_get_num_threads() * ITEMS_PER_THREAD;
    int64_t per = tiles * (int64_t)n_spans / want;
    if (per < 1) per = 1;
    return per < tiles ? per : tiles;
}

/* Tiles per call of a set's multi-tile entry when a span has more rows than one call takes:
 * they stay in L2 while every chunk of MR rows runs over them. (A span of at most MR rows
 * passes its whole range in one call.) Runs sized from the L2, as the other sets get, were
 * 1-8 % slower for the MXFP4 q8 sets at 512 and 2048 tokens (bench/NOTES.md, v5). */
#define TILES_PER_CALL 4

/* The most tiles of tile_bytes that fit in run_bytes (3/4 of the L2) beside one chunk's mr
 * rows of row_bytes, at least one. */
static int64_t tiles_fit(size_t mr, size_t run_bytes, size_t tile_bytes, size_t row_bytes)
{
    const size_t chunk = mr * row_bytes;
    const int64_t n = chunk < run_bytes ? (int64_t)((run_bytes - chunk) / tile_bytes) : 1;
    return n < 1 ? 1 : n;
}

/* The tiles [j, j1) one pass of the chunks takes from j: all of them for a span of one chunk
 * (decode: one call per tile, or one call for all with a multi-tile entry); for more rows, with
 * a multi-tile entry the set's tiles_per_call where it names them, else TILES_PER_CALL — the tile
 * recipe's (tile: its tiles are bf16 or widened to it, up to 458 KB each) no more than
 * tiles_fit, so a bf16 gate/up run stays in L2 beside the chunk's rows —, and without one
 * tiles_fit: the tiles are read from memory once for all chunks, and a chunk's rows once per
 * run rather than once per tile (bench/NOTES.md, v4). */
static int64_t run_tiles(const moe_expert_kernels *ks, bool multi, size_t rows, size_t run_bytes,
                         size_t tile_bytes, size_t row_bytes, int64_t j, int64_t j1)
{
    const size_t mr = (size_t)ks->mr;
    int64_t want;
    if (rows <= mr) return j1 - j;
    if (multi && ks->tiles_per_call > 0) {
        want = ks->tiles_per_call;
    } else if (multi) {
        want = TILES_PER_CALL;
        if (ks->recipe == MOE_RECIPE_TILE) {
            const int64_t fit = tiles_fit(mr, run_bytes, tile_bytes, row_bytes);
            want = fit < want ? fit : want;
        }
    } else {
        want = tiles_fit(mr, run_bytes, tile_bytes, row_bytes);
    }
    return j1 - j < want ? j1 - j : want;
}

/* A chunk of at most STAGE_ROWS rows writes its outputs into a stack stage, STAGE_TILES tiles
 * at a time, and the stage is copied out after each group of tiles: a kernel stores a tile's
 * outputs once, at its end, and at decode each such store went to a line no longer in cache,
 * which cost the weight stream behind it more than the same lines written together (FP8 2-7 %
 * at 1-4 tokens; bench/NOTES.md, v5). The copy is exact, so the bits do not change. */
#define STAGE_ROWS 8
#define STAGE_TILES 4

/* One row of the stage in the types the kernels store: f32, or the bf16 recipe's bf16 h. */
typedef union stage_row {
    float f[STAGE_TILES * 16];
    uint16_t b[STAGE_TILES * 32];
} stage_row;

typedef struct stage {
    stage_row row[STAGE_ROWS];
} __attribute__((aligned(64))) stage;

#define STAGE_ROW_BYTES sizeof(stage_row)

/* Whether a chunk of m rows, tiles of nr outputs of eb bytes, goes through a stage. Not for
 * calls through a multi-tile entry (multi; moe_expert_uses_tiles): cut into calls of STAGE_TILES
 * tiles, the MXFP4 sets ran 1-3 % slower at 1-16 tokens (bench/NOTES.md, v5), and staging inside
 * their multi-tile entries instead was within the noise (v6). */
static bool staged(bool multi, size_t m, size_t nr, size_t eb)
{
    return !multi && m <= STAGE_ROWS && STAGE_TILES * nr * eb <= STAGE_ROW_BYTES;
}

/* The first `bytes` of each of the stage's m rows to dst, rows dst_row bytes apart. */
static void stage_out(const stage *st, size_t m, unsigned char *dst, size_t dst_row, size_t bytes)
{
    for (size_t i = 0; i < m; i++)
        memcpy(dst + i * dst_row, &st->row[i], bytes);
}

/* gate/up tiles [j, j + n) for one chunk of m rows: tile t's outputs at out + (t - j)·NR
 * elements, rows out_stride elements apart. */
static void gateup_run(const moe_expert_group *g, size_t m, const void *const *x,
                       const unsigned char *tiles, int64_t j, int64_t n, unsigned char *out,
                       size_t out_stride)
{
    const moe_expert_kernels *ks = g->ks;
    const size_t nr = (size_t)ks->nr, eb = g->act_elem, tb = g->gateup_tile_bytes;
    if (moe_expert_uses_tiles(ks, true, m)) {
        const size_t last = (size_t)(j + n - 1) * nr;
        ks->gateup_tiles(m, (size_t)g->hidden, x, tiles + (size_t)j * tb, (size_t)n, &g->act, out,
                         out_stride, min_size(nr, (size_t)g->inter - last));
        return;
    }
    for (int64_t t = 0; t < n; t++) {
        const size_t n0 = (size_t)(j + t) * nr;
        ks->gateup(m, (size_t)g->hidden, x, tiles + (size_t)(j + t) * tb, &g->act,
                   out + (size_t)t * nr * eb, out_stride, min_size(nr, (size_t)g->inter - n0));
    }
}

/* down tiles [j, j + n) for one chunk of m rows, as gateup_run (out holds floats). */
static void down_run(const moe_expert_group *g, size_t m, const void *const *hp,
                     const unsigned char *tiles, int64_t j, int64_t n, unsigned char *out_bytes,
                     size_t out_stride)
{
    const moe_expert_kernels *ks = g->ks;
    float *out = (float *)out_bytes;
    const size_t nr = (size_t)ks->nr, tb = g->down_tile_bytes;
    if (moe_expert_uses_tiles(ks, false, m)) {
        const size_t last = (size_t)(j + n - 1) * nr;
        ks->down_tiles(m, (size_t)g->inter, hp, tiles + (size_t)j * tb, (size_t)n, out, out_stride,
                       min_size(nr, (size_t)g->hidden - last));
        return;
    }
    for (int64_t t = 0; t < n; t++) {
        const size_t n0 = (size_t)(j + t) * nr;
        ks->down(m, (size_t)g->inter, hp, tiles + (size_t)(j + t) * tb, out + (size_t)t * nr,
                 out_stride, min_size(nr, (size_t)g->hidden - n0));
    }
}

/* gateup_run or down_run. */
typedef void run_fn(const moe_expert_group *g, size_t m, const void *const *in,
                    const unsigned char *tiles, int64_t j, int64_t n, unsigned char *out,
                    size_t out_stride);

/* Tiles [j, j + n) of one phase (run; multi: through that phase's multi-tile entry) for
 * one chunk of m rows: tile j's outputs at out, rows out_row bytes apart, eb bytes per
 * output, cols outputs from out on in each row. Through the stage where staged(). */
static void chunk_run(const moe_expert_group *g, run_fn *run, bool multi, size_t m,
                      const void *const *in, const unsigned char *tiles, int64_t j, int64_t n,
                      unsigned char *out, size_t out_row, size_t eb, size_t cols)
{
    const size_t nr = (size_t)g->ks->nr;
    if (!staged(multi, m, nr, eb)) {
        run(g, m, in, tiles, j, n, out, out_row / eb);
        return;
    }
    stage st;
    for (int64_t t = j; t < j + n; t += STAGE_TILES) {
        const int64_t k = j + n - t < STAGE_TILES ? j + n - t : STAGE_TILES;
        const size_t c0 = (size_t)(t - j) * nr;
        run(g, m, in, tiles, t, k, (unsigned char *)st.row, STAGE_ROW_BYTES / eb);
        stage_out(&st, m, out + c0 * eb, out_row, (min_size(c0 + (size_t)k * nr, cols) - c0) * eb);
    }
}

/* gate/up for tiles [j0, j1) of one span: each run of tiles is reused by all M-chunks while
 * it is in cache; a span of at most MR rows is the decode case, one chunk over all. */
static void gateup_span(const moe_expert_group *g, const span *s, const unsigned char *act,
                        size_t x_row, unsigned char *h, int64_t j0, int64_t j1)
{
    const moe_expert_kernels *ks = g->ks;
    const size_t mr = (size_t)ks->mr, nr = (size_t)ks->nr, eb = g->act_elem;
    const size_t h_row = g->h_stride * eb, tb = g->gateup_tile_bytes;
    const unsigned char *tiles = moe_expert_gateup(g, s->copy);
    const void *x[MOE_EXPERTS_MAX_MR];
    for (int64_t j = j0, nt; j < j1; j += nt) {
        nt = run_tiles(ks, moe_expert_uses_tiles(ks, true, mr), s->n, g->run_bytes, tb, x_row, j,
                       j1);
        for (size_t c = 0; c < s->n; c += mr) {
            const size_t m = min_size(mr, s->n - c);
            for (size_t i = 0; i < m; i++) {
                const size_t r = s->first + c + i;
                x[i] = act + (s->token ? s->token[r] : r) * x_row;
            }
            const size_t c0 = (size_t)j * nr;
            chunk_run(g, gateup_run, moe_expert_uses_tiles(ks, true, m), m, x, tiles, j, nt,
                      h + (s->first + c) * h_row + c0 * eb, h_row, eb, (size_t)g->inter - c0);
        }
    }
    /* The item that owns the last tile also owns the zero padding after column I. */
    if (j1 == g->gateup_tiles && g->h_stride > (size_t)g->inter) {
        const size_t pad = (g->h_stride - (size_t)g->inter) * eb;
        for (size_t i = 0; i < s->n; i++)
            memset(h + (s->first + i) * h_row + (size_t)g->inter * eb, 0, pad);
    }
}

/* down for tiles [j0, j1) of one span: y rows first .. first + n - 1, y_stride floats apart;
 * h rows h_row bytes apart (h itself, or the Q8 rows prepared from it). */
static void down_span(const moe_expert_group *g, const span *s, const unsigned char *h,
                      size_t h_row, float *y, size_t y_stride, int64_t j0, int64_t j1)
{
    const moe_expert_kernels *ks = g->ks;
    const size_t mr = (size_t)ks->mr, nr = (size_t)ks->nr, tb = g->down_tile_bytes;
    const unsigned char *tiles = moe_expert_down(g, s->copy);
    const void *hp[MOE_EXPERTS_MAX_MR];
    for (int64_t j = j0, nt; j < j1; j += nt) {
        nt = run_tiles(ks, moe_expert_uses_tiles(ks, false, mr), s->n, g->run_bytes, tb, h_row, j,
                       j1);
        for (size_t c = 0; c < s->n; c += mr) {
            const size_t m = min_size(mr, s->n - c);
            for (size_t i = 0; i < m; i++)
                hp[i] = h + (s->first + c + i) * h_row;
            const size_t c0 = (size_t)j * nr;
            chunk_run(g, down_run, moe_expert_uses_tiles(ks, false, m), m, hp, tiles, j, nt,
                      (unsigned char *)(y + (s->first + c) * y_stride + c0),
                      y_stride * sizeof(float), sizeof(float), (size_t)g->hidden - c0);
        }
    }
}

/* The buffers one group's phases use. */
typedef struct group_run {
    const moe_expert_group *g;
    bool routed;
    size_t n_spans, rows;
    unsigned char *x_rows; /* the tile recipe's routed rows: their activations copied in row
                              order (gather_phase), which gate/up reads by row; else NULL
                              (gate/up reads the job's activations by token) */
    unsigned char *h;
    unsigned char *hq; /* Q8: the prepared h rows; NULL for the other recipes */
    float *y;
    size_t y_stride;
} group_run;

/* The tile recipe's routed rows: row r's activations (token[r]'s) copied to row r of x_rows, so
 * each expert's rows are one panel, xg_row_bytes apart, which a set may load as tiles straight
 * from memory. The copy is exact: the bits do not change. */
static void gather_phase(const moe_experts_job *job, const group_run *run)
{
    const moe_expert_group *g = run->g;
    const unsigned char *act = job->act[g->ks->recipe];
    const size_t *token = job->ws.plan.token, x_row = g->x_row_bytes, xg_row = g->xg_row_bytes;
#pragma omp for schedule(static)
    for (size_t r = 0; r < run->rows; r++)
        memcpy(run->x_rows + r * xg_row, act + token[r] * x_row, x_row);
}

/* scale_input: row r of (token t, slot k) gets t's f32 activations times w[t,k], the product
 * rounded to f32, and for the BF16 and TILE recipes then to bf16 (to nearest even) once: the
 * routed experts' input as Llama-4 computes it, x · sigmoid(logit). */
static void scale_phase(const moe_experts_job *job, const group_run *run)
{
    const moe_expert_group *g = run->g;
    const size_t h = (size_t)g->hidden, k = (size_t)job->top_k, xg_row = g->xg_row_bytes;
    const bool f32 = g->ks->recipe == MOE_RECIPE_F32;
#pragma omp for schedule(static)
    for (size_t i = 0; i < run->rows; i++) {
        const size_t t = i / k, r = job->ws.plan.row[i];
        const float w = job->weights[i], *x = job->act_f32 + t * h;
        unsigned char *dst = run->x_rows + r * xg_row;
        if (f32) {
            float *y = (float *)(void *)dst;
            for (size_t c = 0; c < h; c++)
                y[c] = x[c] * w;
        } else { /* in chunks that stay in L1, rounded as moe_act_round_bf16 rounds */
            uint16_t *y = (uint16_t *)(void *)dst;
            float p[COMBINE_CHUNK];
            for (size_t c0 = 0; c0 < h; c0 += COMBINE_CHUNK) {
                const size_t n = min_size(COMBINE_CHUNK, h - c0);
                for (size_t c = 0; c < n; c++)
                    p[c] = x[c0 + c] * w;
                moe_act_round_bf16(n, p, y + c0);
            }
        }
    }
}

static void gateup_phase(const moe_experts_job *job, const group_run *run)
{
    const moe_expert_group *g = run->g;
    const unsigned char *act = run->x_rows ? run->x_rows : job->act[g->ks->recipe];
    const int64_t per = tiles_per_item(g->gateup_tiles, run->n_spans);
    const int64_t ipe = (g->gateup_tiles + per - 1) / per;
    const int64_t n_items = (int64_t)run->n_spans * ipe;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; it++) {
        span s = span_of(job, run->routed, (size_t)(it / ipe));
        if (run->x_rows) s.token = NULL; /* gathered: row r's activations at row r */
        const int64_t j0 = it % ipe * per;
        const int64_t j1 = j0 + per < g->gateup_tiles ? j0 + per : g->gateup_tiles;
        gateup_span(g, &s, act, run->x_rows ? g->xg_row_bytes : g->x_row_bytes, run->h, j0, j1);
    }
}

/* Q8: every h row prepared for down. All rows of the group hold h (each routed row belongs
 * to an expert), and each is prepared alone, whatever the split. */
static void prepare_phase(const group_run *run)
{
    const moe_expert_group *g = run->g;
    const size_t h_row = g->h_stride * g->act_elem, k = (size_t)g->inter;
#pragma omp for schedule(static)
    for (size_t r = 0; r < run->rows; r++)
        g->ks->prepare_act(k, (const float *)(const void *)(run->h + r * h_row),
                           run->hq + r * g->hq_row_bytes);
}

static void down_phase(const moe_experts_job *job, const group_run *run)
{
    const moe_expert_group *g = run->g;
    const unsigned char *h = run->hq ? run->hq : run->h;
    const size_t h_row = run->hq ? g->hq_row_bytes : g->h_stride * g->act_elem;
    const int64_t per = tiles_per_item(g->down_tiles, run->n_spans);
    const int64_t ipe = (g->down_tiles + per - 1) / per;
    const int64_t n_items = (int64_t)run->n_spans * ipe;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; it++) {
        const span s = span_of(job, run->routed, (size_t)(it / ipe));
        const int64_t j0 = it % ipe * per;
        const int64_t j1 = j0 + per < g->down_tiles ? j0 + per : g->down_tiles;
        down_span(g, &s, h, h_row, run->y, run->y_stride, j0, j1);
    }
}

/* out[t] = Σ_k w[t,k] · y[row(t,k)] in slot order, then + out[t] when the always-on MLP has
 * already written the shared experts' output there (+ always_scale[t] · out[t], the product
 * rounded first, when the job has a shared expert gate). */
static void combine_phase(const moe_experts_job *job)
{
    const size_t n_t = job->n_tokens, k_n = (size_t)job->top_k;
    const size_t h_n = (size_t)job->routed->hidden;
    const size_t *row = job->y_given ? NULL : job->ws.plan.row; /* NULL: row t·K + k */
    const float *y = job->y_given ? job->y_given : job->ws.y_routed;
    const bool add_shared = job->always != NULL;
    const size_t chunks = (h_n + COMBINE_CHUNK - 1) / COMBINE_CHUNK;
    /* Work items are (token, chunk) pairs, so a decode step's few tokens spread over every
     * thread too; each element sees the same operations whichever thread runs it. */
#pragma omp for schedule(static)
    for (size_t it = 0; it < n_t * chunks; it++) {
        const size_t t = it / chunks, c = it % chunks * COMBINE_CHUNK;
        const size_t n = min_size(COMBINE_CHUNK, h_n - c);
        const float *w = job->weights + t * k_n;
        float *o = job->out + t * h_n;
        float acc[COMBINE_CHUNK];
        const float *y0 = y + (row ? row[t * k_n] : t * k_n) * h_n + c;
        /* scale_input: the weights already scaled the experts' inputs. */
        const bool unweighted = job->routed->scale_input;
        const float w0 = unweighted ? 1.0f : w[0];
        for (size_t i = 0; i < n; i++)
            acc[i] = w0 * y0[i];
        for (size_t k = 1; k < k_n; k++) {
            const float *yk = y + (row ? row[t * k_n + k] : t * k_n + k) * h_n + c;
            const float wk = unweighted ? 1.0f : w[k];
            for (size_t i = 0; i < n; i++)
                acc[i] += wk * yk[i];
        }
        if (add_shared && job->always_scale) {
            const float s = job->always_scale[t];
            for (size_t i = 0; i < n; i++) {
                const float shared = s * o[c + i];
                o[c + i] = acc[i] + shared;
            }
        } else if (add_shared)
            for (size_t i = 0; i < n; i++)
                o[c + i] = acc[i] + o[c + i];
        else
            memcpy(o + c, acc, n * sizeof(float));
    }
}

/* rows_out: token t's one routed row (top_k 1), unweighted, to out[t]: an exact copy. */
static void rows_out_phase(const moe_experts_job *job)
{
    const size_t h_n = (size_t)job->routed->hidden;
    const size_t *row = job->ws.plan.row;
#pragma omp for schedule(static)
    for (size_t t = 0; t < job->n_tokens; t++)
        memcpy(job->out + t * h_n, job->ws.y_routed + row[t] * h_n, h_n * sizeof(float));
}

/* Marks a GEMM step: weights of the spans that ran plus the activation rows in and out. */
static void mark_gemm(moe_trace_rec *tr, const char *prefix, const char *step, const group_run *run,
                      uint64_t weight_bytes, uint64_t in_row, uint64_t out_row)
{
    char name[32];
    snprintf(name, sizeof name, "%s.%s", prefix, step);
    const uint64_t rows = run->rows;
    moe_trace_mark(tr, name, run->g->ks->name, weight_bytes * run->n_spans + rows * in_row,
                   rows * out_row);
}

static void run_group(moe_experts_job *job, const group_run *run, const char *prefix)
{
    const moe_expert_group *g = run->g;
    const uint64_t ib = (uint64_t)g->inter * g->act_elem;
    if (run->x_rows && g->scale_input) {
        scale_phase(job, run);
#pragma omp master
        {
            char name[32];
            snprintf(name, sizeof name, "%s.scale_input", prefix);
            const bool f32 = g->ks->recipe == MOE_RECIPE_F32;
            moe_trace_mark(job->trace, name,
                           f32 ? "x * w, rounded to f32" : "x * w, rounded to f32 then bf16",
                           job->n_tokens * (uint64_t)g->hidden * 4 + run->rows * 4,
                           run->rows * (uint64_t)g->x_row_bytes);
        }
    } else if (run->x_rows) {
        gather_phase(job, run);
#pragma omp master
        {
            char name[32];
            snprintf(name, sizeof name, "%s.gather", prefix);
            const uint64_t bytes = run->rows * (uint64_t)g->x_row_bytes;
            moe_trace_mark(job->trace, name, "rows in expert order (memcpy)",
                           bytes + run->rows * sizeof(size_t), bytes);
        }
    }
    gateup_phase(job, run);
#pragma omp master
    mark_gemm(job->trace, prefix, "gate_up", run, g->gateup_bytes, g->x_row_bytes, ib);
    if (run->hq) {
        prepare_phase(run);
#pragma omp master
        {
            char name[32], kernel[64];
            snprintf(name, sizeof name, "%s.prepare_h", prefix);
            snprintf(kernel, sizeof kernel, "%s prepare_act", g->ks->name);
            moe_trace_mark(job->trace, name, kernel, run->rows * ib,
                           run->rows * (uint64_t)g->hq_row_bytes);
        }
    }
    down_phase(job, run);
#pragma omp master
    mark_gemm(job->trace, prefix, "down", run, g->down_bytes, run->hq ? g->hq_row_bytes : ib,
              (uint64_t)g->hidden * 4);
}

static void plan_step(moe_experts_job *job)
{
    moe_route_plan *p = &job->ws.plan;
    job->status = moe_route_plan_build(p, job->ids);
    const uint64_t rows = (uint64_t)p->n_tokens * (uint64_t)p->top_k;
    moe_trace_mark(job->trace, "plan", "counting sort by expert", rows * sizeof(int32_t),
                   ((uint64_t)p->n_experts + 1) * sizeof(size_t) + 2 * rows * sizeof(size_t) +
                       p->n_active * sizeof(int32_t));
}

void moe_experts_run_team(moe_experts_job *job)
{
    if (job->n_tokens == 0) return;
    const size_t n_t = job->n_tokens;
    if (job->routed && !job->y_given) {
        /* The master is the calling thread, so an error message lands in its last error. */
#pragma omp master
        plan_step(job);
#pragma omp barrier
        if (job->status != MOE_OK) return; /* every thread reads it after the barrier */
        const group_run run = {.g = job->routed,
                               .routed = true,
                               .n_spans = job->ws.plan.n_active,
                               .rows = n_t * (size_t)job->top_k,
                               .x_rows = job->ws.x_routed,
                               .h = job->ws.h_routed,
                               .hq = job->ws.hq_routed,
                               .y = job->ws.y_routed,
                               .y_stride = (size_t)job->routed->hidden};
        run_group(job, &run, "experts");
    }
    if (job->always) {
        const group_run run = {.g = job->always,
                               .routed = false,
                               .n_spans = 1,
                               .rows = n_t,
                               .h = job->ws.h_always,
                               .hq = job->ws.hq_always,
                               .y = job->out,
                               .y_stride = (size_t)job->always->hidden};
        run_group(job, &run, job->always_name ? job->always_name : "always");
    }
    if (job->routed && job->rows_out) {
        rows_out_phase(job);
#pragma omp master
        moe_trace_mark(job->trace, "rows_out", "each row's output as computed (memcpy)",
                       n_t * (uint64_t)job->routed->hidden * 4,
                       n_t * (uint64_t)job->routed->hidden * 4);
    } else if (job->routed) {
        combine_phase(job);
#pragma omp master
        {
            const uint64_t k_n = (uint64_t)job->top_k, row = (uint64_t)job->routed->hidden * 4;
            moe_trace_mark(job->trace, "combine", "fixed slot order (f32)",
                           n_t * k_n * (row + sizeof(float) + sizeof(size_t)) +
                               (job->always ? n_t * row : 0),
                           n_t * row);
        }
    }
}

moe_status moe_experts_run(moe_experts_job *job, int threads)
{
    job->status = MOE_OK;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    moe_experts_run_team(job);
    return job->status;
}
