/* route_topk.c — moe_route_topk__avx512: top-k over uint32 keys with AVX-512. */
#include <immintrin.h>
#include <stdbool.h>

#include "kernels/avx2/route_topk8.h"
#include "kernels/avx512/math_avx512.h"
#include "kernels/route.h"

/*
 * The reference's k passes of "first index holding the largest key", by row length:
 *  - n ≤ 8: one 8-lane register for all passes (route_topk8.h, shared with AVX2);
 *  - n ≤ 64: up to four 16-lane registers for all passes, one 64-bit equality mask per pass;
 *  - longer rows, where candidates_pay() says so: the candidate path (topk_candidates), which
 *    finds every key that can be picked in two sweeps and orders at most 16 of them at once;
 *  - otherwise k sweeps: an unsigned max (vpmaxud, four accumulators) reduced across lanes,
 *    then the first 16-key block whose compare-equal mask is not empty and its lowest set
 *    bit (tzcnt); the block is written back with the pick set TAKEN (0).
 * Tails are read with zero-masking loads: masked-off lanes are 0 = TAKEN, never a max while
 * some key ≥ 1 remains (route.h's precondition), and compares are masked to the real lanes so
 * a pick never leaves the row even when the precondition is broken.
 */
static inline uint32_t hmax16(__m512i v)
{
    __m256i h = _mm256_max_epu32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i q = _mm_max_epu32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    q = _mm_max_epu32(q, _mm_shuffle_epi32(q, 0x4E));
    q = _mm_max_epu32(q, _mm_shuffle_epi32(q, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(q);
}

/* The unsigned max of the 16 lanes, in every lane (two 128-bit-block swaps, two in-block). */
static inline __m512i hmax_bcast(__m512i v)
{
    v = _mm512_max_epu32(v, _mm512_shuffle_i32x4(v, v, 0x4E));
    v = _mm512_max_epu32(v, _mm512_shuffle_i32x4(v, v, 0xB1));
    v = _mm512_max_epu32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x4E));
    return _mm512_max_epu32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xB1));
}

/* Whole vectors move with plain loads and stores: a store-to-load forward from the key kernel's
 * full-width stores works for them, and not for masked ones. */
static inline __m512i load16(const uint32_t *p, __mmask16 lanes)
{
    return lanes == 0xFFFF ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(lanes, p);
}

static inline void store16(uint32_t *p, __mmask16 lanes, __m512i v)
{
    if (lanes == 0xFFFF)
        _mm512_storeu_si512(p, v);
    else if (lanes)
        _mm512_mask_storeu_epi32(p, lanes, v);
}

/*
 * Rows of up to 64 keys (group scores, groups, small models) live in four registers for all
 * k passes: per pass one max across the registers and lanes, four compares combined into one
 * 64-bit mask whose lowest bit is the pick, and that lane zeroed (TAKEN) in its register.
 * Lanes past n are loaded as 0 and excluded from the mask. The registers are written back
 * once. `nv` (2 or 4 registers) is a constant at each call, so the unused half disappears.
 */
static inline __attribute__((always_inline)) void
topk_regs(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top, const int nv)
{
    uint64_t valid = n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
    __mmask16 m0 = (__mmask16)valid, m1 = (__mmask16)(valid >> 16);
    __mmask16 m2 = (__mmask16)(valid >> 32), m3 = (__mmask16)(valid >> 48);
    __m512i v0 = load16(key, m0), v1 = load16(key + 16, m1);
    __m512i v2 = _mm512_setzero_si512(), v3 = v2;
    if (nv > 2) {
        v2 = load16(key + 32, m2);
        v3 = load16(key + 48, m3);
    }
    for (size_t j = 0; j < k; j++) {
        __m512i mx = _mm512_max_epu32(v0, v1);
        if (nv > 2) mx = _mm512_max_epu32(mx, _mm512_max_epu32(v2, v3));
        __m512i best = hmax_bcast(mx);
        uint64_t eq = (uint64_t)_mm512_cmpeq_epu32_mask(v0, best) |
                      (uint64_t)_mm512_cmpeq_epu32_mask(v1, best) << 16;
        if (nv > 2)
            eq |= (uint64_t)_mm512_cmpeq_epu32_mask(v2, best) << 32 |
                  (uint64_t)_mm512_cmpeq_epu32_mask(v3, best) << 48;
        eq &= valid;
        uint64_t bit = eq & (~eq + 1); /* the lowest index holding the max */
        ids[j] = eq ? (int32_t)__builtin_ctzll(eq) : 0;
        top[j] = (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(best));
        uint64_t keep = ~bit;
        v0 = _mm512_maskz_mov_epi32((__mmask16)keep, v0);
        v1 = _mm512_maskz_mov_epi32((__mmask16)(keep >> 16), v1);
        if (nv > 2) {
            v2 = _mm512_maskz_mov_epi32((__mmask16)(keep >> 32), v2);
            v3 = _mm512_maskz_mov_epi32((__mmask16)(keep >> 48), v3);
        }
    }
    store16(key, m0, v0);
    store16(key + 16, m1, v1);
    if (nv > 2) {
        store16(key + 32, m2, v2);
        store16(key + 48, m3, v3);
    }
}

static inline uint32_t row_max(size_t n, const uint32_t *key, __mmask16 tail)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_epu32(a0, _mm512_loadu_si512(key + i));
        a1 = _mm512_max_epu32(a1, _mm512_loadu_si512(key + i + 16));
        a2 = _mm512_max_epu32(a2, _mm512_loadu_si512(key + i + 32));
        a3 = _mm512_max_epu32(a3, _mm512_loadu_si512(key + i + 48));
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_max_epu32(a0, _mm512_loadu_si512(key + i));
    if (i < n) a1 = _mm512_max_epu32(a1, _mm512_maskz_loadu_epi32(tail, key + i));
    return hmax16(_mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3)));
}

/* Finds the first key equal to best, marks it TAKEN and returns its index. The block holding it
 * is written back whole (a full 64-byte store, or the masked tail): a single 4-byte store
 * would make every 64-byte load of the next pass that covers it wait for the store to reach
 * the cache, since a narrow store cannot be forwarded to a wider load. */
static inline size_t take_first_equal(size_t n, uint32_t *key, uint32_t best, __mmask16 tail)
{
    const __m512i b = _mm512_set1_epi32((int)best);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_loadu_si512(key + i);
        __mmask16 eq = _mm512_cmpeq_epu32_mask(v, b);
        if (eq) {
            __mmask16 bit = (__mmask16)(eq & (~eq + 1u));
            _mm512_storeu_si512(key + i, _mm512_maskz_mov_epi32((__mmask16)~bit, v));
            return i + (size_t)__builtin_ctz(eq);
        }
    }
    /* Only the real lanes may match (a row with every key TAKEN breaks the contract, but must
     * still not index past the row). */
    __mmask16 eq = _mm512_mask_cmpeq_epu32_mask(tail, _mm512_maskz_loadu_epi32(tail, key + i), b);
    if (!eq) return 0; /* unreachable under the contract */
    __mmask16 bit = (__mmask16)(eq & (~eq + 1u));
    _mm512_mask_storeu_epi32(key + i, bit, _mm512_setzero_si512());
    return i + (size_t)__builtin_ctz(eq);
}

/*
 * The rank of each lane in (value descending, lane ascending): lane i counts the lanes j
 * with v[j] > v[i], or v[j] == v[i] and j < i, so the ranks are a permutation of 0..15.
 * With `ties` false only v[j] > v[i] counts (one compare instead of two): equal values then
 * share the lowest of their ranks. Sixteen broadcasts from a copy in memory (load ports).
 */
static inline __m512i ranks16(__m512i v, bool ties)
{
    uint32_t buf[16];
    _mm512_storeu_si512(buf, v);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i r = _mm512_setzero_si512();
    for (unsigned j = 0; j < 16; j++) {
        __m512i vj = _mm512_set1_epi32((int)buf[j]);
        __mmask16 m;
        if (ties) {
            __mmask16 later = (__mmask16)(0xFFFEu << j); /* lanes i > j */
            m = _mm512_mask_cmpge_epu32_mask(later, vj, v) |
                _mm512_mask_cmpgt_epu32_mask((__mmask16)~later, vj, v);
        } else {
            m = _mm512_cmpgt_epu32_mask(vj, v);
        }
        r = _mm512_mask_add_epi32(r, m, r, one);
    }
    return r;
}

/*
 * Top-k for k ≤ 16 on rows of more than 64 keys, without k sweeps of the row (which cost a
 * lane reduction and an unpredictable search each):
 *  1. the lane maxima: lm[l] = the largest key at an index ≡ l (mod 16), one vertical sweep;
 *  2. T = the k-th largest lane maximum: k lanes hold a key ≥ T, so the k-th largest key of
 *     the row is ≥ T, and every key the reference would pick is ≥ T;
 *  3. the candidates, every index with key ≥ T, compressed in index order (vpcompressd);
 *  4. the ranks of the candidates in (key descending, index ascending), which is exactly the
 *     order of the reference's k passes; slot j takes the candidate of rank j, set TAKEN.
 * Keys below T never compete, so the result equals the reference's. More than 16 candidates
 * (many ties at the top, rows of TAKEN/EXCLUDED keys) returns false before writing anything,
 * and the caller falls back to the k sweeps.
 */
static bool topk_candidates(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_epu32(a0, _mm512_loadu_si512(key + i));
        a1 = _mm512_max_epu32(a1, _mm512_loadu_si512(key + i + 16));
        a2 = _mm512_max_epu32(a2, _mm512_loadu_si512(key + i + 32));
        a3 = _mm512_max_epu32(a3, _mm512_loadu_si512(key + i + 48));
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_max_epu32(a0, _mm512_loadu_si512(key + i));
    const __mmask16 tail = moe_tail_mask_avx512(n - i);
    if (tail) a1 = _mm512_max_epu32(a1, _mm512_maskz_loadu_epi32(tail, key + i));
    __m512i lm = _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3));

    /* Lanes with fewer than k strictly larger lane maxima: exactly those ≥ the k-th largest
     * (with multiplicity), whose minimum is therefore that value. */
    const __m512i kv = _mm512_set1_epi32((int)k);
    __mmask16 best_lanes = _mm512_cmplt_epu32_mask(ranks16(lm, false), kv);
    const __m512i t = _mm512_set1_epi32((int)_mm512_mask_reduce_min_epu32(best_lanes, lm));

    uint32_t cand[32]; /* each store writes 16 slots from cand + c, c ≤ 16 */
    size_t c = 0;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i sixteen = _mm512_set1_epi32(16);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 m = _mm512_cmpge_epu32_mask(_mm512_loadu_si512(key + i), t);
        _mm512_storeu_si512(cand + c, _mm512_maskz_compress_epi32(m, idx));
        c += (size_t)__builtin_popcount(m);
        if (c > 16) return false;
        idx = _mm512_add_epi32(idx, sixteen);
    }
    if (tail) {
        __mmask16 m =
            _mm512_mask_cmpge_epu32_mask(tail, _mm512_maskz_loadu_epi32(tail, key + i), t);
        _mm512_storeu_si512(cand + c, _mm512_maskz_compress_epi32(m, idx));
        c += (size_t)__builtin_popcount(m);
        if (c > 16) return false;
    }

    /* Lanes past c hold key 0 at later positions, so they never outrank a candidate. */
    const __mmask16 live = (__mmask16)((1u << c) - 1u);
    __m512i ci = _mm512_maskz_loadu_epi32(live, cand);
    __m512i ck = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, ci, key, 4);
    __m512i rank = ranks16(ck, true);
    uint32_t cidx[16], ckey[16];
    _mm512_storeu_si512(cidx, ci);
    _mm512_storeu_si512(ckey, ck);
    for (size_t j = 0; j < k; j++) { /* slot j: the candidate of rank j */
        __mmask16 at = _mm512_mask_cmpeq_epu32_mask(live, rank, _mm512_set1_epi32((int)j));
        unsigned lane = (unsigned)__builtin_ctz(at);
        ids[j] = (int32_t)cidx[lane];
        top[j] = ckey[lane];
        key[cidx[lane]] = MOE_ROUTE_KEY_TAKEN;
    }
    return true;
}

/* Whether the candidate path beats k sweeps. Measured on an Emerald Rapids (bench/
 * bench_route_kernels.c): a sweep costs about 8 + 0.07·n ns, the candidate path about
 * 80 + 0.14·n ns (two sweeps, two rank computations). Either path gives the same result, so
 * this only moves time: for n = 256 it picks the candidates from k = 5 on, for n = 128 from
 * k = 6 (DeepSeek-V3's final top-8 of 256, Kimi-K2's of 384, Qwen3's of 128). */
static inline bool candidates_pay(size_t n, size_t k)
{
    return k <= 16 && n <= ((size_t)1 << 24) && k * (800 + 7 * n) > 8000 + 14 * n;
}

void moe_route_topk__avx512(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top)
{
    if (k == 0) return;
    if (n <= 8) { /* one 8-lane register, shared with the AVX2 kernel */
        moe_topk8_avx2(n, key, k, ids, top);
        return;
    }
    if (n <= 32) {
        topk_regs(n, key, k, ids, top, 2);
        return;
    }
    if (n <= 64) {
        topk_regs(n, key, k, ids, top, 4);
        return;
    }
    if (candidates_pay(n, k) && topk_candidates(n, key, k, ids, top)) return;
    __mmask16 tail = moe_tail_mask_avx512(n % 16);
    for (size_t j = 0; j < k; j++) {
        uint32_t best = row_max(n, key, tail);
        ids[j] = (int32_t)take_first_equal(n, key, best, tail);
        top[j] = best;
    }
}
