/* family_kimi_k25.c — Kimi-K2.5: the DeepSeek-V3 text_config inside, its language_model tensors. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

/* The text model's family: text_config.model_type "kimi_k2" or "deepseek_v3" (transformers
 * reads both as deepseek_v3, its default when absent). */
static moe_status text_family(const moe_cfg *t, moe_family *out)
{
    const char *type;
    moe_status st = moe_cfg_str(t, "model_type", false, "deepseek_v3", &type);
    if (st) return st;
    if (!strcmp(type, "kimi_k2"))
        *out = MOE_FAMILY_KIMI_K2;
    else if (!strcmp(type, "deepseek_v3"))
        *out = MOE_FAMILY_DEEPSEEK_V3;
    else
        return moe_cfg_fail(t, MOE_EUNSUPPORTED, "model_type",
                            "'%.64s' is not supported inside kimi_k25 (supported: kimi_k2, "
                            "deepseek_v3)",
                            type);
    return MOE_OK;
}

moe_status moe_family_kimi_k25_parse(const moe_cfg *c, moe_model_desc *d)
{
    const json_t *text = json_object_get(c->obj, "text_config");
    if (!text || json_is_null(text))
        return moe_cfg_fail(c, MOE_EMISSING, "text_config",
                            "required field is missing (the language model's config)");
    if (!json_is_object(text))
        return moe_cfg_fail(c, MOE_EJSON, "text_config", "must be an object");
    const moe_cfg t = {text, c->name, "text_config."};
    /* Kimi-K2.5 ships its quantization_config inside text_config, which is where it is read
     * (as deepseek_v3 reads its own); one at the top level too must say the same. */
    const json_t *top = json_object_get(c->obj, "quantization_config");
    if (top && !json_is_null(top) && !json_equal(top, json_object_get(text, "quantization_config")))
        return moe_cfg_fail(c, MOE_ECONFIG, "quantization_config",
                            "differs from text_config.quantization_config (the text model's "
                            "quantisation is read from text_config)");
    moe_family family = MOE_FAMILY_DEEPSEEK_V3;
    moe_status st = text_family(&t, &family);
    if (st) return st;
    return moe_family_deepseek_parse(&t, family, d);
}

static const char layers_prefix[] = "language_model.model.layers.";
static const char blocks_prefix[] = "language_model.model.blocks.";

moe_status moe_family_kimi_k25_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s%d.mlp", layers_prefix, layer);
    return moe_family_deepseek_tensors_under(d, layer, prefix, l);
}

bool moe_family_kimi_k25_alt_name(const char *name, char *buf, size_t cap)
{
    /* The hub's checkpoints say layers; transformers 5.25's save_pretrained writes blocks. */
    const size_t n = sizeof layers_prefix - 1;
    if (strncmp(name, layers_prefix, n) != 0) return false;
    int w = snprintf(buf, cap, "%s%s", blocks_prefix, name + n);
    return w > 0 && (size_t)w < cap;
}
