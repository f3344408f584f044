/* gen_config.h — the config.json `moe gen` writes for each family, with the real HF field names. */
#ifndef MOE_TOOLS_GEN_CONFIG_H
#define MOE_TOOLS_GEN_CONFIG_H

#include <stdint.h>

#include "model/model.h"

/* The expert weight formats `moe gen --dtype` offers. */
typedef enum gen_dtype {
    GEN_DTYPE_BF16 = 0,
    GEN_DTYPE_FP8,   /* FP8 E4M3 with 128x128 block scales */
    GEN_DTYPE_MXFP4, /* gpt-oss MXFP4, DeepSeek-V4 expert_dtype "fp4" */
    GEN_DTYPE_INT4,  /* compressed-tensors pack-quantized int4 routed experts (Kimi-K2-Thinking) */
} gen_dtype;

/* Every value is resolved (no "unset") before the config is built. Fields a family does not
 * have are ignored by it. */
typedef struct gen_options {
    moe_family family;
    gen_dtype dtype;
    int64_t layers;
    int64_t hidden;
    int64_t experts;
    int64_t topk;
    int64_t groups;             /* DeepSeek-V2/V3, Kimi-K2: n_group */
    int64_t topk_group;         /* DeepSeek-V2/V3, Kimi-K2 */
    int64_t intermediate;       /* each routed expert (and each shared expert) */
    int64_t dense_intermediate; /* DeepSeek dense layers; Qwen3 intermediate_size */
    int64_t shared;             /* n_shared_experts: DeepSeek-V2/V3/V4, Kimi-K2 */
    int64_t first_dense;        /* first_k_dense_replace: DeepSeek-V2/V3, Kimi-K2 */
    int64_t hash_layers;        /* num_hash_layers: DeepSeek-V4 */
    int64_t vocab;
    const char *torch_dtype; /* "bfloat16", "float16" or "float32": the router dtype */
    double norm_min;         /* ERNIE-4.5: moe_norm_min, the renormalisation's floor */
} gen_options;

const char *gen_dtype_name(gen_dtype dtype); /* "bf16", "fp8", "mxfp4", "int4" */

/* The config.json text (2-space indented, trailing newline), or NULL when out of memory.
 * Free with free(). */
char *gen_config_text(const gen_options *o);

#endif
