/* expert_layout.h — internal: the packed tile layouts of the expert kernel sets, in code. */
#ifndef MOE_KERNELS_REF_EXPERT_LAYOUT_H
#define MOE_KERNELS_REF_EXPERT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/expert.h"

/*
 * The layouts below serve every kernel set (docs/kernels.md draws them). A tile holds NR = 16
 * rows of one projection (down) or of two (gate and up, "np" = 2); K is padded to even (kpad;
 * the tile pairs to a multiple of 32), zeros in the padding, and rows past the matrix's edge
 * are zeros too.
 *
 * bf16 pair layout (format BF16, the f32 and bf16 recipes):
 *   [bias: np × 16 f32] then the pairs: for k-pair q < kpad/2 of projection p, 16 dwords,
 *   dword n = w[row n][2q] | w[row n][2q+1] << 16 (bf16 codes). One 64-byte load is then
 *   either the two f32 weight vectors of k = 2q and 2q+1 (shift / mask: the f32 recipe) or
 *   exactly the operand vdpbf16ps pairs with (x[2q], x[2q+1]) (the bf16 recipe). The pairs
 *   lie in two streams the kernels read side by side (moe_xl_bf16_pair_at): gate/up, all of
 *   gate's pairs in order, then all of up's; down, its even pairs in order (the chain of the
 *   even pairs), then its odd ones. One core streamed a tile 6-15 % faster as two streams than
 *   as one with gate and up interleaved (bench/NOTES.md, v8).
 *
 * FP8 layouts (format FP8_BLOCK): [bias: np × 16 f32] [scales: for each 128-K block b and
 * projection p, one f32 = scale · 2^8; padded to 64 bytes] then the E4M3 codes, one byte
 * each, in one of three orders:
 *   - k-major (the f32 recipe): for each k < kpad and projection p, the 16 codes of rows
 *     0..15 at k. Decoded with the f16 trick: ((code & 0x7F) << 7 | (code & 0x80) << 8) read
 *     as an f16 is exactly e4m3(code) · 2^-8 for every non-NaN code (subnormals included),
 *     hence the 2^8 folded into the scales; vcvtph2ps widens 16 of them at once.
 *   - pairs (the bf16 recipe): for each k-pair q and projection p, 32 codes: byte 2n is row
 *     n at k = 2q, byte 2n + 1 row n at 2q + 1, the order of vdpbf16ps's operand; the codes
 *     become the bf16 of e4m3(code) · 2^-8 with integer operations (normal codes:
 *     (mag << 4) + (112 << 7); the 7 subnormal magnitudes and 0 from a table).
 *   - groups (the f32 recipe with byte tables, kernels/avx512vbmi/): the k-major codes cut
 *     into 64-byte groups (2 k of gate and up, or 4 k of down), each group's 64 codes
 *     reordered for the decode: vector v < 4 of the group (its 16 codes at offsets 16v..16v+15
 *     of the k-major group: gate k, up k, gate k+1, up k+1; or down k..k+3), row n, sits at
 *     16·(n/4) + 8·(v/2) + 2·(n%4) + v%2. Two 128-entry byte lookups (vpermt2b) give the low
 *     and high bytes of the bf16 of e4m3(code) · 2^-8, vpunpck{l,h}bw interleaves them into
 *     bf16 words, and shift / mask split the words into the four f32 vectors in row order.
 *
 * Every part is a multiple of 64 bytes, so tiles packed back to back from a 64-byte aligned
 * buffer keep every vector load aligned.
 */

#define MOE_XL_NR MOE_EXPERT_NR
#define MOE_XL_KB MOE_EXPERT_KBLOCK
/* The scale factor folded into packed FP8 scales, and its inverse, applied to the codes. */
#define MOE_XL_FP8_SCALE_FOLD 256.0f
#define MOE_XL_FP8_CODE_UNIT 0x1p-8f

static inline int64_t moe_xl_kpad(int64_t k) { return k + (k & 1); }
static inline int64_t moe_xl_nblocks(int64_t k) { return (k + MOE_XL_KB - 1) / MOE_XL_KB; }

/* Byte offsets inside one tile of np projections (1 or 2). */
static inline size_t moe_xl_bias_bytes(int np) { return (size_t)np * MOE_XL_NR * sizeof(float); }
static inline size_t moe_xl_fp8_scale_bytes(int64_t k, int np)
{
    return ((size_t)moe_xl_nblocks(k) * (size_t)np * sizeof(float) + 63) & ~(size_t)63;
}
/* Where the bf16 weights / the FP8 codes start. */
static inline size_t moe_xl_bf16_weights(int np) { return moe_xl_bias_bytes(np); }
static inline size_t moe_xl_fp8_codes(int64_t k, int np)
{
    return moe_xl_bias_bytes(np) + moe_xl_fp8_scale_bytes(k, np);
}
/* The orders of the codes in an FP8 tile (above). */
enum { MOE_XL_FP8_KMAJOR = 0, MOE_XL_FP8_PAIRS = 1, MOE_XL_FP8_GROUPS = 2 };

/* Where the code of row n at step k of projection p sits in the code area of an FP8 tile of
 * np projections, in the given order. */
static inline size_t moe_xl_fp8_code_at(int order, int np, size_t k, int p, size_t n)
{
    if (order == MOE_XL_FP8_PAIRS)
        return k / 2 * (size_t)np * 2 * MOE_XL_NR + (size_t)p * 2 * MOE_XL_NR + 2 * n + (k & 1);
    const size_t i = k * (size_t)np * MOE_XL_NR + (size_t)p * MOE_XL_NR + n;
    if (order == MOE_XL_FP8_KMAJOR) return i;
    const size_t v = i % 64 / MOE_XL_NR;
    return i - i % 64 + 16 * (n / 4) + 8 * (v / 2) + 2 * (n % 4) + v % 2;
}

/* Bytes of one k-pair (bf16) or one k (FP8) step of the weights, all projections. */
static inline size_t moe_xl_bf16_pair_bytes(int np) { return (size_t)np * MOE_XL_NR * 4; }

/* Bytes of one projection's k-pair in a bf16 tile: one 64-byte line. */
#define MOE_XL_BF16_LINE ((size_t)MOE_XL_NR * 4)

/* Where pair q of projection p starts in a bf16 tile's weights (bytes after the bias) of np
 * projections over k (pairs = kpad / 2): gate/up projection-major, down even pairs first. */
static inline size_t moe_xl_bf16_pair_at(int np, int64_t k, int p, size_t q)
{
    const size_t pairs = (size_t)moe_xl_kpad(k) / 2;
    if (np == 2) return ((size_t)p * pairs + q) * MOE_XL_BF16_LINE;
    return ((q & 1) * ((pairs + 1) / 2) + q / 2) * MOE_XL_BF16_LINE;
}

/* Where a bf16 tile's second stream starts, after its weights' start: up's first pair
 * (np = 2), or down's first odd pair (np = 1). */
static inline size_t moe_xl_bf16_stream2(int np, int64_t k)
{
    return moe_xl_bf16_pair_at(np, k, np - 1, np == 2 ? 0 : 1);
}
static inline size_t moe_xl_fp8_step_bytes(int np) { return (size_t)np * MOE_XL_NR; }

/* For a loop that reads a bf16 tile's two streams side by side, n steps of step bytes along
 * the first (len bytes long), prefetching pf bytes ahead: the first step whose prefetch falls
 * in the second stream, which the loop reads itself. From there on the kernels add the tile's
 * size to the first stream's distance, so its lines go to the next tile's second stream, which
 * otherwise starts on demand misses (bench/NOTES.md v10). */
static inline size_t moe_xl_prefetch_switch(size_t len, size_t pf, size_t step, size_t n)
{
    const size_t i = len > pf ? (len - pf + step - 1) / step : 0;
    return i < n ? i : n;
}

/* For one of two tiles read side by side (end: its own tile's end), the line to prefetch for
 * address a: past the tile's end a falls in the next tile, which the partner reads itself, so
 * it goes skip bytes (the tile size) further, to the next pair's tile of the same side, which
 * would otherwise start on demand misses (bench/NOTES.md v10). A tile read alone: skip 0. */
static inline const unsigned char *moe_xl_pair_prefetch(const unsigned char *a,
                                                        const unsigned char *end, size_t skip)
{
    return a >= end ? a + skip : a;
}

/* The bf16 recipe's activation pair q of a row of k bf16 codes, the dword a weight pair meets
 * (x[2q] in the low half, x[2q + 1] in the high); (x[k-1], 0) at an odd end, so nothing past
 * x[k-1] is read. */
static inline uint32_t moe_xl_bf16_x_pair(const uint16_t *x, size_t q, size_t k)
{
    uint32_t v;
    if (2 * q + 1 < k) {
        memcpy(&v, x + 2 * q, sizeof v);
    } else {
        v = x[2 * q];
    }
    return v;
}

/*
 * f32 pair layout (format F32, which serves F16: f16 widens to f32 exactly, so f16 weights are
 * widened once at packing and run as f32): the bf16 pair layout with 4-byte weights. Pair q of
 * projection p is one 128-byte line: the 16 rows' f32 weights at k = 2q (bytes 0..63), then at
 * k = 2q + 1 (bytes 64..127); the lines lie in the same two streams (gate's pairs then up's;
 * down's even pairs then its odd ones), so every set computes the bf16 sets' chains: the same
 * arithmetic, with the weights loaded instead of widened.
 */
#define MOE_XL_F32_LINE ((size_t)MOE_XL_NR * 8)
static inline size_t moe_xl_f32_pair_at(int np, int64_t k, int p, size_t q)
{
    return 2 * moe_xl_bf16_pair_at(np, k, p, q);
}
static inline size_t moe_xl_f32_stream2(int np, int64_t k)
{
    return 2 * moe_xl_bf16_stream2(np, k);
}

/*
 * tile pairs layout (format BF16, the tile recipe): [bias: np × 16 f32] then each projection's
 * P = 16 · ceil(K / 32) pairs in order (gate's, then up's; down's alone), pair q one 64-byte
 * line, dword n = w[row n][2q] | w[row n][2q+1] << 16 (bf16 codes); K past its end and rows past
 * the matrix are zeros. Chunk c of projection p (pairs 16c .. 16c + 15) is then the 1 KB at
 * moe_xl_tile_pair_at(k, p, 16c) after the bias: exactly tdpbf16ps's B tile (16 rows of 64
 * bytes, row r the pair 16c + r), and one chunk of the recipe's arithmetic (kernels/expert.h,
 * "The tile recipe"). For gate/up with K a multiple of 32 it is the bf16 pair layout; down
 * differs (its pairs in plain order, one stream).
 */
#define MOE_XL_TILE_CHUNK 32 /* K per chunk: 16 pairs, one tdpbf16ps */
static inline size_t moe_xl_tile_chunks(int64_t k)
{
    return (size_t)((k + MOE_XL_TILE_CHUNK - 1) / MOE_XL_TILE_CHUNK);
}
static inline size_t moe_xl_tile_pairs(int64_t k)
{
    return moe_xl_tile_chunks(k) * (MOE_XL_TILE_CHUNK / 2);
}
/* Where pair q of projection p starts in a tile pairs tile's weights (bytes after the bias). */
static inline size_t moe_xl_tile_pair_at(int64_t k, int p, size_t q)
{
    return ((size_t)p * moe_xl_tile_pairs(k) + q) * MOE_XL_BF16_LINE;
}

/* Tile sizes (kernels/expert.h: 0 for k < 1 or an overflowing size). */
size_t moe_xl_bf16_gateup_bytes(int64_t k);
size_t moe_xl_bf16_down_bytes(int64_t k);
size_t moe_xl_fp8_gateup_bytes(int64_t k);
size_t moe_xl_fp8_down_bytes(int64_t k);
size_t moe_xl_f32_gateup_bytes(int64_t k);
size_t moe_xl_f32_down_bytes(int64_t k);
size_t moe_xl_tile_gateup_bytes(int64_t k);
size_t moe_xl_tile_down_bytes(int64_t k);

/* Pack and unpack, shared by every kernel set of a format (kernels/ref/expert_pack.c). */
moe_status moe_xl_bf16_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_bf16_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_bf16_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                     const moe_weight_dst *up);
moe_status moe_xl_bf16_unpack_down(const void *packed, const moe_weight_dst *down);
/* f32 pairs: sources F32 or F16; destinations F32 or F16 (exact for weights packed from f16). */
moe_status moe_xl_f32_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_f32_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_f32_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                    const moe_weight_dst *up);
moe_status moe_xl_f32_unpack_down(const void *packed, const moe_weight_dst *down);
moe_status moe_xl_fp8_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_fp8_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_fp8_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                    const moe_weight_dst *up);
moe_status moe_xl_fp8_unpack_down(const void *packed, const moe_weight_dst *down);
/* tile pairs: bf16 sources and destinations, as the bf16 pair layout. */
moe_status moe_xl_tile_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_tile_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_tile_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                     const moe_weight_dst *up);
moe_status moe_xl_tile_unpack_down(const void *packed, const moe_weight_dst *down);
/* The same with the codes in the pairs order (fp8p) and in the groups order (fp8g). */
moe_status moe_xl_fp8p_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_fp8p_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_fp8p_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                     const moe_weight_dst *up);
moe_status moe_xl_fp8p_unpack_down(const void *packed, const moe_weight_dst *down);
moe_status moe_xl_fp8g_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_xl_fp8g_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_xl_fp8g_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                     const moe_weight_dst *up);
moe_status moe_xl_fp8g_unpack_down(const void *packed, const moe_weight_dst *down);

/* What a kernel set's layout decides, as its initializer's fields: the format, the tile
 * sizes, pack and unpack. L is bf16, tile (tile pairs), f32, fp8 (k-major codes), fp8p (pairs)
 * or fp8g (groups). */
#define MOE_XL_SET_LAYOUT(fmt, tiles, L)                                                           \
    .format = (fmt), .gateup_tile_bytes = moe_xl_##tiles##_gateup_bytes,                           \
    .down_tile_bytes = moe_xl_##tiles##_down_bytes, .pack_gateup = moe_xl_##L##_pack_gateup,       \
    .pack_down = moe_xl_##L##_pack_down, .unpack_gateup = moe_xl_##L##_unpack_gateup,              \
    .unpack_down = moe_xl_##L##_unpack_down
#define MOE_XL_BF16_LAYOUT MOE_XL_SET_LAYOUT(MOE_EXPERT_FMT_BF16, bf16, bf16)
#define MOE_XL_FP8_LAYOUT(L) MOE_XL_SET_LAYOUT(MOE_EXPERT_FMT_FP8_BLOCK, fp8, L)
#define MOE_XL_F32_LAYOUT MOE_XL_SET_LAYOUT(MOE_EXPERT_FMT_F32, f32, f32)
#define MOE_XL_TILE_LAYOUT MOE_XL_SET_LAYOUT(MOE_EXPERT_FMT_BF16, tile, tile)

/* A kernel set named as its variable (set), of recipe, ISA and up to mr tokens by MOE_XL_NR rows;
 * the rest of its initializer follows: the layout's fields (MOE_XL_*_LAYOUT) and the kernels. */
#define MOE_XL_SET(set, recipe_, isa_, mr_, ...)                                                   \
    const moe_expert_kernels set = {.name = #set,                                                  \
                                    .recipe = (recipe_),                                           \
                                    .isa = (isa_),                                                 \
                                    .mr = (mr_),                                                   \
                                    .nr = MOE_XL_NR,                                               \
                                    __VA_ARGS__}

/* The bf16 recipe's two kernel sets of one ISA (bf16 pairs, FP8 pairs), both taking up to mr
 * tokens, made of the includer's gateup_bf16, down_bf16, gateup_fp8 and down_fp8. */
#define MOE_XL_BF16_RECIPE_SETS(bf16_set, fp8_set, isa_, mr_)                                      \
    MOE_XL_SET(bf16_set, MOE_RECIPE_BF16, isa_, mr_, MOE_XL_BF16_LAYOUT, .gateup = gateup_bf16,    \
               .down = down_bf16);                                                                 \
    MOE_XL_SET(fp8_set, MOE_RECIPE_BF16, isa_, mr_, MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_fp8, \
               .down = down_fp8)

#endif
