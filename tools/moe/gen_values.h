/* gen_values.h — deterministic synthetic tensor contents for `moe gen`, any chunking. */
#ifndef MOE_TOOLS_GEN_VALUES_H
#define MOE_TOOLS_GEN_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"
#include "model/model.h"

/* What a tensor holds. Every byte is a pure function of (seed, tensor name, byte offset), so
 * files are reproducible whatever the writer's chunk sizes and tensor order. */
typedef enum gen_content {
    GEN_GAUSS,         /* f32/bf16/f16 values ~ mean + std * N(0, 1) (approximately) */
    GEN_E4M3,          /* FP8 E4M3 codes of a Gaussian of std 128, never NaN or saturated */
    GEN_FP8_SCALE_F32, /* weight_scale_inv: code x scale ~ N(0, 0.02) */
    GEN_FP8_SCALE_E8M0,
    GEN_MX_SCALE,  /* E8M0 MX block scales in 2^-7 .. 2^-4, never 0xFF */
    GEN_FP4_PAIRS, /* two E2M1 codes per byte, low nibble = even element */
    GEN_TID2EID,   /* rows of top_k distinct expert ids in [0, n_experts) */
    /* INT4 (compressed-tensors): int32 words of eight nibbles (value + 8), uniform in
     * [-8, 7]; bf16 group scales, (u - 8) x scale ~ 0.02 std, ±20 %; weight_shape [out, in] */
    GEN_INT4_WORDS,
    GEN_INT4_SCALE,
    GEN_INT4_SHAPE,
} gen_content;

typedef struct gen_tensor {
    gen_content content;
    moe_dtype dtype;
    unsigned elem_bytes; /* bytes produced per generated element (a pair of codes for FP4) */
    uint64_t key;        /* hash of (seed, name): the tensor's own random stream */
    double mean, std;    /* GEN_GAUSS */
    int64_t row_len;     /* GEN_TID2EID: top_k */
    int64_t shape[2];    /* GEN_INT4_SHAPE */
    int64_t n_experts;   /* GEN_TID2EID */
    /* GEN_TID2EID scratch: a permutation of the experts and the last row built. */
    int32_t *perm;
    int64_t *row;
    int64_t cached_row;
    uint64_t zero_from; /* bytes from here on are zero (gen_tensor_zero_experts); else ~0 */
} gen_tensor;

/* Decides the contents of SPEC (a tensor of DESC) and prepares its stream. MOE_EUNSUPPORTED
 * for a dtype gen has no recipe for, MOE_ENOMEM; free with gen_tensor_free. */
moe_status gen_tensor_init(gen_tensor *t, const moe_model_desc *desc, const moe_tensor_spec *spec,
                           uint64_t seed);
void gen_tensor_free(gen_tensor *t);

/* Makes the bytes of routed experts STORED and above zero in T (SPEC, of BYTES bytes): the
 * whole tensor of such an expert, or the tail of a tensor stacked over the layer's experts. */
void gen_tensor_zero_experts(gen_tensor *t, const moe_model_desc *desc, const moe_tensor_spec *spec,
                             uint64_t bytes, int64_t stored);

/* Writes LEN bytes of the tensor starting at byte OFFSET (any offset, any length). */
void gen_tensor_fill(gen_tensor *t, uint64_t offset, void *buf, size_t len);

#endif
