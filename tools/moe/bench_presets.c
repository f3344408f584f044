/* bench_presets.c — real MoE layer shapes of released models, and scaling them to memory. */
#include "bench_presets.h"

#include <string.h>

/* Shapes from each model's config.json on Hugging Face (docs/models.md lists the sources). */
static const bench_preset presets[] = {
    {"deepseek-v3", "deepseek_v3", {"fp8", "bf16"}, 7168, 2048, 256, 8, 8, 4, 1},
    {"kimi-k2", "kimi_k2", {"fp8", "bf16"}, 7168, 2048, 384, 8, 1, 1, 1},
    {"deepseek-v4-flash", "deepseek_v4", {"mxfp4", "fp8"}, 4096, 2048, 256, 6, 0, 0, 1},
    {"qwen3-30b-a3b", "qwen3_moe", {"bf16", "fp8"}, 2048, 768, 128, 8, 0, 0, 0},
    {"mixtral-8x7b", "mixtral", {"bf16", "fp8"}, 4096, 14336, 8, 2, 0, 0, 0},
    {"gpt-oss-20b", "gpt_oss", {"mxfp4", "bf16"}, 2880, 2880, 32, 4, 0, 0, 0},
    {"gpt-oss-120b", "gpt_oss", {"mxfp4", "bf16"}, 2880, 2880, 128, 4, 0, 0, 0},
    {"glm-4.5", "glm4_moe", {"bf16", "fp8"}, 5120, 1536, 160, 8, 1, 1, 1},
    {"minimax-m2", "minimax_m2", {"fp8", "bf16"}, 3072, 1536, 256, 8, 0, 0, 0},
    /* Kimi-K2-Thinking / K2.5: Kimi-K2's shapes, routed experts compressed-tensors INT4. */
    {"kimi-k2.5-int4", "kimi_k2", {"int4", "bf16"}, 7168, 2048, 384, 8, 1, 1, 1},
    /* Qwen3-Next-80B-A3B and Qwen3.5-MoE share this block: one shared expert of width 512. */
    {"qwen3.5-moe", "qwen3_5_moe", {"bf16", "fp8"}, 2048, 512, 512, 10, 0, 0, 1},
    /* Llama-4 Maverick: top-1, one shared expert as wide as an expert; bf16 (no FP8 here). */
    {"llama-4-maverick", "llama4", {"bf16", "bf16"}, 5120, 8192, 128, 1, 0, 0, 1},
};

const bench_preset *bench_preset_at(size_t i)
{
    return i < sizeof presets / sizeof presets[0] ? &presets[i] : NULL;
}

const bench_preset *bench_preset_find(const char *name)
{
    for (size_t i = 0; bench_preset_at(i); i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

int bench_preset_has_format(const bench_preset *p, const char *format)
{
    return !strcmp(p->formats[0], format) || !strcmp(p->formats[1], format);
}

uint64_t bench_expert_bytes(const bench_preset *p, const char *format)
{
    const uint64_t h = (uint64_t)p->hidden, i = (uint64_t)p->inter, w = 3 * h * i;
    if (!strcmp(format, "fp8")) {
        const uint64_t hb = (h + 127) / 128, ib = (i + 127) / 128;
        return w + 4 * 3 * hb * ib; /* E4M3 codes + f32 128x128 block scales */
    }
    if (!strcmp(format, "mxfp4")) return w / 2 + w / 32 + 2 * (2 * i + h); /* + bf16 biases */
    /* int4: the nibbles, a bf16 scale per 32, weight_shape */
    if (!strcmp(format, "int4")) return w / 2 + 2 * (w / 32) + 3 * 16;
    return 2 * w;
}

int64_t bench_resident_experts(const bench_preset *p, const char *format, uint64_t budget)
{
    const uint64_t per = bench_expert_bytes(p, format);
    uint64_t shared = (uint64_t)p->shared * per;
    if (budget <= shared) return 0;
    int64_t n = (int64_t)((budget - shared) / per);
    if (n >= p->experts) return p->experts;
    return n >= p->topk ? n : 0;
}
