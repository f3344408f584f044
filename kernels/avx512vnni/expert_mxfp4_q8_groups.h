/* expert_mxfp4_q8_groups.h — internal: the prefill path (m > 4 tokens) of the AVX512-VNNI MXFP4
 * Q8 kernels, register-blocked; included by kernels/avx512/expert_mxfp4_q8_body.h (whose helpers
 * and includes it uses). */
#ifndef MOE_KERNELS_AVX512VNNI_EXPERT_MXFP4_Q8_GROUPS_H
#define MOE_KERNELS_AVX512VNNI_EXPERT_MXFP4_Q8_GROUPS_H

/*
 * Per 32-K block of a tile: the 16 rows' codes of the block are decoded once into a stack
 * buffer (gate/up: 16 zmm, down: 8) and the m tokens' parts of the block (32 q bytes, xs,
 * corr) are gathered into one small array. Then the tokens run in groups of up to
 * GROUP_GATEUP (12: 24 int32 sums, 4 weight vectors, 2 broadcasts, 2 scale vectors: 32 zmm) or
 * GROUP_DOWN (16) tokens, m split as evenly as it goes. Within a group the integer block
 * sums stay in registers: per chunk the 4 (down: 2) weight vectors are loaded once; down
 * broadcasts each token's two activation dwords from memory inside vpdpbusd ({1to16}, one fused
 * uop), gate/up into a register each, once for both projections (half the loads; 1-2 % faster
 * prefill, bench/NOTES.md v6). The group addresses everything from one base register with
 * constant offsets. Then, per token and row vector, the f32 step of the recipe: cvt, S =
 * wsh · xs (broadcast from memory), fma with the total in memory, store.
 *
 * Per 16 rows, token and block that is 8 vpdpbusd and 3 f32 operations on the same two ports
 * (p0/p5), plus the block decode shared by the m tokens: the recipe caps this path at about
 * 8 / 11.6 ≈ 0.69 of the vpdpbusd peak for m = 32 (bench/NOTES.md has what it reaches).
 */

#define MX_GROUP_GATEUP 12
#define MX_GROUP_DOWN 16

/* acc + Σ over the two quads of w·x (mx_dot) with x's two activation dwords read from x and
 * x + 16, broadcast inside vpdpbusd ({1to16}). Written as asm because GCC does not fold the
 * broadcast into vpdpbusd: a separate vpbroadcastd per use made the group loop issue-bound
 * (about 4 instructions per vpdpbusd against 6 a cycle). */
typedef int32_t mx_dword __attribute__((may_alias));
MX_INLINE __m512i mx_dpbusd_at(__m512i acc, __m512i w, const unsigned char *x)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const mx_dword *)x));
    return acc;
}

MX_INLINE __m512i mx_dot_at(__m512i acc, __m512i wlo, __m512i whi, const unsigned char *x)
{
    return mx_dpbusd_at(mx_dpbusd_at(acc, wlo, x), whi, x + 16);
}

/* The activation dword at x broadcast to a register, and acc + w·x from it, both in asm as
 * above: gate and up use each dword, so one broadcast serves both. */
MX_INLINE __m512i mx_bcast_at(const unsigned char *x)
{
    __m512i v;
    __asm__("vpbroadcastd %1, %0" : "=v"(v) : "m"(*(const mx_dword *)x));
    return v;
}

MX_INLINE __m512i mx_dpbusd(__m512i acc, __m512i w, __m512i x)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}

/* One block's activations of all m tokens, gathered from their rows: then a group addresses
 * every token from one base register with constant offsets. (From the m row pointers GCC ran
 * out of general registers, parked pointers in xmm registers and copied accumulators between
 * zmm registers inside the vpdpbusd chains.) Two of them, so block b + 1 is gathered group by
 * group while the groups of block b run, its copies among their vpdpbusd rather than alone
 * between blocks (bench/NOTES.md, "moe bench v4"). */
typedef struct mx_xblock {
    unsigned char q[MX_MR][MX_BLK];
    float xs[MX_MR];
    int32_t corr[MX_MR];
} mx_xblock;

/* Tokens t0 .. t1 - 1 of block b into xb. */
MX_INLINE void mx_gather(size_t t0, size_t t1, const unsigned char *const *rows, size_t k,
                         size_t b, mx_xblock *xb)
{
    const size_t xo = moe_q8_scales_offset(k) + 4 * b, co = moe_q8_corr_offset(k) + 4 * b;
    for (size_t t = t0; t < t1; t++) {
        _mm256_store_si256((__m256i *)xb->q[t],
                           _mm256_loadu_si256((const __m256i *)(rows[t] + MX_BLK * b)));
        memcpy(&xb->xs[t], rows[t] + xo, 4);
        memcpy(&xb->corr[t], rows[t] + co, 4);
    }
}

/* Tells the compiler the decoded block and the gathered activations may have changed, so each
 * group loads them from memory as it goes. Without this GCC keeps the whole decoded block in
 * 16 registers, and with the group's 2·G integer sums they no longer fit: the sums spill
 * inside the vpdpbusd chains (seen in objdump; prefill ran at 0.30 of the vpdpbusd peak). No
 * instruction is emitted. */
MX_INLINE void mx_reload(const __m512i *buf, const mx_xblock *xb)
{
    __asm__ volatile("" : : "r"(buf), "r"(xb) : "memory");
}

/* p, through a register the compiler cannot see into: every access of a group is then one base
 * register plus a constant (GCC otherwise rebuilt each token's address with an lea). */
MX_INLINE const void *mx_base(const void *p)
{
    __asm__("" : "+r"(p));
    return p;
}

/* acc(memory) = fma(cvt(isum), wsh · xs, acc(memory)): the f32 step of one token. */
MX_INLINE void mx_step_mem(__m512i isum, __m512 wsh, const float *xs, float *tot)
{
    const __m512 s = _mm512_mul_ps(wsh, _mm512_set1_ps(*xs));
    _mm512_store_ps(tot, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, _mm512_load_ps(tot)));
}

/* One group of G tokens (from token t0 of the gathered block) over a decoded gate/up block:
 * the 2·G integer sums stay in registers while each chunk's 4 weight vectors are loaded once
 * and meet every token's two broadcast activation dwords; then the f32 step into the totals
 * tot[2t] (gate) and tot[2t+1] (up). */
MX_INLINE void mx_gateup_group(const size_t G, const __m512i *buf, const mx_xblock *xb, size_t t0,
                               __m512 wg, __m512 wu, float (*tot)[MX_NR])
{
    __m512i ig[MX_GROUP_GATEUP], iu[MX_GROUP_GATEUP];
    mx_reload(buf, xb);
    const unsigned char(*q)[MX_BLK] = mx_base(xb->q + t0);
    const float *xs = mx_base(xb->xs + t0);
    const int32_t *corr = mx_base(xb->corr + t0);
    tot = (float(*)[MX_NR])mx_base(tot);
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        ig[t] = iu[t] = _mm512_set1_epi32(corr[t]);
    MX_UNROLL
    for (size_t c = 0; c < 4; c++) {
        const __m512i *g = &buf[MX_GU_STRIDE * c], *u = g + MX_UP_AT;
        const __m512i gl = _mm512_load_si512(g), gh = _mm512_load_si512(g + 1);
        const __m512i ul = _mm512_load_si512(u), uh = _mm512_load_si512(u + 1);
        MX_UNROLL
        for (size_t t = 0; t < G; t++) {
            const __m512i xl = mx_bcast_at(q[t] + 4 * c), xh = mx_bcast_at(q[t] + 4 * c + 16);
            ig[t] = mx_dpbusd(mx_dpbusd(ig[t], gl, xl), gh, xh);
            iu[t] = mx_dpbusd(mx_dpbusd(iu[t], ul, xl), uh, xh);
        }
    }
    MX_UNROLL
    for (size_t t = 0; t < G; t++) {
        mx_step_mem(ig[t], wg, &xs[t], tot[2 * t]);
        mx_step_mem(iu[t], wu, &xs[t], tot[2 * t + 1]);
    }
}

MX_INLINE void mx_down_group(const size_t G, const __m512i *buf, const mx_xblock *xb, size_t t0,
                             __m512 w, float (*tot)[MX_NR])
{
    __m512i is[MX_GROUP_DOWN];
    mx_reload(buf, xb);
    const unsigned char(*q)[MX_BLK] = mx_base(xb->q + t0);
    const float *xs = mx_base(xb->xs + t0);
    const int32_t *corr = mx_base(xb->corr + t0);
    tot = (float(*)[MX_NR])mx_base(tot);
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        is[t] = _mm512_set1_epi32(corr[t]);
    MX_UNROLL
    for (size_t c = 0; c < 4; c++) {
        const __m512i wl = _mm512_load_si512(&buf[2 * c]), wh = _mm512_load_si512(&buf[2 * c + 1]);
        MX_UNROLL
        for (size_t t = 0; t < G; t++)
            is[t] = mx_dot_at(is[t], wl, wh, q[t] + 4 * c);
    }
    MX_UNROLL
    for (size_t t = 0; t < G; t++)
        mx_step_mem(is[t], w, &xs[t], tot[t]);
}

/* One instantiation per group size (expert_shared.h's cases), so every loop over a group's
 * tokens unrolls: 1..11 for gate/up, 1..15 for down (the largest is the switch's default). */
#define MX_CASES_BELOW_16(body, ...)                                                               \
    DISPATCH_CASES_11(body, __VA_ARGS__)                                                           \
    DISPATCH_CASE(12, body, __VA_ARGS__)                                                           \
    DISPATCH_CASE(13, body, __VA_ARGS__)                                                           \
    DISPATCH_CASE(14, body, __VA_ARGS__)                                                           \
    DISPATCH_CASE(15, body, __VA_ARGS__)

/* The call's tokens: their prepared rows, the current block's activations gathered from
 * them, and the groups the m tokens run in. */
typedef struct mx_tokens {
    mx_xblock xb[2] __attribute__((aligned(64))); /* block b in xb[b % 2] */
    const unsigned char *rows[MX_MR];
    group_split gateup, down; /* m = 32, gate/up: 11, 11, 10 rather than 12, 12, 8 */
} mx_tokens;

MX_INLINE void mx_tokens_init(mx_tokens *tk, size_t m, const void *const *v, size_t k)
{
    (void)k;
    for (size_t t = 0; t < m; t++)
        tk->rows[t] = v[t];
    tk->gateup = group_split_of(m, MX_GROUP_GATEUP);
    tk->down = group_split_of(m, MX_GROUP_DOWN);
}

/* Block b's gathered activations. Block 0's are gathered here, every later block's by the
 * groups of the block before it on the call's first tile (mx_gather_next); the other tiles
 * run over the same gathered blocks. Blocks come in order 0, 1, ..., k/32 - 1. */
MX_INLINE const mx_xblock *mx_gather_first(mx_tokens *tk, size_t m, size_t k, size_t b,
                                           bool first)
{
    if (b == 0 && first) mx_gather(0, m, tk->rows, k, 0, &tk->xb[0]);
    return &tk->xb[b % 2];
}

/* After a group of block b on the first tile: its tokens t0 .. t1 - 1 of block b + 1, if there
 * is one. */
MX_INLINE void mx_gather_next(mx_tokens *tk, size_t t0, size_t t1, size_t k, size_t b, bool first)
{
    if (first && b + 1 < k / MX_BLK)
        mx_gather(t0, t1, tk->rows, k, b + 1, &tk->xb[(b + 1) % 2]);
}

/* Every group of the m tokens over the decoded gate/up block b of one tile. */
MX_INLINE void mx_gateup_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                               const __m512i *buf, __m512 wg, __m512 wu, float (*tot)[MX_NR])
{
    const group_split sp = tk->gateup;
    const mx_xblock *xb = mx_gather_first(tk, m, k, b, first);
    for (size_t j = 0, t0 = 0, g; j < sp.ng; j++, t0 += g) {
        g = sp.base + (j < sp.extra);
        switch (g) {
            DISPATCH_CASES_11(mx_gateup_group, buf, xb, t0, wg, wu, tot + 2 * t0)
        default: mx_gateup_group(MX_GROUP_GATEUP, buf, xb, t0, wg, wu, tot + 2 * t0);
        }
        mx_gather_next(tk, t0, t0 + g, k, b, first);
    }
}

MX_INLINE void mx_down_block(mx_tokens *tk, size_t m, size_t k, size_t b, bool first,
                             const __m512i *buf, __m512 w, float (*tot)[MX_NR])
{
    const group_split sp = tk->down;
    const mx_xblock *xb = mx_gather_first(tk, m, k, b, first);
    for (size_t j = 0, t0 = 0, g; j < sp.ng; j++, t0 += g) {
        g = sp.base + (j < sp.extra);
        switch (g) {
            MX_CASES_BELOW_16(mx_down_group, buf, xb, t0, w, tot + t0)
        default: mx_down_group(MX_GROUP_DOWN, buf, xb, t0, w, tot + t0);
        }
        mx_gather_next(tk, t0, t0 + g, k, b, first);
    }
}

#endif
