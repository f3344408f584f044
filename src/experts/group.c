/* group.c — a packed MLP group: sizes from the kernel set, allocation, packing each expert. */
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "experts/experts.h"

/* h rows are padded to a multiple of 32 activations (64 bytes of bf16) with zeros, so a kernel
 * that reads its K in pairs or vectors past an odd I multiplies zeros, never stale bytes. */
#define H_ROW_ALIGN 32

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static moe_status check_kernels(const moe_expert_kernels *ks, const char *what)
{
    if (!ks || !ks->gateup_tile_bytes || !ks->down_tile_bytes || !ks->pack_gateup ||
        !ks->pack_down || !ks->gateup || !ks->down)
        return moe_error(MOE_EINVAL, "%s: the expert kernel set is NULL or incomplete", what);
    if (ks->mr < 1 || ks->mr > MOE_EXPERTS_MAX_MR || ks->nr < 1)
        return moe_error(MOE_EINVAL, "%s: kernel set %s has tile %dx%d (MR must be in [1, %d])",
                         what, ks->name ? ks->name : "?", ks->mr, ks->nr, MOE_EXPERTS_MAX_MR);
    if (ks->recipe != MOE_RECIPE_F32 && ks->recipe != MOE_RECIPE_BF16 &&
        ks->recipe != MOE_RECIPE_Q8)
        return moe_error(MOE_EINVAL, "%s: kernel set %s has an unknown recipe %d", what,
                         ks->name ? ks->name : "?", (int)ks->recipe);
    if (ks->recipe == MOE_RECIPE_Q8 && (!ks->act_row_bytes || !ks->prepare_act))
        return moe_error(MOE_EINVAL, "%s: kernel set %s of the q8 recipe has no prepare_act", what,
                         ks->name ? ks->name : "?");
    return MOE_OK;
}

/* tiles × tile bytes, and the sum of the two parts, all checked. */
static bool part_bytes(int64_t rows, int nr, size_t tile, int64_t *tiles, size_t *bytes)
{
    *tiles = (rows + nr - 1) / nr;
    return moe_mul_overflow_size((size_t)*tiles, tile, bytes);
}

moe_status moe_expert_group_plan(moe_expert_group *g, const moe_expert_kernels *ks, int n,
                                 int64_t hidden, int64_t inter, const moe_act_params *act,
                                 const char *what)
{
    memset(g, 0, sizeof *g);
    moe_status st = check_kernels(ks, what);
    if (st) return st;
    if (n < 1 || hidden < 1 || inter < 1 || !act)
        return moe_error(MOE_EINVAL, "%s: %d experts of hidden %lld × intermediate %lld", what, n,
                         (long long)hidden, (long long)inter);
    g->ks = ks;
    g->n_experts = n;
    g->hidden = hidden;
    g->inter = inter;
    g->act = *act;
    g->gateup_tile_bytes = ks->gateup_tile_bytes(hidden);
    g->down_tile_bytes = ks->down_tile_bytes(inter);
    g->act_elem = ks->recipe == MOE_RECIPE_BF16 ? 2 : 4;
    g->h_stride = round_up((size_t)inter, H_ROW_ALIGN);
    size_t sum;
    /* A kernel set answers 0 for a tile (or a Q8 row) that does not fit in size_t. */
    bool bad = g->gateup_tile_bytes == 0 || g->down_tile_bytes == 0;
    if (ks->recipe == MOE_RECIPE_Q8) {
        g->x_row_bytes = ks->act_row_bytes(hidden);
        g->hq_row_bytes = ks->act_row_bytes(inter);
        bad = bad || g->x_row_bytes == 0 || g->hq_row_bytes == 0;
    } else {
        bad = bad || moe_mul_overflow_size((size_t)hidden, g->act_elem, &g->x_row_bytes);
    }
    bad =
        bad || part_bytes(inter, ks->nr, g->gateup_tile_bytes, &g->gateup_tiles, &g->gateup_bytes);
    bad = bad || part_bytes(hidden, ks->nr, g->down_tile_bytes, &g->down_tiles, &g->down_bytes);
    bad = bad || moe_add_overflow_size(g->gateup_bytes, g->down_bytes, &sum) || sum > SIZE_MAX - 63;
    if (!bad) g->expert_stride = round_up(sum, 64);
    bad = bad || moe_mul_overflow_size(g->expert_stride, (size_t)n, &g->packed_bytes);
    if (bad)
        return moe_error(MOE_EOVERFLOW,
                         "%s: the packed size of %d experts of %lld × %lld overflows", what, n,
                         (long long)hidden, (long long)inter);
    return MOE_OK;
}

moe_status moe_expert_group_alloc(moe_expert_group *g, const char *what)
{
    g->packed = moe_malloc_huge(g->packed_bytes);
    if (!g->packed)
        return moe_error(MOE_ENOMEM, "%s: out of memory for %zu packed bytes (%d experts)", what,
                         g->packed_bytes, g->n_experts);
    return MOE_OK;
}

moe_status moe_expert_group_pack(moe_expert_group *g, int e, const moe_weight_src *gate,
                                 const moe_weight_src *up, const moe_weight_src *down)
{
    if (!g->packed || e < 0 || e >= g->n_experts)
        return moe_error(MOE_EINVAL, "moe_expert_group_pack: expert %d of %d (packed: %s)", e,
                         g->n_experts, g->packed ? "yes" : "no");
    unsigned char *dst = g->packed + (size_t)e * g->expert_stride;
    moe_status st = g->ks->pack_gateup(gate, up, dst);
    if (st) return moe_error_context(st, "expert %d gate/up: ", e);
    st = g->ks->pack_down(down, dst + g->gateup_bytes);
    if (st) return moe_error_context(st, "expert %d down: ", e);
    return MOE_OK;
}

void moe_expert_group_free(moe_expert_group *g)
{
    if (!g) return;
    moe_free(g->packed);
    g->packed = NULL;
}
