/* layer_describe.h — internal: what moe_layer_create would choose for a layer, packing none. */
#ifndef MOE_LAYER_LAYER_DESCRIBE_H
#define MOE_LAYER_LAYER_DESCRIBE_H

#include "moe.h"
#include "moe_ep.h"

/*
 * The text moe_layer_explain would return for moe_layer_create(model, layer, options) made
 * now, on this machine: every resolved default, every kernel chosen with its reason, the
 * recipe, the packed bytes of each group. It runs the same plan function as create (the same
 * tensor checks and eligibility functions) but packs nothing and allocates no packed memory,
 * so `moe inspect` can describe a 61-layer DeepSeek-V3 without packing 700 GB. It does build
 * the layer's router (a copy of the correction bias or hash table), for its explain line.
 *
 * Errors are those create reports before packing (a missing or misshapen tensor, a format
 * not supported yet, bad options). On success *text is a moe_malloc'd string: release it
 * with moe_free (src/core/alloc.h).
 */
moe_status moe_layer_describe(const moe_model *model, int layer, const moe_layer_options *options,
                              char **text);

/* The same with the caps and recipe of TUNING (layer_internal.h; NULL: the defaults), for
 * tests. */
struct moe_layer_tuning;
moe_status moe_layer_describe_tuned(const moe_model *model, int layer,
                                    const moe_layer_options *options,
                                    const struct moe_layer_tuning *tuning, char **text);

/* The same for rank PLACEMENT->rank of PLACEMENT->n_ranks (moe_layer_create_ep): the text
 * lists the placement and every rank's packed bytes. */
moe_status moe_layer_describe_ep(const moe_model *model, int layer,
                                 const moe_layer_options *options,
                                 const moe_ep_placement *placement, char **text);
moe_status moe_layer_describe_ep_tuned(const moe_model *model, int layer,
                                       const moe_layer_options *options,
                                       const struct moe_layer_tuning *tuning,
                                       const moe_ep_placement *placement, char **text);

#endif
