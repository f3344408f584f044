/* config_int4.c — compressed-tensors "pack-quantized" INT4 quantization_config: fields and ignore
 * list. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/*
 * Read independently of the family (docs/formats.md, "INT4 (pack-quantized)"): the family
 * passes the quantization_config object (top level, or text_config's) and later asks, per MLP
 * group, whether its module names are quantised. Every field that changes the math is read or
 * refused naming it; fields that only say how the file was made (observer, version,
 * global_compression_ratio, kv_cache_scheme: attention only) are not read.
 */

static moe_status need_null(const moe_cfg *c, const char *key, const char *why)
{
    if (!moe_cfg_has(c, key)) return MOE_OK;
    return moe_cfg_fail(c, MOE_EUNSUPPORTED, key, "must be null or absent (%s)", why);
}

/* An object field that must be absent, null or empty ({}). */
static moe_status need_empty(const moe_cfg *c, const char *key, const char *why)
{
    const json_t *v = json_object_get(c->obj, key);
    if (!v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0)) return MOE_OK;
    return moe_cfg_fail(c, MOE_EUNSUPPORTED, key, "must be empty or absent (%s)", why);
}

static moe_status read_weights(const moe_cfg *w, moe_cfg_quant_info *out)
{
    int64_t bits, group;
    const char *type, *strategy;
    bool symmetric, dynamic;
    moe_status st = moe_cfg_int(w, "num_bits", true, 0, 1, 64, &bits);
    if (st) return st;
    if (bits != 4)
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "num_bits", "%lld is not supported (only 4)",
                            (long long)bits);
    if ((st = moe_cfg_str(w, "type", true, NULL, &type))) return st;
    if (strcmp(type, "int"))
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "type", "'%.64s' is not supported (only int)",
                            type);
    if ((st = moe_cfg_bool(w, "symmetric", true, true, &symmetric))) return st;
    if (!symmetric)
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "symmetric",
                            "false is not supported (only symmetric int4: no zero points)");
    if ((st = moe_cfg_str(w, "strategy", true, NULL, &strategy))) return st;
    if (strcmp(strategy, "group"))
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "strategy",
                            "'%.64s' is not supported (only group)", strategy);
    if ((st = moe_cfg_bool(w, "dynamic", false, false, &dynamic))) return st;
    if (dynamic)
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "dynamic",
                            "true is not supported (the weight scales are stored)");
    if ((st = need_null(w, "actorder", "activation reordering needs g_idx, not supported")) ||
        (st = need_null(w, "block_structure", "only group scales are supported")))
        return st;
    if ((st = moe_cfg_int(w, "group_size", true, 0, 1, MOE_CFG_MAX_DIM, &group))) return st;
    if (group % 32 != 0)
        return moe_cfg_fail(w, MOE_EUNSUPPORTED, "group_size",
                            "%lld is not supported (a multiple of 32: the activations' block)",
                            (long long)group);
    out->group_size = (int)group;
    return MOE_OK;
}

/* targets: the classes or names the group quantises; "Linear" (every linear layer, less the
 * ignore list) is what libmoe reads. */
static moe_status read_targets(const moe_cfg *g)
{
    const json_t *t = json_object_get(g->obj, "targets");
    if (!t || json_is_null(t))
        return moe_cfg_fail(g, MOE_EMISSING, "targets", "is required (e.g. [\"Linear\"])");
    if (!json_is_array(t) || json_array_size(t) != 1 || !json_is_string(json_array_get(t, 0)) ||
        strcmp(json_string_value(json_array_get(t, 0)), "Linear"))
        return moe_cfg_fail(g, MOE_EUNSUPPORTED, "targets",
                            "only [\"Linear\"] is supported (with an ignore list)");
    return MOE_OK;
}

static moe_status read_group(const moe_cfg *q, const char *name, const json_t *v,
                             moe_cfg_quant_info *out)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%sconfig_groups.%.40s.", q->prefix, name);
    if (!json_is_object(v))
        return moe_cfg_fail(q, MOE_EJSON, "config_groups", "entry '%.40s' is not an object", name);
    const moe_cfg g = {v, q->name, prefix};
    moe_status st = read_targets(&g);
    if (st) return st;
    if ((st = need_null(&g, "input_activations", "W4A16: activations are not quantised")) ||
        (st = need_null(&g, "output_activations", "W4A16: outputs are not quantised")))
        return st;
    const char *fmt;
    if ((st = moe_cfg_str(&g, "format", false, "pack-quantized", &fmt))) return st;
    if (strcmp(fmt, "pack-quantized"))
        return moe_cfg_fail(&g, MOE_EUNSUPPORTED, "format",
                            "'%.64s' is not supported (only pack-quantized)", fmt);
    const json_t *w = json_object_get(v, "weights");
    if (!w || json_is_null(w)) return moe_cfg_fail(&g, MOE_EMISSING, "weights", "is required");
    if (!json_is_object(w)) return moe_cfg_fail(&g, MOE_EJSON, "weights", "is not an object");
    char wp[128];
    snprintf(wp, sizeof wp, "%sweights.", prefix);
    const moe_cfg wc = {w, q->name, wp};
    return read_weights(&wc, out);
}

/* What an untrusted config may ask of the regular expression engine: patterns are compiled
 * once and run against every MLP module name of the model, so their number and length are
 * bounded, and interval expressions ({m,n}), whose compiled size grows with the counts (and
 * multiplies when nested), are refused. Released ignore lists use a handful of short
 * patterns such as ".*self_attn.*". */
#define IGNORE_MAX_PATTERNS 64
#define IGNORE_MAX_PATTERN_BYTES 256

static moe_status read_ignore(const moe_cfg *q, moe_cfg_quant_info *out)
{
    const json_t *ig = json_object_get(q->obj, "ignore");
    if (!ig || json_is_null(ig)) return MOE_OK;
    if (!json_is_array(ig)) return moe_cfg_fail(q, MOE_EJSON, "ignore", "is not an array");
    size_t n_re = 0;
    for (size_t i = 0; i < json_array_size(ig); i++) {
        const json_t *e = json_array_get(ig, i);
        if (!json_is_string(e))
            return moe_cfg_fail(q, MOE_EJSON, "ignore", "entry %zu is not a string", i);
        const char *s = json_string_value(e);
        if (strncmp(s, "re:", 3)) continue;
        if (++n_re > IGNORE_MAX_PATTERNS)
            return moe_cfg_fail(q, MOE_EUNSUPPORTED, "ignore",
                                "entry %zu: more than %d \"re:\" patterns", i,
                                IGNORE_MAX_PATTERNS);
        if (strlen(s + 3) > IGNORE_MAX_PATTERN_BYTES)
            return moe_cfg_fail(q, MOE_EUNSUPPORTED, "ignore",
                                "entry %zu: a pattern of %zu bytes (at most %d)", i,
                                strlen(s + 3), IGNORE_MAX_PATTERN_BYTES);
        if (strchr(s + 3, '{'))
            return moe_cfg_fail(q, MOE_EUNSUPPORTED, "ignore",
                                "entry %zu '%.80s': interval expressions ({m,n}) are not "
                                "supported in ignore patterns",
                                i, s);
        regex_t re;
        char *anchored = moe_malloc(strlen(s) + 8);
        if (!anchored) return moe_error(MOE_ENOMEM, "%s: copying an ignore pattern", q->name);
        sprintf(anchored, "^(%s)", s + 3); /* Python's re.match: anchored at the start only */
        const int rc = regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB);
        moe_free(anchored);
        if (rc != 0)
            return moe_cfg_fail(q, MOE_EUNSUPPORTED, "ignore",
                                "entry %zu '%.80s' is not a POSIX extended regular expression", i,
                                s);
        regfree(&re);
    }
    out->ignore = ig;
    return MOE_OK;
}

moe_status moe_cfg_int4_read(const moe_cfg *q, moe_cfg_quant_info *out)
{
    const char *fmt, *status;
    moe_status st = moe_cfg_str(q, "format", true, NULL, &fmt);
    if (st) return st;
    if (strcmp(fmt, "pack-quantized"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "format",
                            "'%.64s' is not supported (only pack-quantized)", fmt);
    if ((st = moe_cfg_str(q, "quantization_status", false, "compressed", &status))) return st;
    if (strcmp(status, "compressed"))
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "quantization_status",
                            "'%.64s' is not supported (only compressed: packed weights)", status);
    if ((st = need_empty(q, "sparsity_config", "sparse weights are not supported")) ||
        (st = need_empty(q, "transform_config", "weight transforms change the math")))
        return st;
    const json_t *groups = json_object_get(q->obj, "config_groups");
    if (!groups || json_is_null(groups))
        return moe_cfg_fail(q, MOE_EMISSING, "config_groups", "is required");
    if (!json_is_object(groups) || json_object_size(groups) != 1)
        return moe_cfg_fail(q, MOE_EUNSUPPORTED, "config_groups",
                            "must be an object with exactly one group (it has %zu)",
                            json_is_object(groups) ? json_object_size(groups) : (size_t)0);
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)groups, name, v)
    {
        if ((st = read_group(q, name, v, out))) return st;
    }
    if ((st = read_ignore(q, out))) return st;
    out->kind = MOE_QUANT_INT4_GROUP;
    return MOE_OK;
}

/* ---- Which modules the ignore list leaves quantised --------------------------------------- */

struct moe_int4_ignore {
    size_t n_exact, n_re;
    const char **exact; /* sorted, into the JSON */
    regex_t *re;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void moe_int4_ignore_free(moe_int4_ignore *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_re; i++)
        regfree(&m->re[i]);
    moe_free(m->re);
    moe_free(m->exact);
    moe_free(m);
}

moe_status moe_int4_ignore_make(const moe_cfg_quant_info *q, moe_int4_ignore **out)
{
    moe_int4_ignore *m = moe_calloc(1, sizeof *m);
    const size_t n = q->ignore ? json_array_size(q->ignore) : 0;
    if (!m) return moe_error(MOE_ENOMEM, "allocating the ignore list");
    m->exact = moe_calloc(n + 1, sizeof *m->exact);
    m->re = moe_calloc(n + 1, sizeof *m->re);
    if (!m->exact || !m->re) {
        moe_int4_ignore_free(m);
        return moe_error(MOE_ENOMEM, "allocating the ignore list (%zu entries)", n);
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(q->ignore, i));
        if (strncmp(s, "re:", 3)) {
            m->exact[m->n_exact++] = s;
            continue;
        }
        char *anchored = moe_malloc(strlen(s) + 8);
        if (!anchored) {
            moe_int4_ignore_free(m);
            return moe_error(MOE_ENOMEM, "copying an ignore pattern");
        }
        sprintf(anchored, "^(%s)", s + 3);
        const int rc = regcomp(&m->re[m->n_re], anchored, REG_EXTENDED | REG_NOSUB);
        moe_free(anchored);
        if (rc != 0) { /* moe_cfg_int4_read compiled it already */
            moe_int4_ignore_free(m);
            return moe_error(MOE_EUNSUPPORTED, "ignore pattern '%.80s'", s);
        }
        m->n_re++;
    }
    qsort(m->exact, m->n_exact, sizeof *m->exact, cmp_str);
    *out = m;
    return MOE_OK;
}

static bool ignored(const moe_int4_ignore *m, const char *name)
{
    if (m->n_exact && bsearch(&name, m->exact, m->n_exact, sizeof *m->exact, cmp_str)) return true;
    for (size_t i = 0; i < m->n_re; i++)
        if (regexec(&m->re[i], name, 0, NULL, 0) == 0) return true;
    return false;
}

moe_status moe_int4_mlp_format(const moe_int4_ignore *m, const moe_cfg *c, const char *prefix,
                               const char *const proj[3], int n_experts, moe_weight_format *out)
{
    int quantised = 0, total = 0;
    char name[200], first_q[200] = "", first_i[200] = "";
    for (int e = 0; e < (n_experts > 0 ? n_experts : 1); e++)
        for (int p = 0; p < 3; p++) {
            if (n_experts > 0)
                snprintf(name, sizeof name, "%s.experts.%d.%s", prefix, e, proj[p]);
            else
                snprintf(name, sizeof name, "%s.%s", prefix, proj[p]);
            const bool ig = ignored(m, name);
            quantised += !ig;
            total++;
            if (!ig && !first_q[0]) snprintf(first_q, sizeof first_q, "%s", name);
            if (ig && !first_i[0]) snprintf(first_i, sizeof first_i, "%s", name);
        }
    if (quantised != 0 && quantised != total)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "quantization_config.ignore",
                            "ignores '%s' but not '%s': one MLP group must be all INT4 or all "
                            "unquantised",
                            first_i, first_q);
    *out = quantised ? MOE_WFMT_INT4_GROUP : MOE_WFMT_BF16;
    return MOE_OK;
}

moe_status moe_cfg_quant_read_int4(const moe_cfg *c, moe_cfg_quant_info *out)
{
    const json_t *v = json_object_get(c->obj, "quantization_config");
    const json_t *m = json_is_object(v) ? json_object_get(v, "quant_method") : NULL;
    if (!json_is_string(m) || !strcmp(json_string_value(m), "fp8"))
        return moe_cfg_quant_read(c, false, out); /* absent, fp8, or its messages */
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%squantization_config.", c->prefix);
    const moe_cfg q = {v, c->name, prefix};
    if (strcmp(json_string_value(m), "compressed-tensors"))
        return moe_cfg_fail(&q, MOE_EUNSUPPORTED, "quant_method",
                            "'%.64s' is not supported for this model_type (supported: fp8, "
                            "compressed-tensors)",
                            json_string_value(m));
    moe_cfg_quant_info info = {MOE_QUANT_NONE, false, NULL, 0, NULL};
    moe_status st = moe_cfg_int4_read(&q, &info);
    if (st) return st;
    *out = info;
    return MOE_OK;
}
