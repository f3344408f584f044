/* verify.h — internal: check a checkpoint's tensors against a model description, layer by layer. */
#ifndef MOE_MODEL_VERIFY_H
#define MOE_MODEL_VERIFY_H

#include <stddef.h>

#include "io/checkpoint.h"
#include "model/model.h"

/* What became of one tensor spec, or one tensor nobody asked for. */
typedef enum moe_verify_kind {
    MOE_VERIFY_FOUND = 0, /* present (canonical or alternative name), accepted dtype, right shape */
    MOE_VERIFY_MISSING,   /* a required tensor is absent: MOE_EMISSING */
    MOE_VERIFY_BAD_DTYPE, /* present with a dtype outside the spec's mask: MOE_EDTYPE */
    MOE_VERIFY_BAD_SHAPE, /* present with another rank or shape: MOE_ESHAPE */
    MOE_VERIFY_ABSENT,    /* an optional tensor is absent: not an error */
    MOE_VERIFY_UNEXPECTED, /* a tensor under the layer's MoE/MLP namespace (model.layers.L.mlp.,
                              model.layers.L.block_sparse_moe., [model.]layers.L.ffn.) that no
                              spec resolved to: reported, not an error */
} moe_verify_kind;

typedef struct moe_verify_item {
    moe_verify_kind kind;
    int layer;
    const moe_tensor_spec *spec; /* NULL for UNEXPECTED */
    const moe_tensor *tensor;    /* NULL for MISSING and ABSENT */
    moe_status status;   /* MOE_OK, or the status this problem makes verification fail with */
    const char *message; /* one line naming layer and tensor; "" for FOUND; valid only
                            during the callback */
} moe_verify_item;

/* Called once per item. Returning anything but MOE_OK stops the walk with that status. */
typedef moe_status (*moe_verify_fn)(void *ctx, const moe_verify_item *item);

typedef struct moe_verify_summary {
    size_t specs; /* tensor specs checked */
    size_t found, missing, bad_dtype, bad_shape, absent, unexpected;
} moe_verify_summary;

/* Checks every layer's tensors and stops at the first problem: MOE_EMISSING (tensor and
 * layer), MOE_EDTYPE (tensor, dtype found, dtypes accepted) or MOE_ESHAPE (tensor, shape
 * found, shape expected). Memory is one layer's table at a time. */
moe_status moe_model_verify(const moe_model_desc *desc, const moe_ckpt *ckpt);

/* The same checks, reporting instead of stopping: for each layer in order, FN gets every spec
 * in table order, then the layer's unexpected tensors in name order. Returns the status of
 * the first problem (its message is left as the last error) or MOE_OK; a status returned by
 * FN stops the walk and is returned as is. FN and SUMMARY may be NULL; SUMMARY is filled
 * with what was seen before any stop. */
moe_status moe_model_verify_each(const moe_model_desc *desc, const moe_ckpt *ckpt, moe_verify_fn fn,
                                 void *ctx, moe_verify_summary *summary);

/* Whether two projection dtypes hold one format: equal, or the U8 and I8 labels that
 * checkpoints give packed MXFP4 codes (the kernels read either). */
static inline bool moe_same_weight_dtype(moe_dtype a, moe_dtype b)
{
    const bool code_a = a == MOE_DTYPE_U8 || a == MOE_DTYPE_I8;
    const bool code_b = b == MOE_DTYPE_U8 || b == MOE_DTYPE_I8;
    return a == b || (code_a && code_b);
}

/* An unquantised MLP group (format BF16 from the config, which cannot tell) takes the format
 * of the dtype its projections are stored in: F32 or F16 when the group's first projection
 * found is f32 or f16 (what transformers' save_pretrained writes for a float32 or float16
 * model); other groups and groups with no projection present are left alone. Verification
 * then holds every projection of the group to that dtype. MOE_ENOMEM, or MOE_OK. */
moe_status moe_model_resolve_formats(moe_model_desc *desc, const moe_ckpt *ckpt);

/* The checkpoint tensor that holds SPEC: its canonical name, else the family's alternative
 * spelling (moe_model_alt_name). NULL if neither is present. */
const moe_tensor *moe_model_find_tensor(const moe_model_desc *desc, const moe_ckpt *ckpt,
                                        const moe_tensor_spec *spec);

/* SPEC's tensor checked as moe_model_verify checks it, for a handle that may have been opened
 * without verification: *OUT the tensor (NULL for an absent optional one) and MOE_OK, or
 * MOE_EMISSING / MOE_EDTYPE / MOE_ESHAPE with verification's message and *OUT NULL. */
moe_status moe_model_find_checked(const moe_model_desc *desc, const moe_ckpt *ckpt,
                                  const moe_tensor_spec *spec, const moe_tensor **out);

#endif
