/* test_special_files.c — FIFOs, sockets, devices, folders and symlinks to them: errors, never a
 * hang. */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test.h"

/* A reader blocked on a FIFO with no writer would wait forever: SIGALRM's default action ends
 * the test instead, as a failure, after this many seconds for the whole program. */
#define HANG_LIMIT_S 20

/* The special files of one temp folder: each kind, and a symlink to each. */
typedef struct special {
    const char *name;
    const char *kind; /* what the message must call it */
} special;

static const special specials[] = {
    {"fifo", "a FIFO (named pipe)"},
    {"socket", "a socket"},
    {"folder", "a folder"},
    {"device", "a character device"},
    {"link_to_fifo", "a FIFO (named pipe)"},
    {"link_to_socket", "a socket"},
    {"link_to_folder", "a folder"},
    {"link_to_device", "a character device"},
};

static void make_specials(const char *dir, int *sock)
{
    char p[600], t[600];
    snprintf(p, sizeof p, "%s/fifo", dir);
    REQUIRE(mkfifo(p, 0600) == 0);
    snprintf(p, sizeof p, "%s/folder", dir);
    REQUIRE(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/device", dir);
    REQUIRE(symlink("/dev/null", p) == 0); /* /dev/null itself, through a link named plainly */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(p, sizeof p, "%s/socket", dir);
    REQUIRE(strlen(p) < sizeof addr.sun_path);
    memcpy(addr.sun_path, p, strlen(p) + 1);
    *sock = socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(*sock >= 0 && bind(*sock, (struct sockaddr *)&addr, sizeof addr) == 0);
    REQUIRE(listen(*sock, 1) == 0);
    const char *kinds[] = {"fifo", "socket", "folder", "device"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(t, sizeof t, "%s/%s", dir, kinds[i]);
        snprintf(p, sizeof p, "%s/link_to_%s", dir, kinds[i]);
        REQUIRE(symlink(t, p) == 0);
    }
}

/* Every reader of a named file, on each special file: MOE_EIO naming the path and its kind. */
static void test_readers(const char *dir)
{
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, specials[i].name);
        for (int reader = 0; reader < 4; reader++) {
            moe_status st;
            if (reader == 0) {
                int fd;
                uint64_t size;
                st = moe_file_open_read(p, &fd, &size);
            } else if (reader == 1) {
                moe_st_file *f = NULL;
                st = moe_st_open(p, NULL, &f);
                CHECK(f == NULL);
            } else if (reader == 2) {
                moe_npy a;
                memset(&a, 0, sizeof a);
                st = moe_npy_read(p, &a);
            } else {
                void *buf = NULL;
                size_t len;
                st = moe_file_read_all(p, 1 << 20, &buf, &len);
                CHECK(buf == NULL);
            }
            const char *msg = moe_last_error();
            CHECKF(st == MOE_EIO, "reader %d on %s: %s: %s", reader, specials[i].name,
                   moe_status_string(st), msg);
            CHECKF(strstr(msg, p) && strstr(msg, specials[i].kind) &&
                       strstr(msg, "not a regular file"),
                   "reader %d on %s: '%s' lacks the path or '%s'", reader, specials[i].name, msg,
                   specials[i].kind);
        }
    }
}

/* A checkpoint folder whose index or single file is a special file, including a FIFO. */
static void test_checkpoint_folders(const char *dir)
{
    const char *files[] = {"model.safetensors.index.json", "model.safetensors"};
    const char *targets[] = {"fifo", "socket", "folder", "device"};
    for (size_t f = 0; f < 2; f++)
        for (size_t t = 0; t < 4; t++) {
            char sub[600], p[700], target[600];
            snprintf(sub, sizeof sub, "%s/ckpt_%d_%d", dir, (int)f, (int)t);
            REQUIRE(mkdir(sub, 0700) == 0);
            snprintf(p, sizeof p, "%s/%s", sub, files[f]);
            snprintf(target, sizeof target, "%s/%s", dir, targets[t]);
            if (t == 0)
                REQUIRE(mkfifo(p, 0600) == 0); /* a FIFO under the very name, no link */
            else
                REQUIRE(symlink(target, p) == 0);
            moe_ckpt *ck = NULL;
            moe_status st = moe_ckpt_open(sub, NULL, &ck);
            const char *msg = moe_last_error();
            CHECKF(st == MOE_EIO && ck == NULL, "%s as %s: %s: %s", targets[t], files[f],
                   moe_status_string(st), msg);
            CHECKF(strstr(msg, files[f]) && strstr(msg, "not a regular file"), "%s as %s: '%s'",
                   targets[t], files[f], msg);
            remove_tmpdir(sub);
        }
}

int main(void)
{
    alarm(HANG_LIMIT_S);
    char dir[512];
    make_tmpdir(dir, sizeof dir);
    int sock = -1;
    make_specials(dir, &sock);
    test_readers(dir);
    test_checkpoint_folders(dir);
    close(sock);
    char folder[600];
    snprintf(folder, sizeof folder, "%s/folder", dir);
    rmdir(folder);
    remove_tmpdir(dir);
    return TEST_END();
}
