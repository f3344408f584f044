/* gen_values.c — deterministic synthetic tensor contents for `moe gen`, any chunking. */
#include "gen_values.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "dtype/dtype.h"

/* FP8 codes: the Irwin-Hall Gaussian below stays within ±2·sqrt(3)·std = ±443 < 448 for this
 * std, so no code saturates and real blocks' "amax ≈ 448" shape is kept. */
#define GEN_FP8_CODE_STD 128.0
#define GEN_WEIGHT_STD 0.02 /* bf16 expert and MLP weights, and FP8 code x scale */
#define GEN_BIAS_STD 0.01   /* gpt-oss expert biases */
#define GEN_GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t splitmix64(uint64_t x)
{
    x += GEN_GOLDEN;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

/* The random bits of element I: a counter-based stream, so any element is reachable alone. */
static uint64_t element_bits(const gen_tensor *t, uint64_t i)
{
    return splitmix64(t->key + i * GEN_GOLDEN);
}

/* The sum of the four LANE_BITS-bit lanes of H: an Irwin-Hall variable. */
static uint32_t lane_sum(uint64_t h, int lane_bits)
{
    uint64_t mask = (1ull << lane_bits) - 1;
    uint32_t s = 0;
    for (int k = 0; k < 4; k++)
        s += (uint32_t)((h >> (k * lane_bits)) & mask);
    return s;
}

/* An approximately standard Gaussian from a sum S of four uniform lanes (Irwin-Hall: each
 * lane (x + 0.5) / 2^bits is uniform on (0, 1) with variance 1/12). Only exact + and * and
 * one correctly rounded sqrt, so it is bit-reproducible on every IEEE machine, unlike a
 * libm-based Box-Muller; it stays within ±2·sqrt(3). */
static double gauss_of_sum(uint32_t s, int lane_bits)
{
    return (((double)s + 2.0) / (double)(1ull << lane_bits) - 2.0) * sqrt(3.0);
}

/* The FP8 and FP4 codes depend only on the lane sum, so they come from tables built once
 * (the scalar encoders cost more than everything else per byte). */
static uint8_t e4m3_of_sum[4 * 0xFFFF + 1];
static uint8_t e2m1_of_sum[4 * 0xFF + 1];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (uint32_t s = 0; s < sizeof e4m3_of_sum; s++)
        e4m3_of_sum[s] = moe_f32_to_e4m3((float)(GEN_FP8_CODE_STD * gauss_of_sum(s, 16)));
    /* FP4 codes of 2·N(0, 1): most mass on 0.5..3, the tails saturating at ±6. */
    for (uint32_t s = 0; s < sizeof e2m1_of_sum; s++)
        e2m1_of_sum[s] = moe_f32_to_e2m1((float)(2.0 * gauss_of_sum(s, 8))) & 0x0F;
}

static double uniform01(uint64_t h)
{
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* 53 bits */
}

static const moe_mlp_desc *spec_mlp(const moe_model_desc *desc, const moe_tensor_spec *spec)
{
    const moe_layer_desc *l = &desc->layers[spec->layer];
    switch (spec->group) {
    case MOE_GROUP_ROUTED: return &l->experts;
    case MOE_GROUP_SHARED: return &l->shared;
    case MOE_GROUP_DENSE: return &l->dense;
    case MOE_GROUP_ROUTER: break;
    }
    return NULL;
}

static bool is_float_dtype(moe_dtype d)
{
    return d == MOE_DTYPE_F32 || d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F16;
}

static bool is_scale_role(moe_tensor_role role)
{
    return role == MOE_ROLE_GATE_SCALE || role == MOE_ROLE_UP_SCALE ||
           role == MOE_ROLE_DOWN_SCALE || role == MOE_ROLE_GATE_UP_SCALE;
}

static void set_gauss(gen_tensor *t, double mean, double std)
{
    t->content = GEN_GAUSS;
    t->mean = mean;
    t->std = std;
}

/* The router group: weights ~ 1/sqrt(H) so logits are O(1); correction biases are positive
 * around a family constant (about 8 in DeepSeek-V4 checkpoints, small in V3/Kimi). */
static moe_status init_router(gen_tensor *t, const moe_model_desc *desc,
                              const moe_tensor_spec *spec)
{
    const moe_layer_desc *l = &desc->layers[spec->layer];
    switch (spec->role) {
    case MOE_ROLE_ROUTER_WEIGHT: set_gauss(t, 0.0, 1.0 / sqrt((double)desc->hidden)); break;
    case MOE_ROLE_ROUTER_BIAS: set_gauss(t, 0.0, 0.05); break;
    case MOE_ROLE_CORRECTION_BIAS:
        if (desc->family == MOE_FAMILY_DEEPSEEK_V4)
            set_gauss(t, 8.0, 0.1);
        else
            set_gauss(t, 0.05, 0.01);
        break;
    case MOE_ROLE_TID2EID:
        if (spec->dtype != MOE_DTYPE_I64 && spec->dtype != MOE_DTYPE_I32) goto bad;
        t->content = GEN_TID2EID;
        t->row_len = l->routing.top_k;
        t->n_experts = l->routing.n_experts;
        if (t->row_len < 1 || t->row_len > t->n_experts)
            return moe_error(MOE_ECONFIG, "tensor '%s': top_k %lld for %lld experts", spec->name,
                             (long long)t->row_len, (long long)t->n_experts);
        t->perm = moe_calloc((size_t)t->n_experts, sizeof *t->perm);
        t->row = moe_calloc((size_t)t->row_len, sizeof *t->row);
        if (!t->perm || !t->row)
            return moe_error(MOE_ENOMEM, "tensor '%s': tid2eid scratch", spec->name);
        t->cached_row = -1;
        return MOE_OK;
    default: goto bad;
    }
    if (!is_float_dtype(spec->dtype)) goto bad;
    return MOE_OK;
bad:
    return moe_error(MOE_EUNSUPPORTED, "moe gen has no contents for tensor '%s' (%s)", spec->name,
                     moe_dtype_name(spec->dtype));
}

/* Scales: what they multiply decides their range (FP8 blocks vs MX blocks of 32). */
static moe_status init_scale(gen_tensor *t, const moe_mlp_desc *mlp, const moe_tensor_spec *spec)
{
    bool e8m0 = spec->dtype == MOE_DTYPE_F8_E8M0 || spec->dtype == MOE_DTYPE_U8;
    if (mlp->format == MOE_WFMT_MXFP4 && e8m0) {
        t->content = GEN_MX_SCALE;
        return MOE_OK;
    }
    if (mlp->format == MOE_WFMT_FP8_BLOCK && e8m0) {
        t->content = GEN_FP8_SCALE_E8M0;
        return MOE_OK;
    }
    if (mlp->format == MOE_WFMT_FP8_BLOCK && spec->dtype == MOE_DTYPE_F32) {
        t->content = GEN_FP8_SCALE_F32;
        return MOE_OK;
    }
    return moe_error(MOE_EUNSUPPORTED, "moe gen has no contents for scale tensor '%s' (%s)",
                     spec->name, moe_dtype_name(spec->dtype));
}

/* The INT4 (compressed-tensors) tensors: words, bf16 group scales and weight_shape. */
static bool init_int4(gen_tensor *t, const moe_mlp_desc *mlp, const moe_tensor_spec *spec)
{
    if (spec->role == MOE_ROLE_GATE_SHAPE || spec->role == MOE_ROLE_UP_SHAPE ||
        spec->role == MOE_ROLE_DOWN_SHAPE) {
        const bool down = spec->role == MOE_ROLE_DOWN_SHAPE;
        t->content = GEN_INT4_SHAPE;
        t->shape[0] = down ? mlp->hidden : mlp->intermediate;
        t->shape[1] = down ? mlp->intermediate : mlp->hidden;
        return spec->dtype == MOE_DTYPE_I64;
    }
    t->content = is_scale_role(spec->role) ? GEN_INT4_SCALE : GEN_INT4_WORDS;
    return is_scale_role(spec->role) ? spec->dtype == MOE_DTYPE_BF16 : spec->dtype == MOE_DTYPE_I32;
}

static moe_status init_mlp(gen_tensor *t, const moe_mlp_desc *mlp, const moe_tensor_spec *spec)
{
    if (mlp->format == MOE_WFMT_INT4_GROUP) {
        if (init_int4(t, mlp, spec)) return MOE_OK;
        goto bad;
    }
    if (is_scale_role(spec->role)) return init_scale(t, mlp, spec);
    if (spec->role == MOE_ROLE_GATE_UP_BIAS || spec->role == MOE_ROLE_DOWN_BIAS) {
        if (!is_float_dtype(spec->dtype)) goto bad;
        set_gauss(t, 0.0, GEN_BIAS_STD);
        return MOE_OK;
    }
    if (is_float_dtype(spec->dtype)) {
        set_gauss(t, 0.0, GEN_WEIGHT_STD);
        return MOE_OK;
    }
    if (spec->dtype == MOE_DTYPE_F8_E4M3) {
        t->content = GEN_E4M3;
        return MOE_OK;
    }
    if (mlp->format == MOE_WFMT_MXFP4 &&
        (spec->dtype == MOE_DTYPE_U8 || spec->dtype == MOE_DTYPE_I8 ||
         spec->dtype == MOE_DTYPE_F4_E2M1)) {
        t->content = GEN_FP4_PAIRS;
        return MOE_OK;
    }
bad:
    return moe_error(MOE_EUNSUPPORTED, "moe gen has no contents for tensor '%s' (%s)", spec->name,
                     moe_dtype_name(spec->dtype));
}

moe_status gen_tensor_init(gen_tensor *t, const moe_model_desc *desc, const moe_tensor_spec *spec,
                           uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->zero_from = UINT64_MAX;
    pthread_once(&tables_once, build_tables);
    t->dtype = spec->dtype;
    t->key = splitmix64(seed ^ fnv1a(spec->name));
    unsigned bits = moe_dtype_bits(spec->dtype);
    /* Packed 4-bit dtypes are produced a byte (two codes) at a time. */
    t->elem_bytes = bits >= 8 ? bits / 8 : 1;
    if (spec->layer < 0 || spec->layer >= desc->n_layers)
        return moe_error(MOE_EINVAL, "tensor '%s': layer %d outside the model", spec->name,
                         spec->layer);
    const moe_mlp_desc *mlp = spec_mlp(desc, spec);
    moe_status st = mlp ? init_mlp(t, mlp, spec) : init_router(t, desc, spec);
    if (st != MOE_OK) gen_tensor_free(t);
    return st;
}

void gen_tensor_free(gen_tensor *t)
{
    moe_free(t->perm);
    moe_free(t->row);
    t->perm = NULL;
    t->row = NULL;
}

static void store_float(moe_dtype dtype, double v, uint8_t *out)
{
    float f = (float)v;
    uint16_t h;
    switch (dtype) {
    case MOE_DTYPE_BF16:
        h = moe_f32_to_bf16(f);
        memcpy(out, &h, 2);
        break;
    case MOE_DTYPE_F16:
        h = moe_f32_to_f16(f);
        memcpy(out, &h, 2);
        break;
    default: memcpy(out, &f, 4); break;
    }
}

/* Row R of tid2eid: the first top_k entries of a seeded partial Fisher-Yates shuffle, so the
 * ids are distinct by construction and every expert is reachable. */
static void build_tid2eid_row(gen_tensor *t, int64_t r)
{
    for (int64_t e = 0; e < t->n_experts; e++)
        t->perm[e] = (int32_t)e;
    for (int64_t j = 0; j < t->row_len; j++) {
        uint64_t h = element_bits(t, (uint64_t)(r * t->row_len + j));
        int64_t pick = j + (int64_t)(h % (uint64_t)(t->n_experts - j));
        int32_t tmp = t->perm[j];
        t->perm[j] = t->perm[pick];
        t->perm[pick] = tmp;
        t->row[j] = t->perm[j];
    }
    t->cached_row = r;
}

static void gen_tid2eid(gen_tensor *t, uint64_t i, uint8_t *out)
{
    int64_t r = (int64_t)(i / (uint64_t)t->row_len);
    if (r != t->cached_row) build_tid2eid_row(t, r);
    int64_t id = t->row[i % (uint64_t)t->row_len];
    if (t->dtype == MOE_DTYPE_I32) {
        int32_t v = (int32_t)id;
        memcpy(out, &v, 4);
    } else {
        memcpy(out, &id, 8);
    }
}

/* Produces element I (elem_bytes bytes, little-endian as the host) into OUT. */
static void gen_element(gen_tensor *t, uint64_t i, uint8_t *out)
{
    uint64_t h = element_bits(t, i);
    switch (t->content) {
    case GEN_GAUSS:
        store_float(t->dtype, t->mean + t->std * gauss_of_sum(lane_sum(h, 16), 16), out);
        break;
    case GEN_E4M3: out[0] = e4m3_of_sum[lane_sum(h, 16)]; break;
    case GEN_FP8_SCALE_F32: {
        /* A ±20% spread around the scale that maps the code std onto GEN_WEIGHT_STD. */
        float s = (float)(GEN_WEIGHT_STD / GEN_FP8_CODE_STD * (0.8 + 0.4 * uniform01(h)));
        memcpy(out, &s, 4);
        break;
    }
    case GEN_FP8_SCALE_E8M0:
        /* The powers of two either side of GEN_WEIGHT_STD / GEN_FP8_CODE_STD ≈ 2^-12.6. */
        out[0] = moe_f32_to_e8m0(ldexpf(1.0f, -13 + (int)(h & 1)));
        break;
    case GEN_MX_SCALE: out[0] = moe_f32_to_e8m0(ldexpf(1.0f, -7 + (int)(h & 3))); break;
    case GEN_FP4_PAIRS:
        out[0] = (uint8_t)(e2m1_of_sum[lane_sum(h, 8)] | e2m1_of_sum[lane_sum(h >> 32, 8)] << 4);
        break;
    case GEN_TID2EID: gen_tid2eid(t, i, out); break;
    case GEN_INT4_WORDS: {
        const uint32_t w = (uint32_t)h; /* eight uniform nibbles */
        memcpy(out, &w, 4);
        break;
    }
    case GEN_INT4_SCALE:
        /* uniform int4 values have std ≈ 4.6, so scale ≈ GEN_WEIGHT_STD / 4.6 */
        store_float(MOE_DTYPE_BF16, GEN_WEIGHT_STD / 4.6 * (0.8 + 0.4 * uniform01(h)), out);
        break;
    case GEN_INT4_SHAPE: memcpy(out, &t->shape[i % 2], 8); break;
    }
}

static void fill_values(gen_tensor *t, uint64_t offset, void *buf, size_t len)
{
    uint8_t *out = buf, tmp[8];
    const size_t es = t->elem_bytes;
    uint64_t i = offset / es;
    size_t skip = (size_t)(offset % es), done = 0;
    if (skip) { /* the tail of an element the previous chunk began */
        gen_element(t, i++, tmp);
        done = es - skip < len ? es - skip : len;
        memcpy(out, tmp + skip, done);
    }
    for (; len - done >= es; done += es)
        gen_element(t, i++, out + done);
    if (done < len) { /* the head of an element the next chunk ends */
        gen_element(t, i, tmp);
        memcpy(out + done, tmp, len - done);
    }
}

void gen_tensor_zero_experts(gen_tensor *t, const moe_model_desc *desc, const moe_tensor_spec *spec,
                             uint64_t bytes, int64_t stored)
{
    if (spec->group != MOE_GROUP_ROUTED) return;
    const int64_t n = desc->layers[spec->layer].routing.n_experts;
    if (stored >= n) return;
    if (spec->expert >= 0) {
        if (spec->expert >= stored) t->zero_from = 0;
    } else if (spec->ndim >= 1 && spec->shape[0] == n) {
        t->zero_from = bytes / (uint64_t)n * (uint64_t)stored;
    }
}

void gen_tensor_fill(gen_tensor *t, uint64_t offset, void *buf, size_t len)
{
    size_t values = 0; /* the bytes before zero_from */
    if (offset < t->zero_from)
        values = t->zero_from - offset < len ? (size_t)(t->zero_from - offset) : len;
    fill_values(t, offset, buf, values);
    memset((uint8_t *)buf + values, 0, len - values);
}
