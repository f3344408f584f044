/* layer_sources.c — each expert's projections as kernel weight sources, read in place by strides.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "layer/layer_internal.h"

/* bf16 or FP8 [out, in], row-major, with its 128×128 block scales when the format has them. */
static moe_weight_src proj_src(const moe_tensor *w, const moe_tensor *scale, const moe_mlp_desc *m,
                               int64_t rows, int64_t cols)
{
    moe_weight_src s;
    memset(&s, 0, sizeof s);
    s.data = w->data;
    s.dtype = w->dtype;
    s.rows = rows;
    s.cols = cols;
    s.row_stride = cols;
    s.col_stride = 1;
    if (scale) {
        s.scale = scale->data;
        s.scale_dtype = scale->dtype == MOE_DTYPE_U8 ? MOE_DTYPE_F8_E8M0 : scale->dtype;
        s.block_rows = m->block_out;
        s.block_cols = m->block_in;
    }
    return s;
}

/* MXFP4 [out, in]: rows of in/2 code bytes (row_stride in bytes) starting at CODES, and rows
 * of in/32 E8M0 bytes starting at SCALES; the strides of whole rows, ready to be doubled for
 * gpt-oss's interleaved gate/up. */
static moe_weight_src mx_src(const moe_tensor *w, const unsigned char *codes, const moe_tensor *s,
                             const unsigned char *scales, int64_t rows, int64_t cols)
{
    moe_weight_src r;
    memset(&r, 0, sizeof r);
    r.data = codes;
    r.dtype = w->dtype;
    r.rows = rows;
    r.cols = cols;
    r.row_stride = cols / 2;
    r.col_stride = 1;
    r.scale = scales;
    r.scale_dtype = s->dtype == MOE_DTYPE_U8 ? MOE_DTYPE_F8_E8M0 : s->dtype;
    r.block_rows = 1;
    r.block_cols = MOE_EXPERT_MXBLOCK;
    r.scale_stride = cols / MOE_EXPERT_MXBLOCK;
    return r;
}

/* gpt-oss biases [E, 2I] (gate j at 2j, up j at 2j + 1) and [E, H], when present. */
static void stacked_biases(const moe_layer_group_plan *g, int e, moe_weight_src *gate,
                           moe_weight_src *up, moe_weight_src *down)
{
    const int64_t h = g->mlp.hidden, i = g->mlp.intermediate;
    const moe_tensor *gub = g->one[MOE_ROLE_GATE_UP_BIAS], *db = g->one[MOE_ROLE_DOWN_BIAS];
    const size_t bb = moe_dtype_bits(g->bias_dtype) / 8;
    if (gub) {
        const unsigned char *b =
            (const unsigned char *)gub->data + (size_t)((int64_t)e * 2 * i) * bb;
        gate->bias = b;
        up->bias = b + bb;
        gate->bias_dtype = up->bias_dtype = gub->dtype;
        gate->bias_stride = up->bias_stride = 2;
    }
    if (db) {
        down->bias = (const unsigned char *)db->data + (size_t)((int64_t)e * h) * bb;
        down->bias_dtype = db->dtype;
        down->bias_stride = 1;
    }
}

/* gpt-oss in HF's bf16 layout: gate_up_proj [E, H, 2I] with gate j in column 2j and up j in
 * column 2j + 1, down_proj [E, I, H]; Llama-4 the same with gate j in column j and up j in
 * column I + j (gate_up_halves). Strides read each expert's [out, in] projections in place. */
static void stacked_bf16(const moe_layer_group_plan *g, int e, moe_weight_src *gate,
                         moe_weight_src *up, moe_weight_src *down)
{
    const int64_t h = g->mlp.hidden, i = g->mlp.intermediate;
    const moe_tensor *gu = g->one[MOE_ROLE_GATE_UP], *dn = g->one[MOE_ROLE_DOWN];
    const size_t wb = moe_dtype_bits(gu->dtype) / 8;
    const unsigned char *gu_e = (const unsigned char *)gu->data + (size_t)(e * h * 2 * i) * wb;
    *gate = proj_src(gu, NULL, &g->mlp, i, h);
    gate->data = gu_e;
    gate->row_stride = g->gate_up_halves ? 1 : 2;
    gate->col_stride = 2 * i;
    *up = *gate;
    up->data = gu_e + (g->gate_up_halves ? (size_t)i * wb : wb);
    *down = proj_src(dn, NULL, &g->mlp, h, i);
    down->data = (const unsigned char *)dn->data + (size_t)(e * i * h) * wb;
    down->row_stride = 1;
    down->col_stride = h;
}

/* gpt-oss in its MXFP4 layout: gate_up_proj_blocks [E, 2I, H/32, 16] and _scales [E, 2I, H/32]
 * with gate j in row 2j and up j in row 2j + 1, so gate reads every other row from row 0 and
 * up from row 1 (doubled strides); down_proj_blocks [E, H, I/32, 16] and _scales [E, H, I/32]
 * are plain rows. */
static void stacked_mxfp4(const moe_layer_group_plan *g, int e, moe_weight_src *gate,
                          moe_weight_src *up, moe_weight_src *down)
{
    const int64_t h = g->mlp.hidden, i = g->mlp.intermediate;
    const moe_tensor *gu = g->one[MOE_ROLE_GATE_UP], *gus = g->one[MOE_ROLE_GATE_UP_SCALE];
    const moe_tensor *dn = g->one[MOE_ROLE_DOWN], *dns = g->one[MOE_ROLE_DOWN_SCALE];
    const int64_t hb = h / 2, hs = h / MOE_EXPERT_MXBLOCK;
    const unsigned char *codes = (const unsigned char *)gu->data + (size_t)(e * 2 * i * hb);
    const unsigned char *scales = (const unsigned char *)gus->data + (size_t)(e * 2 * i * hs);
    *gate = mx_src(gu, codes, gus, scales, i, h);
    gate->row_stride = 2 * hb;
    gate->scale_stride = 2 * hs;
    *up = *gate;
    up->data = codes + hb;
    up->scale = scales + hs;
    const int64_t ib = i / 2, is = i / MOE_EXPERT_MXBLOCK;
    *down = mx_src(dn, (const unsigned char *)dn->data + (size_t)(e * h * ib), dns,
                   (const unsigned char *)dns->data + (size_t)(e * h * is), h, i);
}

/* INT4 (compressed-tensors) [out, in]: weight_packed's int32 words as bytes, in/2 a row, and
 * the group scales [out, in/G] (scale_stride in elements). */
static moe_weight_src int4_src(const moe_tensor *w, const moe_tensor *s, const moe_mlp_desc *m,
                               int64_t rows, int64_t cols)
{
    moe_weight_src r;
    memset(&r, 0, sizeof r);
    r.data = w->data;
    r.dtype = w->dtype;
    r.rows = rows;
    r.cols = cols;
    r.row_stride = cols / 2;
    r.col_stride = 1;
    r.scale = s->data;
    r.scale_dtype = s->dtype;
    r.block_rows = 1;
    r.block_cols = m->block_in;
    r.scale_stride = cols / m->block_in;
    return r;
}

void moe_layer_sources(const moe_layer_group_plan *g, int e, moe_weight_src *gate,
                       moe_weight_src *up, moe_weight_src *down)
{
    const bool mx = g->mlp.format == MOE_WFMT_MXFP4;
    if (g->stacked) {
        if (mx)
            stacked_mxfp4(g, e, gate, up, down);
        else
            stacked_bf16(g, e, gate, up, down);
        stacked_biases(g, e, gate, up, down);
        return;
    }
    const moe_tensor *const *t = g->per_expert ? g->per_expert[e] : g->one;
    const int64_t h = g->mlp.hidden, i = g->mlp.intermediate;
    if (g->mlp.format == MOE_WFMT_INT4_GROUP) {
        *gate = int4_src(t[MOE_ROLE_GATE], t[MOE_ROLE_GATE_SCALE], &g->mlp, i, h);
        *up = int4_src(t[MOE_ROLE_UP], t[MOE_ROLE_UP_SCALE], &g->mlp, i, h);
        *down = int4_src(t[MOE_ROLE_DOWN], t[MOE_ROLE_DOWN_SCALE], &g->mlp, h, i);
        return;
    }
    if (mx) { /* DeepSeek-V4: w1/w3 [I, H/2] + .scale [I, H/32], w2 [H, I/2] + [H, I/32] */
        const moe_tensor *gs = t[MOE_ROLE_GATE_SCALE], *us = t[MOE_ROLE_UP_SCALE];
        const moe_tensor *ds = t[MOE_ROLE_DOWN_SCALE];
        *gate = mx_src(t[MOE_ROLE_GATE], t[MOE_ROLE_GATE]->data, gs, gs->data, i, h);
        *up = mx_src(t[MOE_ROLE_UP], t[MOE_ROLE_UP]->data, us, us->data, i, h);
        *down = mx_src(t[MOE_ROLE_DOWN], t[MOE_ROLE_DOWN]->data, ds, ds->data, h, i);
        return;
    }
    *gate = proj_src(t[MOE_ROLE_GATE], t[MOE_ROLE_GATE_SCALE], &g->mlp, i, h);
    *up = proj_src(t[MOE_ROLE_UP], t[MOE_ROLE_UP_SCALE], &g->mlp, i, h);
    *down = proj_src(t[MOE_ROLE_DOWN], t[MOE_ROLE_DOWN_SCALE], &g->mlp, h, i);
}

/* ---- MXFP4 scales ------------------------------------------------------------------------- */

/* The first 0xFF among COUNT scale bytes of T from element FIRST: MOE_EVALUE naming T and the
 * byte's index in T's own shape. */
static moe_status scan(const moe_tensor *t, int e, uint64_t first, uint64_t count)
{
    const unsigned char *p = (const unsigned char *)t->data + first;
    const unsigned char *bad = memchr(p, 0xFF, (size_t)count);
    if (!bad) return MOE_OK;
    uint64_t flat = first + (uint64_t)(bad - p);
    int64_t idx[MOE_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(flat % (uint64_t)t->shape[d]);
        flat /= (uint64_t)t->shape[d];
    }
    char at[160];
    size_t len = 0;
    at[0] = '\0';
    for (int d = 0; d < t->ndim && len < sizeof at; d++) {
        const int n =
            snprintf(at + len, sizeof at - len, "%s%lld", d ? ", " : "", (long long)idx[d]);
        if (n < 0) break;
        len += (size_t)n;
    }
    return moe_error(MOE_EVALUE,
                     "expert %d: tensor '%s' holds the E8M0 scale 0xFF (NaN) at [%s]; no MXFP4 "
                     "block scale may be NaN",
                     e, t->name, at);
}

/* ---- INT4: weight_shape values and finite scales ------------------------------------------ */

/* T's weight_shape [2] must say [ROWS, COLS]: the packed and scale shapes were checked
 * against the config at open, this is the third statement of the same shape. */
static moe_status check_shape_values(const moe_tensor *t, int e, int64_t rows, int64_t cols)
{
    int64_t v[2];
    for (int i = 0; i < 2; i++) {
        if (t->dtype == MOE_DTYPE_I64) {
            memcpy(&v[i], (const unsigned char *)t->data + 8 * i, 8);
        } else {
            int32_t w;
            memcpy(&w, (const unsigned char *)t->data + 4 * i, 4);
            v[i] = w;
        }
    }
    if (v[0] == rows && v[1] == cols) return MOE_OK;
    return moe_error(MOE_ESHAPE,
                     "expert %d: tensor '%s' says [%lld, %lld]; the config and weight_packed say "
                     "[%lld, %lld]",
                     e, t->name, (long long)v[0], (long long)v[1], (long long)rows,
                     (long long)cols);
}

/* The first NaN or infinite group scale of T (bf16, f16 or f32): MOE_EVALUE naming T and the
 * element. */
static moe_status check_finite_scales(const moe_tensor *t, int e)
{
    const unsigned char *p = t->data;
    for (uint64_t i = 0; i < t->count; i++) {
        bool bad;
        if (t->dtype == MOE_DTYPE_F32) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            bad = (u & 0x7F800000u) == 0x7F800000u;
        } else {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            bad = t->dtype == MOE_DTYPE_BF16 ? (u & 0x7F80u) == 0x7F80u : (u & 0x7C00u) == 0x7C00u;
        }
        if (bad) {
            const int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
            return moe_error(MOE_EVALUE,
                             "expert %d: tensor '%s' holds a %s group scale at [%lld, %lld]; "
                             "INT4 scales must be finite",
                             e, t->name, "NaN or infinite", (long long)((int64_t)i / cols),
                             (long long)((int64_t)i % cols));
        }
    }
    return MOE_OK;
}

static moe_status check_int4(const moe_layer_group_plan *g, int e)
{
    const moe_tensor *const *t = g->per_expert ? g->per_expert[e] : g->one;
    const int64_t h = g->mlp.hidden, i = g->mlp.intermediate;
    const moe_tensor_role shapes[3] = {MOE_ROLE_GATE_SHAPE, MOE_ROLE_UP_SHAPE, MOE_ROLE_DOWN_SHAPE};
    const moe_tensor_role scales[3] = {MOE_ROLE_GATE_SCALE, MOE_ROLE_UP_SCALE, MOE_ROLE_DOWN_SCALE};
    for (int p = 0; p < 3; p++) {
        moe_status st = check_shape_values(t[shapes[p]], e, p < 2 ? i : h, p < 2 ? h : i);
        if (!st) st = check_finite_scales(t[scales[p]], e);
        if (st) return st;
    }
    return MOE_OK;
}

moe_status moe_layer_check_scales(const moe_layer_group_plan *g, int e)
{
    if (g->mlp.format == MOE_WFMT_INT4_GROUP) return check_int4(g, e);
    if (g->mlp.format != MOE_WFMT_MXFP4) return MOE_OK;
    static const moe_tensor_role roles[] = {MOE_ROLE_GATE_SCALE, MOE_ROLE_UP_SCALE,
                                            MOE_ROLE_GATE_UP_SCALE, MOE_ROLE_DOWN_SCALE};
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
        moe_status st = MOE_OK;
        if (g->stacked) { /* expert e's slice of [E, rows, K/32] */
            const moe_tensor *t = g->one[roles[r]];
            if (!t) continue;
            const uint64_t per = t->count / (uint64_t)g->n;
            st = scan(t, e, (uint64_t)e * per, per);
        } else {
            const moe_tensor *t = g->per_expert ? g->per_expert[e][roles[r]] : g->one[roles[r]];
            if (t) st = scan(t, e, 0, t->count);
        }
        if (st) return st;
    }
    return MOE_OK;
}
