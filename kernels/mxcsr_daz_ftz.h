/* mxcsr_daz_ftz.h — internal: MXCSR's DAZ and FTZ set around the bf16 recipe's emulated pair steps,
 * the controls put back after. */
#ifndef MOE_KERNELS_MXCSR_DAZ_FTZ_H
#define MOE_KERNELS_MXCSR_DAZ_FTZ_H

#include <xmmintrin.h>

/*
 * With DAZ and FTZ set, an FMA reads denormal operands as zero and flushes a denormal result:
 * what vdpbf16ps does whatever MXCSR says, and what the bf16 recipe's reference emulates
 * (kernels/ref/expert_ref.h). The sets that compute the recipe's pair step as two FMAs set
 * them around each run of pair steps only (dp_enter, dp_leave): everything else of theirs
 * runs under the caller's MXCSR, as the reference has it. dp_fence keeps the compiler from
 * moving a value's arithmetic across either write.
 */
#define MOE_MXCSR_DAZ_FTZ 0x8040u
#define MOE_MXCSR_FLAGS 0x3Fu

typedef unsigned dp_state;

static inline __attribute__((always_inline)) dp_state dp_enter(void)
{
    const dp_state s = _mm_getcsr();
    _mm_setcsr(s | MOE_MXCSR_DAZ_FTZ);
    return s;
}

/* The controls put back; the status flags raised meanwhile kept. */
static inline __attribute__((always_inline)) void dp_leave(dp_state s)
{
    _mm_setcsr((_mm_getcsr() & MOE_MXCSR_FLAGS) | (s & ~MOE_MXCSR_FLAGS));
}

/* An empty asm that takes and gives v. */
#define dp_fence(v) __asm__ volatile("" : "+v"(v))

#endif
