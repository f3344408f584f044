/* ckpt_patch.h — layer tests: change the bytes of a checkpoint tensor in its file, in place. */
#ifndef MOE_TEST_CKPT_PATCH_H
#define MOE_TEST_CKPT_PATCH_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"
#include "io/safetensors.h"

/* The file offset of byte BYTE of tensor T: after the 8-byte header length and the header. */
static inline uint64_t ckpt_file_offset(const moe_tensor *t, uint64_t byte)
{
    unsigned char len[8];
    int fd = open(t->file, O_RDONLY);
    REQUIRE(fd >= 0 && pread(fd, len, 8, 0) == 8);
    close(fd);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len[i];
    return 8 + n + t->begin + byte;
}

/* Reads the whole of tensor T from its file, lets FN change the bytes, writes them back. Open
 * handles that map the file see the new bytes; open a new handle to be sure. */
static inline void ckpt_rewrite(const moe_tensor *t, void (*fn)(void *ctx, unsigned char *, size_t),
                                void *ctx)
{
    unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
    REQUIRE(buf);
    const off_t at = (off_t)ckpt_file_offset(t, 0);
    int fd = open(t->file, O_RDWR);
    REQUIRE(fd >= 0 && pread(fd, buf, t->nbytes, at) == (ssize_t)t->nbytes);
    fn(ctx, buf, t->nbytes);
    REQUIRE(pwrite(fd, buf, t->nbytes, at) == (ssize_t)t->nbytes);
    close(fd);
    free(buf);
}

#endif
