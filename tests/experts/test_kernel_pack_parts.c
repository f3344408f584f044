/* test_kernel_pack_parts.c — packing an expert in parts gives the whole pack's bytes and reports exactly the packed rows. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "select/kernel.h"
#include "experts/experts.h"
#include "moe.h"
#include "test.h"
#include "xorshift.h"

/* Rows that are no multiple of the part (256) nor of the FP8 scale block (128), so the last
 * part and the last scale block are partial; K a multiple of 32 for MXFP4. */
#define H 320
#define I 608

typedef struct set {
    const char *name;
    uint32_t isa;
    const moe_expert_kernels *ks;
} set;

static const set sets[] = {
#define MOE_KERNEL(name, isa, ref) {#name, isa, &name},
#include "kernels/expert_bf16_f32.inc"
#include "kernels/expert_bf16_bf16.inc"
#include "kernels/expert_fp8_f32.inc"
#include "kernels/expert_fp8_bf16.inc"
#include "kernels/expert_mxfp4_q8.inc"
#include "kernels/expert_f32_f32.inc"
#include "kernels/expert_bf16_tile.inc"
#include "kernels/expert_fp8_tile.inc"
#include "kernels/expert_mxfp4_tile.inc"
#undef MOE_KERNEL
};

/* ---- What DONE was told ---------------------------------------------------------------- */

#define MAX_SPANS 64
typedef struct spans {
    const unsigned char *lo[MAX_SPANS];
    size_t bytes[MAX_SPANS];
    int n;
} spans;

static void record(void *ctx, const void *lo, size_t bytes)
{
    spans *s = ctx;
    if (s->n < MAX_SPANS) {
        s->lo[s->n] = lo;
        s->bytes[s->n] = bytes;
    }
    s->n++;
}

/* The spans inside [base, base + size), as a coverage map: true where some span covered. */
static int covered(const spans *s, const unsigned char *base, size_t size, bool *map)
{
    int inside = 0;
    memset(map, 0, size);
    for (int i = 0; i < s->n && i < MAX_SPANS; i++) {
        if (s->lo[i] < base || s->lo[i] >= base + size) continue;
        inside++;
        CHECKF(s->bytes[i] <= size - (size_t)(s->lo[i] - base), "span %d runs past its buffer", i);
        for (size_t b = 0; b < s->bytes[i] && (size_t)(s->lo[i] - base) + b < size; b++)
            map[(size_t)(s->lo[i] - base) + b] = true;
    }
    return inside;
}

static bool all_true(const bool *map, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!map[i]) return false;
    return true;
}

/* ---- Random sources -------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void) { return (uint32_t)(xorshift64(&rng_state) >> 11); }

static void *fill(size_t bytes, int kind) /* 0 bf16 in [-2, 2), 1 E4M3 not NaN, 2 any byte,
                                             3 E8M0 in 120..135, 4 f32 scales in [0.5, 1.5) */
{
    unsigned char *p = malloc(bytes);
    REQUIRE(p);
    for (size_t i = 0; i < bytes;) {
        switch (kind) {
        case 0: {
            const float f = ((float)(rnd() % 4096) / 1024.0f) - 2.0f;
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t b = (uint16_t)(u >> 16);
            memcpy(p + i, &b, 2);
            i += 2;
            break;
        }
        case 1: {
            unsigned c = rnd() & 0xFF;
            p[i++] = (c & 0x7F) == 0x7F ? (unsigned char)(c & 0xF0) : (unsigned char)c;
            break;
        }
        case 2: p[i++] = (unsigned char)rnd(); break;
        case 3: p[i++] = (unsigned char)(120 + rnd() % 16); break;
        default: {
            const float f = 0.5f + (float)(rnd() % 1000) / 1000.0f;
            memcpy(p + i, &f, 4);
            i += 4;
        }
        }
    }
    return p;
}

/* A plain [rows, cols] source. */
static moe_weight_src plain(const void *data, moe_dtype dt, int64_t rows, int64_t cols)
{
    moe_weight_src s;
    memset(&s, 0, sizeof s);
    s.data = data;
    s.dtype = dt;
    s.rows = rows;
    s.cols = cols;
    s.row_stride = cols;
    s.col_stride = 1;
    return s;
}

static void fp8_scales(moe_weight_src *s, const void *scale)
{
    s->scale = scale;
    s->scale_dtype = MOE_DTYPE_F32;
    s->block_rows = s->block_cols = 128;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- One comparison -------------------------------------------------------------------- */

typedef struct expert_src {
    moe_weight_src gate, up, down;
} expert_src;

/* Packs E whole and in parts with KS; the bytes must agree. Returns the spans DONE got. */
static void compare(const set *st, const expert_src *e, const char *what, spans *got)
{
    const moe_act_params act = {0, 0, 0};
    moe_expert_group whole, parts;
    REQUIRE(moe_expert_group_plan(&whole, st->ks, 1, H, I, &act, "whole") == MOE_OK);
    REQUIRE(moe_expert_group_plan(&parts, st->ks, 1, H, I, &act, "parts") == MOE_OK);
    REQUIRE(moe_expert_group_alloc(&whole, "whole") == MOE_OK);
    REQUIRE(moe_expert_group_alloc(&parts, "parts") == MOE_OK);
    memset(whole.packed, 0xA5, whole.packed_bytes);
    memset(parts.packed, 0x5A, parts.packed_bytes);
    memset(got, 0, sizeof *got);
    CHECK_STATUS(moe_expert_group_pack(&whole, 0, &e->gate, &e->up, &e->down), MOE_OK);
    CHECK_STATUS(moe_expert_group_pack_parts(&parts, 0, &e->gate, &e->up, &e->down, record, got),
                 MOE_OK);
    /* The tiles themselves: the layout's padding past the tiles is not written by either. */
    const size_t gu = (size_t)cdiv(I, st->ks->nr) * parts.gateup_tile_bytes;
    const size_t dn = (size_t)cdiv(H, st->ks->nr) * parts.down_tile_bytes;
    CHECKF(!memcmp(whole.packed, parts.packed, gu), "%s %s: gate/up tiles differ", st->name, what);
    CHECKF(!memcmp(whole.packed + parts.gateup_bytes, parts.packed + parts.gateup_bytes, dn),
           "%s %s: down tiles differ", st->name, what);
    CHECKF(got->n <= MAX_SPANS, "%s %s: %d spans", st->name, what, got->n);
    moe_expert_group_free(&whole);
    moe_expert_group_free(&parts);
}

/* Spans inside [base, base + size) must be N and cover it exactly. */
static void check_cover(const spans *s, const void *base, size_t size, int n, const char *what)
{
    bool *map = malloc(size);
    REQUIRE(map);
    const int inside = covered(s, base, size, map);
    CHECKF(inside == n, "%s: %d spans, want %d", what, inside, n);
    CHECKF(all_true(map, size), "%s: the spans leave bytes uncovered", what);
    free(map);
}

/* Plain float weights of dtype dt (bf16; f32 or f16 for the f32 sets), es bytes each, filled
 * as kind (fill). */
static void test_plain(const set *st, moe_dtype dt, size_t es, int kind)
{
    unsigned char *g = fill((size_t)I * H * es, kind), *u = fill((size_t)I * H * es, kind),
                  *d = fill((size_t)H * I * es, kind);
    uint16_t *bias = fill((size_t)2 * I * 2, 0);
    expert_src e = {plain(g, dt, I, H), plain(u, dt, I, H), plain(d, dt, H, I)};
    e.gate.bias = bias;
    e.up.bias = bias + 1; /* interleaved biases, stride 2, as gpt-oss's */
    e.gate.bias_dtype = e.up.bias_dtype = MOE_DTYPE_BF16;
    e.gate.bias_stride = e.up.bias_stride = 2;
    spans s;
    compare(st, &e, moe_dtype_name(dt), &s);
    const int parts_i = (int)cdiv(I, 256), parts_h = (int)cdiv(H, 256);
    CHECKF(s.n == 2 * parts_i + parts_h, "%s: %d spans", st->name, s.n);
    check_cover(&s, g, (size_t)I * H * es, parts_i, "gate");
    check_cover(&s, u, (size_t)I * H * es, parts_i, "up");
    check_cover(&s, d, (size_t)H * I * es, parts_h, "down");

    /* Gate and up stored transposed ([H, I], col_stride I): no row runs, packed whole,
     * nothing reported for them; down still goes in parts. */
    expert_src t = e;
    t.gate.row_stride = t.up.row_stride = 1;
    t.gate.col_stride = t.up.col_stride = I;
    compare(st, &t, "transposed gate/up", &s);
    CHECKF(s.n == parts_h, "%s transposed: %d spans, want the %d of down", st->name, s.n, parts_h);
    check_cover(&s, d, (size_t)H * I * es, parts_h, "down beside transposed gate/up");
    free(g), free(u), free(d), free(bias);
}

static void test_fp8(const set *st)
{
    unsigned char *g = fill((size_t)I * H, 1), *u = fill((size_t)I * H, 1), *d = fill((size_t)H * I, 1);
    float *gs = fill((size_t)cdiv(I, 128) * cdiv(H, 128) * 4, 4),
          *us = fill((size_t)cdiv(I, 128) * cdiv(H, 128) * 4, 4),
          *ds = fill((size_t)cdiv(H, 128) * cdiv(I, 128) * 4, 4);
    expert_src e = {plain(g, MOE_DTYPE_F8_E4M3, I, H), plain(u, MOE_DTYPE_F8_E4M3, I, H),
                    plain(d, MOE_DTYPE_F8_E4M3, H, I)};
    fp8_scales(&e.gate, gs);
    fp8_scales(&e.up, us);
    fp8_scales(&e.down, ds);
    spans s;
    compare(st, &e, "fp8", &s);
    check_cover(&s, g, (size_t)I * H, (int)cdiv(I, 256), "fp8 gate");
    check_cover(&s, u, (size_t)I * H, (int)cdiv(I, 256), "fp8 up");
    check_cover(&s, d, (size_t)H * I, (int)cdiv(H, 256), "fp8 down");

    /* A NaN code in the second part: the parts fail with the same status as the whole pack,
     * whose message names the row in the whole matrix (the layer packs again for it). */
    g[(size_t)300 * H + 5] = 0x7F;
    const moe_act_params act = {0, 0, 0};
    moe_expert_group grp;
    REQUIRE(moe_expert_group_plan(&grp, st->ks, 1, H, I, &act, "nan") == MOE_OK);
    REQUIRE(moe_expert_group_alloc(&grp, "nan") == MOE_OK);
    memset(&s, 0, sizeof s);
    CHECK_STATUS(moe_expert_group_pack_parts(&grp, 0, &e.gate, &e.up, &e.down, record, &s),
                 MOE_EVALUE);
    CHECK_STATUS(moe_expert_group_pack(&grp, 0, &e.gate, &e.up, &e.down), MOE_EVALUE);
    CHECKF(strstr(moe_last_error(), "row 300, col 5") != NULL, "%s", moe_last_error());
    moe_expert_group_free(&grp);
    free(g), free(u), free(d), free(gs), free(us), free(ds);
}

static void test_mxfp4(const set *st)
{
    /* gpt-oss's gate_up [2I, H/2] with gate row j at 2j and up row j at 2j + 1, scales
     * [2I, H/32] likewise, f32 biases [2I]; down [H, I/2] plain. */
    unsigned char *gu = fill((size_t)2 * I * (H / 2), 2), *gus = fill((size_t)2 * I * (H / 32), 3),
                  *d = fill((size_t)H * (I / 2), 2), *dsc = fill((size_t)H * (I / 32), 3);
    float *bias = fill((size_t)2 * I * 4, 4);
    expert_src e;
    memset(&e, 0, sizeof e);
    moe_weight_src *p[3] = {&e.gate, &e.up, &e.down};
    for (int k = 0; k < 3; k++) {
        p[k]->dtype = MOE_DTYPE_F4_E2M1;
        p[k]->col_stride = 1;
        p[k]->scale_dtype = MOE_DTYPE_F8_E8M0;
        p[k]->block_rows = 1;
        p[k]->block_cols = 32;
    }
    for (int k = 0; k < 2; k++) {
        p[k]->data = gu + k * (H / 2);
        p[k]->rows = I;
        p[k]->cols = H;
        p[k]->row_stride = H; /* two rows of H/2 bytes */
        p[k]->scale = gus + k * (H / 32);
        p[k]->scale_stride = 2 * (H / 32);
        p[k]->bias = bias + k;
        p[k]->bias_dtype = MOE_DTYPE_F32;
        p[k]->bias_stride = 2;
    }
    e.down.data = d;
    e.down.rows = H;
    e.down.cols = I;
    e.down.row_stride = I / 2;
    e.down.scale = dsc;
    e.down.scale_stride = I / 32;
    spans s;
    compare(st, &e, "mxfp4 interleaved", &s);
    check_cover(&s, gu, (size_t)2 * I * (H / 2), 2 * (int)cdiv(I, 256), "mxfp4 gate/up");
    check_cover(&s, d, (size_t)H * (I / 2), (int)cdiv(H, 256), "mxfp4 down");
    /* A gate part's span ends with its last up row: never a byte of the next part's rows. */
    for (int i = 0; i < s.n && i < MAX_SPANS; i++)
        if (s.lo[i] >= gu && s.lo[i] < gu + (size_t)2 * I * (H / 2)) {
            const size_t end = (size_t)(s.lo[i] - gu) + s.bytes[i];
            CHECKF(end % H == 0 || end % H == H / 2, "span %d ends at byte %zu", i, end);
            CHECKF(end - (size_t)(s.lo[i] - gu) <= (size_t)256 * H, "span %d too long", i);
        }
    free(gu), free(gus), free(d), free(dsc), free(bias);
}

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    const uint32_t allowed = moe_cpu_caps_mask(&info.allowed);
    int ran = 0;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        const set *st = &sets[i];
        if (st->isa & ~allowed) continue;
        ran++;
        if (st->ks->format == MOE_EXPERT_FMT_BF16) test_plain(st, MOE_DTYPE_BF16, 2, 0);
        if (st->ks->format == MOE_EXPERT_FMT_F32) {
            test_plain(st, MOE_DTYPE_F32, 4, 4);
            test_plain(st, MOE_DTYPE_F16, 2, 0); /* bf16 codes in [-2, 2) are finite f16 */
        }
        if (st->ks->format == MOE_EXPERT_FMT_FP8_BLOCK) test_fp8(st);
        if (st->ks->format == MOE_EXPERT_FMT_MXFP4) test_mxfp4(st);
    }
    CHECK(ran >= 5); /* the references at least */
    return TEST_END();
}
