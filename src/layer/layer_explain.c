/* layer_explain.c — the explain / describe text of a layer plan: every choice and resolution. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "layer/layer_internal.h"

typedef struct text {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends, growing the buffer; an allocation failure sticks and is reported at the end. */
static void put(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        const size_t cap = t->cap * 2 + (size_t)n;
        char *b = moe_realloc(t->buf, cap);
        if (!b) {
            t->oom = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

/* What the recipe line adds for the groups that run q8: INT4 and MXFP4 ones (tile when asked;
 * MXFP4 then keeps q8 where a block scale has no bf16, INT4 always takes it). */
static const char *q8_groups_note(const moe_layer_plan *p)
{
    bool int4 = false, mx = false;
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        const moe_layer_group_plan *g = &p->groups[id];
        if (!g->present || g->recipe != MOE_RECIPE_Q8) continue;
        if (g->mlp.format == MOE_WFMT_INT4_GROUP)
            int4 = true;
        else
            mx = true;
    }
    if (!mx) return int4 ? "; int4 groups: q8 (tile when asked)" : "";
    if (p->recipe == MOE_RECIPE_TILE)
        return "; mxfp4 groups with a block scale bf16 cannot hold: q8";
    return int4 ? "; int4 groups: q8 (tile when asked); mxfp4 groups: q8 (tile when asked)"
                : "; mxfp4 groups: q8 (tile when asked)";
}

static const char *logits_origin(const moe_layer_plan *p)
{
    switch (p->logits_origin) {
    case 1: return "options->logits_dtype";
    case 2: return "set by moe_layer_set_logits_dtype";
    default:
        return "default: not set at creation; moe_layer_set_logits_dtype may set it once, before "
               "the first forward";
    }
}

static const char *recipe_text(moe_expert_recipe r)
{
    switch (r) {
    case MOE_RECIPE_BF16:
        return "bf16 (activations rounded to bf16 once per forward, vdpbf16ps, fp32 "
               "accumulation; the same at every batch size)";
    case MOE_RECIPE_TILE:
        return "tile (activations and h rounded to bf16 once per forward, the tile unit's "
               "arithmetic (tdpbf16ps): per 32 along K two fp32 chains summed into the total "
               "(MXFP4 weights widened with their block scale to bf16 exactly); the same at "
               "every batch size and ISA level)";
    case MOE_RECIPE_Q8:
        return "q8 (input rows and h rows quantised per 32-block to int8 with one f32 scale, "
               "exact int32 dot products with the doubled E2M1 codes, fp32 accumulation across "
               "blocks; the same at every batch size)";
    default:
        return "f32 (activations f32, weights in f32 (bf16, FP8 and f16 widened exactly), fp32 "
               "FMA; the same at every batch size)";
    }
}

static void put_activation(text *t, const moe_mlp_desc *m)
{
    put(t, "%s", moe_activation_name(m->activation));
    if (m->activation == MOE_ACT_SILU_GLU_CLAMP) put(t, " (limit %g)", (double)m->swiglu_limit);
    if (m->activation == MOE_ACT_GPTOSS_GLU)
        put(t, " (limit %g, alpha %g)", (double)m->swiglu_limit, (double)m->alpha);
}

static void put_group(text *t, const moe_layer_group_plan *g, const char *label)
{
    const moe_mlp_desc *m = &g->mlp;
    put(t, "  %s: %d × mlp(hidden %lld, intermediate %lld), ", label, g->n, (long long)m->hidden,
        (long long)m->intermediate);
    put_activation(t, m);
    put(t, ", format %s: weights %s", moe_weight_format_name(m->format),
        moe_dtype_name(g->weight_dtype));
    if (g->scale_dtype != MOE_DTYPE_INVALID)
        put(t, " with %s %d×%d block scales", moe_dtype_name(g->scale_dtype), m->block_out,
            m->block_in);
    if (g->bias_dtype != MOE_DTYPE_INVALID) put(t, ", %s biases", moe_dtype_name(g->bias_dtype));
    if (g->stacked)
        put(t, " (stacked [E, in, out] tensors, gate/up %s: read by strides)",
            g->gate_up_halves ? "in halves" : "interleaved");
    put(t, "\n    kernel set: %s\n    recipe: %s\n", g->reason, recipe_text(g->recipe));
    put(t,
        "    packed: %zu bytes per expert (gate/up %zu in %lld tiles, down %zu in %lld tiles), "
        "%zu in all\n",
        g->group.expert_stride, g->group.gateup_bytes, (long long)g->group.gateup_tiles,
        g->group.down_bytes, (long long)g->group.down_tiles, g->group.packed_bytes);
    if (g->group.n_packed < g->group.n_experts && !g->group.slot) /* placed: a rank's own */
        put(t,
            "    resident: experts 0 .. %d packed; the batch's i-th expert runs on copy i mod %d "
            "(a benchmark's layer: outputs are not the model's)\n",
            g->group.n_packed - 1, g->group.n_packed);
}

static void put_gate(text *t, const moe_layer_plan *p)
{
    const moe_gate_problem *g = &p->gate_problem;
    const moe_packing *pk = p->gate_choice[0].packing;
    put(t, "  gate: weight %s [%lld, %lld], %s; packed %zu bytes%s%s%s\n",
        moe_dtype_name(g->weight_dtype), (long long)g->n_experts, (long long)g->hidden,
        g->has_bias ? "bias added in the epilogue" : "no bias", p->gate_bytes,
        pk && pk->name ? " (" : "", pk && pk->name ? pk->name : "", pk && pk->name ? ")" : "");
    put(t, "    f32 input: %s\n    bf16 input: %s\n", p->gate_choice[0].reason,
        p->gate_choice[1].reason);
    put(t, "  router: %s\n", p->router_explain ? p->router_explain : "(not built)");
}

static void put_activations(text *t, const moe_layer_plan *p)
{
    const bool f32 = p->recipe_used[MOE_RECIPE_F32];
    const bool bf16 = moe_layer_uses_bf16_rows(p);
    /* The recipe that reads the bf16 rows (a layer asks one of the two). */
    const char *b16 = p->recipe_used[MOE_RECIPE_TILE] ? "tile" : "bf16";
    const moe_layer_group_plan *q8 = NULL;
    for (int id = 0; id < MOE_LG_COUNT_ && !q8; id++)
        if (p->groups[id].present && p->groups[id].recipe == MOE_RECIPE_Q8) q8 = &p->groups[id];
    put(t, "  activations: f32 input: ");
    if (f32) put(t, "used in place by the f32 recipe%s", bf16 ? "; " : "");
    if (bf16)
        put(t, "rounded to bf16 once per forward by moe_act_round_bf16 for the %s recipe", b16);
    if (q8)
        put(t, "%sprepared as q8 rows once per forward by %s prepare_act for the q8 recipe",
            f32 || bf16 ? "; " : "", q8->ks->name);
    put(t, "\n  activations: bf16 input: ");
    if (bf16) put(t, "used in place by the %s recipe%s", b16, f32 || q8 ? "; " : "");
    if (f32 || q8)
        put(t, "widened to f32 once per forward for the %s: %s",
            f32 && q8 ? "f32 recipe and the q8 rows"
            : f32     ? "f32 recipe"
                      : "q8 rows",
            p->cvt_bf16.reason);
    if (q8) put(t, "; then prepared as q8 rows as above");
    put(t, "\n");
}

moe_status moe_layer_plan_render(const moe_layer_plan *p, char **out)
{
    text t = {moe_malloc(4096), 0, 4096, false};
    if (!t.buf) return moe_error(MOE_ENOMEM, "layer %d: allocating the explain text", p->index);
    t.buf[0] = '\0';
    put(&t, "layer %d (%s, %s): hidden %lld\n", p->index, p->desc->model_type,
        moe_layer_kind_name(p->ld->kind), (long long)p->desc->hidden);
    put(&t, "  threads: %d (%s)\n", p->threads,
        p->threads_default ? "default: options->threads 0 = the number of cores"
                           : "options->threads");
    if (p->threads > 1)
        put(&t, "  while preempted: %s\n",
            p->fixed_threads ? "every forward on all threads (options->fixed_threads)"
                             : "fewer threads, all tried again after a pause (default: "
                               "options->fixed_threads false)");
    put(&t, "  recipe asked of the expert kernels: %s (%s)%s\n",
        p->recipe == MOE_RECIPE_BF16   ? "bf16"
        : p->recipe == MOE_RECIPE_TILE ? "tile"
                                       : "f32",
        p->recipe_default
            ? "default: f32 keeps the activations exact; tile is faster at prefill with AMX"
            : "options->experts_recipe",
        q8_groups_note(p));
    if (p->moe) {
        put(&t, "  logits dtype: %s (%s)\n", moe_dtype_name(p->logits_dtype), logits_origin(p));
        put_gate(&t, p);
    } else {
        put(&t, "  logits dtype: none (a dense layer has no router)\n");
    }
    put_activations(&t, p);
    size_t total = p->gate_bytes;
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        const moe_layer_group_plan *g = &p->groups[id];
        if (!g->present) continue;
        put_group(&t, g, moe_layer_group_label[id]);
        total += g->group.packed_bytes;
    }
    if (p->moe && p->ld->scale_input)
        put(&t, "  routed input: each routed expert computes mlp(x * w), w its routing weight (the "
                "product rounded to f32, then to bf16 for the bf16 and tile recipes); the combine "
                "adds the outputs with weight 1\n");
    if (p->ld->shared_gate)
        put(&t,
            "  shared expert gate: weight %s [1, %lld] widened to f32 at creation; sigmoid(x . w) "
            "per token (f32, 8 partial sums) multiplies the shared experts' output in the "
            "combine\n",
            moe_dtype_name(p->shared_gate_dtype), (long long)p->desc->hidden);
    put(&t, "  packed total: %zu bytes (gate and experts; created once, read by every forward)\n",
        total);
    char *placement = NULL;
    if (moe_layer_placement_render(p, &placement)) t.oom = true;
    if (placement) put(&t, "%s", placement);
    moe_free(placement);
    put(&t, "  workspace: %zu bytes for 1 token, %zu for 512 (moe_layer_workspace_size)\n",
        moe_layer_plan_workspace(p, 1), moe_layer_plan_workspace(p, 512));
    if (t.oom) {
        moe_free(t.buf);
        return moe_error(MOE_ENOMEM, "layer %d: allocating the explain text", p->index);
    }
    *out = t.buf;
    return MOE_OK;
}
