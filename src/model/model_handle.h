/* model_handle.h — internal: what an opened moe_model holds, for the CLI and later layers. */
#ifndef MOE_MODEL_MODEL_HANDLE_H
#define MOE_MODEL_MODEL_HANDLE_H

#include "io/checkpoint.h"
#include "model/model.h"

/* Flags of moe_model_open_ex. */
#define MOE_OPEN_SKIP_VERIFY                                                                       \
    1u /* keep the handle even when tensors are missing or wrong                                   \
          (moe inspect reports them with moe_model_verify_each) */

/* moe_model_open with FLAGS; FLAGS 0 is exactly moe_model_open. */
moe_status moe_model_open_ex(const char *dir, const moe_open_options *options, unsigned flags,
                             moe_model **out);

/* The parsed config.json and the opened tensors of a handle; owned by the handle. */
const moe_model_desc *moe_model_desc_of(const moe_model *model);
const moe_ckpt *moe_model_ckpt_of(const moe_model *model);

#endif
