/* fuzz_util.h — what the libFuzzer targets share: the entry point, checks, a scratch folder and
 * the framing that turns one input into several files. */
#ifndef MOE_TEST_FUZZ_UTIL_H
#define MOE_TEST_FUZZ_UTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe.h"

/* libFuzzer's entry point; replay.c calls it for each corpus file when there is no libFuzzer. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a finding: abort, so libFuzzer saves the input (and replay fails). The
 * library itself never aborts; this is the harness. */
#define FUZZ_REQUIRE(cond)                                                                       \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s (last error: %s)\n", __FILE__,     \
                    __LINE__, #cond, moe_last_error());                                          \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/* A failed call must say why: a status other than OK comes with a message. */
#define FUZZ_REQUIRE_MESSAGE(st) FUZZ_REQUIRE((st) == MOE_OK || moe_last_error()[0] != '\0')

/* With MOE_FUZZ_VERBOSE set, a target says what each step returned (to see what a corpus file
 * reaches when replaying it). */
#define FUZZ_NOTE(st, ...)                                                                       \
    do {                                                                                         \
        if (getenv("MOE_FUZZ_VERBOSE")) {                                                        \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fprintf(stderr, ": %s%s%s\n", moe_status_string(st), (st) ? ": " : "",               \
                    (st) ? moe_last_error() : "");                                               \
        }                                                                                        \
    } while (0)

/* ---- A scratch folder, one per process ---------------------------------------------------- */

static char fuzz_dir_path[256];

static inline void fuzz_dir_clear(void)
{
    DIR *d = opendir(fuzz_dir_path);
    if (!d) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", fuzz_dir_path, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static inline void fuzz_dir_remove(void)
{
    fuzz_dir_clear();
    rmdir(fuzz_dir_path);
}

/* An empty folder for this run's files (made once, emptied on every call, removed at exit).
 * /dev/shm when it exists: millions of small files are written, and there they never reach a
 * disk. */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        struct stat sb;
        const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) &&
                                   access("/dev/shm", W_OK) == 0
                               ? "/dev/shm"
                               : "/tmp";
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/moe_fuzz_XXXXXX", base);
        if (!mkdtemp(fuzz_dir_path)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    fuzz_dir_clear();
    return fuzz_dir_path;
}

static inline bool fuzz_write(const char *dir, const char *name, const void *data, size_t size)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return false;
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* ---- One input, several files ---------------------------------------------------------------
 * An input is a list of files: NAME "\n" CONTENT, separated by FUZZ_SEP. The separator is text
 * so that seeds can be made with cat and printf, and so that mutations inside a file rarely
 * create one. Names the harness would not write safely (anything but [A-Za-z0-9._-], a leading
 * '.', over 64 bytes) are skipped: the library's own path checks are fuzzed through the index,
 * whose shard names it joins itself. */

#define FUZZ_SEP "\n--moe-fuzz-file--\n"
#define FUZZ_MAX_FILES 16

typedef struct fuzz_file {
    char name[65];
    const uint8_t *data;
    size_t size;
} fuzz_file;

static inline const uint8_t *fuzz_find(const uint8_t *p, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (p[i] == (uint8_t)needle[0] && memcmp(p + i, needle, k) == 0) return p + i;
    return NULL;
}

static inline bool fuzz_safe_name(const uint8_t *p, size_t n)
{
    if (n == 0 || n > 64 || p[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = p[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

/* Splits DATA into at most FUZZ_MAX_FILES files; returns how many have a usable name. */
static inline size_t fuzz_split(const uint8_t *data, size_t size, fuzz_file *files)
{
    size_t n = 0;
    const size_t sep = strlen(FUZZ_SEP);
    while (n < FUZZ_MAX_FILES) {
        const uint8_t *end = fuzz_find(data, size, FUZZ_SEP);
        const size_t len = end ? (size_t)(end - data) : size;
        const uint8_t *nl = memchr(data, '\n', len);
        if (nl && fuzz_safe_name(data, (size_t)(nl - data))) {
            fuzz_file *f = &files[n++];
            memcpy(f->name, data, (size_t)(nl - data));
            f->name[nl - data] = '\0';
            f->data = nl + 1;
            f->size = len - (size_t)(nl - data) - 1;
        }
        if (!end) break;
        data = end + sep;
        size -= len + sep;
    }
    return n;
}

/* Writes the files of DATA into an emptied scratch folder and returns it. */
static inline const char *fuzz_write_folder(const uint8_t *data, size_t size)
{
    fuzz_file files[FUZZ_MAX_FILES];
    const size_t n = fuzz_split(data, size, files);
    const char *dir = fuzz_dir();
    for (size_t i = 0; i < n; i++)
        if (!fuzz_write(dir, files[i].name, files[i].data, files[i].size)) {
            perror("fuzz: writing a scratch file");
            abort();
        }
    return dir;
}

#endif
