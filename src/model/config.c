/* config.c — config.json into moe_model_desc: strict field readers, shared rules, dispatch. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json_cost.h"
#include "model/family.h"
#include "route/route_check.h"

/* config.json files are a few KiB; this only bounds what a bad path can make us read. */
#define MOE_CFG_MAX_FILE (INT64_C(16) << 20)

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

moe_status moe_cfg_fail(const moe_cfg *c, moe_status status, const char *key, const char *fmt, ...)
{
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return moe_error(status, "%s: field '%s%s': %s", c->name, c->prefix, key, detail);
}

/* The value of KEY, or NULL when it is absent or null (HF writes None as null). */
static const json_t *cfg_get(const moe_cfg *c, const char *key)
{
    const json_t *v = json_object_get(c->obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

bool moe_cfg_has(const moe_cfg *c, const char *key) { return cfg_get(c, key) != NULL; }

static moe_status cfg_missing(const moe_cfg *c, const char *key)
{
    return moe_cfg_fail(c, MOE_EMISSING, key, "required field is missing");
}

static moe_status cfg_wrong_type(const moe_cfg *c, const char *key, const json_t *v,
                                 const char *want)
{
    return moe_cfg_fail(c, MOE_EJSON, key, "must be %s, not %s", want, json_type_name(v));
}

moe_status moe_cfg_int(const moe_cfg *c, const char *key, bool required, int64_t def, int64_t lo,
                       int64_t hi, int64_t *out)
{
    const json_t *v = cfg_get(c, key);
    if (!v) {
        if (required) return cfg_missing(c, key);
        *out = def;
        return MOE_OK;
    }
    if (!json_is_integer(v)) return cfg_wrong_type(c, key, v, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return moe_cfg_fail(c, MOE_ECONFIG, key, "%lld is outside [%lld, %lld]", (long long)x,
                            (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return MOE_OK;
}

moe_status moe_cfg_num(const moe_cfg *c, const char *key, bool required, double def, double lo,
                       double hi, double *out)
{
    const json_t *v = cfg_get(c, key);
    if (!v) {
        if (required) return cfg_missing(c, key);
        *out = def;
        return MOE_OK;
    }
    if (!json_is_number(v)) return cfg_wrong_type(c, key, v, "a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return moe_cfg_fail(c, MOE_ECONFIG, key, "%g is outside [%g, %g]", x, lo, hi);
    *out = x;
    return MOE_OK;
}

moe_status moe_cfg_bool(const moe_cfg *c, const char *key, bool required, bool def, bool *out)
{
    const json_t *v = cfg_get(c, key);
    if (!v) {
        if (required) return cfg_missing(c, key);
        *out = def;
        return MOE_OK;
    }
    if (!json_is_boolean(v)) return cfg_wrong_type(c, key, v, "true or false");
    *out = json_is_true(v);
    return MOE_OK;
}

moe_status moe_cfg_str(const moe_cfg *c, const char *key, bool required, const char *def,
                       const char **out)
{
    const json_t *v = cfg_get(c, key);
    if (!v) {
        if (required) return cfg_missing(c, key);
        *out = def;
        return MOE_OK;
    }
    if (!json_is_string(v)) return cfg_wrong_type(c, key, v, "a string");
    *out = json_string_value(v);
    return MOE_OK;
}

moe_status moe_cfg_int_either(const moe_cfg *c, const char *key, const char *alias, bool required,
                              int64_t def, int64_t lo, int64_t hi, int64_t *out, const char **used)
{
    const bool has_key = moe_cfg_has(c, key), has_alias = moe_cfg_has(c, alias);
    int64_t a = def, b = def;
    moe_status st;
    if (has_key && (st = moe_cfg_int(c, key, true, def, lo, hi, &a))) return st;
    if (has_alias && (st = moe_cfg_int(c, alias, true, def, lo, hi, &b))) return st;
    if (!has_key && !has_alias && required)
        return moe_cfg_fail(c, MOE_EMISSING, key, "required field is missing (nor is %s%s present)",
                            c->prefix, alias);
    if (has_key && has_alias && a != b)
        return moe_cfg_fail(c, MOE_ECONFIG, key, "%lld disagrees with %s%s = %lld", (long long)a,
                            c->prefix, alias, (long long)b);
    *out = has_key ? a : has_alias ? b : def;
    if (used) *used = has_key || !has_alias ? key : alias;
    return MOE_OK;
}

moe_status moe_cfg_check_act(const moe_cfg *c)
{
    /* transformers' ACT2FN maps both names to x·sigmoid(x). */
    const char *act = NULL;
    moe_status st = moe_cfg_str(c, "hidden_act", false, "silu", &act);
    if (st) return st;
    if (strcmp(act, "silu") && strcmp(act, "swish"))
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "hidden_act",
                            "'%.64s' is not supported (only silu, which transformers also calls "
                            "swish)",
                            act);
    return MOE_OK;
}

moe_status moe_cfg_check_no_mlp_bias(const moe_cfg *c)
{
    bool bias = false;
    moe_status st = moe_cfg_bool(c, "mlp_bias", false, false, &bias);
    if (st) return st;
    if (bias)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "mlp_bias",
                            "true is not supported (the MLPs of this model_type have no biases "
                            "in libmoe)");
    return MOE_OK;
}

moe_status moe_cfg_common(const moe_cfg *c, moe_model_desc *d)
{
    int64_t layers = 0, hidden = 0, vocab = 0;
    moe_status st = moe_cfg_int(c, "num_hidden_layers", true, 0, 1, MOE_CFG_MAX_LAYERS, &layers);
    if (st) return st;
    st = moe_cfg_int(c, "hidden_size", true, 0, 1, MOE_CFG_MAX_DIM, &hidden);
    if (st) return st;
    st = moe_cfg_int(c, "vocab_size", false, 0, 1, MOE_CFG_MAX_VOCAB, &vocab);
    if (st) return st;
    if ((st = moe_cfg_dtype(c, d))) return st;
    d->n_layers = (int)layers;
    d->hidden = hidden;
    d->vocab_size = vocab;
    return MOE_OK;
}

moe_status moe_cfg_dtype(const moe_cfg *c, moe_model_desc *d)
{
    /* transformers 5 renamed torch_dtype to dtype; the older name wins when both exist. */
    const char *key = moe_cfg_has(c, "torch_dtype") ? "torch_dtype" : "dtype";
    const char *dt = NULL;
    moe_status st = moe_cfg_str(c, key, false, "bfloat16", &dt);
    if (st) return st;
    if (!strcmp(dt, "bfloat16"))
        d->router_dtype = MOE_DTYPE_BF16;
    else if (!strcmp(dt, "float16"))
        d->router_dtype = MOE_DTYPE_F16;
    else if (!strcmp(dt, "float32"))
        d->router_dtype = MOE_DTYPE_F32;
    else
        return moe_cfg_fail(c, MOE_ECONFIG, key,
                            "'%.64s' is not one of \"bfloat16\", \"float16\", \"float32\"", dt);
    return MOE_OK;
}

static moe_status quant_fp8(const moe_cfg *q, moe_cfg_quant_info *out)
{
    const char *fmt = NULL, *scheme = NULL, *scale_fmt = NULL;
    moe_status st = moe_cfg_str(q, "fmt", false, "e4m3", &fmt);
    if (st) return st;
    /* MiniMax-M2 releases spell E4M3 by its torch dtype name. */
    if (strcmp(fmt, "e4m3") && strcmp(fmt, "float8_e4m3fn"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "fmt",
                            "'%.64s' is not supported (only e4m3, also spelled float8_e4m3fn)",
                            fmt);
    st = moe_cfg_str(q, "activation_scheme", false, "dynamic", &scheme);
    if (st) return st;
    if (strcmp(scheme, "dynamic"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "activation_scheme",
                            "'%.64s' is not supported (only dynamic)", scheme);
    /* transformers' FineGrainedFP8Config writes "float" (f32 scales) unless told "ue8m0". */
    st = moe_cfg_str(q, "scale_fmt", false, "float", &scale_fmt);
    if (st) return st;
    if (strcmp(scale_fmt, "float") && strcmp(scale_fmt, "ue8m0"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "scale_fmt",
                            "'%.64s' is not supported (supported: float, ue8m0)", scale_fmt);
    st = moe_cfg_str(q, "expert_dtype", false, NULL, &out->expert_dtype);
    if (st) return st;
    if (out->expert_dtype && strcmp(out->expert_dtype, "fp8") && strcmp(out->expert_dtype, "fp4"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "expert_dtype",
                            "'%.64s' is not supported (supported: fp8, fp4)", out->expert_dtype);
    const json_t *bs = json_object_get(q->obj, "weight_block_size");
    if (!bs || json_is_null(bs))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "weight_block_size",
                            "absent: per-tensor FP8 is not supported (only [128, 128] blocks)");
    if (!json_is_array(bs)) return cfg_wrong_type(q, "weight_block_size", bs, "an array");
    json_int_t b[2] = {0, 0};
    for (size_t i = 0; i < 2 && i < json_array_size(bs); i++) {
        const json_t *e = json_array_get(bs, i);
        if (!json_is_integer(e))
            return moe_cfg_fail(q, MOE_EJSON, "weight_block_size",
                                "element %zu must be an integer, not %s", i, json_type_name(e));
        b[i] = json_integer_value(e);
    }
    if (json_array_size(bs) != 2 || b[0] != 128 || b[1] != 128)
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "weight_block_size",
                            "only [128, 128] is supported (got %zu elements, [%lld, %lld])",
                            json_array_size(bs), (long long)b[0], (long long)b[1]);
    out->kind = MOE_QUANT_FP8_BLOCK;
    out->scale_ue8m0 = !strcmp(scale_fmt, "ue8m0");
    return MOE_OK;
}

moe_status moe_cfg_quant_read(const moe_cfg *c, bool allow_mxfp4, moe_cfg_quant_info *out)
{
    moe_cfg_quant_info info = {MOE_QUANT_NONE, false, NULL, 0, NULL};
    const json_t *v = cfg_get(c, "quantization_config");
    if (!v) {
        *out = info;
        return MOE_OK;
    }
    if (!json_is_object(v)) return cfg_wrong_type(c, "quantization_config", v, "an object");
    char prefix[96]; /* nested configs (Kimi-K2.5's text_config) name the whole path */
    snprintf(prefix, sizeof prefix, "%squantization_config.", c->prefix);
    moe_cfg q = {v, c->name, prefix};
    const char *method;
    moe_status st = moe_cfg_str(&q, "quant_method", true, NULL, &method);
    if (st) return st;
    if (!strcmp(method, "fp8")) {
        st = quant_fp8(&q, &info);
        if (st) return st;
    } else if (!strcmp(method, "mxfp4") && allow_mxfp4) {
        info.kind = MOE_QUANT_MXFP4;
    } else {
        return moe_cfg_fail(&q, MOE_EUNSUPPORTED, "quant_method",
                            "'%.64s' is not supported for this model_type (supported: fp8%s)",
                            method, allow_mxfp4 ? ", mxfp4" : "");
    }
    *out = info;
    return MOE_OK;
}

moe_status moe_cfg_plain_format(const moe_cfg *c, const moe_cfg_quant_info *q,
                                moe_weight_format *out)
{
    if (q->expert_dtype && !strcmp(q->expert_dtype, "fp4"))
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "quantization_config.expert_dtype",
                            "'fp4' is supported for deepseek_v4 only");
    *out = q->kind == MOE_QUANT_FP8_BLOCK ? MOE_WFMT_FP8_BLOCK : MOE_WFMT_BF16;
    return MOE_OK;
}

moe_mlp_desc moe_cfg_mlp(int64_t hidden, int64_t intermediate, moe_weight_format format,
                         moe_dtype scale)
{
    moe_mlp_desc m;
    memset(&m, 0, sizeof m);
    m.hidden = hidden;
    m.intermediate = intermediate;
    m.format = format;
    m.activation = MOE_ACT_SILU_GLU;
    m.scale_dtype = MOE_DTYPE_INVALID;
    if (format == MOE_WFMT_FP8_BLOCK) {
        m.scale_dtype = scale;
        m.block_out = 128;
        m.block_in = 128;
    } else if (format == MOE_WFMT_MXFP4) {
        m.scale_dtype = MOE_DTYPE_F8_E8M0;
        m.block_out = 1;
        m.block_in = 32;
    } else if (format == MOE_WFMT_INT4_GROUP) { /* block_in: the caller sets the group size */
        m.scale_dtype = MOE_DTYPE_BF16;
        m.block_out = 1;
        m.block_in = 32;
    }
    return m;
}

moe_status moe_cfg_check_routing(const moe_cfg *c, const moe_routing_desc *r,
                                 const char *experts_key, const char *topk_key)
{
    /* The rules are the router's own (src/route/route_check.c), so a config that parses is
     * one a router accepts; only the field names are config.json's. */
    const char *const names[MOE_ROUTE_FIELD_COUNT_] = {
        [MOE_ROUTE_FIELD_METHOD] = "topk_method",
        [MOE_ROUTE_FIELD_SCORE] = "scoring_func",
        [MOE_ROUTE_FIELD_N_EXPERTS] = experts_key,
        [MOE_ROUTE_FIELD_TOP_K] = topk_key,
        [MOE_ROUTE_FIELD_N_GROUP] = "n_group",
        [MOE_ROUTE_FIELD_TOPK_GROUP] = "topk_group",
        [MOE_ROUTE_FIELD_NORM_TOPK_PROB] = "norm_topk_prob",
    };
    const moe_route_shape shape = {r->method,  r->score,      r->n_experts,     r->top_k,
                                   r->n_group, r->topk_group, r->norm_topk_prob};
    moe_route_violation v;
    if (moe_route_check(&shape, names, &v)) return MOE_OK;
    return moe_cfg_fail(c, MOE_ECONFIG, names[v.field], "%s", v.detail);
}

moe_status moe_cfg_alloc_layers(const moe_cfg *c, moe_model_desc *d)
{
    d->layers = moe_calloc((size_t)d->n_layers, sizeof *d->layers);
    if (!d->layers)
        return moe_error(MOE_ENOMEM, "%s: allocating %d layer descriptions", c->name, d->n_layers);
    for (int i = 0; i < d->n_layers; i++)
        d->layers[i].index = i;
    return MOE_OK;
}

/* ---- Entry points -------------------------------------------------------------------- */

typedef moe_status (*family_parse_fn)(const moe_cfg *c, moe_model_desc *d);

static moe_status parse_deepseek_v2(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_deepseek_parse(c, MOE_FAMILY_DEEPSEEK_V2, d);
}
static moe_status parse_deepseek_v3(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_deepseek_parse(c, MOE_FAMILY_DEEPSEEK_V3, d);
}
static moe_status parse_kimi_k2(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_deepseek_parse(c, MOE_FAMILY_KIMI_K2, d);
}

static moe_status parse_deepseek_v32(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_v3_moe_parse(c, MOE_FAMILY_DEEPSEEK_V32, d);
}
static moe_status parse_glm4_moe(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_v3_moe_parse(c, MOE_FAMILY_GLM4_MOE, d);
}
static moe_status parse_glm_moe_dsa(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_v3_moe_parse(c, MOE_FAMILY_GLM_MOE_DSA, d);
}
static moe_status parse_glm4_moe_lite(const moe_cfg *c, moe_model_desc *d)
{
    return moe_family_v3_moe_parse(c, MOE_FAMILY_GLM4_MOE_LITE, d);
}

static family_parse_fn parser_of(moe_family f)
{
    switch (f) {
    case MOE_FAMILY_DEEPSEEK_V2: return parse_deepseek_v2;
    case MOE_FAMILY_DEEPSEEK_V3: return parse_deepseek_v3;
    case MOE_FAMILY_KIMI_K2: return parse_kimi_k2;
    case MOE_FAMILY_DEEPSEEK_V4: return moe_family_deepseek_v4_parse;
    case MOE_FAMILY_QWEN3_MOE: return moe_family_qwen3_parse;
    case MOE_FAMILY_MIXTRAL: return moe_family_mixtral_parse;
    case MOE_FAMILY_GPT_OSS: return moe_family_gpt_oss_parse;
    case MOE_FAMILY_DEEPSEEK_V32: return parse_deepseek_v32;
    case MOE_FAMILY_GLM4_MOE: return parse_glm4_moe;
    case MOE_FAMILY_GLM_MOE_DSA: return parse_glm_moe_dsa;
    case MOE_FAMILY_GLM4_MOE_LITE: return parse_glm4_moe_lite;
    case MOE_FAMILY_MINIMAX_M2: return moe_family_minimax_m2_parse;
    case MOE_FAMILY_KIMI_K25: return moe_family_kimi_k25_parse;
    case MOE_FAMILY_QWEN3_NEXT: return moe_family_qwen3_next_parse;
    case MOE_FAMILY_QWEN3_5_MOE: return moe_family_qwen3_5_moe_parse;
    case MOE_FAMILY_ERNIE4_5_MOE: return moe_family_ernie4_5_moe_parse;
    case MOE_FAMILY_LLAMA4: return moe_family_llama4_parse;
    case MOE_FAMILY_COUNT_: break;
    }
    return NULL;
}

/* The key jansson stopped at: it reports a duplicate with the position just past the key,
 * and its own message drops the key when the text before it is long. */
static void duplicate_key(const char *json, size_t len, int pos, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (pos <= 0 || (size_t)pos > len) return;
    size_t end = (size_t)pos;
    while (end > 0 && strchr(" \t\r\n", json[end - 1]))
        end--;
    if (end < 2 || json[end - 1] != '"') return;
    size_t start = end - 1;
    while (start > 0 && json[start - 1] != '"')
        start--;
    if (start == 0) return;
    snprintf(buf, cap, "%.*s", (int)(end - 1 - start), json + start);
}

static moe_status json_fail(const char *name, const char *json, size_t len, const json_error_t *err)
{
    if (json_error_code(err) == json_error_duplicate_key) {
        char key[80];
        duplicate_key(json, len, err->position, key, sizeof key);
        return moe_error(MOE_EDUPLICATE, "%s: line %d: key '%s' appears twice in one object", name,
                         err->line, key);
    }
    return moe_error(MOE_EJSON, "%s: not valid JSON: line %d column %d: %s", name, err->line,
                     err->column, err->text);
}

static moe_status parse_root(const json_t *root, const char *name, moe_model_desc *d)
{
    moe_cfg c = {root, name, ""};
    if (!json_is_object(root))
        return moe_error(MOE_EJSON, "%s: the top level must be a JSON object, not %s", name,
                         json_type_name(root));
    const char *type;
    moe_status st = moe_cfg_str(&c, "model_type", true, NULL, &type);
    if (st) return st;
    moe_family family;
    if (!moe_family_from_name(type, &family)) {
        /* Every model_type of the name table, in enum order. */
        char known[512];
        size_t len = 0;
        known[0] = '\0';
        for (int f = 0; f < MOE_FAMILY_COUNT_ && len < sizeof known; f++) {
            const int n = snprintf(known + len, sizeof known - len, "%s%s", f ? ", " : "",
                                   moe_family_name((moe_family)f));
            if (n < 0) break;
            len += (size_t)n;
        }
        return moe_cfg_fail(&c, MOE_EUNSUPPORTED, "model_type",
                            "'%.64s' is not supported (supported: %s)", type, known);
    }
    d->family = family;
    snprintf(d->model_type, sizeof d->model_type, "%s", moe_family_name(family));
    return parser_of(family)(&c, d);
}

moe_status moe_model_desc_parse(const char *json, size_t len, const char *name, moe_model_desc *out)
{
    if (!name) name = "config.json";
    if (!json) return moe_error(MOE_EINVAL, "%s: argument 'json' is NULL", name);
    if (!out) return moe_error(MOE_EINVAL, "%s: argument 'out' is NULL", name);
    moe_status st = moe_json_check_cost(json, len, name, "config");
    if (st != MOE_OK) return st;
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) return json_fail(name, json, len, &err);
    moe_model_desc d;
    memset(&d, 0, sizeof d);
    st = parse_root(root, name, &d);
    json_decref(root);
    if (st) {
        moe_model_desc_free(&d);
        return st;
    }
    *out = d;
    return MOE_OK;
}

moe_status moe_model_desc_load(const char *path, moe_model_desc *out)
{
    if (!path) return moe_error(MOE_EINVAL, "argument 'path' is NULL");
    if (!out) return moe_error(MOE_EINVAL, "argument 'out' is NULL");
    void *buf = NULL;
    size_t len = 0;
    moe_status st = moe_file_read_all(path, MOE_CFG_MAX_FILE, &buf, &len);
    if (st) return st;
    st = moe_model_desc_parse(buf, len, path, out);
    moe_free(buf);
    return st;
}

void moe_model_desc_free(moe_model_desc *desc)
{
    if (!desc) return;
    moe_free(desc->layers);
    desc->layers = NULL;
    desc->n_layers = 0;
}
