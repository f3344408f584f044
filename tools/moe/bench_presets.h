/* bench_presets.h — the model shapes `moe bench --preset` knows, and how many experts fit. */
#ifndef MOE_TOOLS_BENCH_PRESETS_H
#define MOE_TOOLS_BENCH_PRESETS_H

#include <stddef.h>
#include <stdint.h>

/* One MoE layer of a released model, as its config.json has it. formats[0] is the format
 * the model ships in (the default of --format). */
typedef struct bench_preset {
    const char *name;   /* the --preset value */
    const char *family; /* moe gen --family */
    const char *formats[2];
    int64_t hidden, inter, experts, topk;
    int64_t groups, topk_group; /* n_group, topk_group; 0 where the family has none */
    int64_t shared;             /* n_shared_experts */
} bench_preset;

/* The preset called NAME, or NULL. */
const bench_preset *bench_preset_find(const char *name);
/* The i-th preset, or NULL past the last. */
const bench_preset *bench_preset_at(size_t i);
/* True when the preset can be generated in FORMAT ("bf16", "fp8" or "mxfp4"). */
int bench_preset_has_format(const bench_preset *p, const char *format);

/* Checkpoint bytes of one routed expert in FORMAT (codes + scales + biases). */
uint64_t bench_expert_bytes(const bench_preset *p, const char *format);

/* How many routed experts to keep resident within BUDGET bytes of weights: all of them when
 * they fit; else the most that fit, at least top-k (the others run on their copies: the
 * routing still chooses among all of the model's experts). 0 when not even that fits. */
int64_t bench_resident_experts(const bench_preset *p, const char *format, uint64_t budget);

#endif
