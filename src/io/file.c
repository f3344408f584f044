/* file.c — descriptor helpers for the readers, and the temp-file-plus-rename writer. */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/error.h"

const char *moe_errno_text(int err, char *buf, size_t len)
{
    if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
    return buf;
}

static moe_status errno_status(int err, const char *what, const char *path)
{
    char text[128];
    if (err == ENOENT) return moe_error(MOE_EMISSING, "'%s' does not exist", path);
    return moe_error(MOE_EIO, "cannot %s '%s': %s", what, path,
                     moe_errno_text(err, text, sizeof text));
}

const char *moe_file_kind(unsigned mode)
{
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "a regular file";
}

static moe_status not_regular(const char *path, mode_t mode)
{
    return moe_error(MOE_EIO, "'%s' is %s, not a regular file", path, moe_file_kind(mode));
}

moe_status moe_file_open_read(const char *path, int *fd, uint64_t *size)
{
    /* stat first, so a device or FIFO is never opened at all (opening one can block, as a
     * FIFO with no writer does, or act on the device); it follows symlinks, so a link to one
     * is refused the same way. */
    struct stat st;
    if (stat(path, &st) != 0) return errno_status(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
    /* The name may be replaced between stat and open: O_NONBLOCK keeps a FIFO swapped in from
     * blocking the open, and fstat checks the file actually opened. */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) return errno_status(errno, "open", path);
    int flags;
    if (fstat(f, &st) != 0 || (flags = fcntl(f, F_GETFL)) < 0 ||
        (S_ISREG(st.st_mode) && fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0)) {
        int err = errno;
        close(f);
        return errno_status(err, "stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return not_regular(path, st.st_mode);
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return MOE_OK;
}

moe_status moe_file_pread(int fd, void *buf, size_t len, uint64_t offset, const char *path)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done;
        /* pread's count is capped in practice at about 2 GiB; ask for at most 1 GiB. */
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        if (offset + done > (uint64_t)INT64_MAX)
            return moe_error(MOE_EOVERFLOW, "'%s': offset %llu is beyond what can be read", path,
                             (unsigned long long)(offset + done));
        ssize_t got = pread(fd, p + done, want, (off_t)(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno_status(errno, "read", path);
        }
        if (got == 0)
            return moe_error(MOE_ETRUNCATED,
                             "'%s' ended after %llu bytes while reading %zu bytes at offset %llu",
                             path, (unsigned long long)(offset + done), len,
                             (unsigned long long)offset);
        done += (size_t)got;
    }
    return MOE_OK;
}

moe_status moe_file_read_all(const char *path, uint64_t max, void **buf, size_t *len)
{
    int fd;
    uint64_t size;
    moe_status st = moe_file_open_read(path, &fd, &size);
    if (st != MOE_OK) return st;
    void *data = NULL;
    if (size > max || size > SIZE_MAX) {
        st = moe_error(MOE_EOVERFLOW, "'%s' is %llu bytes, over the limit of %llu", path,
                       (unsigned long long)size, (unsigned long long)max);
        goto fail;
    }
    data = moe_malloc((size_t)size);
    if (!data) {
        st = moe_error(MOE_ENOMEM, "out of memory reading '%s' (%llu bytes)", path,
                       (unsigned long long)size);
        goto fail;
    }
    st = moe_file_pread(fd, data, (size_t)size, 0, path);
    if (st != MOE_OK) goto fail;
    close(fd);
    *buf = data;
    *len = (size_t)size;
    return MOE_OK;
fail:
    moe_free(data);
    close(fd);
    return st;
}

char *moe_path_join(const char *dir, const char *name)
{
    size_t nd = strlen(dir), nn = strlen(name);
    bool slash = nd > 0 && dir[nd - 1] != '/';
    char *p = moe_malloc(nd + slash + nn + 1);
    if (!p) return NULL;
    memcpy(p, dir, nd);
    if (slash) p[nd] = '/';
    memcpy(p + nd + slash, name, nn + 1);
    return p;
}

/* ---- atomic files ------------------------------------------------------------------- */

static atomic_uint tmp_counter;

moe_status moe_atomic_open(moe_atomic_file *af, const char *path)
{
    af->fd = -1;
    af->path = NULL;
    af->tmp = NULL;
    size_t n = strlen(path);
    /* ".tmp.<pid>.<counter>": at most 2 * 10 digits plus 6 characters and the NUL. */
    size_t cap = n + 32;
    af->path = moe_strdup(path);
    af->tmp = moe_malloc(cap);
    if (!af->path || !af->tmp) {
        moe_atomic_abort(af);
        return moe_error(MOE_ENOMEM, "out of memory opening '%s' for writing", path);
    }
    /* The same folder as PATH, so the final rename cannot cross file systems. O_EXCL with
     * a fresh name per try instead of mkstemp, because mkstemp's mode 0600 ignores the
     * umask a user expects their outputs to follow. */
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned k = atomic_fetch_add(&tmp_counter, 1u);
        snprintf(af->tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), k);
        af->fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (af->fd >= 0) return MOE_OK;
        if (errno != EEXIST) break;
    }
    int err = errno;
    char text[128];
    moe_free(af->tmp);
    af->tmp = NULL;
    moe_atomic_abort(af);
    return moe_error(MOE_EIO, "cannot create '%s' (through a temporary file): %s", path,
                     moe_errno_text(err, text, sizeof text));
}

moe_status moe_atomic_write(moe_atomic_file *af, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t put = write(af->fd, p, len);
        if (put < 0) {
            if (errno == EINTR) continue;
            char text[128];
            return moe_error(MOE_EIO, "cannot write '%s': %s", af->path,
                             moe_errno_text(errno, text, sizeof text));
        }
        p += put;
        len -= (size_t)put;
    }
    return MOE_OK;
}

moe_status moe_atomic_zeros(moe_atomic_file *af, uint64_t len)
{
    const int err = len > (uint64_t)INT64_MAX                 ? EOVERFLOW
                    : lseek(af->fd, (off_t)len, SEEK_CUR) < 0 ? errno
                                                              : 0;
    char text[128];
    if (err)
        return moe_error(MOE_EIO, "cannot write %llu zero bytes to '%s': %s",
                         (unsigned long long)len, af->path, moe_errno_text(err, text, sizeof text));
    return MOE_OK;
}

moe_status moe_atomic_commit(moe_atomic_file *af)
{
    char text[128];
    const char *what = NULL;
    int err = 0;
    /* The size, where the file ends in a hole (moe_atomic_zeros); else already the size. */
    const off_t end = lseek(af->fd, 0, SEEK_CUR);
    if (end < 0 || ftruncate(af->fd, end) != 0) {
        what = "set the size of";
        err = errno;
    }
    /* fsync before rename: otherwise a crash can leave the new name on an empty file. */
    if (!what && fsync(af->fd) != 0) {
        what = "flush";
        err = errno;
    }
    int fd = af->fd;
    af->fd = -1;
    if (close(fd) != 0 && !what) {
        what = "close";
        err = errno;
    }
    if (!what && rename(af->tmp, af->path) != 0) {
        what = "rename the temporary file to";
        err = errno;
    }
    if (what) {
        moe_status st = moe_error(MOE_EIO, "cannot %s '%s': %s", what, af->path,
                                  moe_errno_text(err, text, sizeof text));
        moe_atomic_abort(af);
        return st;
    }
    moe_free(af->tmp);
    af->tmp = NULL;
    moe_atomic_abort(af);
    return MOE_OK;
}

void moe_atomic_abort(moe_atomic_file *af)
{
    if (af->fd >= 0) close(af->fd);
    af->fd = -1;
    if (af->tmp) unlink(af->tmp);
    moe_free(af->tmp);
    af->tmp = NULL;
    moe_free(af->path);
    af->path = NULL;
}
