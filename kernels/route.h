/* route.h — internal: the routing primitives (keys, top-k, exp-sum) every ISA implements alike. */
#ifndef MOE_KERNELS_ROUTE_H
#define MOE_KERNELS_ROUTE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
 * -0.0 is encoded as +0.0 so that the two zeros tie, as they compare in float.
 *
 * Bit-exactness: every ISA produces the same bits as the reference. The score functions use
 * one polynomial exp/log1p, operation for operation, with FMA; the exp-sum adds in one fixed
 * order (16 interleaved partial sums, lane i % 16, folded 8+8, 4+4, 2+2, 1+1), which AVX-512
 * does in one register, AVX2 in two and the reference in an array. So expert ids and weights
 * never depend on the ISA.
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

/* key[i] = encode(z[i]) for finite z[i], MOE_ROUTE_KEY_EXCLUDED otherwise. */
typedef void moe_route_logit_keys_ukernel(size_t n, const float *z, uint32_t *key);

/* s[i] = sigmoid(z[i]); key[i] = encode(s[i] + bias[i]) (bias NULL: encode(s[i])).
 * A non-finite z[i] gives s[i] = 0 and key[i] = MOE_ROUTE_KEY_EXCLUDED. */
typedef void moe_route_sigmoid_keys_ukernel(size_t n, const float *z, const float *bias, float *s,
                                            uint32_t *key);

/* The same with s[i] = sqrt(softplus(z[i])), softplus(z) = max(z, 0) + log1p(exp(-|z|)):
 * no underflow to 0 for very negative z, no overflow for large z. */
typedef void moe_route_sqrtsoftplus_keys_ukernel(size_t n, const float *z, const float *bias,
                                                 float *s, uint32_t *key);

/* Picks k ≤ n times the largest key (the lowest index among equals), writes its index to
 * ids[j] and its key to top[j], and sets key[index] = MOE_ROUTE_KEY_TAKEN. */
typedef void moe_route_topk_ukernel(size_t n, uint32_t *key, size_t k, int32_t *ids,
                                    uint32_t *top);

/* Σ exp(z[i] - m) over the finite z[i] (m is the row's largest finite logit). */
typedef float moe_route_expsum_ukernel(size_t n, const float *z, float m);

#endif
