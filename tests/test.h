/* test.h — a few check macros for the plain-C test programs (CTest runs them). */
#ifndef MOE_TEST_H
#define MOE_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Failures are counted, not fatal, so one run reports every broken case; main() ends with
 * `return TEST_END();`, which prints a summary and fails when any check failed. */
static int test_failures_;
static long test_checks_;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        test_checks_++;                                                                   \
        if (!(cond)) {                                                                    \
            test_failures_++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                                 \
    } while (0)

/* Like CHECK, with a printf-style explanation of the case (paste it to rerun). */
#define CHECKF(cond, ...)                                                                 \
    do {                                                                                  \
        test_checks_++;                                                                   \
        if (!(cond)) {                                                                    \
            test_failures_++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
        }                                                                                 \
    } while (0)

/* A status check that prints the library's message on failure. */
#define CHECK_STATUS(expr, want)                                                          \
    do {                                                                                  \
        moe_status got_ = (expr);                                                         \
        test_checks_++;                                                                   \
        if (got_ != (want)) {                                                             \
            test_failures_++;                                                             \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %d: %s\n", __FILE__,        \
                    __LINE__, #expr, (int)got_, moe_status_string(got_), (int)(want),     \
                    moe_last_error());                                                    \
        }                                                                                 \
    } while (0)

/* Stop the whole test when a precondition fails (a later check would crash). */
#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define TEST_END()                                                                        \
    (test_checks_ == 0                                                                    \
         ? (fprintf(stderr, "no checks ran\n"), 1)                                        \
         : (fprintf(stderr, "%ld checks, %d failed\n", test_checks_, test_failures_),     \
            test_failures_ != 0))

#endif
