/* test_layer_numeric.c — every family's layer against a float64 reference from the checkpoint. */
#include "layer_fixture.h"

/* One worker: the thread count changes no bit (test_layer_invariance), and a second worker
 * would only spin while this test computes its reference. */
enum { T = 32, THREADS = 1 };

/* The reference of one layer: everything read back from the checkpoint, in double. */
typedef struct ref_layer {
    const moe_layer_desc *ld;
    int index;
    int64_t h;
    int e, k;
    double *router_w; /* [E][H] */
    double *router_b; /* [E] or NULL */
    float *cbias;     /* [E] or NULL */
    const moe_tensor *table;
    fx_mlp *experts;
    fx_mlp shared, dense;
    bool has_shared;
    double *shared_gate; /* [H]: the shared output × sigmoid(x · shared_gate), or NULL */
    int resident; /* 0, or R: a layer created with moe_layer_tuning.resident_experts = R, whose
                     batch's i-th expert (ascending ids) computes with expert i % R's weights */
    int *copy_of; /* with resident: [E] the weights each expert of the batch computes with */
    /* MLP outputs already computed, per input kind (f32, bf16-rounded): [T][E + 1][H], slot
     * E for the always-on MLP; done[][][] says which. The levels and recipes share them. */
    double *memo[2];
    bool *done[2];
} ref_layer;

/* mlp_e(x_t) for input kind KIND, computed once (e = -1: the shared or dense MLP). */
static const double *ref_mlp_out(ref_layer *r, int kind, size_t t, int e, const double *x)
{
    if (e >= 0 && r->resident) e = r->copy_of[e]; /* the memo holds each weight set's output */
    const size_t slots = (size_t)r->e + 1, h = (size_t)r->h;
    const size_t slot = e < 0 ? (size_t)r->e : (size_t)e;
    if (!r->memo[kind]) {
        r->memo[kind] = calloc(T * slots * h, sizeof(double));
        r->done[kind] = calloc(T * slots, sizeof(bool));
        REQUIRE(r->memo[kind] && r->done[kind]);
    }
    double *y = r->memo[kind] + (t * slots + slot) * h;
    if (!r->done[kind][t * slots + slot]) {
        const fx_mlp *m = e >= 0 ? &r->experts[e] : r->has_shared ? &r->shared : &r->dense;
        fx_mlp_apply(m, x, 1.0, y);
        r->done[kind][t * slots + slot] = true;
    }
    return y;
}

static void ref_load(const moe_model *m, int layer, ref_layer *r)
{
    const moe_model_desc *d = moe_model_desc_of(m);
    memset(r, 0, sizeof *r);
    r->ld = &d->layers[layer];
    r->index = layer;
    r->h = d->hidden;
    if (r->ld->kind == MOE_LAYER_DENSE) {
        fx_mlp_load(m, layer, MOE_GROUP_DENSE, -1, &r->dense);
        return;
    }
    r->e = r->ld->routing.n_experts;
    r->k = r->ld->routing.top_k;
    const moe_tensor *w = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_ROUTER_WEIGHT);
    REQUIRE(w);
    r->router_w = fx_alloc(r->e * r->h);
    for (int64_t i = 0; i < r->e * r->h; i++)
        r->router_w[i] = fx_decode(w, (uint64_t)i);
    const moe_tensor *b = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_ROUTER_BIAS);
    if (b) {
        r->router_b = fx_alloc(r->e);
        for (int i = 0; i < r->e; i++)
            r->router_b[i] = fx_decode(b, (uint64_t)i);
    }
    const moe_tensor *cb = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_CORRECTION_BIAS);
    if (cb) {
        r->cbias = malloc((size_t)r->e * sizeof *r->cbias);
        REQUIRE(r->cbias);
        for (int i = 0; i < r->e; i++)
            r->cbias[i] = (float)fx_decode(cb, (uint64_t)i);
    }
    r->table = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_TID2EID);
    r->experts = calloc((size_t)r->e, sizeof *r->experts);
    REQUIRE(r->experts);
    for (int x = 0; x < r->e; x++)
        fx_mlp_load(m, layer, MOE_GROUP_ROUTED, x, &r->experts[x]);
    r->has_shared = r->ld->n_shared > 0;
    if (r->has_shared) fx_mlp_load(m, layer, MOE_GROUP_SHARED, -1, &r->shared);
    const moe_tensor *sg = fx_find(m, layer, MOE_GROUP_SHARED, -1, MOE_ROLE_SHARED_GATE);
    CHECK((sg != NULL) == r->ld->shared_gate);
    if (sg) {
        r->shared_gate = fx_alloc(r->h);
        for (int64_t c = 0; c < r->h; c++)
            r->shared_gate[c] = fx_decode(sg, (uint64_t)c);
    }
}

static void ref_free(ref_layer *r)
{
    for (int kind = 0; kind < 2; kind++) {
        free(r->memo[kind]);
        free(r->done[kind]);
    }
    free(r->router_w);
    free(r->router_b);
    free(r->cbias);
    free(r->shared_gate);
    for (int x = 0; x < r->e; x++)
        fx_mlp_free(&r->experts[x]);
    free(r->experts);
    if (r->has_shared) fx_mlp_free(&r->shared);
    if (r->ld->kind == MOE_LAYER_DENSE) fx_mlp_free(&r->dense);
}

typedef struct stats {
    double logit_err;  /* max |Δ| / Σ|x·w| */
    double weight_err; /* max |Δ| / |w| */
    double err2, norm2;
    int ties;
} stats;

/* Checks one token's logits, ids and weights; returns the ids and weights the block output
 * reference uses (the oracle's, or the layer's at a true near-tie). */
static void check_routing(const ref_layer *r, size_t t, const double *x, const float *logits,
                          const int32_t *ids, const float *w, int64_t token, int *use_ids,
                          double *use_w, stats *s, const char *what)
{
    for (int e = 0; e < r->e; e++) {
        double z = r->router_b ? r->router_b[e] : 0, mag = r->router_b ? fabs(r->router_b[e]) : 0;
        for (int64_t c = 0; c < r->h; c++) {
            z += x[c] * r->router_w[e * r->h + c];
            mag += fabs(x[c] * r->router_w[e * r->h + c]);
        }
        const double err = fabs(logits[e] - z) / mag;
        s->logit_err = err > s->logit_err ? err : s->logit_err;
        CHECKF(err <= 1e-5, "%s: token %zu logit %d = %.9g, reference %.9g", what, t, e,
               (double)logits[e], z);
    }
    const route_cfg c = fx_route_cfg(&r->ld->routing);
    int32_t row[64];
    if (r->table)
        for (int j = 0; j < r->k; j++)
            row[j] = (int32_t)fx_decode(r->table, (uint64_t)(token * r->k + j));
    oracle_row *o = malloc(sizeof *o);
    REQUIRE(o);
    oracle_route_floor(&c, r->ld->routing.renorm_min, logits, r->cbias, row, o);
    bool same = true;
    for (int j = 0; j < r->k; j++)
        same &= ids[j] == o->ids[j];
    const bool tie = !same && o_near_tie(r->k, r->e, o);
    CHECKF(same || tie, "%s: token %zu ids differ from the oracle's (slot 0: %d vs %d)", what, t,
           ids[0], o->ids[0]);
    s->ties += tie;
    for (int j = 0; j < r->k; j++) {
        if (same) {
            const double err = fabs(w[j] - o->w[j]) / fmax(fabs(o->w[j]), 1e-3);
            s->weight_err = err > s->weight_err ? err : s->weight_err;
            CHECKF(err <= 1e-5, "%s: token %zu weight %d = %.9g, oracle %.9g", what, t, j,
                   (double)w[j], o->w[j]);
        }
        use_ids[j] = same ? o->ids[j] : ids[j];
        use_w[j] = same ? o->w[j] : w[j];
    }
    free(o);
}

/* Checks a forward of T tokens of X (the values the layer saw: KIND 0 the f32 input, 1 the
 * same rounded to bf16) against the reference. */
static void check_forward(ref_layer *r, int kind, const float *x, const int32_t *tokens,
                          const float *logits, const int32_t *ids, const float *w, const float *out,
                          stats *s, const char *what)
{
    const size_t h = (size_t)r->h;
    double *xd = fx_alloc(r->h), *y = fx_alloc(r->h);
    for (size_t t = 0; t < T; t++) {
        for (size_t c = 0; c < h; c++) {
            xd[c] = x[t * h + c];
            y[c] = 0;
        }
        if (r->ld->kind != MOE_LAYER_DENSE) {
            int use_ids[64];
            double use_w[64];
            const size_t k = (size_t)r->k;
            check_routing(r, t, xd, logits + t * (size_t)r->e, ids + t * k, w + t * k,
                          tokens ? tokens[t] : 0, use_ids, use_w, s, what);
            for (size_t j = 0; j < k; j++) {
                if (r->ld->scale_input) { /* Llama-4: mlp(x · w), added with weight 1 */
                    double *xs = fx_alloc(r->h);
                    for (size_t c = 0; c < h; c++)
                        xs[c] = xd[c] * use_w[j];
                    const int id = r->resident ? r->copy_of[use_ids[j]] : use_ids[j];
                    fx_mlp_apply(&r->experts[id], xs, 1.0, y);
                    free(xs);
                    continue;
                }
                const double *ye = ref_mlp_out(r, kind, t, use_ids[j], xd);
                for (size_t c = 0; c < h; c++)
                    y[c] += use_w[j] * ye[c];
            }
        }
        if (r->has_shared || r->ld->kind == MOE_LAYER_DENSE) {
            const double *ya = ref_mlp_out(r, kind, t, -1, xd);
            double gate = 1.0; /* transformers: sigmoid(shared_expert_gate(x)) * shared_expert(x) */
            if (r->shared_gate) {
                double z = 0;
                for (size_t c = 0; c < h; c++)
                    z += xd[c] * r->shared_gate[c];
                gate = 1.0 / (1.0 + exp(-z));
            }
            for (size_t c = 0; c < h; c++)
                y[c] += gate * ya[c];
        }
        for (size_t c = 0; c < h; c++) {
            s->err2 += (out[t * h + c] - y[c]) * (out[t * h + c] - y[c]);
            s->norm2 += y[c] * y[c];
        }
    }
    free(xd);
    free(y);
}

/* ---- The trace ------------------------------------------------------------------------------- */

static bool has_any(const char *s, const char *const *needles)
{
    for (; *needles; needles++)
        if (strstr(s, *needles)) return true;
    return false;
}

static const moe_trace_step *step_named(const moe_trace *tr, const char *name)
{
    for (size_t i = 0; i < tr->count; i++)
        if (!strcmp(tr->steps[i].name, name)) return &tr->steps[i];
    return NULL;
}

/* The bytes a GEMM step of group G may read besides the packed weights of the experts it ran:
 * its activation rows (Q8: prepared rows; the prepare_h step between reads h and writes the
 * prepared h rows, and no weight). */
static void check_gemm(const moe_trace *tr, const char *prefix, const moe_expert_group *g,
                       uint64_t n_used, uint64_t rows, uint64_t *weights, const char *what)
{
    char name[32];
    snprintf(name, sizeof name, "%s.gate_up", prefix);
    const moe_trace_step *s = step_named(tr, name);
    REQUIRE(s);
    const uint64_t hb = g->x_row_bytes, ib = (uint64_t)g->inter * g->act_elem;
    const bool q8 = g->ks->recipe == MOE_RECIPE_Q8;
    CHECKF(hb == (q8 ? g->ks->act_row_bytes(g->hidden) : (uint64_t)g->hidden * g->act_elem),
           "%s: %s input rows of %llu bytes", what, name, (unsigned long long)hb);
    CHECKF(s->bytes_read == n_used * g->gateup_bytes + rows * hb && s->bytes_written == rows * ib,
           "%s: %s reads %llu bytes, writes %llu", what, name, (unsigned long long)s->bytes_read,
           (unsigned long long)s->bytes_written);
    *weights += s->bytes_read - rows * hb;
    const uint64_t db = q8 ? g->hq_row_bytes : ib;
    if (q8) {
        snprintf(name, sizeof name, "%s.prepare_h", prefix);
        s = step_named(tr, name);
        REQUIRE(s);
        CHECKF(db == g->ks->act_row_bytes(g->inter) && s->bytes_read == rows * ib &&
                   s->bytes_written == rows * db,
               "%s: %s reads %llu bytes, writes %llu", what, name,
               (unsigned long long)s->bytes_read, (unsigned long long)s->bytes_written);
    }
    snprintf(name, sizeof name, "%s.down", prefix);
    s = step_named(tr, name);
    REQUIRE(s);
    CHECKF(s->bytes_read == n_used * g->down_bytes + rows * db &&
               s->bytes_written == rows * (uint64_t)g->hidden * 4,
           "%s: %s reads %llu bytes", what, name, (unsigned long long)s->bytes_read);
    *weights += s->bytes_read - rows * db;
}

/* The steps are exactly the expected ones; no step but the activations' converts anything;
 * the GEMM steps read exactly the packed bytes of the experts the tokens used, plus their
 * activation rows; nothing else reads a weight. */
static void check_trace(const moe_layer *l, const moe_trace *tr, moe_dtype in, const int32_t *ids,
                        const char *what)
{
    const moe_layer_plan *p = &l->plan;
    const uint64_t h = (uint64_t)p->desc->hidden, inb = in == MOE_DTYPE_BF16 ? 2 : 4;
    const char *want[16];
    size_t n = 0;
    want[n++] = "threads";
    want[n++] = "activations";
    if (p->ld->shared_gate) want[n++] = "shared_gate";
    if (p->moe) {
        static const char *const moe_steps[] = {"gate", "route", "plan", "experts.gate_up"};
        for (size_t i = 0; i < 4; i++)
            want[n++] = moe_steps[i];
        if (l->routed->scale_input) {
            /* Llama-4: the routed rows' scaled input, in row order, before gate/up */
            const char *gu = want[--n];
            want[n++] = "experts.scale_input";
            want[n++] = gu;
        } else if (l->routed->ks->recipe == MOE_RECIPE_TILE) {
            /* the routed rows copied in row order before gate/up (src/experts/engine.c) */
            const char *gu = want[--n];
            want[n++] = "experts.gather";
            want[n++] = gu;
        }
        if (l->routed->ks->recipe == MOE_RECIPE_Q8) want[n++] = "experts.prepare_h";
        want[n++] = "experts.down";
        if (l->always) {
            want[n++] = "shared.gate_up";
            if (l->always->ks->recipe == MOE_RECIPE_Q8) want[n++] = "shared.prepare_h";
            want[n++] = "shared.down";
        }
        want[n++] = "combine";
    } else {
        want[n++] = "dense.gate_up";
        if (l->always->ks->recipe == MOE_RECIPE_Q8) want[n++] = "dense.prepare_h";
        want[n++] = "dense.down";
    }
    CHECKF(tr->count == n, "%s: %zu trace steps, expected %zu", what, tr->count, n);
    for (size_t i = 0; i < n && i < tr->count; i++)
        CHECKF(!strcmp(tr->steps[i].name, want[i]), "%s: step %zu is '%s', expected '%s'", what, i,
               tr->steps[i].name, want[i]);
    static const char *const convert[] = {"cvt", "convert", "cast", "quant", NULL};
    for (size_t i = 0; i < tr->count; i++) {
        const moe_trace_step *s = &tr->steps[i];
        const bool act = !strcmp(s->name, "activations");
        CHECKF(act || (!has_any(s->name, convert) && !has_any(s->kernel, convert)),
               "%s: step '%s' runs '%s'", what, s->name, s->kernel);
    }
    /* The activations step reads the hidden rows (no more: no weight), once, and writes the
     * rows of each recipe that does not read them in place. */
    const moe_trace_step *a = step_named(tr, "activations");
    REQUIRE(a);
    const bool converts = a->bytes_written > 0;
    const moe_expert_group *q8 = moe_layer_q8_group(p);
    const bool widen = in == MOE_DTYPE_BF16 &&
                       (p->recipe_used[MOE_RECIPE_F32] || q8 || (p->moe && p->ld->scale_input));
    const bool round =
        in == MOE_DTYPE_F32 && (p->recipe_used[MOE_RECIPE_BF16] || p->recipe_used[MOE_RECIPE_TILE]);
    const uint64_t written = (widen   ? T * h * 4
                              : round ? T * h * 2
                                      : 0) +
                             (q8 ? T * (uint64_t)q8->x_row_bytes : 0);
    CHECKF(a->bytes_written == written, "%s: activations write %llu bytes, expected %llu", what,
           (unsigned long long)a->bytes_written, (unsigned long long)written);
    CHECKF(a->bytes_read == (converts ? T * h * inb : 0), "%s: activations read %llu bytes", what,
           (unsigned long long)a->bytes_read);
    uint64_t weights = 0, want_weights = 0;
    if (p->moe) {
        const moe_trace_step *g = step_named(tr, "gate");
        REQUIRE(g);
        CHECKF(g->bytes_read == p->gate_bytes + T * h * inb, "%s: gate reads %llu bytes", what,
               (unsigned long long)g->bytes_read);
        weights += g->bytes_read - T * h * inb;
        want_weights += p->gate_bytes;
        if (p->ld->shared_gate) { /* its f32 weight [H] and the hidden rows; one f32 per token */
            const moe_trace_step *sg = step_named(tr, "shared_gate");
            REQUIRE(sg);
            CHECKF(sg->bytes_read == h * 4 + T * h * inb && sg->bytes_written == T * 4,
                   "%s: shared_gate reads %llu bytes, writes %llu", what,
                   (unsigned long long)sg->bytes_read, (unsigned long long)sg->bytes_written);
            weights += sg->bytes_read - T * h * inb;
            want_weights += h * 4;
        }
        bool used[4096] = {false};
        uint64_t n_used = 0;
        const size_t k = (size_t)p->ld->routing.top_k;
        for (size_t i = 0; i < T * k; i++)
            if (!used[ids[i]]) {
                used[ids[i]] = true;
                n_used++;
            }
        check_gemm(tr, "experts", l->routed, n_used, T * k, &weights, what);
        want_weights += n_used * (l->routed->gateup_bytes + l->routed->down_bytes);
        if (l->always) {
            check_gemm(tr, "shared", l->always, 1, T, &weights, what);
            want_weights += l->always->gateup_bytes + l->always->down_bytes;
        }
    } else {
        check_gemm(tr, "dense", l->always, 1, T, &weights, what);
        want_weights += l->always->gateup_bytes + l->always->down_bytes;
    }
    CHECKF(weights == want_weights,
           "%s: the steps read %llu weight bytes, the used experts hold "
           "%llu",
           what, (unsigned long long)weights, (unsigned long long)want_weights);
}

/* ---- One case -------------------------------------------------------------------------------- */

static void run_level(const moe_model *m, ref_layer *r, const fam_case *fc,
                      const moe_cpu_caps *caps, const char *level, int recipe, bool bf16_input,
                      int resident, const float *x, const int32_t *tokens)
{
    const moe_layer_options opts = fx_options(THREADS, recipe);
    const moe_layer_tuning tune = {caps, resident};
    moe_layer *l = NULL;
    char what[160];
    snprintf(what, sizeof what, "%s layer %d at %s, %s recipe asked%s", fc->name, r->index, level,
             fx_recipe_name(recipe), resident ? ", experts aliased" : "");
    r->resident = resident;
    moe_status st = moe_layer_create_tuned(m, r->index, &opts, &tune, &l);
    CHECKF(st == MOE_OK, "%s: create: %s", what, moe_last_error());
    if (st) return;
    char *desc = NULL;
    CHECK_STATUS(moe_layer_describe_tuned(m, r->index, &opts, &tune, &desc), MOE_OK);
    CHECKF(desc && !strcmp(desc, moe_layer_explain(l)),
           "%s: explain and describe differ:\n%s\n--\n%s", what, moe_layer_explain(l),
           desc ? desc : "(null)");
    moe_free(desc);

    const size_t h = (size_t)r->h, e = (size_t)(r->e ? r->e : 1), k = (size_t)(r->k ? r->k : 1);
    float *logits = malloc(T * e * 4), *w = malloc(T * k * 4), *out = malloc(T * h * 4);
    float *xr = malloc(T * h * 4);
    int32_t *ids = malloc(T * k * 4);
    uint16_t *xb = malloc(T * h * 2);
    moe_trace *trace = malloc(sizeof *trace);
    REQUIRE(logits && w && out && xr && ids && xb && trace);
    size_t ws_size;
    void *ws = fx_workspace(l, T, &ws_size);
    for (int pass = 0; pass < (bf16_input ? 2 : 1); pass++) {
        /* Pass 0: f32 hidden states; pass 1: the same rounded to bf16, given as bf16. */
        const bool bf16 = pass == 1;
        for (size_t i = 0; i < T * h; i++) {
            xb[i] = moe_f32_to_bf16(x[i]);
            xr[i] = bf16 ? moe_bf16_to_f32(xb[i]) : x[i];
        }
        moe_forward_args a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.n_tokens = T;
        a.hidden_size = h;
        a.hidden = bf16 ? (const void *)xb : (const void *)x;
        a.hidden_dtype = bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
        a.token_ids = tokens;
        a.token_id_dtype = MOE_DTYPE_I32;
        a.out = out;
        a.logits_out = logits;
        a.ids_out = ids;
        a.weights_out = w;
        a.workspace = ws;
        a.workspace_size = ws_size;
        a.trace = trace;
        st = moe_layer_forward(l, &a);
        CHECKF(st == MOE_OK, "%s: forward: %s", what, moe_last_error());
        if (st) continue;
        if (resident) {
            /* Only R experts packed, and the routing reached the aliased ones. */
            const moe_expert_group *g = l->routed;
            CHECKF(g->n_packed == resident &&
                       g->packed_bytes == (size_t)resident * g->expert_stride,
                   "%s: %d experts packed, %zu bytes", what, g->n_packed, g->packed_bytes);
            CHECKF(strstr(moe_layer_explain(l), "resident: experts 0 .. ") != NULL,
                   "%s: explain does not say so", what);
            size_t beyond = 0;
            for (size_t i = 0; i < T * k; i++)
                beyond += ids[i] >= resident;
            CHECKF(beyond > 0, "%s: no token routed to an expert beyond %d", what, resident);
            /* The batch's experts in ascending order, i-th on copy i % R. */
            r->copy_of = malloc((size_t)r->e * sizeof *r->copy_of);
            REQUIRE(r->copy_of);
            for (int ex = 0, rank = 0; ex < r->e; ex++) {
                bool used = false;
                for (size_t i = 0; i < T * k; i++)
                    used |= ids[i] == ex;
                r->copy_of[ex] = used ? rank++ % resident : ex % resident;
            }
        }
        stats s = {0, 0, 0, 0, 0};
        check_forward(r, pass, xr, tokens, logits, ids, w, out, &s, what);
        free(r->copy_of);
        r->copy_of = NULL;
        const double rel = sqrt(s.err2 / s.norm2);
        const moe_expert_group *g0 = l->routed ? l->routed : l->always;
        const char *rname = fx_recipe_name(g0->ks->recipe);
        /* MXFP4 groups run the tile recipe when it is asked (the fixtures' scales, 2^-8 ..
         * 2^-6, fold into bf16) and Q8 otherwise, INT4 groups likewise (any finite scale), and
         * f32 / f16 groups theirs, F32; the others the asked one. */
        bool all_f32 = true;
        for (const moe_expert_group *g = g0; g; g = g == l->always ? NULL : l->always) {
            const int f = g->ks->format;
            all_f32 = all_f32 && f == MOE_EXPERT_FMT_F32;
            const bool tile = recipe == MOE_RECIPE_TILE;
            const bool q8 = (f == MOE_EXPERT_FMT_MXFP4 || f == MOE_EXPERT_FMT_INT4_GROUP) && !tile;
            CHECKF(g->ks->recipe == (q8                        ? MOE_RECIPE_Q8
                                     : f == MOE_EXPERT_FMT_F32 ? MOE_RECIPE_F32
                                                               : (moe_expert_recipe)recipe),
                   "%s: kernel set %s", what, g->ks->name);
        }
        /* f32 and f16 weights are used exactly with f32 activations: only the fp32 sums (and
         * the router's) separate the block from the float64 reference. */
        if (all_f32)
            CHECKF(rel <= 1e-5, "%s (%s input): f32-weight block error %.3g", what,
                   bf16 ? "bf16" : "f32", rel);
        /* docs/design.md: 1e-2 for bf16 (or f32) activations, 2e-2 where they are quantised per
         * 32-block to int8 (the Q8 recipe of MXFP4 and INT4 groups). */
        const bool q8 = moe_layer_q8_group(&l->plan) != NULL;
        CHECKF(rel <= (q8 ? 2e-2 : 1e-2),
               "%s (%s input): block output relative Frobenius error %.3g", what,
               bf16 ? "bf16" : "f32", rel);
        fprintf(stderr,
                "%-16s layer %d %-10s %s input, recipe %s: logits %.2g, weights %.2g, output "
                "%.3g (near-ties %d)\n",
                fc->name, r->index, level, bf16 ? "bf16" : "f32", rname, s.logit_err, s.weight_err,
                rel, s.ties);
        check_trace(l, trace, a.hidden_dtype, ids, what);
    }
    free(ws);
    free(logits);
    free(w);
    free(out);
    free(xr);
    free(ids);
    free(xb);
    free(trace);
    moe_layer_destroy(l);
    r->resident = 0;
}

static void run_case(const fam_case *fc, const char *dir, uint64_t seed, bool every_level,
                     moe_dtype weights_as)
{
    fx_write_model_full(dir, fc->config, seed, NULL, NULL, weights_as);
    moe_model *m = fx_open(dir, false);
    if (weights_as) { /* the format follows the stored dtype, in every group */
        const moe_model_desc *d = moe_model_desc_of(m);
        const moe_weight_format want = weights_as == MOE_DTYPE_F32 ? MOE_WFMT_F32 : MOE_WFMT_F16;
        for (int i = 0; i < d->n_layers; i++) {
            const moe_layer_desc *ld = &d->layers[i];
            CHECK(ld->kind == MOE_LAYER_DENSE
                      ? ld->dense.format == want
                      : ld->experts.format == want &&
                            (ld->n_shared == 0 || ld->shared.format == want));
        }
    }
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    const int layers[2] = {fc->moe_layer, fc->other_layer};
    for (int li = 0; li < 2; li++) {
        if (layers[li] < 0) continue;
        ref_layer r;
        ref_load(m, layers[li], &r);
        float *x = malloc(T * (size_t)r.h * sizeof *x);
        int32_t tokens[T];
        REQUIRE(x);
        fx_hidden(seed + (uint64_t)li, T * (size_t)r.h, x);
        for (int t = 0; t < T; t++)
            tokens[t] = (t * 37 + 5) % 1000;
        /* Both recipes and both input dtypes at the machine's best level for every family;
         * the lower levels (down to the reference kernels) with f32 input for one bf16 and
         * one FP8 family, which keeps the test fast while every layout reaches every kernel
         * set. */
        for (size_t i = every_level ? 0 : n_levels - 1; i < n_levels; i++) {
            const bool best = i + 1 == n_levels;
            run_level(m, &r, fc, &caps[i], names[i], MOE_RECIPE_F32, best, 0, x, tokens);
            if (i == 0 || best || !strcmp(names[i], "avx512") || !strcmp(names[i], "avx2")) {
                run_level(m, &r, fc, &caps[i], names[i], MOE_RECIPE_BF16, best, 0, x, tokens);
                run_level(m, &r, fc, &caps[i], names[i], MOE_RECIPE_TILE, best, 0, x, tokens);
            }
        }
        /* moe bench's aliased layer (per-expert and stacked tensors): 5 experts packed, the
         * batch's i-th expert computed with expert i % 5's weights. */
        if (every_level && li == 0)
            run_level(m, &r, fc, &caps[n_levels - 1], names[n_levels - 1], MOE_RECIPE_F32, false, 5,
                      x, tokens);
        free(x);
        ref_free(&r);
    }
    moe_model_close(m);
    fx_remove_model(dir);
}

/* The tile recipe on FP8 experts: DeepSeek-V3 FP8's MoE layer (routed and shared groups) and
 * its dense layer are created with the FP8 tile sets, and describe names them. */
static void test_tile_fp8_sets(const char *dir)
{
    const fam_case *fc = &fam_cases[2];
    REQUIRE(!strcmp(fc->name, "deepseek_v3_fp8"));
    fx_write_model(dir, fc->config, 4000);
    moe_model *m = fx_open(dir, false);
    const moe_layer_options opts = fx_options(THREADS, MOE_RECIPE_TILE);
    for (int li = 0; li < 2; li++) {
        const int layer = li ? fc->other_layer : fc->moe_layer;
        moe_layer *l = NULL;
        CHECKF(moe_layer_create(m, layer, &opts, &l) == MOE_OK && l != NULL, "layer %d: '%s'",
               layer, moe_last_error());
        moe_layer_destroy(l);
        char *desc = NULL;
        CHECK_STATUS(moe_layer_describe(m, layer, &opts, &desc), MOE_OK);
        CHECKF(desc && strstr(desc, "moe_expert_fp8_tile_") &&
                   !strstr(desc, "moe_expert_fp8_f32_") && !strstr(desc, "moe_expert_fp8_bf16_"),
               "layer %d: describe '%s'", layer, desc ? desc : "(null)");
        moe_free(desc);
    }
    moe_model_close(m);
    fx_remove_model(dir);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_numeric_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    test_tile_fp8_sets(dir);
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const char *name = fam_cases[i].name;
        run_case(&fam_cases[i], dir, 1000 + i,
                 !strcmp(name, "deepseek_v3_fp8") || !strcmp(name, "gpt_oss") ||
                     strstr(name, "mxfp4") || strstr(name, "int4") ||
                     !strcmp(name, "minimax_m2_fp8") || !strcmp(name, "kimi_k25") ||
                     !strcmp(name, "qwen3_next") || !strcmp(name, "llama4") ||
                     !strcmp(name, "ernie4_5_moe"),
                 0);
        /* Unquantised checkpoints saved in f32 and f16 (dense, shared and routed groups; gpt-oss
         * with its stacked, transposed tensors and biases), at every level. */
        if (!strcmp(name, "deepseek_v3") || !strcmp(name, "gpt_oss")) {
            run_case(&fam_cases[i], dir, 2000 + i, true, MOE_DTYPE_F32);
            run_case(&fam_cases[i], dir, 3000 + i, true, MOE_DTYPE_F16);
        }
    }
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
