/* route.h — internal: the routing primitives (keys, top-k, exp-sum) every ISA implements alike. */
#ifndef MOE_KERNELS_ROUTE_H
#define MOE_KERNELS_ROUTE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "select/kernel.h" /* the moe_route_*_ukernel signatures, next to every family's */

/*
 * Routing (src/route/) is written once in plain C over these primitives; each primitive has a
 * reference (kernels/ref/) and AVX2 / AVX-512 variants chosen by moe_select_route().
 *
 * Selection works on keys encoded as uint32 so that a larger float is a larger integer
 * (order-preserving), which makes "largest key, lower index on ties" an integer max plus a
 * first-match search in every ISA, and leaves two codes below every real key:
 *   MOE_ROUTE_KEY_TAKEN    already picked by top-k;
 *   MOE_ROUTE_KEY_EXCLUDED a non-finite score or an expert of a masked group: picked only
 *                          after every real key, lower index first, and given weight 0.
 * -0.0 is encoded as +0.0 so that the two zeros tie, as they compare in float. The smallest
 * real key is encode(-FLT_MAX) = 0x00800000, far above both codes.
 *
 * Bit-exactness: every ISA produces the same bits as the reference, for every input. The
 * score functions use one polynomial exp/log1p (kernels/ref/math_ref.h, mirrored operation for
 * operation with FMA in math_avx2.h / math_avx512.h); the exp-sum adds in one fixed order
 * (below), which AVX-512 does in one register, AVX2 in two and the reference in an array. So
 * expert ids and weights never depend on the ISA.
 *
 * Common to every primitive: any n ≥ 0 unless stated, any alignment of every array, nothing
 * read or written outside [0, n) (or [0, k)), no allocation, no state; inputs and outputs do
 * not overlap.
 */
#define MOE_ROUTE_KEY_TAKEN 0u
#define MOE_ROUTE_KEY_EXCLUDED 1u

static inline uint32_t moe_route_key_encode(float f)
{
    uint32_t u;
    f += 0.0f; /* -0.0 -> +0.0 (IEEE: -0 + +0 = +0 in round-to-nearest) */
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float moe_route_key_decode(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * The contract of each primitive (the signatures are in select/kernel.h):
 *
 * moe_route_logit_keys_ukernel(n, z, key):
 * key[i] = encode(z[i]) for finite z[i], MOE_ROUTE_KEY_EXCLUDED otherwise.
 *
 * moe_route_sigmoid_keys_ukernel(n, z, bias, s, key):
 * s[i] = sigmoid(z[i]); key[i] = encode(s[i] + bias[i]) (bias NULL: encode(s[i])).
 * A non-finite z[i] gives s[i] = 0 and key[i] = MOE_ROUTE_KEY_EXCLUDED; so does a non-finite
 * s[i] + bias[i] (a bias of ±Inf or NaN), with s[i] left as the finite score.
 * sigmoid(z) is e^z/(1 + e^z) for z < 0 and 1/(1 + e^-z) otherwise (math_ref.h), so small
 * scores keep their relative accuracy instead of rounding to 0 early.
 *
 * moe_route_sqrtsoftplus_keys_ukernel(n, z, bias, s, key):
 * The same with s[i] = sqrt(softplus(z[i])), softplus(z) = max(z, 0) + log1p(exp(-|z|)):
 * no overflow for large z, and no underflow to 0 for very negative z (below z = -20 it is
 * computed as exp(z/2), which stays nonzero down to z ≈ -207; math_ref.h).
 *
 * moe_route_topk_ukernel(n, key, k, ids, top):
 * Picks k times the largest key (the lowest index among equals), writes its index to ids[j]
 * and its key to top[j], and sets key[index] = MOE_ROUTE_KEY_TAKEN. So ids come out in
 * descending key order, EXCLUDED entries after every real key, lower index first.
 * Requires k ≤ n and at least k keys that are not MOE_ROUTE_KEY_TAKEN on entry (otherwise an
 * index could be picked twice); k = 0 does nothing. n ≤ INT32_MAX.
 *
 * moe_route_expsum_ukernel(n, z, m) -> float:
 * Σ exp(z[i] - m) over the finite z[i], where m is the row's largest finite logit (any m with
 * m ≥ every finite z[i] and m finite works; the terms are then in [0, 1] and the sum cannot
 * overflow for n < 2^24). Non-finite z[i] (NaN, ±Inf) contribute nothing; n = 0 gives +0.
 *
 * The order of the additions, which every ISA follows exactly:
 *   acc[j] = 0 for j = 0..15;
 *   for i = 0, 1, ..., n-1:  acc[i % 16] += exp(z[i] - m)   (skipped for non-finite z[i]);
 *   fold 8+8: acc[j] += acc[j + 8] for j = 0..7;
 *   fold 4+4: acc[j] += acc[j + 4] for j = 0..3;
 *   fold 2+2: acc[j] += acc[j + 2] for j = 0..1;
 *   fold 1+1: acc[0] += acc[1];  the result is acc[0].
 * i % 16 counts from the start of the row, not from an alignment boundary. Adding +0 for a
 * skipped or masked-off element is the same as skipping it (every acc[j] is ≥ +0).
 */

/*
 * moe_route_noaux_tc_ukernel(args, n_rows, z, ids, w, scratch):
 * noaux_tc routing of n_rows rows of logits z [n_rows, E] into ids [n_rows, K] and weights
 * [n_rows, K], exactly as docs/routing.md defines the method: s = the score of z (sigmoid or
 * sqrt-softplus, as the key kernels compute it), key = encode(s + bias); with groups
 * (1 < n_group, topk_group < n_group) a group's score is the f32 sum of its two largest keys
 * (EXCLUDED with fewer than two real keys), the topk_group best groups are kept (lower group
 * on ties) and every key of the others set EXCLUDED; then top_k as moe_route_topk_ukernel
 * picks; w[j] = s[ids[j]] for a real pick and 0 otherwise, then (w[j] / Σ w) · scale (Σ in slot
 * order, skipped when not > 0) if renormalize, else w[j] · scale. The reference is those steps
 * written once over the reference primitives (kernels/ref/route_rows.h); every variant gives
 * the same bits for every row. Requires: a shape moe_route_check accepts, every bias value
 * finite, n_experts ≤ MOE_ROUTE_SCRATCH_EXPERTS; rows are independent, so any n_rows ≥ 0 (rows
 * of E floats, contiguous, any alignment). SCRATCH is used by the portable path only.
 *
 * The AVX-512 variant has a fused path for DeepSeek-V3's shape (moe_route_noaux_tc_fused_shape
 * below): the keys of a row stay floats (s + bias, -inf for a non-finite logit), the group
 * step is a register reduction of (largest, second) pairs, and the final top-k ranks the few
 * keys at or above a bound instead of sweeping the row k times
 * (kernels/avx512/route_noaux_tc.c). Rows it cannot settle that way (fewer than two real keys
 * in a kept group, more than 16 keys at the bound, or equal keys among them) take the
 * portable path, so the result never depends on which path ran.
 */

/* The shape the AVX-512 noaux_tc kernel fuses: sigmoid, 256 experts in 8 groups, some groups
 * dropped, at most 8 picks and no more than the kept groups' top two keys (DeepSeek-V3/R1 is
 * n_group 8, topk_group 4, top_k 8). Any other shape runs the primitives. */
static inline int moe_route_noaux_tc_fused_shape(int score_is_sigmoid, int n_experts, int top_k,
                                                 int n_group, int topk_group)
{
    return score_is_sigmoid && n_experts == 256 && n_group == 8 && topk_group >= 1 &&
           topk_group < 8 && top_k >= 1 && top_k <= 8 && top_k <= 2 * topk_group;
}

/* The workspace of the portable row algorithms (kernels/ref/route_rows.h), sized for the
 * largest E (80 KiB): moe_router_forward keeps one on its stack. */
#define MOE_ROUTE_SCRATCH_EXPERTS 4096
struct moe_route_scratch {
    _Alignas(64) uint32_t key[MOE_ROUTE_SCRATCH_EXPERTS];  /* selection keys, encoded */
    _Alignas(64) float s[MOE_ROUTE_SCRATCH_EXPERTS];       /* unbiased scores */
    _Alignas(64) uint32_t gkey[MOE_ROUTE_SCRATCH_EXPERTS]; /* one key per group */
    int32_t gidx[MOE_ROUTE_SCRATCH_EXPERTS];               /* the kept groups */
    uint32_t top[MOE_ROUTE_SCRATCH_EXPERTS];               /* keys of the selected, slot order */
};

/* ---- The kernels, declared from their enumerators ---------------------------------------- */

#define MOE_KERNEL(name, isa, ref) moe_route_logit_keys_ukernel name;
#include "kernels/route_logit_keys.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_route_sigmoid_keys_ukernel name;
#include "kernels/route_sigmoid_keys.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_route_sqrtsoftplus_keys_ukernel name;
#include "kernels/route_sqrtsoftplus_keys.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_route_topk_ukernel name;
#include "kernels/route_topk.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_route_expsum_ukernel name;
#include "kernels/route_expsum.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_route_noaux_tc_ukernel name;
#include "kernels/route_noaux_tc.inc"
#undef MOE_KERNEL

#endif
