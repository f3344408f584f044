/* test_config_int4.c — compressed-tensors pack-quantized INT4 configs: which groups are INT4,
 * the group size, and every refused field named. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "core/error.h"
#include "model/model.h"

/* Kimi-K2's shape (61 layers, the first dense, 384 experts, one shared), with QUANT as its
 * quantization_config. */
#define KIMI(quant)                                                                                \
    "{\"model_type\":\"kimi_k2\",\"hidden_size\":7168,\"num_hidden_layers\":61,"                   \
    "\"intermediate_size\":18432,\"moe_intermediate_size\":2048,\"n_routed_experts\":384,"         \
    "\"num_experts_per_tok\":8,\"n_group\":1,\"topk_group\":1,\"n_shared_experts\":1,"             \
    "\"first_k_dense_replace\":1,\"norm_topk_prob\":true,\"routed_scaling_factor\":2.827,"         \
    "\"vocab_size\":163840,\"quantization_config\":" quant "}"

#define WEIGHTS(extra)                                                                             \
    "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"group\","                  \
    "\"group_size\":32,\"dynamic\":false,\"actorder\":null,\"observer\":\"minmax\"" extra "}"

#define QUANT(group_extra, weights, ignore, extra)                                                 \
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","                      \
    "\"quantization_status\":\"compressed\",\"kv_cache_scheme\":null,\"sparsity_config\":{},"      \
    "\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"input_activations\":null,"         \
    "\"output_activations\":null" group_extra ",\"weights\":" weights "}},"                        \
    "\"ignore\":" ignore extra "}"

/* As Kimi-K2-Thinking's release: attention, the head, the shared experts and the dense MLP
 * stay bf16; here by patterns and exact names both. */
#define KIMI_IGNORE                                                                                \
    "[\"lm_head\",\"re:.*self_attn.*\",\"re:.*shared_experts.*\","                                 \
    "\"model.layers.0.mlp.gate_proj\",\"model.layers.0.mlp.up_proj\","                             \
    "\"model.layers.0.mlp.down_proj\"]"

static moe_status parse(const char *json, moe_model_desc *d)
{
    return moe_model_desc_parse(json, strlen(json), "kimi", d);
}

static void expect_fail(const char *json, moe_status want, const char *needle)
{
    moe_model_desc d;
    memset(&d, 0x5A, sizeof d);
    const moe_status st = parse(json, &d);
    CHECK_STATUS(st, want);
    CHECKF(strstr(moe_last_error(), needle) != NULL, "message '%s' lacks '%s'", moe_last_error(),
           needle);
    if (st == MOE_OK) moe_model_desc_free(&d);
}

static void test_kimi_thinking(void)
{
    moe_model_desc d;
    CHECK_STATUS(parse(KIMI(QUANT("", WEIGHTS(""), KIMI_IGNORE, "")), &d), MOE_OK);
    CHECK(d.n_layers == 61 && d.layers[0].kind == MOE_LAYER_DENSE);
    CHECK(d.layers[0].dense.format == MOE_WFMT_BF16);
    for (int i = 1; i < 61; i++) {
        const moe_layer_desc *l = &d.layers[i];
        CHECK(l->kind == MOE_LAYER_MOE && l->experts.format == MOE_WFMT_INT4_GROUP);
        CHECK(l->experts.block_out == 1 && l->experts.block_in == 32);
        CHECK(l->experts.scale_dtype == MOE_DTYPE_BF16 && l->shared.format == MOE_WFMT_BF16);
    }
    moe_model_desc_free(&d);
    /* No ignore list: every MLP is INT4, dense and shared included; group size 128. */
    CHECK_STATUS(parse(KIMI(QUANT("",
                                  "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,"
                                  "\"strategy\":\"group\",\"group_size\":128}",
                                  "[]", "")),
                       &d),
                 MOE_OK);
    CHECK(d.layers[0].dense.format == MOE_WFMT_INT4_GROUP && d.layers[0].dense.block_in == 128);
    CHECK(d.layers[5].shared.format == MOE_WFMT_INT4_GROUP && d.layers[5].experts.block_in == 128);
    moe_model_desc_free(&d);
    /* The shared experts of each layer named exactly, not by pattern. */
    char json[20000], ignore[16384];
    size_t n = (size_t)snprintf(ignore, sizeof ignore, "[\"re:model[.]layers[.]0[.]mlp[.]\"");
    for (int i = 1; i < 61; i++)
        for (int p = 0; p < 3; p++)
            n += (size_t)snprintf(ignore + n, sizeof ignore - n,
                                  ",\"model.layers.%d.mlp.shared_experts.%s_proj\"", i,
                                  p == 0   ? "gate"
                                  : p == 1 ? "up"
                                           : "down");
    REQUIRE(n + 2 < sizeof ignore);
    snprintf(ignore + n, sizeof ignore - n, "]");
    snprintf(json, sizeof json, KIMI(QUANT("", WEIGHTS(""), "%s", "")), ignore);
    CHECK_STATUS(parse(json, &d), MOE_OK);
    CHECK(d.layers[0].dense.format == MOE_WFMT_BF16 && d.layers[60].shared.format == MOE_WFMT_BF16);
    CHECK(d.layers[60].experts.format == MOE_WFMT_INT4_GROUP);
    moe_model_desc_free(&d);
    /* One shared projection left out of the list: that group is partly ignored. */
    char *last = strstr(json, ",\"model.layers.60.mlp.shared_experts.down_proj\"");
    REQUIRE(last);
    memmove(last, last + strlen(",\"model.layers.60.mlp.shared_experts.down_proj\""),
            strlen(last + strlen(",\"model.layers.60.mlp.shared_experts.down_proj\"")) + 1);
    expect_fail(json, MOE_EUNSUPPORTED,
                "ignores 'model.layers.60.mlp.shared_experts.gate_proj' but not "
                "'model.layers.60.mlp.shared_experts.down_proj'");
}

static void test_refused(void)
{
    expect_fail(KIMI(QUANT("", WEIGHTS(""), KIMI_IGNORE, ",\"transform_config\":{\"x\":1}")),
                MOE_EUNSUPPORTED, "'quantization_config.transform_config': must be empty");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                     "\"sparsity_config\":{\"format\":\"sparse-24-bitmask\"},"
                     "\"config_groups\":{}}"),
                MOE_EUNSUPPORTED, "'quantization_config.sparsity_config': must be empty");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                     "\"quantization_status\":\"frozen\"}"),
                MOE_EUNSUPPORTED, "'frozen' is not supported (only compressed");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\"}"),
                MOE_EMISSING, "'quantization_config.config_groups'");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                     "\"config_groups\":{\"a\":{},\"b\":{}}}"),
                MOE_EUNSUPPORTED, "exactly one group (it has 2)");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\"}"), MOE_EMISSING,
                "'quantization_config.format'");
    expect_fail(KIMI("{\"quant_method\":\"awq\"}"), MOE_EUNSUPPORTED,
                "'awq' is not supported for this model_type (supported: fp8, compressed-tensors)");
    expect_fail(KIMI(QUANT("",
                           "{\"num_bits\":4,\"type\":\"float\",\"symmetric\":true,"
                           "\"strategy\":\"group\",\"group_size\":32}",
                           "[]", "")),
                MOE_EUNSUPPORTED, "weights.type': 'float' is not supported");
    expect_fail(KIMI(QUANT("", WEIGHTS(",\"block_structure\":\"2:4\""), "[]", "")),
                MOE_EUNSUPPORTED, "weights.block_structure'");
    expect_fail(
        KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
             "\"config_groups\":{\"g\":{\"targets\":[\"re:.*experts.*\"],\"weights\":" WEIGHTS(
                 "") "}}}"),
        MOE_EUNSUPPORTED, "'quantization_config.config_groups.g.targets'");
    expect_fail(KIMI("{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                     "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"]}}}"),
                MOE_EMISSING, "'quantization_config.config_groups.g.weights'");
    expect_fail(KIMI(QUANT("", WEIGHTS(""), "\"lm_head\"", "")), MOE_EJSON,
                "'quantization_config.ignore': is not an array");
    /* Patterns are bounded: no interval expressions, at most 256 bytes, at most 64. */
    expect_fail(KIMI(QUANT("", WEIGHTS(""), "[\"lm_head\",\"re:((a{255}){255}){255}\"]", "")),
                MOE_EUNSUPPORTED, "entry 1 're:((a{255}){255}){255}': interval expressions");
    {
        char pat[300], json[4096], ig[1024];
        memset(pat, 'a', 257);
        pat[257] = '\0';
        snprintf(ig, sizeof ig, "[\"re:%s\"]", pat);
        snprintf(json, sizeof json, KIMI(QUANT("", WEIGHTS(""), "%s", "")), ig);
        expect_fail(json, MOE_EUNSUPPORTED, "entry 0: a pattern of 257 bytes (at most 256)");
        pat[256] = '\0'; /* 256 bytes: accepted */
        snprintf(ig, sizeof ig, "[\"re:%s\"]", pat);
        snprintf(json, sizeof json, KIMI(QUANT("", WEIGHTS(""), "%s", "")), ig);
        moe_model_desc d;
        const moe_status st = parse(json, &d);
        CHECK_STATUS(st, MOE_OK);
        if (st == MOE_OK) moe_model_desc_free(&d);
        size_t n = (size_t)snprintf(ig, sizeof ig, "[");
        for (int i = 0; i < 65; i++)
            n += (size_t)snprintf(ig + n, sizeof ig - n, "%s\"re:x%d\"", i ? "," : "", i);
        snprintf(ig + n, sizeof ig - n, "]");
        snprintf(json, sizeof json, KIMI(QUANT("", WEIGHTS(""), "%s", "")), ig);
        expect_fail(json, MOE_EUNSUPPORTED, "entry 64: more than 64 \"re:\" patterns");
    }
    /* Other families do not read it. */
    expect_fail("{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                "\"moe_intermediate_size\":32,\"num_experts\":4,\"num_experts_per_tok\":2,"
                "\"quantization_config\":{\"quant_method\":\"compressed-tensors\"}}",
                MOE_EUNSUPPORTED, "'compressed-tensors' is not supported for this model_type");
}

int main(void)
{
    test_kimi_thinking();
    test_refused();
    return TEST_END();
}
