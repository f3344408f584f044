/* checked.h — internal: overflow-checked size arithmetic (reliability.md §6). */
#ifndef MOE_CORE_CHECKED_H
#define MOE_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns true on overflow and leaves *out unspecified; false means *out is exact. */
static inline bool moe_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline bool moe_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}
static inline bool moe_mul_overflow_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline bool moe_add_overflow_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

#endif
