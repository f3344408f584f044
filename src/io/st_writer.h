/* st_writer.h — internal: write a .safetensors file in a stream, tensor by tensor. */
#ifndef MOE_IO_ST_WRITER_H
#define MOE_IO_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"

typedef struct moe_st_writer moe_st_writer;

/* Fills BUF with LEN bytes of tensor INDEX (declaration order) starting at byte OFFSET of
 * that tensor. Called in file order, in chunks; returns MOE_OK or an error to stop. */
typedef moe_status (*moe_st_fill_fn)(void *ctx, size_t index, uint64_t offset, void *buf,
                                     size_t len);

moe_status moe_st_writer_create(moe_st_writer **out);
void moe_st_writer_destroy(moe_st_writer *w);

/* Declares a tensor; names must be unique. */
moe_status moe_st_writer_add(moe_st_writer *w, const char *name, moe_dtype dtype, int ndim,
                             const int64_t *shape);

/* Adds a __metadata__ entry. */
moe_status moe_st_writer_metadata(moe_st_writer *w, const char *key, const char *value);

/* Writes PATH: the header (padded with spaces so the data starts at a multiple of 8), then
 * the tensors sorted by descending element alignment and then name, each produced by FILL
 * in chunks of at most 1 MiB, so memory stays small whatever the file size; a chunk of
 * zeros becomes a hole (no disk space where the file system has sparse files). The file is
 * written to a temporary name and renamed on success. */
moe_status moe_st_writer_write(moe_st_writer *w, const char *path, moe_st_fill_fn fill, void *ctx);

#endif
