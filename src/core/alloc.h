/* alloc.h — internal: the library's only allocation entry points (one place for test hooks). */
#ifndef MOE_CORE_ALLOC_H
#define MOE_CORE_ALLOC_H

#include <stddef.h>

/* Like malloc/calloc/realloc/free. moe_calloc checks n * size for overflow. They do not set
 * the last-error message: callers report MOE_ENOMEM with what they were allocating. */
void *moe_malloc(size_t size);
void *moe_calloc(size_t n, size_t size);
void *moe_realloc(void *ptr, size_t size);
void moe_free(void *ptr);

/* strdup through moe_malloc; NULL on failure. */
char *moe_strdup(const char *s);

#endif
