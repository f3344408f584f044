/* inline.h — INLINE: static inline, always inlined (a kernel body's flags fold away). */
#ifndef MOE_KERNELS_INLINE_H
#define MOE_KERNELS_INLINE_H

#define INLINE static inline __attribute__((always_inline))

#endif
