/* layer_internal.h — internal: the layer object, its plan (shared with describe), test hooks. */
#ifndef MOE_LAYER_LAYER_INTERNAL_H
#define MOE_LAYER_LAYER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "experts/experts.h"
#include "gate/gate.h"
#include "io/checkpoint.h"
#include "layer/layer_team.h"
#include "model/model.h"
#include "moe.h"
#include "moe_ep.h"
#include "select/select.h"

/* Expert parallelism: this rank of n, and which routed experts each rank packs. One rank
 * (n 1) owns every expert; the tables are then NULL. */
typedef struct moe_layer_placement {
    int rank, n_ranks;
    bool table;           /* the caller's expert -> rank table, not the contiguous default */
    int32_t *expert_rank; /* [E] (owned), NULL for one rank */
    int32_t *slot;        /* [E] (owned): this rank's packed expert of each expert, or -1 */
    int32_t *owned;       /* [n_owned] (owned): the experts this rank packs, ascending */
    int n_owned;
} moe_layer_placement;

/* The MLP groups a layer may have. */
typedef enum moe_layer_group_id {
    MOE_LG_ROUTED = 0, /* the routed experts */
    MOE_LG_SHARED,     /* DeepSeek's shared experts: one MLP every token visits */
    MOE_LG_DENSE,      /* the MLP of a dense layer */
    MOE_LG_COUNT_
} moe_layer_group_id;

/* "routed experts", "shared experts", "dense mlp": for messages and explain. */
extern const char *const moe_layer_group_label[MOE_LG_COUNT_];

#define MOE_LAYER_ROLES (MOE_ROLE_SHARED_GATE + 1)

/* What creation decided for one group, before (describe) or while (create) packing. */
typedef struct moe_layer_group_plan {
    bool present;
    int n;                  /* experts in the group (1 for shared and dense) */
    moe_mlp_desc mlp;       /* shape, format, activation */
    moe_dtype weight_dtype; /* of the checkpoint's projections (all the same in a group) */
    moe_dtype scale_dtype;  /* FP8: of the block scales; INVALID otherwise */
    moe_dtype bias_dtype;   /* gpt-oss: of the biases; INVALID otherwise */
    bool stacked;           /* gpt-oss, Llama-4: [E, ...] tensors, gate_up transposed [E, H, 2I] */
    bool gate_up_halves;    /* Llama-4: gate in columns [0, I), up in [I, 2I) (gpt-oss: gate
                               and up in alternate columns) */
    const moe_expert_kernels *ks;
    moe_expert_recipe recipe;
    char reason[320];       /* the eligibility function's reason */
    moe_expert_group group; /* sizes (and, in a created layer, the packed bytes) */
    /* The checkpoint tensors: stacked/shared/dense ones in one[role]; routed ones per expert
     * in per_expert[e][role] (n × MOE_LAYER_ROLES), NULL entries where a role is absent. */
    const moe_tensor *one[MOE_LAYER_ROLES];
    const moe_tensor *(*per_expert)[MOE_LAYER_ROLES];
} moe_layer_group_plan;

/* Everything creation resolves and chooses, computed by one function for both
 * moe_layer_create and moe_layer_describe, so their texts cannot drift apart. */
typedef struct moe_layer_plan {
    const moe_model *model;
    const moe_model_desc *desc;
    const moe_layer_desc *ld;
    int index;
    moe_cpu_caps allowed;
    int threads;
    bool threads_default;
    bool fixed_threads;       /* options->fixed_threads: no fewer threads while preempted */
    moe_expert_recipe recipe; /* asked of the expert eligibility function for every bf16, FP8,
                                 f32 and f16 group; MXFP4 groups are asked for their one
                                 recipe, Q8 */
    bool recipe_default;      /* not asked for by the caller (options->experts_recipe) */
    int resident_experts;     /* moe_layer_tuning's; 0: all */
    moe_dtype logits_dtype;   /* F32 or BF16: what forward uses */
    int logits_origin;        /* 0 default (unset), 1 options, 2 moe_layer_set_logits_dtype */
    bool moe;                 /* has a router (MOE and HASH layers) */
    /* The gate and router (moe layers). */
    const moe_tensor *router[MOE_LAYER_ROLES];
    moe_gate_problem gate_problem;
    moe_kernel_choice gate_choice[2]; /* [0] f32 input, [1] bf16 input */
    size_t gate_bytes;
    char *router_explain; /* owned: moe_router_explain's text */
    moe_router_params router_params;
    /* Activations: which recipes the groups use, and the bf16 -> f32 widening kernel (for
     * the f32 recipe, and for the Q8 recipe, which prepares its rows from f32). */
    bool recipe_used[MOE_EXPERTS_RECIPES];
    moe_kernel_choice cvt_bf16;
    moe_layer_group_plan groups[MOE_LG_COUNT_];
    moe_layer_placement ep; /* where the routed experts live (layer_placement.c) */
    moe_dtype shared_gate_dtype; /* ld->shared_gate: the gate weight's dtype in the checkpoint */
} moe_layer_plan;

/* What the public API does not choose: the ISA caps and the resident experts. */
typedef struct moe_layer_tuning {
    const moe_cpu_caps *allowed; /* NULL: moe_cpu_query()'s */
    int resident_experts; /* 0 (or E and above): every routed expert packed. R in [1, E): only
                             experts 0 .. R - 1 are read and packed, and the batch's i-th
                             expert (ascending ids) runs on copy i % R (moe_expert_copy): moe
                             bench routes over a model's real expert count in the memory of R
                             (moe gen --stored-experts R writes such a checkpoint); outputs
                             are then not the model's, nor batch-invariant (principle 7):
                             the public API cannot make such a layer */
} moe_layer_tuning;

/* Resolves OPTIONS (and TUNING, which may be NULL), finds and checks every tensor of layer
 * LAYER, and runs every eligibility function (gate, experts, activation widening); packs
 * nothing. The router is not created (router_explain stays NULL). Free with
 * moe_layer_plan_free. */
moe_status moe_layer_plan_make(const moe_model *model, int layer, const moe_layer_options *options,
                               const moe_layer_tuning *tuning, moe_layer_plan *plan);

/* moe_layer_plan_make for rank PLACEMENT->rank of PLACEMENT->n_ranks (NULL: one rank). */
moe_status moe_layer_plan_make_ep(const moe_model *model, int layer,
                                  const moe_layer_options *options, const moe_layer_tuning *tuning,
                                  const moe_ep_placement *placement, moe_layer_plan *plan);
void moe_layer_plan_free(moe_layer_plan *plan);

/* Resolves PLACEMENT (NULL: one rank) for the planned layer P (its groups laid out): checks
 * rank, n and every table entry, and builds P->ep's tables (layer_placement.c). */
moe_status moe_layer_placement_make(moe_layer_plan *p, const moe_ep_placement *placement);
void moe_layer_placement_free(moe_layer_placement *ep);

/* The checkpoint expert that packed expert I of group G is (placed routed groups pack only
 * the rank's experts). */
int moe_layer_packed_expert(const moe_layer_plan *p, moe_layer_group_id id, int i);

/* Packed bytes rank R holds (the gate, its routed experts, shared, dense). */
size_t moe_layer_rank_bytes(const moe_layer_plan *p, int r);

/* The placement's lines of the explain text (moe_malloc'd into *text; "" for one rank). */
moe_status moe_layer_placement_render(const moe_layer_plan *p, char **text);

/* A hash of what every rank of a placed layer must agree on (moe_ep_info.fingerprint). */
uint64_t moe_layer_fingerprint(const moe_layer_plan *p);

/* Which part of a forward to run (expert parallelism's steps, or all of it). */
typedef enum moe_layer_part {
    MOE_PART_FULL = 0, /* moe_layer_forward and moe_layer_forward_experts */
    MOE_PART_ROUTE,    /* gate and router only */
    MOE_PART_ROWS,     /* routed rows (top_k 1), each row's unweighted output */
    MOE_PART_COMBINE,  /* the always-on MLP and the combine of given routed rows */
} moe_layer_part;

/* Expert E of group G as kernel weight sources over the checkpoint tensors the plan found
 * (strides read gpt-oss's stacked, interleaved tensors in place). */
void moe_layer_sources(const moe_layer_group_plan *g, int e, moe_weight_src *gate,
                       moe_weight_src *up, moe_weight_src *down);

/* MXFP4 groups: MOE_EVALUE naming the tensor and index of the first E8M0 scale 0xFF (NaN) of
 * expert E; MOE_OK for the other formats, whose kernels check their scales. */
moe_status moe_layer_check_scales(const moe_layer_group_plan *g, int e);

/* The explain text of PLAN (moe_malloc'd, into *text). */
moe_status moe_layer_plan_render(const moe_layer_plan *plan, char **text);

/* A forward's arrays in the workspace: the activations in each recipe's type the input does
 * not already have, logits / ids / weights (used when the caller asks for none), the engine's. */
typedef struct moe_layer_bufs {
    float *act_f32;
    uint16_t *act_bf16;
    unsigned char *act_q8; /* T prepared Q8 rows (k = H) of the Q8 groups */
    float *logits;
    int32_t *ids;
    float *weights;
    float *shared_scale; /* [T]: the shared expert gate's sigmoid per token (ld->shared_gate) */
    moe_experts_ws ws;
} moe_layer_bufs;

/* The first group of the Q8 recipe, or NULL. Every Q8 group of a layer reads the same
 * prepared rows of the input (k = H; every set of the recipe writes the same bytes), so the
 * forward prepares them once, with this group's kernel set. */
const moe_expert_group *moe_layer_q8_group(const moe_layer_plan *p);

/* Whether a forward needs the input as f32 rows: for the F32 recipe, the Q8 rows (prepared
 * from f32), or the routed experts' scaled input (moe_expert_group.scale_input). */
static inline bool moe_layer_needs_f32_rows(const moe_layer_plan *p)
{
    return p->recipe_used[MOE_RECIPE_F32] || p->recipe_used[MOE_RECIPE_Q8] ||
           (p->moe && p->ld->scale_input);
}

/* Whether a group of the layer reads bf16 activation rows (the BF16 or the TILE recipe). */
static inline bool moe_layer_uses_bf16_rows(const moe_layer_plan *p)
{
    return p->recipe_used[MOE_RECIPE_BF16] || p->recipe_used[MOE_RECIPE_TILE];
}

/* Takes a forward's arrays for n_tokens from C (counting only when c->base is NULL). */
void moe_layer_carve(const moe_layer_plan *p, moe_carve *c, size_t n_tokens, moe_layer_bufs *b);

/* The arrays of one PART of a forward of n_tokens (rows, for MOE_PART_ROWS). */
void moe_layer_carve_part(const moe_layer_plan *p, moe_carve *c, size_t n_tokens,
                          moe_layer_part part, moe_layer_bufs *b);

/* The bytes PART of a forward of n_tokens needs (0 for none, and on overflow). */
size_t moe_layer_part_workspace(const moe_layer_plan *plan, size_t n_tokens, moe_layer_part part);

/* Runs PART of a forward whose arguments the caller checked: ARGS' rows, workspace and
 * outputs; ROUTE writes ids_out and weights_out; ROWS reads ids (the rows' experts, top_k 1)
 * and, for a scale_input layer, weights (each row's input scale), and writes out; COMBINE
 * reads weights and y (rows t·K + k) and writes out. */
moe_status moe_layer_forward_part(const moe_layer *layer, const moe_forward_args *args,
                                  moe_layer_part part, const int32_t *ids, const float *weights,
                                  const float *y);

/* A hash-routed layer's token ids in ARGS: present, I32 or I64, each in [0, vocab); messages
 * start with FN (the public function) and the NULL one ends with HINT. */
moe_status moe_layer_check_token_ids(const moe_layer *layer, const moe_forward_args *args,
                                     const char *fn, const char *hint);

/* The bytes a forward of n_tokens needs (0 for no tokens, and on overflow). */
size_t moe_layer_plan_workspace(const moe_layer_plan *plan, size_t n_tokens);

struct moe_layer {
    /* After creation plan.desc and plan.ld point at these copies and the plan's tensor
     * pointers are cleared: a created layer keeps nothing of the model. */
    moe_model_desc desc; /* without its layer array */
    moe_layer_desc ld;
    moe_layer_plan plan;
    moe_gate *gate;     /* NULL for dense layers */
    moe_router *router; /* NULL for dense layers */
    float *shared_gate; /* [H] f32: the shared expert gate's weight (ld->shared_gate), else NULL */
    /* The groups forward runs (point into plan.groups[...].group, or NULL). */
    const moe_expert_group *routed, *always;
    const char *always_name;
    /* bit 0: a forward has run; bit 1: the logits dtype was decided (options or a set call).
     * Separate from the layer so forward, which gets a const layer, can set it. */
    atomic_uint *state;
    moe_team *team; /* how many threads forwards run on now (layer_team.h) */
    char *explain;     /* the current text */
    char *explain_old; /* the text before moe_layer_set_logits_dtype, kept for old pointers */
};

#define MOE_LAYER_USED 1u
#define MOE_LAYER_LOGITS_SET 2u

/* moe_layer_create with TUNING (NULL: the defaults), so tests can force every ISA level (a
 * level this build did not compile is simply not chosen) and either recipe. */
moe_status moe_layer_create_tuned(const moe_model *model, int layer,
                                  const moe_layer_options *options, const moe_layer_tuning *tuning,
                                  moe_layer **out);

/* moe_layer_create_tuned placed on a rank (moe_layer_create_ep; NULL PLACEMENT: one rank). */
moe_status moe_layer_create_ep_tuned(const moe_model *model, int layer,
                                     const moe_layer_options *options,
                                     const moe_layer_tuning *tuning,
                                     const moe_ep_placement *placement, moe_layer **out);

#endif
