/* group.c — a packed MLP group: sizes from the kernel set, allocation, packing each expert. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "cpu/cpu.h"
#include "experts/experts.h"

/* h rows are padded to a multiple of 32 activations (64 bytes of bf16) with zeros, so a kernel
 * that reads its K in pairs or vectors past an odd I multiplies zeros, never stale bytes. */
#define H_ROW_ALIGN 32
/* The L2 the engine's blocking assumes where CPUID does not describe one (some hypervisors):
 * 1 MiB, the per-core L2 of Skylake-SP and Zen 4, so a run does not overflow theirs. */
#define L2_UNKNOWN ((size_t)1 << 20)

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

size_t moe_expert_run_bytes(void)
{
    const size_t l2 = moe_cpu_l2_bytes();
    return (l2 ? l2 : L2_UNKNOWN) / 4 * 3;
}

static moe_status check_kernels(const moe_expert_kernels *ks, const char *what)
{
    if (!ks || !ks->gateup_tile_bytes || !ks->down_tile_bytes || !ks->pack_gateup ||
        !ks->pack_down || !ks->gateup || !ks->down)
        return moe_error(MOE_EINVAL, "%s: the expert kernel set is NULL or incomplete", what);
    if (ks->mr < 1 || ks->mr > MOE_EXPERTS_MAX_MR || ks->nr < 1)
        return moe_error(MOE_EINVAL, "%s: kernel set %s has tile %dx%d (MR must be in [1, %d])",
                         what, ks->name ? ks->name : "?", ks->mr, ks->nr, MOE_EXPERTS_MAX_MR);
    if (ks->recipe != MOE_RECIPE_F32 && ks->recipe != MOE_RECIPE_BF16 &&
        ks->recipe != MOE_RECIPE_Q8 && ks->recipe != MOE_RECIPE_TILE)
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
    g->n_experts = g->n_packed = n;
    g->hidden = hidden;
    g->inter = inter;
    g->act = *act;
    g->gateup_tile_bytes = ks->gateup_tile_bytes(hidden);
    g->down_tile_bytes = ks->down_tile_bytes(inter);
    g->act_elem = moe_recipe_bf16_rows(ks->recipe) ? 2 : 4;
    g->h_stride = round_up((size_t)inter, H_ROW_ALIGN);
    /* The tile unit loads 16 rows of a panel at once; rows a multiple of 4 KB apart compete
     * for the same L1 sets, and 64 bytes more between them was 5-11 % faster at 32 tokens
     * (bench/bench_tile_amx.c; 16 bytes more was slower). */
    if (ks->recipe == MOE_RECIPE_TILE && g->h_stride * g->act_elem % 4096 == 0)
        g->h_stride += H_ROW_ALIGN;
    g->run_bytes = moe_expert_run_bytes();
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
    g->xg_row_bytes = g->x_row_bytes + (g->x_row_bytes % 4096 == 0 ? 64 : 0);
    bad = bad || g->xg_row_bytes < g->x_row_bytes;
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

void moe_expert_group_alias(moe_expert_group *g, int n_packed)
{
    if (n_packed < 1 || n_packed >= g->n_experts) return;
    g->n_packed = n_packed;
    g->packed_bytes = (size_t)n_packed * g->expert_stride; /* below the planned size */
}

moe_status moe_expert_group_alloc(moe_expert_group *g, const char *what)
{
    g->packed = moe_malloc_huge(g->packed_bytes);
    if (!g->packed)
        return moe_error(MOE_ENOMEM, "%s: out of memory for %zu packed bytes (%d experts)", what,
                         g->packed_bytes, g->n_packed);
    return MOE_OK;
}

/* The expert packed expert E is, for messages. */
static int expert_id(const moe_expert_group *g, int e)
{
    return g->packed_ids ? g->packed_ids[e] : e;
}

moe_status moe_expert_group_pack(moe_expert_group *g, int e, const moe_weight_src *gate,
                                 const moe_weight_src *up, const moe_weight_src *down)
{
    if (!g->packed || e < 0 || e >= g->n_packed)
        return moe_error(MOE_EINVAL, "moe_expert_group_pack: expert %d of %d (packed: %s)", e,
                         g->n_packed, g->packed ? "yes" : "no");
    unsigned char *dst = g->packed + (size_t)e * g->expert_stride;
    moe_status st = g->ks->pack_gateup(gate, up, dst);
    if (st) return moe_error_context(st, "expert %d gate/up: ", expert_id(g, e));
    st = g->ks->pack_down(down, dst + g->gateup_bytes);
    if (st) return moe_error_context(st, "expert %d down: ", expert_id(g, e));
    return MOE_OK;
}

/* ---- Packing in parts ------------------------------------------------------------------ */

/* The 4-bit formats, whose row strides count bytes of two codes each. */
static bool nibbles(const moe_expert_group *g)
{
    return g->ks->format == MOE_EXPERT_FMT_MXFP4 || g->ks->format == MOE_EXPERT_FMT_INT4_GROUP;
}

/* Bytes of one element step along a row of S's data (MXFP4 and INT4 strides count bytes). */
static size_t data_elem_bytes(const moe_expert_group *g, const moe_weight_src *s)
{
    return nibbles(g) ? 1 : moe_dtype_bits(s->dtype) / 8;
}

/* Elements (MXFP4, INT4: bytes) of one row of S's data. */
static int64_t row_elems(const moe_expert_group *g, const moe_weight_src *s)
{
    return nibbles(g) ? s->cols / 2 : s->cols;
}

/* Whether S's rows lie one after another in memory, so a run of rows is one byte span. */
static bool rows_in_order(const moe_expert_group *g, const moe_weight_src *s)
{
    return s->col_stride == 1 && s->row_stride >= row_elems(g, s) && s->scale_stride >= 0 &&
           s->bias_stride >= 0 && (g->ks->format != MOE_EXPERT_FMT_FP8_BLOCK || s->block_rows > 0);
}

/* Rows [r0, r0 + n) of S as a source of their own (r0 a multiple of S's scale block rows). */
static moe_weight_src rows_of(const moe_expert_group *g, const moe_weight_src *s, int64_t r0,
                              int64_t n)
{
    moe_weight_src v = *s;
    v.rows = n;
    v.data = (const unsigned char *)s->data + (size_t)(r0 * s->row_stride) * data_elem_bytes(g, s);
    if (s->scale && g->ks->format == MOE_EXPERT_FMT_MXFP4) {
        v.scale = (const unsigned char *)s->scale + (size_t)(r0 * s->scale_stride);
    } else if (s->scale && g->ks->format == MOE_EXPERT_FMT_INT4_GROUP) { /* stride: elements */
        v.scale = (const unsigned char *)s->scale +
                  (size_t)(r0 * s->scale_stride) * (moe_dtype_bits(s->scale_dtype) / 8);
    } else if (s->scale) { /* row-major [ceil(rows / block_rows), ceil(cols / 128)] */
        const int64_t ncols = (s->cols + MOE_EXPERT_KBLOCK - 1) / MOE_EXPERT_KBLOCK;
        v.scale = (const unsigned char *)s->scale +
                  (size_t)(r0 / s->block_rows * ncols) * (moe_dtype_bits(s->scale_dtype) / 8);
    }
    if (s->bias)
        v.bias = (const unsigned char *)s->bias +
                 (size_t)(r0 * s->bias_stride) * (moe_dtype_bits(s->bias_dtype) / 8);
    return v;
}

/* Rows per part: MOE_EXPERT_PACK_PART_ROWS rounded up to whole tiles and scale blocks. */
static int64_t part_rows(const moe_expert_group *g, const moe_weight_src *s)
{
    int64_t unit = g->ks->nr;
    if (g->ks->format == MOE_EXPERT_FMT_FP8_BLOCK && s->block_rows > unit) unit = s->block_rows;
    return (MOE_EXPERT_PACK_PART_ROWS + unit - 1) / unit * unit;
}

static void part_done(const moe_expert_group *g, const moe_weight_src *v,
                      moe_expert_pack_done *done, void *ctx)
{
    /* From the first row's first byte to the last row's last: a part of gpt-oss's interleaved
     * gate/up spans its up rows too, which the same part packs, and nothing of the next. */
    const int64_t elems = (v->rows - 1) * v->row_stride + row_elems(g, v);
    done(ctx, v->data, (size_t)elems * data_elem_bytes(g, v));
}

moe_status moe_expert_group_pack_parts(moe_expert_group *g, int e, const moe_weight_src *gate,
                                       const moe_weight_src *up, const moe_weight_src *down,
                                       moe_expert_pack_done *done, void *ctx)
{
    if (!g->packed || e < 0 || e >= g->n_packed || !gate || !up || !down || !done)
        return moe_expert_group_pack(g, e, gate, up, down); /* its checks and messages */
    unsigned char *dst = g->packed + (size_t)e * g->expert_stride;
    moe_status st = MOE_OK;
    if (rows_in_order(g, gate) && rows_in_order(g, up) && gate->rows == up->rows &&
        gate->block_rows == up->block_rows) {
        const int64_t step = part_rows(g, gate);
        for (int64_t r0 = 0; r0 < gate->rows && !st; r0 += step) {
            const int64_t n = gate->rows - r0 < step ? gate->rows - r0 : step;
            const moe_weight_src vg = rows_of(g, gate, r0, n), vu = rows_of(g, up, r0, n);
            st =
                g->ks->pack_gateup(&vg, &vu, dst + (size_t)(r0 / g->ks->nr) * g->gateup_tile_bytes);
            if (!st) {
                part_done(g, &vg, done, ctx);
                part_done(g, &vu, done, ctx);
            }
        }
    } else {
        st = g->ks->pack_gateup(gate, up, dst);
    }
    if (st) return moe_error_context(st, "expert %d gate/up: ", expert_id(g, e));
    dst += g->gateup_bytes;
    if (rows_in_order(g, down)) {
        const int64_t step = part_rows(g, down);
        for (int64_t r0 = 0; r0 < down->rows && !st; r0 += step) {
            const int64_t n = down->rows - r0 < step ? down->rows - r0 : step;
            const moe_weight_src v = rows_of(g, down, r0, n);
            st = g->ks->pack_down(&v, dst + (size_t)(r0 / g->ks->nr) * g->down_tile_bytes);
            if (!st) part_done(g, &v, done, ctx);
        }
    } else {
        st = g->ks->pack_down(down, dst);
    }
    if (st) return moe_error_context(st, "expert %d down: ", expert_id(g, e));
    return MOE_OK;
}

void moe_expert_group_free(moe_expert_group *g)
{
    if (!g) return;
    moe_free(g->packed);
    g->packed = NULL;
}
