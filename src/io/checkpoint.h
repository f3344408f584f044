/* checkpoint.h — internal: the tensors of a model folder, single file or sharded through an index. */
#ifndef MOE_IO_CHECKPOINT_H
#define MOE_IO_CHECKPOINT_H

#include "io/safetensors.h"

typedef struct moe_ckpt moe_ckpt;

/* Opens the tensors of DIR: model.safetensors.index.json when present (every shard named in
 * weight_map must be a plain file name in DIR, exist and validate; every tensor of the map
 * must be in the shard it names, and the union of the shards' tensors must equal the map),
 * otherwise model.safetensors. Names are unique across shards. */
moe_status moe_ckpt_open(const char *dir, const moe_st_options *options, moe_ckpt **out);

/* Opens a single .safetensors file as a one-shard checkpoint. */
moe_status moe_ckpt_open_file(const char *path, const moe_st_options *options, moe_ckpt **out);

void moe_ckpt_close(moe_ckpt *ckpt);

size_t moe_ckpt_count(const moe_ckpt *ckpt);
const moe_tensor *moe_ckpt_tensor(const moe_ckpt *ckpt, size_t index); /* sorted by name */
const moe_tensor *moe_ckpt_find(const moe_ckpt *ckpt, const char *name); /* NULL if absent */
size_t moe_ckpt_shard_count(const moe_ckpt *ckpt);

/* moe_st_release on the shard that holds TENSOR (see there: the pages of a mapped shard are
 * given back and fault in again from the file if the tensor is read later; files read with
 * no_mmap keep their bytes). NULL arguments and foreign tensors are ignored. */
void moe_ckpt_release(const moe_ckpt *ckpt, const moe_tensor *tensor);
/* moe_st_release_range on the shard that holds TENSOR. */
void moe_ckpt_release_range(const moe_ckpt *ckpt, const moe_tensor *tensor, uint64_t offset,
                            uint64_t len);

/* moe_st_check_size on every shard that holds one of the N TENSORS (NULL entries and foreign
 * tensors are skipped): MOE_ETRUNCATED naming the shard when one has shrunk since open. Call it
 * before reading mapped tensor bytes long after open. */
moe_status moe_ckpt_check_files(const moe_ckpt *ckpt, const moe_tensor *const *tensors, size_t n);

/* Validates an index.json held in memory against nothing but itself (JSON shape, plain
 * shard names, string values): for fuzzing and tests. */
moe_status moe_ckpt_check_index(const void *json, size_t len, const char *name);

#endif
