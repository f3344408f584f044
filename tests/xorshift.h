/* xorshift.h — tests: the xorshift64 step behind their seeded random numbers. */
#ifndef MOE_TEST_XORSHIFT_H
#define MOE_TEST_XORSHIFT_H

#include <stdint.h>

/* Advances state S (never 0: 0 stays 0) and returns it. */
static inline uint64_t xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
