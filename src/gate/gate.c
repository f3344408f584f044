/* gate.c — the router gate: validate, pack once, select per input dtype, run the chosen kernel. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "dtype/dtype.h"
#include "gate/gate.h"
#include "kernels/gate.h"

/*
 * Creation does every conversion the gate will ever need: the weight is packed, bit for bit,
 * into the layout of the kernels chosen for it (one layout per weight dtype, so one packed
 * copy serves the f32-input and the bf16-input kernels), the bias becomes f32, the logits
 * dtype resolves. Forward only calls the kernel: it converts nothing and allocates nothing.
 */

struct moe_gate {
    int64_t n_experts, hidden;
    moe_dtype weight_dtype;
    bool has_bias;
    void *packed_raw;   /* the allocation */
    const void *packed; /* 64-byte aligned inside it */
    size_t packed_bytes;
    float *bias;                 /* [n_experts] f32, or NULL */
    moe_dtype logits_dtype;      /* F32 or BF16: the resolution of INVALID is F32 */
    moe_kernel_choice choice[2]; /* [0] f32 input, [1] bf16 input */
};

static int input_slot(moe_dtype x_dtype)
{
    return x_dtype == MOE_DTYPE_F32 ? 0 : x_dtype == MOE_DTYPE_BF16 ? 1 : -1;
}

/* The two selections for a logits dtype, both or none. */
static moe_status select_both(const moe_gate_src *src, const moe_cpu_caps *allowed,
                              moe_dtype logits_dtype, bool has_bias, moe_kernel_choice out[2])
{
    moe_kernel_choice c[2];
    for (int s = 0; s < 2; s++) {
        moe_gate_problem p = {.weight_dtype = src->weight_dtype,
                              .input_dtype = s ? MOE_DTYPE_BF16 : MOE_DTYPE_F32,
                              .logits_dtype = logits_dtype,
                              .has_bias = has_bias,
                              .n_experts = src->n_experts,
                              .hidden = src->hidden};
        moe_status st = moe_select_gate(allowed, &p, &c[s]);
        if (st != MOE_OK) return st;
    }
    /* One packed copy for both: the layouts must agree (they do: moe_select_gate takes the
     * layout from the weight dtype alone). */
    if (c[0].packing != c[1].packing)
        return moe_error(MOE_EUNSUPPORTED, "router gate: the f32- and bf16-input kernels want "
                                           "different packed layouts");
    out[0] = c[0];
    out[1] = c[1];
    return MOE_OK;
}

static moe_status convert_bias(const moe_gate_src *src, float *bias)
{
    for (int64_t e = 0; e < src->n_experts; e++) {
        float v;
        uint16_t c;
        switch (src->bias_dtype) {
        case MOE_DTYPE_F32: memcpy(&v, (const uint8_t *)src->bias + 4 * e, 4); break;
        case MOE_DTYPE_BF16:
            memcpy(&c, (const uint8_t *)src->bias + 2 * e, 2);
            v = moe_bf16_to_f32(c);
            break;
        case MOE_DTYPE_F16:
            memcpy(&c, (const uint8_t *)src->bias + 2 * e, 2);
            v = moe_f16_to_f32(c);
            break;
        default: return moe_error(MOE_EDTYPE, "router gate: bias dtype checked at the door");
        }
        if (v - v != 0.0f) /* NaN or Inf */
            return moe_error(MOE_EVALUE, "router gate bias [%lld] is %s; every bias must be finite",
                             (long long)e, v != v ? "NaN" : "Inf");
        bias[e] = v;
    }
    return MOE_OK;
}

static moe_status check_src(const moe_gate_src *src, moe_dtype logits_dtype)
{
    if (!src->weight) return moe_error(MOE_EINVAL, "moe_gate_create: the router weight is NULL");
    if (src->n_experts < 1 || src->hidden < 1)
        return moe_error(MOE_ESHAPE, "moe_gate_create: router weight shape [%lld, %lld] is empty",
                         (long long)src->n_experts, (long long)src->hidden);
    if (src->bias && src->bias_dtype != MOE_DTYPE_F32 && src->bias_dtype != MOE_DTYPE_BF16 &&
        src->bias_dtype != MOE_DTYPE_F16)
        return moe_error(MOE_EDTYPE,
                         "moe_gate_create: router bias dtype %s is not supported (f32, bf16 or "
                         "f16)",
                         moe_dtype_name(src->bias_dtype));
    if (logits_dtype != MOE_DTYPE_F32 && logits_dtype != MOE_DTYPE_BF16 &&
        logits_dtype != MOE_DTYPE_INVALID)
        return moe_error(MOE_EDTYPE,
                         "moe_gate_create: logits dtype %s is not f32, bf16 or undecided",
                         moe_dtype_name(logits_dtype));
    return MOE_OK;
}

moe_status moe_gate_create(const moe_gate_src *src, const moe_cpu_caps *allowed,
                           moe_dtype logits_dtype, moe_gate **out)
{
    if (!src || !allowed || !out)
        return moe_error(MOE_EINVAL, "moe_gate_create: argument '%s' is NULL",
                         !src       ? "src"
                         : !allowed ? "allowed"
                                    : "out");
    moe_status st = check_src(src, logits_dtype);
    if (st != MOE_OK) return st;
    moe_dtype resolved = logits_dtype == MOE_DTYPE_INVALID ? MOE_DTYPE_F32 : logits_dtype;
    moe_kernel_choice choice[2];
    st = select_both(src, allowed, resolved, src->bias != NULL, choice);
    if (st != MOE_OK) return st;

    size_t bytes = 0;
    st = choice[0].packing->bytes(src->n_experts, src->hidden, &bytes);
    if (st != MOE_OK) return st;
    moe_gate *g = moe_calloc(1, sizeof *g);
    if (!g) return moe_error(MOE_ENOMEM, "moe_gate_create: out of memory for the gate");
    g->n_experts = src->n_experts;
    g->hidden = src->hidden;
    g->weight_dtype = src->weight_dtype;
    g->has_bias = src->bias != NULL;
    g->logits_dtype = resolved;
    g->choice[0] = choice[0];
    g->choice[1] = choice[1];
    g->packed_bytes = bytes;
    if (bytes > SIZE_MAX - 63) {
        st = moe_error(MOE_EOVERFLOW, "moe_gate_create: packed router weight is too large");
        goto fail;
    }
    g->packed_raw = moe_malloc(bytes + 63);
    if (!g->packed_raw) {
        st = moe_error(MOE_ENOMEM,
                       "moe_gate_create: out of memory packing the router weight "
                       "(%zu bytes)",
                       bytes);
        goto fail;
    }
    void *aligned = (void *)(((uintptr_t)g->packed_raw + 63) & ~(uintptr_t)63);
    st = choice[0].packing->pack(src->weight, src->n_experts, src->hidden, aligned);
    if (st != MOE_OK) goto fail;
    g->packed = aligned;
    if (src->bias) {
        g->bias = moe_malloc((size_t)src->n_experts * sizeof(float));
        if (!g->bias) {
            st = moe_error(MOE_ENOMEM, "moe_gate_create: out of memory for the router bias");
            goto fail;
        }
        st = convert_bias(src, g->bias);
        if (st != MOE_OK) goto fail;
    }
    *out = g;
    return MOE_OK;
fail:
    moe_gate_destroy(g);
    return st;
}

void moe_gate_destroy(moe_gate *gate)
{
    if (!gate) return;
    moe_free(gate->packed_raw);
    moe_free(gate->bias);
    moe_free(gate);
}

moe_status moe_gate_set_logits_dtype(moe_gate *gate, const moe_cpu_caps *allowed,
                                     moe_dtype logits_dtype)
{
    if (!gate || !allowed)
        return moe_error(MOE_EINVAL, "moe_gate_set_logits_dtype: argument '%s' is NULL",
                         !gate ? "gate" : "allowed");
    if (logits_dtype != MOE_DTYPE_F32 && logits_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE,
                         "moe_gate_set_logits_dtype: logits dtype %s is not f32 or "
                         "bf16",
                         moe_dtype_name(logits_dtype));
    moe_gate_src src = {
        .weight_dtype = gate->weight_dtype, .n_experts = gate->n_experts, .hidden = gate->hidden};
    moe_kernel_choice choice[2];
    moe_status st = select_both(&src, allowed, logits_dtype, gate->has_bias, choice);
    if (st != MOE_OK) return st;
    /* The weight was packed for the creation's choice; the new one must read the same bytes. */
    if (choice[0].packing != gate->choice[0].packing)
        return moe_error(MOE_ESTATE,
                         "moe_gate_set_logits_dtype: logits dtype %s would need the "
                         "router weight packed as '%s', it is packed as '%s'",
                         moe_dtype_name(logits_dtype), choice[0].packing->name,
                         gate->choice[0].packing->name);
    gate->choice[0] = choice[0];
    gate->choice[1] = choice[1];
    gate->logits_dtype = logits_dtype;
    return MOE_OK;
}

void moe_gate_forward(const moe_gate *gate, size_t m, const void *x, moe_dtype x_dtype,
                      size_t x_stride, float *logits, size_t ld, size_t part, size_t parts)
{
    int s = input_slot(x_dtype);
    if (s < 0 || m == 0 || part >= parts) return; /* the layer validates; nothing to do */
    const size_t tiles = moe_gate_tiles((size_t)gate->n_experts);
    moe_gate_args a = {.m = m,
                       .n = (size_t)gate->n_experts,
                       .k = (size_t)gate->hidden,
                       .x = x,
                       .x_stride = x_stride,
                       .w = gate->packed,
                       .bias = gate->bias,
                       .round_bf16 = gate->logits_dtype == MOE_DTYPE_BF16,
                       .logits = logits,
                       .ld = ld,
                       .tile_begin = tiles * part / parts,
                       .tile_end = tiles * (part + 1) / parts};
    gate->choice[s].kernel->fn.gate(&a);
}

const moe_kernel_choice *moe_gate_choice(const moe_gate *gate, moe_dtype x_dtype)
{
    int s = input_slot(x_dtype);
    return gate && s >= 0 ? &gate->choice[s] : NULL;
}

size_t moe_gate_packed_bytes(const moe_gate *gate)
{
    if (!gate) return 0;
    return gate->packed_bytes + (gate->bias ? (size_t)gate->n_experts * sizeof(float) : 0);
}

moe_dtype moe_gate_logits_dtype(const moe_gate *gate)
{
    return gate ? gate->logits_dtype : MOE_DTYPE_INVALID;
}
