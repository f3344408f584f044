/* npy.h — internal: read and write NumPy .npy arrays (f32, f64, f16, i32, i64; C order; v1-3). */
#ifndef MOE_IO_NPY_H
#define MOE_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"

#define MOE_NPY_MAX_DIMS 8

typedef struct moe_npy {
    moe_dtype dtype; /* MOE_DTYPE_F32, F64, F16, I32 or I64 */
    int ndim;
    int64_t shape[MOE_NPY_MAX_DIMS];
    size_t count;  /* product of shape (1 for a 0-d array) */
    size_t nbytes; /* count * element size */
    void *data;    /* owned; free with moe_npy_free */
} moe_npy;

/* Reads PATH. Any other descr ('<f4', '<f8', '<f2', '<i4', '<i8' only), Fortran order, a bad magic or
 * header, or a file shorter than the header says is an error naming PATH and what is wrong;
 * *out is untouched then. */
moe_status moe_npy_read(const char *path, moe_npy *out);

/* Parses an in-memory .npy image (the same checks; for fuzzing and tests). */
moe_status moe_npy_parse(const void *buf, size_t len, moe_npy *out);

void moe_npy_free(moe_npy *npy);

/* Writes an array to PATH atomically (a temporary file in the same folder, renamed on
 * success), so a failure leaves no partial output. dtype: F32, F64, F16, I32 or I64. */
moe_status moe_npy_write(const char *path, moe_dtype dtype, int ndim, const int64_t *shape,
                         const void *data);

#endif
