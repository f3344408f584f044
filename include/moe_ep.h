/* moe_ep.h — expert parallelism: a layer placed on rank r of n, its forward in steps. */
#ifndef MOE_EP_H
#define MOE_EP_H

/*
 * Expert parallelism splits a layer's routed experts over n ranks (processes, machines): each
 * rank packs only the experts it owns, plus what every rank needs (the gate, the router's
 * tables, the shared experts, a dense layer's MLP). A forward is then a sequence of steps the
 * caller drives, moving the rows between ranks with whatever transport it has (libmoe_mpi's
 * moe_mpi_forward is one; docs/parallel.md shows the sequence):
 *
 *   1. moe_ep_route        each rank routes its own tokens: ids [T, K], weights [T, K]
 *   2. moe_ep_send_plan    the (token, slot) pairs per destination rank, tagged t·K + k; the
 *                          caller sends, for each, the token's hidden row and the expert id
 *                          (and its weight w[t,k] where moe_ep_info.scales_input is set)
 *   3. moe_ep_experts      each rank runs its experts on the rows it received: one output row
 *                          (unweighted) per row received
 *   4. (transport)         the output rows go back to the ranks they came from
 *   5. moe_ep_combine      at each token's home rank: the shared experts, then
 *                          out[t] = Σ_k w[t,k] · y[t,k] in slot order, + the shared output
 *                          (weight 1 where the weights scaled the experts' inputs instead)
 *
 * Every token's output (and its ids and weights) is bit for bit moe_layer_forward's on one
 * process, whatever n, the placement, and how the tokens are spread over the ranks: every row
 * is computed alone (the batch invariance of moe_layer_forward), the combine is the one the
 * one-process forward runs, on the same unweighted rows in the same order.
 *
 * Functions follow moe.h's conventions (moe_status, moe_last_error, nothing written on error).
 */

#include "moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a layer's routed experts live. Set size to sizeof(moe_ep_placement); fields may be
 * added at the end in later versions. */
typedef struct moe_ep_placement {
    size_t size;
    int rank;    /* this process's rank, in [0, n_ranks) */
    int n_ranks; /* n >= 1 */
    /* NULL: contiguous ranges, expert e on rank floor(e · n / E) (ranks 0 .. n - 1 own
     * E / n experts each, give or take one). Otherwise [n_entries] ranks, entry e the rank of
     * expert e: n_entries must equal E and every entry lie in [0, n) (MOE_ERANGE naming the
     * entry). Copied at creation. A rank may own no expert. */
    const int32_t *expert_rank;
    size_t n_entries;
} moe_ep_placement;

/* moe_layer_create for rank placement->rank of placement->n_ranks (NULL placement: one rank,
 * which is moe_layer_create). Packs only this rank's routed experts, and reads only their
 * tensors of the checkpoint (other ranks' expert pages are never touched). A placed layer of
 * more than one rank runs its forward through the steps below: moe_layer_forward and
 * moe_layer_forward_experts on it are MOE_ESTATE unless the rank owns every expert. A dense
 * layer has no routed experts: every rank packs its MLP and runs moe_layer_forward on its own
 * tokens. */
MOE_API moe_status moe_layer_create_ep(const moe_model *model, int layer,
                                       const moe_layer_options *options,
                                       const moe_ep_placement *placement, moe_layer **out);

/* A placed layer, as it describes itself. Set size to sizeof(moe_ep_info). */
typedef struct moe_ep_info {
    size_t size;
    int rank, n_ranks;
    int n_experts;       /* E (0 for a dense layer) */
    int top_k;           /* K (0 for a dense layer) */
    int n_owned;         /* routed experts packed on this rank */
    size_t packed_bytes; /* this rank's packed bytes: gate, its experts, shared, dense */
    size_t expert_bytes; /* packed bytes of one routed expert */
    /* A hash of everything the ranks must agree on: the config fields the math reads, the
     * formats and recipes, the packed layout of an expert, the placement table. Equal on every
     * rank of one layer; ranks whose fingerprints differ cannot run a forward together. */
    uint64_t fingerprint;
    /* 1 where the routing weights scale the experts' inputs (Llama-4: expert e computes
     * mlp(x · w), added with weight 1): step 3 forms x · w on the expert's rank, so each row
     * travels with its weight (moe_ep_rows_args.weights). 0: the rows travel alone. Written
     * when info->size covers it. */
    int scales_input;
} moe_ep_info;

MOE_API moe_status moe_ep_get_info(const moe_layer *layer, moe_ep_info *info);

/* The rank of routed expert E (in [0, E)), into *rank. */
MOE_API moe_status moe_ep_expert_rank(const moe_layer *layer, int expert, int *rank);

/* Packed bytes rank R of the layer's placement holds (gate, its experts, shared, dense): the
 * same answer on every rank. */
MOE_API moe_status moe_ep_rank_bytes(const moe_layer *layer, int rank, size_t *bytes);

/* ---- The steps ------------------------------------------------------------------------- */

/* Bytes of workspace any step needs for up to n_tokens tokens of this rank and n_rows rows
 * received (0 on overflow; 0 tokens and 0 rows need none). One buffer of this size serves
 * every step of a forward. */
MOE_API size_t moe_ep_workspace_size(const moe_layer *layer, size_t n_tokens, size_t n_rows);

/* Step 1: the gate and the router of an MoE (or hash) layer for this rank's tokens. Reads of
 * ARGS: n_tokens, hidden_size, hidden, hidden_dtype, token_ids and token_id_dtype (hash
 * layers: I32 or I64, each in [0, vocab)), logits_out (optional), ids_out and weights_out
 * (required: [T, K]), workspace (moe_ep_workspace_size(layer, T, 0) bytes), trace; out is not
 * read. ids, weights and logits are moe_layer_forward's, bit for bit. A dense layer is
 * MOE_EINVAL. */
MOE_API moe_status moe_ep_route(const moe_layer *layer, const moe_forward_args *args);

/* Step 2: which (token, slot) pairs go to which rank. ids: [n_tokens, K] (step 1's), each in
 * [0, E) (MOE_ERANGE naming the token and slot). Writes counts[r] (n_ranks entries: the pairs
 * rank r receives) and tags[T·K]: rank 0's tags, then rank 1's, ..., each rank's ascending,
 * tag = t·K + k for token t, slot k. The row to send for tag g is hidden row g / K with
 * expert ids[g] (and, where moe_ep_info.scales_input is set, weight weights[g] of step 1).
 * Pairs for this rank itself are among them (the caller runs them locally). */
MOE_API moe_status moe_ep_send_plan(const moe_layer *layer, size_t n_tokens, const int32_t *ids,
                                    size_t *counts, int64_t *tags);

/* Step 3's arguments: rows received, each with the expert to run it. */
typedef struct moe_ep_rows_args {
    size_t size;            /* sizeof(moe_ep_rows_args) */
    size_t n_rows;          /* 0 is a valid no-op */
    size_t hidden_size;     /* the model's hidden size */
    const void *rows;       /* [n_rows, hidden] hidden rows as the tokens' home ranks hold them */
    moe_dtype rows_dtype;   /* MOE_DTYPE_F32 or MOE_DTYPE_BF16: every rank's input dtype */
    const int32_t *experts; /* [n_rows]: each an expert this rank owns (else MOE_ERANGE) */
    float *y;               /* [n_rows, hidden]: each row's expert output, unweighted */
    void *workspace;        /* moe_ep_workspace_size(layer, 0, n_rows) bytes, 64-byte aligned */
    size_t workspace_size;
    moe_trace *trace; /* optional */
    /* [n_rows]: each row's routing weight, step 1's weights[g] for the row of tag g, finite.
     * Required where moe_ep_info.scales_input is set (args->size must cover it: else
     * MOE_EINVAL); not read otherwise. */
    const float *weights;
} moe_ep_rows_args;

/* Step 3: runs each row through its expert; row r's output is what the one-process forward
 * computes for that (token, expert) before the combine. Where the weights scale the experts'
 * inputs, row r runs as x_r · weights[r], formed here as the one-process forward forms it
 * (the f32 product, rounded to bf16 for the bf16 and tile recipes: docs/layer.md). */
MOE_API moe_status moe_ep_experts(const moe_layer *layer, const moe_ep_rows_args *args);

/* Step 5's arguments: this rank's tokens, their weights and their returned expert rows. */
typedef struct moe_ep_combine_args {
    size_t size;            /* sizeof(moe_ep_combine_args) */
    size_t n_tokens;        /* T; 0 is a valid no-op */
    size_t hidden_size;     /* the model's hidden size */
    const void *hidden;     /* [T, hidden]: the shared experts' input (step 1's rows) */
    moe_dtype hidden_dtype; /* MOE_DTYPE_F32 or MOE_DTYPE_BF16 */
    const float *weights;   /* [T, K] step 1's weights, finite */
    const float *y;         /* [T·K, hidden]: row t·K + k is step 3's output for tag t·K + k */
    float *out;             /* [T, hidden]: the block's output */
    void *workspace;        /* moe_ep_workspace_size(layer, T, 0) bytes, 64-byte aligned */
    size_t workspace_size;
    moe_trace *trace; /* optional */
} moe_ep_combine_args;

/* Step 5: out[t] = Σ_k weights[t,k] · y[t·K + k] in slot order (Σ_k 1 · y[t·K + k] where the
 * weights scaled the experts' inputs), + the shared experts' output of hidden[t] (which this
 * step computes): moe_layer_forward's output, bit for bit. */
MOE_API moe_status moe_ep_combine(const moe_layer *layer, const moe_ep_combine_args *args);

#ifdef __cplusplus
}
#endif

#endif /* MOE_EP_H */
