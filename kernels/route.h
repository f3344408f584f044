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

#endif
