/* experts.h — internal: the expert engine: packed MLP groups, route plan, phases, combine. */
#ifndef MOE_EXPERTS_EXPERTS_H
#define MOE_EXPERTS_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "experts/trace.h"
#include "kernels/expert.h"
#include "moe.h"

/*
 * The engine runs gated MLPs y = down(act(gate·x, up·x)) over lists of token rows with one
 * kernel set per group (kernels/expert.h). A layer has up to two groups:
 *
 *   routed     E experts; each token visits the K experts the router chose, and the combine
 *              adds them in the router's slot order: out[t] = Σ_k w[t,k] · y[t,k] (+ below)
 *   always-on  one MLP every token visits: DeepSeek's shared experts (added last in the
 *              combine) or the MLP of a dense layer (its output is the block's output)
 *
 * Forward, for a batch of T tokens, inside one OpenMP team:
 *
 *   plan       counting sort of the [T, K] ids by expert (one thread): per-expert row
 *              counts and offsets, the token of every row (ascending within an expert), and
 *              the row of every (token, slot)
 *   gather     the tile recipe's routed group only: every row's activations copied in row
 *              order, so each expert's rows are one uniformly strided panel (kernels that
 *              load them as tiles read them in place)
 *   gate_up    work items (expert, run of N-tiles of I): for each tile, the expert's rows in
 *              M-chunks of MR, so the tile stays in cache while every chunk uses it; writes h
 *   prepare_h  the Q8 recipe only: every h row (f32) becomes a prepared Q8 row of k = I
 *              (the kernel set's prepare_act), one row at a time, so a row's bytes depend on
 *              that row alone
 *   down       work items (expert, run of N-tiles of H): y rows of the routed experts, or the
 *              block output itself for the always-on MLP
 *   combine    one token at a time, in slot order, then + the shared output
 *
 * Every work item writes its own rows and tiles; OpenMP barriers separate the phases.
 * Nothing is allocated: all scratch comes from the caller's workspace. A token's result is
 * computed by the same operations in the same order whatever the batch, the other tokens,
 * the work split or the thread count, because every micro-kernel call computes each row
 * independently (kernels/expert.h) and the combine runs in a fixed order.
 */

/* Widest MR a kernel set may have: the engine keeps MR row pointers on the stack. */
#define MOE_EXPERTS_MAX_MR 128

/* The recipes (moe_expert_recipe values index the activation arrays of a job). */
#define MOE_EXPERTS_RECIPES 4

/* One packed MLP group: n_experts MLPs of the same shape, format and kernel set. */
typedef struct moe_expert_group {
    const moe_expert_kernels *ks;
    int n_experts;
    int n_packed;          /* experts with packed bytes: n_experts, or fewer, which the
                              batch's experts share (moe_expert_group_alias) */
    int64_t hidden, inter; /* H and I */
    moe_act_params act;
    int64_t gateup_tiles;     /* ceil(I / NR) */
    int64_t down_tiles;       /* ceil(H / NR) */
    size_t gateup_tile_bytes; /* one gate/up tile for K = H */
    size_t down_tile_bytes;   /* one down tile for K = I */
    size_t gateup_bytes;      /* gateup_tiles × gateup_tile_bytes */
    size_t down_bytes;        /* down_tiles × down_tile_bytes */
    size_t expert_stride;     /* gateup_bytes + down_bytes, rounded up to 64 */
    size_t packed_bytes;      /* n_packed × expert_stride */
    size_t act_elem;          /* bytes of one h element as gate/up writes it: 4 (F32 and Q8:
                                 float) or 2 (BF16 and TILE) */
    size_t h_stride;          /* elements between h rows: I rounded up to 32, tail zeroed
                                 (TILE: 32 more where the row would be a multiple of 4 KB) */
    size_t x_row_bytes;       /* one input row as gate/up reads it: H floats, H bf16 codes, or
                                 (Q8) a prepared row, act_row_bytes(H) */
    size_t xg_row_bytes;      /* TILE: between the gathered routed rows (x_routed):
                                 x_row_bytes, 64 more where that is a multiple of 4 KB */
    size_t hq_row_bytes;      /* Q8: one prepared h row, act_row_bytes(I), which down reads;
                                 0 for the other recipes (down reads h itself) */
    size_t run_bytes;         /* what a run of tiles and one chunk's input rows may fill (the
                                 engine's prefill blocking): 3/4 of the L2 */
    bool scale_input;         /* routed (Llama-4): row (t, k) computes mlp(x_t · w[t,k]) and the
                                 combine adds it with weight 1 (the F32, BF16 and TILE recipes) */
    unsigned char *packed;    /* moe_malloc_huge'd; NULL until moe_expert_group_alloc */
    const int32_t *slot;      /* a placed group (expert parallelism): [n_experts], the packed
                                 expert of each expert this rank owns, -1 for the others;
                                 NULL: expert e is packed expert e (or an alias copy) */
    const int32_t *packed_ids; /* a placed group: [n_packed], the expert each packed expert
                                  is (messages name it); NULL: the same index */
} moe_expert_group;

/* What a run of tiles and one chunk's input rows may fill in the engine's prefill blocking:
 * 3/4 of the L2 CPUID reports (moe_cpu_l2_bytes), of 1 MiB where it reports none. */
size_t moe_expert_run_bytes(void);

/* Fills G's shape and sizes for N experts of H × I with kernel set KS (checked arithmetic:
 * MOE_EOVERFLOW naming WHAT). Allocates nothing; moe_expert_group_free is still safe. */
moe_status moe_expert_group_plan(moe_expert_group *g, const moe_expert_kernels *ks, int n,
                                 int64_t hidden, int64_t inter, const moe_act_params *act,
                                 const char *what);

/* Makes a planned group hold N_PACKED < n_experts packed experts (packed: 0 .. N_PACKED - 1),
 * which the experts of a batch share (moe_expert_copy): moe bench's way to route over a
 * model's real expert count in the memory of fewer (moe_layer_tuning.resident_experts).
 * N_PACKED outside [1, n_experts) leaves the group as it is. Before moe_expert_group_alloc. */
void moe_expert_group_alias(moe_expert_group *g, int n_packed);

/* Allocates the packed bytes of a planned group (MOE_ENOMEM naming WHAT). */
moe_status moe_expert_group_alloc(moe_expert_group *g, const char *what);

/* Packs expert E of G from its checkpoint tensors (MOE_EVALUE etc. from the kernel set's pack,
 * with the expert named). */
moe_status moe_expert_group_pack(moe_expert_group *g, int e, const moe_weight_src *gate,
                                 const moe_weight_src *up, const moe_weight_src *down);

/* Told that the checkpoint bytes [lo, lo + bytes) (one part's rows of a projection) are
 * packed and will not be read again. */
typedef void moe_expert_pack_done(void *ctx, const void *lo, size_t bytes);

/* Packs expert E as moe_expert_group_pack does (the same packed bytes), but in parts of
 * MOE_EXPERT_PACK_PART_ROWS rows (rounded up to the FP8 scale block) wherever a projection's
 * rows lie in memory order (col_stride 1, non-negative strides), calling DONE after each part
 * with each of its projections' rows: a caller gives those pages back at once, so packing
 * holds about one part of the checkpoint per thread, not a whole expert (a Mixtral expert is
 * 352 MB). Projections laid out otherwise are packed whole, without DONE. On error a message
 * may name a row relative to its part: callers pack the failing expert again with
 * moe_expert_group_pack for the message that names the row in the whole matrix. */
#define MOE_EXPERT_PACK_PART_ROWS 256
moe_status moe_expert_group_pack_parts(moe_expert_group *g, int e, const moe_weight_src *gate,
                                       const moe_weight_src *up, const moe_weight_src *down,
                                       moe_expert_pack_done *done, void *ctx);

void moe_expert_group_free(moe_expert_group *g);

/* The packed gate/up and down bytes of packed expert E. */
static inline const unsigned char *moe_expert_gateup(const moe_expert_group *g, int e)
{
    return g->packed + (size_t)e * g->expert_stride;
}
static inline const unsigned char *moe_expert_down(const moe_expert_group *g, int e)
{
    return g->packed + (size_t)e * g->expert_stride + g->gateup_bytes;
}

/* The packed expert that runs expert E, the batch's RANK-th expert (ascending ids): E itself,
 * or in an aliased group copy RANK % n_packed. A forward then uses no copy twice before it has
 * used every copy once, so each use reads its weights from memory as a model's distinct
 * experts would (E % n_packed would put two experts of a small batch on one copy, the second
 * read from the cache the first filled). */
static inline int moe_expert_copy(const moe_expert_group *g, int e, size_t rank)
{
    if (g->slot) return g->slot[e];
    return g->n_packed < g->n_experts ? (int)(rank % (size_t)g->n_packed) : e;
}

/* ---- The route plan ------------------------------------------------------------------- */

typedef struct moe_route_plan {
    size_t n_tokens;
    int n_experts, top_k;
    size_t *offset;  /* [E + 1]: expert e owns rows offset[e] .. offset[e + 1] - 1 */
    size_t *token;   /* [T·K]: the token of each row; ascending within an expert */
    size_t *row;     /* [T·K]: the row of (token t, slot k) at t·K + k */
    int32_t *active; /* [E]: experts with at least one row, ascending */
    size_t n_active;
} moe_route_plan;

/* Builds the plan from IDS [T, K] into P's arrays (already pointing at workspace). An id
 * outside [0, E) is MOE_ERANGE naming the token and slot (the router never produces one; the
 * check keeps a bad id from becoming an out-of-bounds write). */
moe_status moe_route_plan_build(moe_route_plan *p, const int32_t *ids);

/* ---- Workspace ------------------------------------------------------------------------ */

/* Carves 64-byte aligned arrays out of one buffer. With base NULL it only counts, so the same
 * code sizes the workspace and binds it. Any overflow sticks. */
typedef struct moe_carve {
    unsigned char *base;
    size_t used;
    bool overflow;
} moe_carve;

/* N elements of ELEM bytes; NULL when counting, or after an overflow. */
void *moe_carve_take(moe_carve *c, size_t n, size_t elem);

/* The engine's scratch for one forward. */
typedef struct moe_experts_ws {
    moe_route_plan plan;
    void *x_routed;  /* TILE or scale_input: [T·K rows] of xg_row_bytes, the activations in row
                        order (scale_input: each scaled by its routing weight); else NULL */
    void *h_routed;  /* [T·K rows, h_stride] of the routed recipe */
    void *hq_routed; /* Q8: [T·K rows] prepared h rows of hq_row_bytes; else NULL */
    float *y_routed; /* [T·K rows, H] */
    void *h_always;  /* [T rows, h_stride] of the always-on recipe */
    void *hq_always; /* Q8: [T rows] prepared h rows; else NULL */
} moe_experts_ws;

/* Takes the engine's arrays for T tokens from C (ROUTED / ALWAYS may be NULL). */
void moe_experts_ws_carve(moe_carve *c, moe_experts_ws *ws, const moe_expert_group *routed,
                          int top_k, const moe_expert_group *always, size_t n_tokens);

/* ---- Forward -------------------------------------------------------------------------- */

typedef struct moe_experts_job {
    size_t n_tokens;
    /* The activations [T rows] in each recipe's type (moe_expert_recipe index), rows
     * x_row_bytes apart: f32, bf16 codes, or Q8 rows prepared with k = H (moe_act_prepare);
     * only those the groups' recipes read need to be set. */
    const void *act[MOE_EXPERTS_RECIPES];
    const float *act_f32;           /* [T rows, H]: the f32 activations scale_input reads */
    const moe_expert_group *routed; /* NULL for a dense layer */
    int top_k;
    const int32_t *ids;             /* [T, K] from the router */
    const float *weights;           /* [T, K]: routed_scaling_factor is already in them */
    const moe_expert_group *always; /* shared experts or the dense MLP; NULL if none */
    const char *always_name;        /* "shared" or "dense": the trace's step prefix */
    const float *always_scale;      /* [T] or NULL: the shared output of token t is multiplied
                                       by always_scale[t] in the combine (a shared expert gate) */
    float *out;                     /* [T, H] */
    moe_experts_ws ws;
    moe_trace_rec *trace; /* marks by the team's master; NULL or off: nothing recorded */
    /* Expert parallelism. y_given: the routed rows [T·K, H] already computed (row t·K + k for
     * token t, slot k), so the routed group does not run and the combine reads them (with the
     * always-on MLP run first, as ever). rows_out (top_k 1): out[t] is token t's routed row
     * itself, unweighted, instead of the combine (weights are not read). */
    const float *y_given;
    bool rows_out;
    moe_status status;    /* MOE_OK, or what the plan reported (then out is not written) */
} moe_experts_job;

/* Runs the job. Call it from every thread of an OpenMP team (or outside any parallel region,
 * as a team of one): it uses orphaned work-sharing loops and barriers, so each thread must
 * call it with the same job. */
void moe_experts_run_team(moe_experts_job *job);

/* Opens a team of THREADS and runs the job; returns job->status. */
moe_status moe_experts_run(moe_experts_job *job, int threads);

/* ---- Activations ---------------------------------------------------------------------- */

/* y[i] = x[i] rounded to bf16, to nearest even, bit for bit as moe_f32_to_bf16 (NaN kept,
 * quieted). A plain loop the compiler vectorises. */
void moe_act_round_bf16(size_t n, const float *x, uint16_t *y);

/* The Q8 rows of N input rows for group G (recipe Q8): row r of x (f32, G's hidden values,
 * x_stride floats apart) becomes G's prepared row r at dst + r · x_row_bytes, by the kernel
 * set's prepare_act. Each row is prepared alone, so its bytes depend on that row only. */
void moe_act_prepare(const moe_expert_group *g, size_t n, const float *x, size_t x_stride,
                     void *dst);

#endif
