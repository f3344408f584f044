/* io_test_util.h — helpers for the I/O tests: the corpus manifest, temp folders, whole files. */
#ifndef MOE_IO_TEST_UTIL_H
#define MOE_IO_TEST_UTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe.h"
#include "test.h"

/* One line of tests/data/corpus/io_manifest.tsv. */
typedef struct io_case {
    char path[512]; /* absolute (MOE_TEST_DATA joined with the manifest's path) */
    char rel[512];  /* as in the manifest */
    moe_status status;
    char needle[512]; /* must occur in the message; "" for valid cases */
} io_case;

static inline const char *test_data_dir(void)
{
    const char *d = getenv("MOE_TEST_DATA");
    return d && *d ? d : "tests/data";
}

static inline moe_status status_from_name(const char *s)
{
    static const struct {
        const char *name;
        moe_status status;
    } table[] = {
        {"MOE_OK", MOE_OK},
        {"MOE_EINVAL", MOE_EINVAL},
        {"MOE_ENOMEM", MOE_ENOMEM},
        {"MOE_EIO", MOE_EIO},
        {"MOE_ESTATE", MOE_ESTATE},
        {"MOE_EUNSUPPORTED", MOE_EUNSUPPORTED},
        {"MOE_EOVERFLOW", MOE_EOVERFLOW},
        {"MOE_ERANGE", MOE_ERANGE},
        {"MOE_EMISSING", MOE_EMISSING},
        {"MOE_ETRUNCATED", MOE_ETRUNCATED},
        {"MOE_EHEADER", MOE_EHEADER},
        {"MOE_EJSON", MOE_EJSON},
        {"MOE_EDUPLICATE", MOE_EDUPLICATE},
        {"MOE_EOFFSET", MOE_EOFFSET},
        {"MOE_EDTYPE", MOE_EDTYPE},
        {"MOE_ESHAPE", MOE_ESHAPE},
        {"MOE_EPATH", MOE_EPATH},
        {"MOE_ECONFIG", MOE_ECONFIG},
        {"MOE_EVALUE", MOE_EVALUE},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].name, s) == 0) return table[i].status;
    fprintf(stderr, "io_manifest.tsv: unknown status name '%s'\n", s);
    exit(1);
}

/* The manifest's lines whose path starts with PREFIX; *n receives their number. The caller
 * frees the array. A missing manifest or a malformed line stops the test. */
static inline io_case *load_manifest(const char *prefix, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/corpus/io_manifest.tsv", test_data_dir());
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s (is MOE_TEST_DATA set?)\n", path);
        exit(1);
    }
    io_case *cases = NULL;
    size_t count = 0, cap = 0;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = '\0';
        char *t1 = strchr(line, '\t');
        char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        REQUIRE(t1 && t2);
        *t1 = *t2 = '\0';
        if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            cases = realloc(cases, cap * sizeof *cases);
            REQUIRE(cases);
        }
        io_case *c = &cases[count++];
        snprintf(c->rel, sizeof c->rel, "%.400s", line);
        snprintf(c->path, sizeof c->path, "%.100s/%.400s", test_data_dir(), line);
        c->status = status_from_name(t1 + 1);
        snprintf(c->needle, sizeof c->needle, "%.500s", t2 + 1);
    }
    fclose(f);
    *n = count;
    return cases;
}

/* The checks on opening manifest case C (NO_MMAP: how) that returned ST: the case's status;
 * on failure a message that holds the case's text and names its path (a WHAT: "file",
 * "folder"), and the output left as it was (UNTOUCHED). True when the open succeeded. */
static inline bool check_case_open(const io_case *c, int no_mmap, moe_status st, bool untouched,
                                   const char *what)
{
    const char *msg = moe_last_error();
    CHECKF(st == c->status, "%s (no_mmap=%d): got %s, want %s: %s", c->rel, no_mmap,
           moe_status_string(st), moe_status_string(c->status), msg);
    if (st == MOE_OK) return true;
    CHECKF(strstr(msg, c->needle) != NULL, "%s: message '%s' lacks '%s'", c->rel, msg, c->needle);
    CHECKF(strstr(msg, c->path) != NULL, "%s: message '%s' does not name the %s", c->rel, msg,
           what);
    CHECKF(untouched, "%s: output changed on failure", c->rel);
    return false;
}

/* Reads a whole file into a malloc'd buffer (NULL if it cannot). */
static inline unsigned char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            unsigned char *b = realloc(buf, cap);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static inline void write_whole(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(buf, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
}

/* A fresh folder under $TMPDIR (or /tmp) in BUF. */
static inline const char *make_tmpdir(char *buf, size_t cap)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, cap, "%s/moe-io-test-XXXXXX", base && *base ? base : "/tmp");
    REQUIRE(mkdtemp(buf) != NULL);
    return buf;
}

/* The number of entries in DIR other than . and .. */
static inline int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Removes DIR and the files in it (the tests make no deeper trees). */
static inline void remove_tmpdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A small deterministic generator (xorshift64*) for the mutation tests. */
static inline uint64_t test_rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717u;
}

#endif
