/* moe.h — the one public header of libmoe: status codes, dtypes, CPU capabilities, checkpoints. */
#ifndef MOE_H
#define MOE_H

/*
 * libmoe runs the Mixture-of-Experts block of large language models (DeepSeek-V2/V3/R1,
 * Kimi-K2, DeepSeek-V4, Qwen3-MoE, Mixtral, gpt-oss) from their Hugging Face checkpoints.
 *
 * Conventions that hold for every function below:
 *  - Functions return a moe_status. MOE_OK (0) is success; on any other value the output
 *    arguments are left untouched and moe_last_error() describes the first failing check,
 *    naming the file, tensor, layer, field or argument.
 *  - The library never aborts, never exits and never prints.
 *  - Handles are opaque. An opened handle is immutable, so several threads may read it at
 *    once; the last-error message is per thread.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MOE_API marks the functions libmoe exports: the shared library builds everything else with
 * hidden visibility, so these declarations are its whole dynamic interface. */
#if defined(__GNUC__) || defined(__clang__)
#define MOE_API __attribute__((visibility("default")))
#else
#define MOE_API
#endif

#define MOE_VERSION_MAJOR 0
#define MOE_VERSION_MINOR 1
#define MOE_VERSION_PATCH 0
#define MOE_VERSION_STRING "0.1.0"

/* The version string of the library that is linked, which may differ from the header's. */
MOE_API const char *moe_version_string(void);

/* Status codes. The values are stable: new codes are appended, none is renumbered. */
typedef enum moe_status {
    MOE_OK = 0,
    MOE_EINVAL = 1,       /* invalid argument: NULL pointer, value out of the allowed set */
    MOE_ENOMEM = 2,       /* an allocation failed */
    MOE_EIO = 3,          /* a file could not be opened, read, written or mapped */
    MOE_ESTATE = 4,       /* a call in the wrong order (e.g. a setting changed twice) */
    MOE_EUNSUPPORTED = 5, /* well-formed but not supported (model type, format, ISA) */
    MOE_EOVERFLOW = 6,    /* size arithmetic overflows 64 bits or a documented limit */
    MOE_ERANGE = 7,       /* a value out of range: expert id, token id, table entry */
    MOE_EMISSING = 8,     /* a required file, tensor or config field is absent */
    MOE_ETRUNCATED = 9,   /* a file is shorter than its own header says */
    MOE_EHEADER = 10,     /* a file header is malformed (length, magic, version) */
    MOE_EJSON = 11,       /* JSON that does not parse, or a value of the wrong JSON type */
    MOE_EDUPLICATE = 12,  /* a name or key that appears twice */
    MOE_EOFFSET = 13,     /* tensor offsets with holes, overlaps, or bytes past the end */
    MOE_EDTYPE = 14,      /* an unknown dtype, or one not allowed for this tensor */
    MOE_ESHAPE = 15,      /* a shape that disagrees with its byte size, config or peers */
    MOE_EPATH = 16,       /* a path that is not a plain file name (shard names) */
    MOE_ECONFIG = 17,     /* a config.json that is inconsistent or has a bad field */
    MOE_EVALUE = 18,      /* a bad value inside tensor data (e.g. a NaN block scale) */
} moe_status;

/* A short, constant description of a status ("invalid argument"); never NULL. */
MOE_API const char *moe_status_string(moe_status status);

/* The message of the last failure on the calling thread, or "" if none. The pointer stays
 * valid until the next libmoe call on this thread. */
MOE_API const char *moe_last_error(void);

/* Element types, as they appear in checkpoints and arrays. The values are stable. */
typedef enum moe_dtype {
    MOE_DTYPE_INVALID = 0,
    MOE_DTYPE_F32 = 1,
    MOE_DTYPE_F16 = 2,
    MOE_DTYPE_BF16 = 3,
    MOE_DTYPE_F64 = 4,
    MOE_DTYPE_F8_E4M3 = 5, /* OCP E4M3 "fn": no Inf, NaN = 0x7F/0xFF, max 448 */
    MOE_DTYPE_F8_E5M2 = 6, /* OCP E5M2: IEEE-like, Inf and NaN */
    MOE_DTYPE_F8_E8M0 = 7, /* MX block scale: 2^(e-127), 0xFF = NaN */
    MOE_DTYPE_F4_E2M1 = 8, /* FP4, two codes per byte, low nibble = even element */
    MOE_DTYPE_BOOL = 9,
    MOE_DTYPE_U8 = 10,
    MOE_DTYPE_I8 = 11,
    MOE_DTYPE_U16 = 12,
    MOE_DTYPE_I16 = 13,
    MOE_DTYPE_U32 = 14,
    MOE_DTYPE_I32 = 15,
    MOE_DTYPE_U64 = 16,
    MOE_DTYPE_I64 = 17,
    MOE_DTYPE_INT4 = 18,  /* signed int4 in two's complement, two per byte */
    MOE_DTYPE_UINT4 = 19, /* int4 stored as value + 8, two per byte */
    MOE_DTYPE_COUNT_
} moe_dtype;

/* The canonical name ("bf16", "f8_e4m3", ...), or "invalid" for an unknown value. */
MOE_API const char *moe_dtype_name(moe_dtype dtype);

/* Bits per element (4, 8, 16, 32 or 64), or 0 for an unknown value. */
MOE_API unsigned moe_dtype_bits(moe_dtype dtype);

/* ---- CPU capabilities ---------------------------------------------------------------- */

/* ISA levels, ordered: each includes the ones before it. MOE_ISA (environment) caps the
 * level libmoe may use: "scalar", "avx2", "avx512" or "avx512bf16". */
typedef enum moe_isa_level {
    MOE_ISA_SCALAR = 0,     /* portable C */
    MOE_ISA_AVX2 = 1,       /* AVX2 + FMA + F16C, with AVX-VNNI where present */
    MOE_ISA_AVX512 = 2,     /* AVX-512 F/BW/DQ/VL, with VNNI where present */
    MOE_ISA_AVX512BF16 = 3, /* + AVX512-BF16, with FP16, AMX-INT8 and AMX-BF16 where present */
} moe_isa_level;

/* One set of features. Every flag already accounts for OS support of the registers. */
typedef struct moe_cpu_caps {
    bool avx2;        /* AVX2, FMA and F16C, with YMM state enabled by the OS */
    bool avx512;      /* AVX-512 F, BW, DQ and VL, with ZMM and opmask state enabled */
    bool avx512_bf16; /* AVX512-BF16 (vdpbf16ps); implies avx512 */
    bool avx512_vnni; /* AVX512-VNNI (vpdpbusd); implies avx512 */
    bool avx512_fp16; /* AVX512-FP16; implies avx512 */
    bool avx512_vbmi; /* AVX512-VBMI (vpermb, vpermt2b: byte tables); implies avx512 */
    bool avx_vnni;    /* AVX-VNNI (VEX vpdpbusd on ymm); implies avx2 */
    bool amx_int8;    /* AMX-TILE and AMX-INT8 (tdpbssd), tile data granted to this process by the
                       * OS; implies avx512 */
    bool amx_bf16;    /* AMX-TILE and AMX-BF16 (tdpbf16ps), tile data granted likewise; implies
                       * avx512 */
} moe_cpu_caps;

/* What the machine has, what this build compiled kernels for, and what libmoe will use
 * (detected ∩ compiled ∩ the MOE_ISA cap). */
typedef struct moe_cpu_info {
    moe_cpu_caps detected;
    moe_cpu_caps compiled;
    moe_cpu_caps allowed;
    moe_isa_level cap; /* the MOE_ISA cap, or the highest level when MOE_ISA is unset */
    bool cap_from_env; /* true when MOE_ISA was set */
    char brand[64];    /* the CPU brand string, "" if unknown */
} moe_cpu_info;

/* Detects the CPU (once per process, thread-safe) and applies MOE_ISA. An unknown MOE_ISA
 * value is MOE_EINVAL, naming the value. */
MOE_API moe_status moe_cpu_query(moe_cpu_info *info);

/* The name of a level ("scalar", "avx2", "avx512", "avx512bf16"). */
MOE_API const char *moe_isa_level_name(moe_isa_level level);

/* ---- Checkpoints --------------------------------------------------------------------- */

/* An opened Hugging Face model folder: config.json, and model.safetensors or shards listed
 * in model.safetensors.index.json. Opening parses and validates every header and the
 * config, and maps the files; it packs nothing. */
typedef struct moe_model moe_model;

/* Options for moe_model_open. Set size to sizeof(moe_open_options); fields may be added at
 * the end in later versions. NULL options means all defaults. */
typedef struct moe_open_options {
    size_t size;
    bool no_mmap; /* read tensors into memory instead of mapping (e.g. network file systems) */
} moe_open_options;

/* Opens DIR (see above). On success *out is a handle to close with moe_model_close. */
MOE_API moe_status moe_model_open(const char *dir, const moe_open_options *options,
                                  moe_model **out);

/* Releases everything the handle holds. NULL is a no-op. */
MOE_API void moe_model_close(moe_model *model);

/* The number of decoder layers in the model description. */
MOE_API int moe_model_layer_count(const moe_model *model);

/* ---- Routing ------------------------------------------------------------------------- */

/* The score function applied to router logits. */
typedef enum moe_score_func {
    MOE_SCORE_SOFTMAX = 0,
    MOE_SCORE_SIGMOID = 1,
    MOE_SCORE_SQRTSOFTPLUS = 2, /* sqrt(softplus(z)), computed without underflow or overflow */
} moe_score_func;

/* Routing methods; docs/routing.md gives each formula. */
typedef enum moe_route_method {
    MOE_ROUTE_SOFTMAX_TOPK = 0, /* softmax -> top-k -> renormalise if asked (Mixtral, Qwen3) */
    MOE_ROUTE_TOPK_SOFTMAX = 1, /* top-k on the logits -> softmax over the k (gpt-oss) */
    MOE_ROUTE_GREEDY = 2,       /* DeepSeek-V2 greedy: softmax -> top-k */
    MOE_ROUTE_GROUP_LIMITED_GREEDY = 3, /* DeepSeek-V2: group score = max, keep topk_group */
    MOE_ROUTE_NOAUX_TC = 4,             /* score + correction bias, group score = top-2 sum */
    MOE_ROUTE_HASH = 5,                 /* ids from tid2eid[token id] (DeepSeek-V4 hash layers) */
    MOE_ROUTE_SIGMOID_TOP1 = 6,         /* Llama-4: top-1 on the logits, sigmoid weight */
    MOE_ROUTE_SOFTMAX_BIAS = 7, /* ERNIE-4.5: top-k of softmax + correction bias; the unbiased
                                   softmax renormalised as w / max(sum, renorm_min) */
} moe_route_method;

/* Names: "softmax_topk", "noaux_tc", ...; "softmax", "sigmoid", "sqrtsoftplus"; "unknown" for
 * a value outside the enum. */
MOE_API const char *moe_route_method_name(moe_route_method method);
MOE_API const char *moe_score_func_name(moe_score_func score);

/* A router: turns logits [T, E] (f32) into expert ids [T, K] (int32) and combine weights
 * [T, K] (f32). Immutable after creation; any number of threads may call forward at once. */
typedef struct moe_router moe_router;

/* What a router does. Set size to sizeof(moe_router_params); NULL pointers mean "none". */
typedef struct moe_router_params {
    size_t size;
    moe_route_method method;
    moe_score_func score; /* NOAUX_TC and HASH: SIGMOID or SQRTSOFTPLUS; others: fixed by method */
    int n_experts;        /* E */
    int top_k;            /* K */
    int n_group;          /* groups of E / n_group contiguous experts; 1 = no groups */
    int topk_group;       /* groups kept; 1 when n_group is 1 */
    bool norm_topk_prob;  /* renormalise the selected weights */
    float routed_scaling_factor; /* applied once, in the returned weights; 1 = none */
    /* The score-correction bias [E] (NOAUX_TC): F32, BF16 or F16, converted to f32 once, at
     * creation; every value must be finite. Copied: the caller may free it after create. */
    const void *correction_bias;
    moe_dtype correction_bias_dtype;
    /* The hash table [vocab_size, K] (HASH): I32 or I64, validated at creation (entries in
     * [0, E), distinct within a row) and copied. */
    const void *tid2eid;
    moe_dtype tid2eid_dtype;
    int64_t vocab_size;
    /* SOFTMAX_BIAS: the renormalisation divides by max(sum of the selected, renorm_min)
     * (ERNIE-4.5's moe_norm_min); finite and >= 0. 0 for the other methods (and when size ends
     * before this field). */
    float renorm_min;
} moe_router_params;

/* Creates a router after validating every parameter (MOE_EINVAL / MOE_ECONFIG naming the
 * field, MOE_EVALUE / MOE_ERANGE naming the table entry) and choosing its kernels. */
MOE_API moe_status moe_router_create(const moe_router_params *params, moe_router **out);

/* Creates the router of layer LAYER of an opened model (its correction bias and tid2eid
 * tensors read from the checkpoint). A dense layer is MOE_EINVAL. */
MOE_API moe_status moe_router_create_from_model(const moe_model *model, int layer,
                                                moe_router **out);

MOE_API void moe_router_destroy(moe_router *router);

/* Routes n_tokens rows. logits: [n_tokens, E] f32, row-major. token_ids: [n_tokens] of
 * token_id_dtype (I32 or I64, read in place), required by HASH routers (MOE_EINVAL without
 * them, MOE_ERANGE for an id outside [0, vocab_size)) and ignored otherwise. ids: [n_tokens, K]
 * int32; weights: [n_tokens, K] f32. n_tokens = 0 is a valid no-op. On error nothing is
 * written to ids or weights.
 *
 * Contract: fp32 throughout; slots in descending key order, ties to the lower expert id
 * (HASH: the table's order); ids distinct and in [0, E) for every input; a non-finite logit
 * is never preferred over a finite one and its weight is 0; renormalisation with a zero sum
 * leaves zero weights; routed_scaling_factor is applied exactly once. */
MOE_API moe_status moe_router_forward(const moe_router *router, size_t n_tokens,
                                      const float *logits, const void *token_ids,
                                      moe_dtype token_id_dtype, int32_t *ids, float *weights);

/* One line naming the method, its parameters and the kernels chosen, with the reason. The
 * string lives as long as the router. */
MOE_API const char *moe_router_explain(const moe_router *router);

/* ---- Describing a model and its layers: the sizes a caller's buffers need --------------- */

/* What a layer's MLP is. The values are stable. */
typedef enum moe_layer_kind {
    MOE_LAYER_DENSE = 0, /* one always-on MLP (DeepSeek's first_k_dense_replace, Qwen3's
                            mlp_only_layers) */
    MOE_LAYER_MOE = 1,   /* routed experts chosen by router scores */
    MOE_LAYER_HASH = 2,  /* routed experts chosen by tid2eid[token id] (DeepSeek-V4) */
} moe_layer_kind;

/* How a group of expert (or shared, or dense MLP) weights is stored in the checkpoint. The
 * values are stable. */
typedef enum moe_weight_format {
    MOE_WFMT_BF16 = 0,      /* plain bf16 [out, in] */
    MOE_WFMT_FP8_BLOCK = 1, /* E4M3 [out, in] + a scale per 128 × 128 block (f32 or E8M0) */
    MOE_WFMT_MXFP4 = 2,     /* E2M1 codes, two per byte, + an E8M0 scale per 32 along K */
    MOE_WFMT_F32 = 3,       /* plain f32 [out, in] (an unquantised checkpoint saved in f32) */
    MOE_WFMT_F16 = 4,       /* plain f16 [out, in] (an unquantised checkpoint saved in f16) */
    /* symmetric int4, 8 per int32 word (compressed-tensors pack-quantized), + a bf16 scale
     * per G along K */
    MOE_WFMT_INT4_GROUP = 5,
} moe_weight_format;

/* "dense", "moe", "hash"; "bf16", "fp8_block", "mxfp4", "f32", "f16", "int4_group"; "unknown"
 * outside the enums. */
MOE_API const char *moe_layer_kind_name(moe_layer_kind kind);
MOE_API const char *moe_weight_format_name(moe_weight_format format);

/* A model, as its config.json describes it. Set size to sizeof(moe_model_info) before the
 * call; fields may be added at the end in later versions. */
typedef struct moe_model_info {
    size_t size;
    const char *family;  /* the model_type ("deepseek_v3", "gpt_oss", ...): lives as long as
                            the model */
    int n_layers;        /* decoder layers (moe_model_layer_count) */
    int64_t hidden_size; /* H: every forward's rows are H wide */
    int64_t vocab_size;
    int n_moe_layers;    /* layers of kind MOE or HASH */
    int n_experts;       /* routed experts of the MoE layers (0 when there are none) */
    int top_k;           /* experts per token of the MoE layers (0 when there are none) */
} moe_model_info;

/* One layer, as creation would build it. Set size to sizeof(moe_layer_info) before the call. */
typedef struct moe_layer_info {
    size_t size;
    int index;
    moe_layer_kind kind;
    int64_t hidden_size;              /* H */
    int n_experts;                    /* E: routed experts; 0 for a dense layer */
    int top_k;                        /* K: the width of ids and weights; 0 for a dense layer */
    int64_t intermediate_size;        /* each routed expert's (a dense layer: its MLP's) */
    moe_weight_format expert_format;  /* of the routed experts (a dense layer: its MLP) */
    int n_shared_experts;             /* 0 when the layer has none */
    int64_t shared_intermediate_size; /* the shared experts' width, all of them together */
    moe_weight_format shared_format;  /* of the shared experts, when there are some */
    moe_route_method route_method;    /* MOE and HASH layers */
    moe_score_func score_func;        /* MOE and HASH layers */
} moe_layer_info;

/* Fill INFO (whose size field the caller set; MOE_EINVAL for a size smaller than this
 * version's first release of the struct). Nothing is packed or read beyond config.json. */
MOE_API moe_status moe_model_get_info(const moe_model *model, moe_model_info *info);
MOE_API moe_status moe_model_get_layer_info(const moe_model *model, int layer,
                                            moe_layer_info *info);

/* ---- The MoE layer ------------------------------------------------------------------- */

/* One MoE block (or dense MLP) of a model: router gate -> routing -> experts -> shared
 * experts -> combine. Created from an opened model: creation chooses every kernel, packs
 * every weight once into the kernel's layout (and releases the mapped checkpoint pages it
 * packed), converts every per-expert constant, and resolves every default. Immutable after
 * creation except for moe_layer_set_logits_dtype; forward may then run on any number of
 * threads at once, each with its own workspace. */
typedef struct moe_layer moe_layer;

/* How the bf16 and FP8 experts (routed, shared, dense MLP) meet the activations. MXFP4 experts
 * run q8 (activations quantised per 32-block to int8) unless TILE is asked for. */
typedef enum moe_experts_recipe {
    MOE_EXPERTS_RECIPE_DEFAULT = 0, /* f32 */
    MOE_EXPERTS_RECIPE_F32 = 1,  /* f32 activations, fp32 FMA: the same bits at every ISA level */
    MOE_EXPERTS_RECIPE_BF16 = 2, /* activations rounded to bf16 once per forward, vdpbf16ps's
                                arithmetic (exact products, fp32 sums): the same bits at every
                                level, fast from AVX2 up (emulated in portable C below) */
    MOE_EXPERTS_RECIPE_TILE = 3, /* bf16 and FP8 experts: activations and h rounded to bf16 as
                                for bf16, the AMX tile unit's arithmetic (tdpbf16ps: per 32
                                along K two fp32 chains of exact products, summed into the
                                total; FP8: per 128-K block from zero, then one scale FMA): the
                                same bits at every level, tdpbf16ps where AMX-BF16 is allowed,
                                FMA chains below; f32 / f16 experts run f32; MXFP4 experts too,
                                each weight and its block scale one bf16 (exact), where every
                                E8M0 scale is in 2^-125..2^125, else q8 (explain says why) */
} moe_experts_recipe;

typedef struct moe_layer_options {
    size_t size; /* sizeof(moe_layer_options) */
    int threads; /* worker threads per forward; 0 = the number of cores */
    /* The router logits dtype: MOE_DTYPE_F32 (default), MOE_DTYPE_BF16 (parity mode: the gate
     * rounds its fp32 accumulation to bf16 in the same epilogue), or MOE_DTYPE_INVALID to
     * decide later with moe_layer_set_logits_dtype (it resolves to F32 if never set). */
    moe_dtype logits_dtype;
    /* The experts' recipe; read only when size covers it (older callers get the default). */
    moe_experts_recipe experts_recipe;
    /* false (the default): while a forward's threads wait on run queues (its cores shared with
     * other work, such as PyTorch's threads), the next forwards run on fewer threads, trying
     * all `threads` again after a growing pause; true: every forward runs on exactly
     * `threads` (benchmarks). The results are the same bits either way. Read only when size
     * covers it. */
    bool fixed_threads;
} moe_layer_options;

/* Creates layer LAYER of MODEL. options NULL = defaults. */
MOE_API moe_status moe_layer_create(const moe_model *model, int layer,
                                    const moe_layer_options *options, moe_layer **out);

MOE_API void moe_layer_destroy(moe_layer *layer);

/* Sets the logits dtype once, after creation and before the first forward; re-runs the same
 * eligibility function creation ran. A second call, or a call after a forward, is
 * MOE_ESTATE. */
MOE_API moe_status moe_layer_set_logits_dtype(moe_layer *layer, moe_dtype dtype);

/* Bytes of workspace a forward of n_tokens needs (0 on overflow). */
MOE_API size_t moe_layer_workspace_size(const moe_layer *layer, size_t n_tokens);

/* One step of a forward, in order: name ("gate", "route", "experts.gate_up", ...), the
 * kernel that ran, bytes read and written, and wall time. */
typedef struct moe_trace_step {
    char name[32];
    char kernel[64];
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t ns;
} moe_trace_step;

#define MOE_TRACE_MAX_STEPS 32
typedef struct moe_trace {
    size_t count;
    moe_trace_step steps[MOE_TRACE_MAX_STEPS];
} moe_trace;

/* The arguments of one forward. Optional outputs may be NULL. */
typedef struct moe_forward_args {
    size_t size;            /* sizeof(moe_forward_args) */
    size_t n_tokens;        /* T; 0 is a valid no-op */
    size_t hidden_size;     /* must equal the model's hidden size (checked) */
    const void *hidden;     /* [T, hidden] hidden states entering the block */
    moe_dtype hidden_dtype; /* MOE_DTYPE_F32 or MOE_DTYPE_BF16 */
    const void *token_ids;  /* [T] I32 or I64; required by hash-routed layers */
    moe_dtype token_id_dtype;
    float *out;         /* [T, hidden] the block output: routed experts combined + shared */
    float *logits_out;  /* optional [T, E] router logits */
    int32_t *ids_out;   /* optional [T, K] expert ids */
    float *weights_out; /* optional [T, K] combine weights */
    void *workspace;    /* moe_layer_workspace_size(layer, T) bytes, 64-byte aligned */
    size_t workspace_size;
    moe_trace *trace; /* optional: filled with one entry per step */
} moe_forward_args;

/* Runs the block. Validates every argument first (hidden dtype, NULL pointers, workspace size,
 * token ids); on error nothing is written to any output. The output for a token does not
 * depend on the other tokens of the batch, on the batch size or on the thread count. */
MOE_API moe_status moe_layer_forward(const moe_layer *layer, const moe_forward_args *args);

/* The layer's description (moe_model_get_layer_info of the layer it was created from). */
MOE_API moe_status moe_layer_get_info(const moe_layer *layer, moe_layer_info *info);

/* ---- Experts only: the caller routes --------------------------------------------------- */

/* The arguments of moe_layer_forward_experts: a hybrid engine routes elsewhere (on its GPU)
 * and hands libmoe the ids and weights. Optional outputs may be NULL. */
typedef struct moe_experts_args {
    size_t size;            /* sizeof(moe_experts_args) */
    size_t n_tokens;        /* T; 0 is a valid no-op */
    size_t hidden_size;     /* must equal the model's hidden size */
    const void *hidden;     /* [T, hidden] hidden states entering the block */
    moe_dtype hidden_dtype; /* MOE_DTYPE_F32 or MOE_DTYPE_BF16 */
    size_t top_k;           /* K, the width of ids and weights: must equal the layer's top_k */
    const void *ids;        /* [T, K] expert ids, I32 or I64, each in [0, E), distinct within
                               a row; read in place */
    moe_dtype ids_dtype;
    const float *weights;   /* [T, K] combine weights, finite; used as given (no scaling) */
    bool shared;            /* also add the shared experts' output, as the full forward does */
    float *out;             /* [T, hidden]: sum over k of weights[t,k] · expert(ids[t,k]) (in
                               slot order), + the shared experts when asked */
    void *workspace;        /* moe_layer_workspace_size(layer, T) bytes, 64-byte aligned */
    size_t workspace_size;
    moe_trace *trace;       /* optional: one entry per step */
} moe_experts_args;

/* Runs the routed experts of an MoE (or hash) layer for the caller's ids and weights, and the
 * combine. Given the ids and weights moe_layer_forward produced, the output is bit for bit
 * moe_layer_forward's (with shared = true). Validates every argument first (an id outside
 * [0, E) or repeated in its row is MOE_ERANGE naming the token and slot, a non-finite weight
 * MOE_EVALUE); a dense layer is MOE_EINVAL. On error nothing is written to out. */
MOE_API moe_status moe_layer_forward_experts(const moe_layer *layer, const moe_experts_args *args);

/* A multi-line description: every kernel chosen and why, the recipe (activation rounding),
 * packed bytes, and every default resolved at creation. Lives as long as the layer. */
MOE_API const char *moe_layer_explain(const moe_layer *layer);

#ifdef __cplusplus
}
#endif

#endif /* MOE_H */
