/* test_core.c — status strings, the per-thread last-error message, checked arithmetic, allocation.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "test.h"

static void test_status_strings(void)
{
    /* Every defined status has its own text; an unknown value has a fallback, never NULL. */
    const char *seen[64] = {0};
    for (int s = MOE_OK; s <= MOE_EVALUE; s++) {
        const char *str = moe_status_string((moe_status)s);
        CHECKF(str && *str && strcmp(str, "unknown status") != 0, "status %d", s);
        for (int t = MOE_OK; t < s; t++)
            CHECKF(strcmp(seen[t], str) != 0, "status %d == %d", s, t);
        seen[s] = str;
    }
    CHECK(strcmp(moe_status_string((moe_status)999), "unknown status") == 0);
    CHECK(strcmp(moe_version_string(), MOE_VERSION_STRING) == 0);
}

static void test_error_message(void)
{
    moe_error_clear();
    CHECK(strcmp(moe_last_error(), "") == 0);
    CHECK(moe_error(MOE_ESHAPE, "tensor '%s': shape [%d]", "w", 3) == MOE_ESHAPE);
    CHECK(strcmp(moe_last_error(), "tensor 'w': shape [3]") == 0);
    CHECK(moe_error_context(MOE_ESHAPE, "file '%s': ", "a.safetensors") == MOE_ESHAPE);
    CHECK(strcmp(moe_last_error(), "file 'a.safetensors': tensor 'w': shape [3]") == 0);

    /* A message longer than the buffer is truncated, not overflowed. */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    moe_error(MOE_EINVAL, "%s", big);
    size_t n = strlen(moe_last_error());
    CHECK(n > 0 && n < sizeof big - 1);
    moe_error_context(MOE_EINVAL, "%s", big);
    CHECK(strlen(moe_last_error()) == n);
}

static void *other_thread(void *arg)
{
    (void)arg;
    /* A new thread starts with no message and its own buffer. */
    int clean = strcmp(moe_last_error(), "") == 0;
    moe_error(MOE_EIO, "thread message");
    return (void *)(intptr_t)clean;
}

static void test_error_per_thread(void)
{
    moe_error(MOE_EINVAL, "main message");
    pthread_t t;
    void *clean = NULL;
    REQUIRE(pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_join(t, &clean);
    CHECK(clean != NULL);
    CHECK(strcmp(moe_last_error(), "main message") == 0);
}

static void test_checked(void)
{
    uint64_t u;
    CHECK(!moe_mul_overflow_u64(1ull << 31, 1ull << 32, &u) && u == 1ull << 63);
    CHECK(moe_mul_overflow_u64(1ull << 32, 1ull << 32, &u));
    CHECK(moe_mul_overflow_u64(2, UINT64_MAX / 2 + 1, &u));
    CHECK(!moe_add_overflow_u64(UINT64_MAX - 1, 1, &u) && u == UINT64_MAX);
    CHECK(moe_add_overflow_u64(UINT64_MAX, 1, &u));
    size_t z;
    CHECK(moe_mul_overflow_size(SIZE_MAX, 2, &z));
    CHECK(!moe_add_overflow_size(3, 4, &z) && z == 7);
}

static void test_alloc(void)
{
    CHECK(moe_calloc(SIZE_MAX / 2, 4) == NULL); /* n * size overflows: refused */
    unsigned char *p = moe_calloc(16, 4);
    REQUIRE(p);
    int zero = 1;
    for (int i = 0; i < 64; i++)
        zero &= p[i] == 0;
    CHECK(zero);
    p = moe_realloc(p, 128);
    CHECK(p != NULL);
    moe_free(p);
    char *s = moe_strdup("expert");
    CHECK(s && strcmp(s, "expert") == 0);
    moe_free(s);
}

int main(void)
{
    test_status_strings();
    test_error_message();
    test_error_per_thread();
    test_checked();
    test_alloc();
    return TEST_END();
}
