/* route_noaux_tc.c — moe_route_noaux_tc__avx512: noaux_tc rows, fused for DeepSeek-V3's shape. */
#include <immintrin.h>
#include <stdbool.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/ref/route_rows.h"
#include "kernels/route.h"

/*
 * The fused path (moe_route_noaux_tc_fused_shape: sigmoid, E = 256 in 8 groups of 32, K ≤ 8)
 * takes rows in blocks of BLOCK and runs three passes over a block, so that the out-of-order
 * core overlaps the rows' long dependency chains (one row at a time leaves most of each chain
 * exposed):
 *
 *  1. scores: per row 16 vectors of 16 logits → s (the reference sigmoid, bit for bit) and
 *     v = s + bias, stored as floats. Keys stay floats: for finite values float order is key
 *     order (v is never -0: s ≥ +0 and +0 + -0 = +0), and a non-finite logit gets v = -inf,
 *     below every real key. No encoding, and float max/min run on two ports, integer ones on
 *     one.
 *  2. groups: each group's largest and second largest v by a register reduction of (h, l)
 *     pairs: merge((h1, l1), (h2, l2)) = (max(h1, h2), max(min(h1, h2), max(l1, l2))), which
 *     is topk(2) of the union with a repeated maximum counted twice. Group g (vectors 2g, 2g+1)
 *     is halved four times, 16 → 8 → 4 → 2 → 1 lanes, each level pairing registers with one
 *     blend and one shuffle (vshuff32x4 / vpermt2ps / vshufps / vpermilps):
 *
 *        level 1   H[2p], H[2p+1] → P[p]:  lanes 0-7 group 2p, lanes 8-15 group 2p+1
 *        level 2   P[2q], P[2q+1] → Q[q]:  128-bit blocks g(4q), g(4q+2), g(4q+1), g(4q+3)
 *        level 3   Q[0], Q[1]     → R:     per block: lanes 0-1 from Q[0], 2-3 from Q[1]
 *        level 4   R              → S:     lane 4j: group of Q[0] block j, 4j+2: of Q[1]
 *
 *     The group score h + l is the reference's f32 sum (-inf without two real keys). The kept
 *     groups are the topk_group best in (score, lower group) order, found as ranks over 64-bit
 *     composites (order-preserving encoding of the score << 32 | 7 - g). One difference from
 *     the reference's order: a real group whose sum overflowed to -inf ties here with a group
 *     without two real keys (the reference puts the real one first). Keeping the latter sends
 *     the row to the portable path (below), and otherwise the two orders keep the same groups.
 *  3. selection: every kept group holds two real keys ≥ bound = the smallest second-largest
 *     of the kept groups, so at least 2 · topk_group ≥ K keys are ≥ bound and every pick is.
 *     The candidates (v ≥ bound in the kept groups, about 12 for DeepSeek-V3's logits) are
 *     compressed (vpcompressd) and merged into one register (vpermt2d, shifted by the count
 *     so far); their ranks in (v descending) order come from 16 broadcast compares. Ranks are
 *     the reference's slots when the candidates' values are distinct, which the rank sum checks
 *     (a tie makes two ranks equal and the sum smaller). Slot j's id is the candidate of rank
 *     j; the weights gather s at the ids and normalise as route_rows.h does, Σ in slot order.
 *
 * A row the fused path cannot settle (more than 16 candidates, which includes every row with a
 * kept group of fewer than two real keys, or two equal candidates) is routed again by the
 * portable path on the AVX-512 primitives. Every other shape runs the portable path only.
 * bench/NOTES.md has the costs.
 */

#define FUSED_E 256
#define BLOCK 8

typedef struct fused_block {
    _Alignas(64) float v[BLOCK][FUSED_E]; /* s + bias; -inf for a non-finite logit */
    _Alignas(64) float s[BLOCK][FUSED_E]; /* sigmoid; -inf for a non-finite logit */
    uint32_t kept[BLOCK];                 /* kept groups (bit g) */
    float bound[BLOCK];                   /* every pick's v is at least this */
} fused_block;

/* Index vectors 0..255, one load per 16 experts. */
#define IOTA16(b)                                                                                  \
    b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11, b + 12,      \
        b + 13, b + 14, b + 15
_Alignas(64) static const int32_t expert_ids[FUSED_E] = {
    IOTA16(0),   IOTA16(16),  IOTA16(32),  IOTA16(48),  IOTA16(64),  IOTA16(80),
    IOTA16(96),  IOTA16(112), IOTA16(128), IOTA16(144), IOTA16(160), IOTA16(176),
    IOTA16(192), IOTA16(208), IOTA16(224), IOTA16(240)};

/* append[c]: the vpermt2d index that keeps lanes 0..c-1 of the first operand and puts lanes
 * 0.. of the second after them (c = 16 keeps the first operand whole). */
#define APPEND_LANE(l, c) ((l) < (c) ? (l) : 16 + (l) - (c))
#define APPEND4(c, l)                                                                              \
    APPEND_LANE(l, c), APPEND_LANE(l + 1, c), APPEND_LANE(l + 2, c), APPEND_LANE(l + 3, c)
#define APPEND(c) APPEND4(c, 0), APPEND4(c, 4), APPEND4(c, 8), APPEND4(c, 12)
_Alignas(64) static const int32_t append[17][16] = {
    {APPEND(0)},  {APPEND(1)},  {APPEND(2)},  {APPEND(3)},  {APPEND(4)},  {APPEND(5)},
    {APPEND(6)},  {APPEND(7)},  {APPEND(8)},  {APPEND(9)},  {APPEND(10)}, {APPEND(11)},
    {APPEND(12)}, {APPEND(13)}, {APPEND(14)}, {APPEND(15)}, {APPEND(16)}};

/* vfixupimmps tables: one 4-bit response per class of z (QNaN, SNaN, ±0, +1, -inf, +inf,
 * negative, positive; response 0 keeps the first operand, 4 is -inf, 10 is +1). */
#define NUM_FIXUP 0xA044AA44u /* z < 0: e; z ≥ 0 (-0 included): 1; NaN, ±inf: -inf */

/*
 * sigmoid(z) as moe_math_sigmoid computes it, operation for operation on the finite z (exp's
 * clamp to [-104, 89] is max(-|z|, -104), as -|z| ≤ 0), and v = sigmoid(z) + bias. The
 * numerator (e for z < 0, 1 otherwise) comes from one vfixupimmps, which also makes it -inf
 * for NaN and ±inf; their e is e^-104 = 0 (the max returns -104 for NaN), so s = -inf/1 and
 * v = -inf.
 */
static inline void scores16(__m512 z, __m512 bias, __m512 *s_out, __m512 *v_out)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 shifter = _mm512_set1_ps(MOE_EXP_SHIFTER);
    __m512 x = _mm512_max_ps(moe_neg_abs_avx512(z), _mm512_set1_ps(MOE_EXP_LO));
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(MOE_EXP_LOG2E), shifter);
    __m512 n = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MOE_EXP_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MOE_EXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MOE_EXP_E6), r, _mm512_set1_ps(MOE_EXP_E5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E2));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    __m512 e = _mm512_scalef_ps(p, n); /* as in moe_exp_avx512 */
    __m512 num = _mm512_fixupimm_ps(e, z, _mm512_set1_epi32((int)NUM_FIXUP), 0);
    __m512 s = _mm512_div_ps(num, _mm512_add_ps(one, e));
    *s_out = s;
    *v_out = _mm512_add_ps(s, bias);
}

static void scores_row(const float *z, const float *bias, float *s, float *v)
{
    for (int i = 0; i < FUSED_E; i += 16) {
        __m512 si, vi;
        scores16(_mm512_loadu_ps(z + i), _mm512_loadu_ps(bias + i), &si, &vi);
        _mm512_store_ps(s + i, si);
        _mm512_store_ps(v + i, vi);
    }
}

/* topk(2) of the union of two (largest, second) pairs, lane by lane. */
static inline void merge2(__m512 h1, __m512 l1, __m512 h2, __m512 l2, __m512 *h, __m512 *l)
{
    *h = _mm512_max_ps(h1, h2);
    *l = _mm512_max_ps(_mm512_min_ps(h1, h2), _mm512_max_ps(l1, l2));
}

/* The group reduction of pass 2: SH/SL hold each group's largest and second largest v, group g
 * at lane group_lane[g]. */
static inline void group_pairs(const float *v, __m512 *sh, __m512 *sl)
{
    __m512 h[8], l[8];
    for (int g = 0; g < 8; g++) {
        __m512 a = _mm512_load_ps(v + 32 * g), b = _mm512_load_ps(v + 32 * g + 16);
        h[g] = _mm512_max_ps(a, b);
        l[g] = _mm512_min_ps(a, b);
    }
    __m512 ph[4], pl[4]; /* X = [a 0-7, b 8-15], Y = [a 8-15, b 0-7] */
    for (int p = 0; p < 4; p++)
        merge2(_mm512_mask_blend_ps(0xFF00, h[2 * p], h[2 * p + 1]),
               _mm512_mask_blend_ps(0xFF00, l[2 * p], l[2 * p + 1]),
               _mm512_shuffle_f32x4(h[2 * p], h[2 * p + 1], 0x4E),
               _mm512_shuffle_f32x4(l[2 * p], l[2 * p + 1], 0x4E), &ph[p], &pl[p]);
    /* X = [a.b0, b.b1, a.b2, b.b3], Y = [a.b1, b.b0, a.b3, b.b2] (128-bit blocks) */
    const __m512i swap_blocks =
        _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
    __m512 qh[2], ql[2];
    for (int q = 0; q < 2; q++)
        merge2(_mm512_mask_blend_ps(0xF0F0, ph[2 * q], ph[2 * q + 1]),
               _mm512_mask_blend_ps(0xF0F0, pl[2 * q], pl[2 * q + 1]),
               _mm512_permutex2var_ps(ph[2 * q], swap_blocks, ph[2 * q + 1]),
               _mm512_permutex2var_ps(pl[2 * q], swap_blocks, pl[2 * q + 1]), &qh[q], &ql[q]);
    /* per block: X = [a0, a1, b2, b3], Y = [a2, a3, b0, b1] */
    __m512 rh, rl;
    merge2(_mm512_mask_blend_ps(0xCCCC, qh[0], qh[1]), _mm512_mask_blend_ps(0xCCCC, ql[0], ql[1]),
           _mm512_shuffle_ps(qh[0], qh[1], 0x4E), _mm512_shuffle_ps(ql[0], ql[1], 0x4E), &rh, &rl);
    merge2(rh, rl, _mm512_permute_ps(rh, 0xB1), _mm512_permute_ps(rl, 0xB1), sh, sl);
}

/* Pass 2 for one row: the kept groups (bit g) and the bound, the smallest second-largest v of
 * the kept groups. A kept group with fewer than two real keys makes the bound -inf, so every key
 * of the kept groups (32 or more) is a candidate and pass 3 hands the row to the portable path:
 * no separate test is needed. */
static void groups_row(const float *v, int topk_group, uint32_t *kept_out, float *bound_out)
{
    __m512 sh, sl;
    group_pairs(v, &sh, &sl);
    /* The composites: qword g = (encode(h + l) << 32) | (7 - g); a larger one is a better
     * group. The encoding is moe_route_key_encode's (h + l is never -0). */
    __m512i u = _mm512_castps_si512(_mm512_add_ps(sh, sl));
    __m512i key = _mm512_ternarylogic_epi32(u, _mm512_srai_epi32(u, 31),
                                            _mm512_set1_epi32((int)0x80000000u), 0x1E);
    const __m512i low = _mm512_setr_epi32(7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i pick = _mm512_setr_epi32(0, 16, 2, 24, 4, 20, 6, 28, 8, 18, 10, 26, 12, 22, 14,
                                           30); /* high dword of qword g: lane of group g */
    __m512i comp = _mm512_permutex2var_epi32(low, pick, key);
    _Alignas(64) uint64_t cb[8];
    _mm512_store_si512(cb, comp);
    __m512i rank = _mm512_setzero_si512();
    const __m512i minus1 = _mm512_set1_epi64(-1);
    for (int j = 0; j < 8; j++) {
        __mmask8 beats = _mm512_cmpgt_epu64_mask(_mm512_set1_epi64((long long)cb[j]), comp);
        rank = _mm512_mask_sub_epi64(rank, beats, rank, minus1);
    }
    const __mmask8 kept = _mm512_cmplt_epu64_mask(rank, _mm512_set1_epi64(topk_group));
    const __m512i group_lane = _mm512_setr_epi32(0, 8, 4, 12, 2, 10, 6, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 second = _mm512_permutexvar_ps(group_lane, sl);
    *kept_out = (uint32_t)kept;
    *bound_out = _mm512_mask_reduce_min_ps((__mmask16)kept, second);
}

/*
 * Pass 3 for one row: ids and weights, or false (nothing written) when the candidates exceed
 * one register or two of them are equal.
 */
static bool select_row(const moe_route_noaux_tc_args *a, const float *v, const float *s,
                       uint32_t kept, float bound, int32_t *ids, float *w)
{
    const __m512 bv = _mm512_set1_ps(bound);
    __m512i cand = _mm512_setzero_si512();
    unsigned c = 0;
    for (unsigned km = kept; km; km &= km - 1) {
        const unsigned g = (unsigned)__builtin_ctz(km);
        __mmask16 m0 = _mm512_cmp_ps_mask(_mm512_load_ps(v + 32 * g), bv, _CMP_GE_OQ);
        __mmask16 m1 = _mm512_cmp_ps_mask(_mm512_load_ps(v + 32 * g + 16), bv, _CMP_GE_OQ);
        __m512i i0 = _mm512_maskz_compress_epi32(m0, _mm512_load_si512(expert_ids + 32 * g));
        __m512i i1 = _mm512_maskz_compress_epi32(m1, _mm512_load_si512(expert_ids + 32 * g + 16));
        const unsigned c0 = c, c1 = c + (unsigned)__builtin_popcount(m0);
        cand = _mm512_permutex2var_epi32(cand, _mm512_load_si512(append[c0 < 16 ? c0 : 16]), i0);
        cand = _mm512_permutex2var_epi32(cand, _mm512_load_si512(append[c1 < 16 ? c1 : 16]), i1);
        c = c1 + (unsigned)__builtin_popcount(m1);
    }
    if (c > 16) return false;
    /* Ranks: lane i counts the candidates above it; the unused lanes hold -inf, so they count
     * nothing and each ranks c. */
    const __mmask16 live = (__mmask16)((1u << c) - 1u);
    const __m512 cv = _mm512_mask_i32gather_ps(_mm512_set1_ps(-INFINITY), live, cand, v, 4);
    /* The broadcasts come from memory (vcmpps with a {1to16} operand): load ports, not the
     * shuffle port the compress, merges and compares already crowd. */
    _Alignas(64) float val[16];
    _mm512_store_ps(val, cv);
    __m512i r0 = _mm512_setzero_si512(), r1 = r0;
    const __m512i minus1 = _mm512_set1_epi32(-1);
    for (int j = 0; j < 16; j += 2) {
        __mmask16 a0 = _mm512_cmp_ps_mask(_mm512_set1_ps(val[j]), cv, _CMP_GT_OQ);
        __mmask16 a1 = _mm512_cmp_ps_mask(_mm512_set1_ps(val[j + 1]), cv, _CMP_GT_OQ);
        r0 = _mm512_mask_sub_epi32(r0, a0, r0, minus1);
        r1 = _mm512_mask_sub_epi32(r1, a1, r1, minus1);
    }
    _Alignas(64) int32_t rank[16], id[16];
    _mm512_store_si512(rank, _mm512_add_epi32(r0, r1));
    _mm512_store_si512(id, cand);
    /* Scalar stores and loads of the same width forward; a vector reload of scalar stores would
     * wait for them to reach the cache. */
    int32_t slot[17];
    unsigned sum = 0;
    for (int i = 0; i < 16; i++) {
        const unsigned ri = (unsigned)rank[i];
        sum += ri;
        slot[ri] = id[i];
    }
    if (sum != c * (c - 1) / 2 + (16 - c) * c) return false; /* distinct ranks 0..c-1, then c */
    const int k = a->top_k;
    const __mmask8 kmask = (__mmask8)((1u << k) - 1u);
    const __m256i slots = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i out = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), kmask, slots, slot, 4);
    __m256 wv = _mm256_mmask_i32gather_ps(_mm256_setzero_ps(), kmask, out, s, 4);
    if (a->renormalize) {
        float total = s[slot[0]]; /* = 0 + s: the reference's sum, in slot order */
        for (int j = 1; j < k; j++)
            total += s[slot[j]];
        if (total > 0.0f)
            wv = _mm256_mul_ps(_mm256_div_ps(wv, _mm256_set1_ps(total)), _mm256_set1_ps(a->scale));
    } else {
        wv = _mm256_mul_ps(wv, _mm256_set1_ps(a->scale)); /* w · 1 = w: as scale_by's skip */
    }
    _mm256_mask_storeu_epi32(ids, kmask, out);
    _mm256_mask_storeu_ps(w, kmask, wv);
    return true;
}

static void portable_rows(const moe_route_noaux_tc_args *a, size_t n_rows, const float *z,
                          int32_t *ids, float *w, moe_route_scratch *scratch)
{
    moe_route_noaux_tc_rows(a, moe_route_sigmoid_keys__avx512, moe_route_sqrtsoftplus_keys__avx512,
                            moe_route_topk__avx512, n_rows, z, ids, w, scratch);
}

void moe_route_noaux_tc__avx512(const moe_route_noaux_tc_args *args, size_t n_rows, const float *z,
                                int32_t *ids, float *w, moe_route_scratch *scratch)
{
    if (!moe_route_noaux_tc_fused_shape(args->score == MOE_SCORE_SIGMOID, args->n_experts,
                                        args->top_k, args->n_group, args->topk_group)) {
        portable_rows(args, n_rows, z, ids, w, scratch);
        return;
    }
    const size_t k = (size_t)args->top_k;
    fused_block blk;
    for (size_t r0 = 0; r0 < n_rows; r0 += BLOCK) {
        const size_t nb = n_rows - r0 < BLOCK ? n_rows - r0 : BLOCK;
        for (size_t b = 0; b < nb; b++)
            scores_row(z + (r0 + b) * FUSED_E, args->bias, blk.s[b], blk.v[b]);
        for (size_t b = 0; b < nb; b++)
            groups_row(blk.v[b], args->topk_group, &blk.kept[b], &blk.bound[b]);
        for (size_t b = 0; b < nb; b++) {
            const size_t t = r0 + b;
            if (select_row(args, blk.v[b], blk.s[b], blk.kept[b], blk.bound[b], ids + t * k,
                           w + t * k))
                continue;
            portable_rows(args, 1, z + t * FUSED_E, ids + t * k, w + t * k, scratch);
        }
    }
}
