/* file.h — internal: whole reads and writes on descriptors, and files written atomically. */
#ifndef MOE_IO_FILE_H
#define MOE_IO_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"

/* strerror without the thread-safety problem of strerror(): the text of ERR in BUF. */
const char *moe_errno_text(int err, char *buf, size_t len);

/* What a stat mode is, for messages: "a folder", "a FIFO (named pipe)", "a socket", "a
 * character device", "a block device" or "a regular file". */
const char *moe_file_kind(unsigned mode);

/* Opens PATH read-only, checking that it is a regular file (symlinks followed) before and
 * after the open, so it never blocks: a folder, FIFO, socket or device is MOE_EIO ("'PATH' is
 * a FIFO (named pipe), not a regular file"). A path that does not exist is MOE_EMISSING, any
 * other failure MOE_EIO; all name PATH. *size receives the file size. Every read of a file a
 * user names goes through here. */
moe_status moe_file_open_read(const char *path, int *fd, uint64_t *size);

/* Reads exactly LEN bytes at OFFSET (retrying short reads and EINTR). End of file before
 * LEN bytes is MOE_ETRUNCATED, a read error MOE_EIO; both name PATH. */
moe_status moe_file_pread(int fd, void *buf, size_t len, uint64_t offset, const char *path);

/* Reads the whole of PATH into a moe_malloc'd buffer (*buf, *len); a file larger than MAX
 * bytes is MOE_EOVERFLOW. Statuses as moe_file_open_read. */
moe_status moe_file_read_all(const char *path, uint64_t max, void **buf, size_t *len);

/* A file written under a temporary name in the same folder and renamed over PATH only when
 * everything succeeded, so readers never see a partial file and a failure leaves nothing.
 * Use: open, write..., then commit; on any error call abort (commit aborts by itself when it
 * fails). abort after commit or abort is a no-op. */
typedef struct moe_atomic_file {
    int fd;
    char *path; /* the final name */
    char *tmp;  /* the temporary name, NULL once renamed or removed */
} moe_atomic_file;

moe_status moe_atomic_open(moe_atomic_file *af, const char *path);
moe_status moe_atomic_write(moe_atomic_file *af, const void *buf, size_t len);
/* LEN zero bytes as a hole: the file offset moves on without a write (commit sets the size),
 * so they take no disk space where the file system has sparse files. */
moe_status moe_atomic_zeros(moe_atomic_file *af, uint64_t len);
moe_status moe_atomic_commit(moe_atomic_file *af);
void moe_atomic_abort(moe_atomic_file *af);

/* "DIR/NAME" in a moe_malloc'd string (no doubled '/'), or NULL when out of memory. */
char *moe_path_join(const char *dir, const char *name);

#endif
