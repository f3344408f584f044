/* expert_bf16.c — the AVX512-BF16 expert kernel sets of the bf16 recipe (bf16 and FP8), 8x16:
 * vdpbf16ps. */
#include <immintrin.h>

/*
 * The recipe's pair step is the instruction itself. vdpbf16ps ignores MXCSR: it reads
 * denormal operands as zero, flushes denormal results, and adds the odd product before the
 * even one, each with one rounding; the reference (kernels/ref/expert_ref.h) emulates exactly
 * that, so the bits agree. It does half the flops of an fp32 FMA per cycle on this project's
 * host (about 0.43 per cycle, measured), so 8 tokens keep it busy and the FP8 decode hides
 * behind it.
 */
#define DP(acc, w, x) _mm512_dpbf16_ps((acc), (__m512bh)(w), (__m512bh)(x))
typedef int dp_state;
#define dp_enter() 0
#define dp_leave(s) ((void)(s))
#define dp_fence(v) ((void)(v))

#include "kernels/avx512/expert_bf16_body.h"

MOE_XL_BF16_RECIPE_SETS(moe_expert_bf16_bf16_8x16__avx512bf16, moe_expert_fp8_bf16_8x16__avx512bf16,
                        MOE_REQ_AVX512BF16, MR);
