/* shape_text.h — a tensor's shape as "[2, 3]" for messages. */
#ifndef MOE_CORE_SHAPE_TEXT_H
#define MOE_CORE_SHAPE_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* The NDIM sizes of SHAPE as "[a, b, ...]" in BUF (always terminated, cut short at CAP);
 * returns BUF. */
const char *moe_shape_text(const int64_t *shape, int ndim, char *buf, size_t cap);

#endif
