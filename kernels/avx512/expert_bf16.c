/* expert_bf16.c — the AVX-512 expert kernel sets of the bf16 recipe (bf16 and FP8), 8x16: vdpbf16ps
 * emulated with two FMAs under DAZ and FTZ. */
#include <immintrin.h>

/*
 * For CPUs with AVX-512 but not AVX512-BF16. Each pair step is two FMAs on the widened bf16
 * values, the odd products first, with MXCSR's DAZ and FTZ set: an FMA then reads denormal
 * operands (weights, activations, the running sum) as zero and flushes a denormal result,
 * which is what vdpbf16ps does and the reference emulates (kernels/ref/expert_ref.h; checked
 * on 3.2 million random lanes, denormals included, with no difference: bench/NOTES.md v17).
 * MXCSR is set around each run of pair steps and put back after it (kernels/mxcsr_daz_ftz.h);
 * everything else (the FP8 block scale FMA, down's A + B, the epilogue) runs under the
 * caller's MXCSR, as in the reference. The weight pairs widen once per projection and step, each
 * token's activation pair once per step (a shift for the even element, a mask for the odd one).
 */
static inline __attribute__((always_inline)) __m512 dp_emul(__m512 acc, __m512i w, __m512i x)
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)),
                          _mm512_castsi512_ps(_mm512_and_si512(x, hi)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                           _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), acc);
}

#define DP(acc, w, x) dp_emul((acc), (w), (x))

#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/avx512/expert_bf16_body.h"

MOE_XL_BF16_RECIPE_SETS(moe_expert_bf16_bf16_8x16__avx512, moe_expert_fp8_bf16_8x16__avx512,
                        MOE_REQ_AVX512, MR);
