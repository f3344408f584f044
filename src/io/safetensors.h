/* safetensors.h — internal: open one .safetensors file, strictly validated (reliability.md §1). */
#ifndef MOE_IO_SAFETENSORS_H
#define MOE_IO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe.h"

#define MOE_MAX_DIMS 8
#define MOE_ST_MAX_HEADER 100000000u /* 100 MB, as the reference reader */

/* One tensor of an opened file. Pointers stay valid until the file is closed. */
typedef struct moe_tensor {
    const char *name;
    moe_dtype dtype;
    int ndim;
    int64_t shape[MOE_MAX_DIMS];
    uint64_t count;  /* product of shape (1 for rank 0) */
    uint64_t begin;  /* data_offsets[0], relative to the data area */
    uint64_t nbytes; /* data_offsets[1] - data_offsets[0] */
    /* Into the mapping or the read buffer. Alignment is not guaranteed (old writers did not
     * align tensors): check (uintptr_t)data % element size before reading it through a
     * wider type, and copy (memcpy) otherwise. */
    const void *data;
    const char *file; /* the path of the file that holds it */
} moe_tensor;

typedef struct moe_st_file moe_st_file;

typedef struct moe_st_options {
    bool no_mmap; /* read the file into memory instead of mapping it */
} moe_st_options;

/* Opens and validates PATH: header length ≤ 100 MB and inside the file; a JSON object with
 * no duplicate keys; optional string→string __metadata__; known dtypes; shapes of
 * non-negative integers; integer data_offsets, contiguous from 0, no holes, overlaps or
 * trailing bytes; shape product × element size = byte length, all with checked arithmetic.
 * The file size is checked against the header before anything is mapped. */
moe_status moe_st_open(const char *path, const moe_st_options *options, moe_st_file **out);

/* The same validation over an in-memory image (fuzzing, tests). The buffer must outlive the
 * returned handle; NAME is used in messages. */
moe_status moe_st_open_memory(const void *buf, size_t len, const char *name, moe_st_file **out);

void moe_st_close(moe_st_file *file);

size_t moe_st_count(const moe_st_file *file);
const moe_tensor *moe_st_tensor(const moe_st_file *file, size_t index); /* in offset order */
const moe_tensor *moe_st_find(const moe_st_file *file, const char *name); /* NULL if absent */

/* Gives the memory behind TENSOR's bytes back to the system once it is no longer needed (a
 * layer calls it after packing the tensor): madvise(MADV_DONTNEED) on the whole pages inside
 * its byte range; the pages at its ends, which may hold a neighbour's bytes, are kept. The
 * mapping is private and read-only, so a later read of the tensor faults its pages in again
 * from the file: the data stays correct, only resident memory is returned. A no-op for a file
 * read with no_mmap or opened from memory (their buffers are the only copy), and for a tensor
 * that is not FILE's. */
void moe_st_release(const moe_st_file *file, const moe_tensor *tensor);
/* The same for bytes [offset, offset + len) of TENSOR only (clipped to the tensor): one
 * expert's slice of a tensor that stacks every expert. */
void moe_st_release_range(const moe_st_file *file, const moe_tensor *tensor, uint64_t offset,
                          uint64_t len);

/* Measures a mapped FILE again (fstat on the descriptor kept since open): a file that is now
 * shorter than when it was opened is MOE_ETRUNCATED naming it and both sizes, because reading
 * a mapped page past the new end raises SIGBUS. Call it right before reading tensor bytes long
 * after open (a layer does, before packing). MOE_OK for a file read with no_mmap or opened
 * from memory: their bytes were copied at open, or belong to the caller. A file that shrinks
 * after this check can still SIGBUS a reader; docs/checkpoints.md says what to do. */
moe_status moe_st_check_size(const moe_st_file *file);

/* Whether TENSOR is one of FILE's (a pointer into its table). */
bool moe_st_holds(const moe_st_file *file, const moe_tensor *tensor);

/* The __metadata__ value for KEY, or NULL. */
const char *moe_st_metadata(const moe_st_file *file, const char *key);

#endif
