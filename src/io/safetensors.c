/* safetensors.c — open one .safetensors file: validate the whole header, then map or read it. */
#define _DEFAULT_SOURCE /* madvise and MADV_DONTNEED (moe_st_release) */
#include "io/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/shape_text.h"
#include "dtype/dtype.h"
#include "io/file.h"
#include "io/json_util.h"

#define ST_METADATA "__metadata__"

typedef struct st_meta {
    const char *key;
    const char *value;
} st_meta;

struct moe_st_file {
    char *path;                /* also every tensor's ->file */
    moe_tensor *tensors;       /* in offset order */
    const moe_tensor **byname; /* the same tensors in strcmp order, for moe_st_find */
    size_t count;
    st_meta *meta; /* sorted by key */
    size_t meta_count;
    char *strings; /* one arena for tensor names and metadata */
    void *map;     /* the whole file when mapped */
    size_t map_len;
    int fd; /* kept open while mapped, to measure the file again (moe_st_check_size); else -1 */
    void *buf; /* the data area when read with no_mmap */
};

/* ---- small helpers ------------------------------------------------------------------- */

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reads an exact JSON integer in [0, 2^48-1]. A non-integer is MOE_EJSON, a negative value
 * NEG_STATUS, a value past the schema's bound MOE_EOVERFLOW; messages name the file, the
 * tensor and FIELD[I]. */
static moe_status get_u48(const json_t *v, const char *file, const char *tensor, const char *field,
                          size_t i, moe_status neg_status, uint64_t *out)
{
    if (!json_is_integer(v))
        return moe_error(MOE_EJSON, "%s: tensor '%s': %s[%zu] is %s, not an integer", file, tensor,
                         field, i, moe_json_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return moe_error(neg_status, "%s: tensor '%s': %s[%zu] = %lld is negative", file, tensor,
                         field, i, (long long)x);
    if ((uint64_t)x > MOE_JSON_MAX_INT)
        return moe_error(MOE_EOVERFLOW,
                         "%s: tensor '%s': %s[%zu] = %lld exceeds the format's limit 2^48-1", file,
                         tensor, field, i, (long long)x);
    *out = (uint64_t)x;
    return MOE_OK;
}

/* ---- one tensor entry ---------------------------------------------------------------- */

static moe_status parse_dtype(const json_t *entry, const char *file, const char *name,
                              moe_tensor *t)
{
    const json_t *v = json_object_get(entry, "dtype");
    if (!v) return moe_error(MOE_EMISSING, "%s: tensor '%s': missing field 'dtype'", file, name);
    if (!json_is_string(v))
        return moe_error(MOE_EJSON, "%s: tensor '%s': dtype is %s, not a string", file, name,
                         moe_json_type_name(v));
    const char *s = json_string_value(v);
    t->dtype = moe_dtype_from_safetensors(s);
    if (t->dtype == MOE_DTYPE_INVALID)
        return moe_error(MOE_EDTYPE, "%s: tensor '%s': unknown dtype '%s'", file, name, s);
    return MOE_OK;
}

static moe_status parse_shape(const json_t *entry, const char *file, const char *name,
                              moe_tensor *t)
{
    const json_t *v = json_object_get(entry, "shape");
    if (!v) return moe_error(MOE_EMISSING, "%s: tensor '%s': missing field 'shape'", file, name);
    if (!json_is_array(v))
        return moe_error(MOE_EJSON, "%s: tensor '%s': shape is %s, not an array", file, name,
                         moe_json_type_name(v));
    size_t ndim = json_array_size(v);
    if (ndim > MOE_MAX_DIMS)
        return moe_error(MOE_EUNSUPPORTED, "%s: tensor '%s': rank %zu exceeds the supported %d",
                         file, name, ndim, MOE_MAX_DIMS);
    uint64_t count = 1;
    for (size_t i = 0; i < ndim; i++) {
        uint64_t d;
        moe_status st = get_u48(json_array_get(v, i), file, name, "shape", i, MOE_ESHAPE, &d);
        if (st != MOE_OK) return st;
        t->shape[i] = (int64_t)d;
        /* Checked at every step, as the reference reader does, so no intermediate product
         * wraps (ggml #27203 reopened an overflow by testing only the end); a shape whose
         * prefix overflows is refused even if a later dimension is 0. */
        if (moe_mul_overflow_u64(count, d, &count)) {
            char buf[200];
            return moe_error(MOE_EOVERFLOW,
                             "%s: tensor '%s': element count of shape %s overflows 64 bits", file,
                             name, moe_shape_text(t->shape, (int)i + 1, buf, sizeof buf));
        }
    }
    t->ndim = (int)ndim;
    t->count = count;
    return MOE_OK;
}

static moe_status parse_offsets(const json_t *entry, const char *file, const char *name,
                                moe_tensor *t)
{
    const json_t *v = json_object_get(entry, "data_offsets");
    if (!v)
        return moe_error(MOE_EMISSING, "%s: tensor '%s': missing field 'data_offsets'", file, name);
    if (!json_is_array(v))
        return moe_error(MOE_EJSON, "%s: tensor '%s': data_offsets is %s, not an array", file, name,
                         moe_json_type_name(v));
    if (json_array_size(v) != 2)
        return moe_error(MOE_EOFFSET, "%s: tensor '%s': data_offsets has %zu entries, not 2", file,
                         name, json_array_size(v));
    uint64_t begin, end;
    moe_status st =
        get_u48(json_array_get(v, 0), file, name, "data_offsets", 0, MOE_EOFFSET, &begin);
    if (st == MOE_OK)
        st = get_u48(json_array_get(v, 1), file, name, "data_offsets", 1, MOE_EOFFSET, &end);
    if (st != MOE_OK) return st;
    if (end < begin)
        return moe_error(MOE_EOFFSET,
                         "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", file,
                         name, (unsigned long long)begin, (unsigned long long)end);
    t->begin = begin;
    t->nbytes = end - begin;
    return MOE_OK;
}

/* The byte size the shape and dtype call for must be what the offsets span. */
static moe_status check_size(const char *file, const char *name, const moe_tensor *t)
{
    unsigned bits = moe_dtype_bits(t->dtype);
    const char *dt = moe_dtype_safetensors_name(t->dtype);
    char buf[200];
    uint64_t total_bits;
    if (moe_mul_overflow_u64(t->count, bits, &total_bits))
        return moe_error(MOE_EOVERFLOW,
                         "%s: tensor '%s': %llu elements of %s overflow 64 bits of size", file,
                         name, (unsigned long long)t->count, dt);
    if (total_bits % 8 != 0)
        return moe_error(MOE_ESHAPE,
                         "%s: tensor '%s': %llu elements of %u-bit %s do not fill whole bytes",
                         file, name, (unsigned long long)t->count, bits, dt);
    if (total_bits / 8 != t->nbytes)
        return moe_error(MOE_ESHAPE,
                         "%s: tensor '%s': shape %s of %s needs %llu bytes, but data_offsets "
                         "[%llu, %llu] hold %llu",
                         file, name, moe_shape_text(t->shape, t->ndim, buf, sizeof buf), dt,
                         (unsigned long long)(total_bits / 8), (unsigned long long)t->begin,
                         (unsigned long long)(t->begin + t->nbytes), (unsigned long long)t->nbytes);
    return MOE_OK;
}

static moe_status parse_tensor(const json_t *entry, const char *file, const char *name,
                               moe_tensor *t)
{
    if (!json_is_object(entry))
        return moe_error(MOE_EJSON, "%s: tensor '%s': entry is %s, not an object", file, name,
                         moe_json_type_name(entry));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)entry, key, v)
    {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return moe_error(MOE_EHEADER, "%s: tensor '%s': unknown field '%s'", file, name, key);
    }
    moe_status st = parse_dtype(entry, file, name, t);
    if (st == MOE_OK) st = parse_shape(entry, file, name, t);
    if (st == MOE_OK) st = parse_offsets(entry, file, name, t);
    if (st == MOE_OK) st = check_size(file, name, t);
    return st;
}

/* ---- __metadata__ -------------------------------------------------------------------- */

static moe_status check_metadata(const json_t *meta, const char *file, size_t *count, size_t *chars)
{
    if (!json_is_object(meta))
        return moe_error(MOE_EJSON, "%s: '__metadata__' is %s, not an object of strings", file,
                         moe_json_type_name(meta));
    /* A tensor entry under the reserved name would otherwise be reported as "a value is
     * not a string", which hides what happened (safetensors issue #849). */
    const json_t *shape = json_object_get(meta, "shape");
    const json_t *offsets = json_object_get(meta, "data_offsets");
    if ((shape && !json_is_string(shape)) || (offsets && !json_is_string(offsets)))
        return moe_error(MOE_EHEADER,
                         "%s: a tensor may not be named '__metadata__' (the name is reserved "
                         "for string metadata)",
                         file);
    const char *key;
    const json_t *v;
    size_t n = 0, c = 0;
    json_object_foreach((json_t *)meta, key, v)
    {
        if (!json_is_string(v))
            return moe_error(MOE_EJSON, "%s: __metadata__ value of '%s' is %s, not a string", file,
                             key, moe_json_type_name(v));
        /* jansson rejects NUL inside strings, so strlen is the whole value. */
        if (moe_add_overflow_size(c, strlen(key) + strlen(json_string_value(v)) + 2, &c))
            return moe_error(MOE_EOVERFLOW, "%s: __metadata__ is too large", file);
        n++;
    }
    *count = n;
    *chars = c;
    return MOE_OK;
}

/* ---- the header as a whole ----------------------------------------------------------- */

static int cmp_offset(const void *a, const void *b)
{
    const moe_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_name_ptr(const void *a, const void *b)
{
    const moe_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int cmp_meta(const void *a, const void *b)
{
    const st_meta *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* The JSON's order means nothing: sorted by offset, the tensors must tile [0, DATA_SIZE)
 * exactly, with no hole (hidden bytes), no overlap (the memory-amplification attack) and
 * no trailing bytes (polyglot files). */
static moe_status check_layout(const moe_st_file *f, uint64_t data_size)
{
    uint64_t expect = 0;
    const moe_tensor *prev = NULL;
    for (size_t i = 0; i < f->count; i++) {
        const moe_tensor *t = &f->tensors[i];
        if (!prev && t->begin != 0)
            return moe_error(MOE_EOFFSET,
                             "%s: tensor '%s': the first tensor in the data area starts at byte "
                             "%llu, not 0",
                             f->path, t->name, (unsigned long long)t->begin);
        if (prev && t->begin > expect)
            return moe_error(MOE_EOFFSET,
                             "%s: tensor '%s': hole of %llu bytes between '%s' (ends at %llu) and "
                             "'%s' (starts at %llu)",
                             f->path, t->name, (unsigned long long)(t->begin - expect), prev->name,
                             (unsigned long long)expect, t->name, (unsigned long long)t->begin);
        if (prev && t->begin < expect)
            return moe_error(
                MOE_EOFFSET, "%s: tensor '%s': [%llu, %llu) overlaps '%s' [%llu, %llu)", f->path,
                t->name, (unsigned long long)t->begin, (unsigned long long)(t->begin + t->nbytes),
                prev->name, (unsigned long long)prev->begin, (unsigned long long)expect);
        expect = t->begin + t->nbytes; /* both < 2^48: no overflow */
        prev = t;
    }
    if (expect > data_size)
        return moe_error(MOE_ETRUNCATED,
                         "%s: tensor '%s' ends at byte %llu of the data area, but the file "
                         "holds only %llu data bytes",
                         f->path, prev->name, (unsigned long long)expect,
                         (unsigned long long)data_size);
    if (expect < data_size && !prev)
        return moe_error(MOE_EOFFSET,
                         "%s: %llu trailing bytes after a header that lists no tensors", f->path,
                         (unsigned long long)data_size);
    if (expect < data_size)
        return moe_error(MOE_EOFFSET, "%s: %llu trailing bytes after the last tensor '%s'", f->path,
                         (unsigned long long)(data_size - expect), prev->name);
    return MOE_OK;
}

/* First pass: the metadata, the number of tensors and the bytes their names need. */
static moe_status survey(const json_t *root, const char *file, size_t *ntensors, size_t *nmeta,
                         size_t *chars)
{
    const char *key;
    const json_t *v;
    size_t n = 0, c = 0;
    *nmeta = 0;
    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, ST_METADATA) == 0) {
            size_t mc = 0;
            moe_status st = check_metadata(v, file, nmeta, &mc);
            if (st != MOE_OK) return st;
            if (moe_add_overflow_size(c, mc, &c)) goto overflow;
            continue;
        }
        if (key[0] == '\0') return moe_error(MOE_EHEADER, "%s: a tensor has an empty name", file);
        if (moe_add_overflow_size(c, strlen(key) + 1, &c)) goto overflow;
        n++;
    }
    *ntensors = n;
    *chars = c;
    return MOE_OK;
overflow:
    return moe_error(MOE_EOVERFLOW, "%s: header names are too large", file);
}

static char *arena_put(char **cursor, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = *cursor;
    memcpy(p, s, n);
    *cursor += n;
    return p;
}

/* Second pass: every entry into f (whose arrays survey sized). */
static moe_status fill_entries(moe_st_file *f, const json_t *root)
{
    char *cursor = f->strings;
    const char *key;
    const json_t *v;
    size_t ti = 0;
    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, ST_METADATA) == 0) {
            const char *mk;
            const json_t *mv;
            size_t mi = 0;
            json_object_foreach((json_t *)v, mk, mv)
            {
                f->meta[mi].key = arena_put(&cursor, mk);
                f->meta[mi].value = arena_put(&cursor, json_string_value(mv));
                mi++;
            }
            continue;
        }
        moe_tensor *t = &f->tensors[ti++];
        t->name = arena_put(&cursor, key);
        t->file = f->path;
        moe_status st = parse_tensor(v, f->path, t->name, t);
        if (st != MOE_OK) return st;
    }
    return MOE_OK;
}

/* Parses and validates the header JSON into F (f->path set); DATA_SIZE is the number of
 * bytes after the header. Leaves the data pointers unset. */
static moe_status parse_header(moe_st_file *f, const void *json, size_t n, uint64_t data_size)
{
    json_t *root = NULL;
    moe_status st = moe_json_parse(json, n, f->path, "header", &root);
    if (st != MOE_OK) return st;
    if (!json_is_object(root)) {
        st = moe_error(MOE_EJSON, "%s: header is %s, not a JSON object", f->path,
                       moe_json_type_name(root));
        goto done;
    }
    size_t chars = 0;
    st = survey(root, f->path, &f->count, &f->meta_count, &chars);
    if (st != MOE_OK) goto done;
    /* Each tensor took at least a few dozen header bytes, so these sizes are bounded by the
     * header (≤ 100 MB) times a small factor; moe_calloc still checks the products. */
    f->tensors = moe_calloc(f->count, sizeof *f->tensors);
    f->byname = moe_calloc(f->count, sizeof *f->byname);
    f->meta = moe_calloc(f->meta_count, sizeof *f->meta);
    f->strings = moe_malloc(chars);
    if (!f->tensors || !f->byname || !f->meta || !f->strings) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for %zu tensors", f->path, f->count);
        goto done;
    }
    st = fill_entries(f, root);
    if (st != MOE_OK) goto done;
    qsort(f->tensors, f->count, sizeof *f->tensors, cmp_offset);
    st = check_layout(f, data_size);
    if (st != MOE_OK) goto done;
    for (size_t i = 0; i < f->count; i++)
        f->byname[i] = &f->tensors[i];
    qsort(f->byname, f->count, sizeof *f->byname, cmp_name_ptr);
    qsort(f->meta, f->meta_count, sizeof *f->meta, cmp_meta);
done:
    json_decref(root);
    return st;
}

/* The 8-byte length prefix against the limit and the size of the whole input. */
static moe_status check_prefix(const char *name, const unsigned char prefix[8], uint64_t size,
                               uint64_t *n)
{
    uint64_t len = load_le64(prefix);
    if (len > MOE_ST_MAX_HEADER)
        return moe_error(MOE_EHEADER, "%s: header length %llu exceeds the limit of %u bytes", name,
                         (unsigned long long)len, MOE_ST_MAX_HEADER);
    if (len > size - 8)
        return moe_error(MOE_ETRUNCATED,
                         "%s: header length %llu runs past the end of the file (%llu bytes)", name,
                         (unsigned long long)len, (unsigned long long)size);
    *n = len;
    return MOE_OK;
}

static moe_status too_short(const char *name, uint64_t size)
{
    return moe_error(MOE_ETRUNCATED,
                     "%s: file is %llu bytes, shorter than the 8-byte header length", name,
                     (unsigned long long)size);
}

static moe_st_file *new_file(const char *name)
{
    moe_st_file *f = moe_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->fd = -1;
    f->path = moe_strdup(name);
    if (!f->path) {
        moe_free(f);
        return NULL;
    }
    return f;
}

static void set_data(moe_st_file *f, const unsigned char *base)
{
    for (size_t i = 0; i < f->count; i++)
        f->tensors[i].data = base + f->tensors[i].begin;
}

/* Maps the whole file, or reads the data area into memory. */
static moe_status load_data(moe_st_file *f, int fd, uint64_t size, uint64_t n, bool no_mmap)
{
    uint64_t data_size = size - 8 - n;
    char text[128];
    if (size > SIZE_MAX)
        return moe_error(MOE_EOVERFLOW, "%s: file of %llu bytes does not fit in memory", f->path,
                         (unsigned long long)size);
    if (no_mmap) {
        f->buf = moe_malloc((size_t)data_size);
        if (!f->buf)
            return moe_error(MOE_ENOMEM, "%s: out of memory reading %llu data bytes", f->path,
                             (unsigned long long)data_size);
        moe_status st = moe_file_pread(fd, f->buf, (size_t)data_size, 8 + n, f->path);
        if (st != MOE_OK) return st;
        set_data(f, f->buf);
        return MOE_OK;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        int err = errno;
        return moe_error(err == ENOMEM ? MOE_ENOMEM : MOE_EIO,
                         "%s: cannot map %llu bytes: %s (the no_mmap option reads instead)",
                         f->path, (unsigned long long)size, moe_errno_text(err, text, sizeof text));
    }
    f->map = m;
    f->map_len = (size_t)size;
    set_data(f, (const unsigned char *)m + 8 + n);
    return MOE_OK;
}

moe_status moe_st_open(const char *path, const moe_st_options *options, moe_st_file **out)
{
    if (!path || !out)
        return moe_error(MOE_EINVAL, "moe_st_open: %s is NULL", path ? "out" : "path");
    int fd;
    uint64_t size;
    moe_status st = moe_file_open_read(path, &fd, &size);
    if (st != MOE_OK) return st;
    moe_st_file *f = NULL;
    void *header = NULL;
    unsigned char prefix[8];
    uint64_t n = 0;
    if (size < 8) {
        st = too_short(path, size);
        goto fail;
    }
    st = moe_file_pread(fd, prefix, 8, 0, path);
    if (st == MOE_OK) st = check_prefix(path, prefix, size, &n);
    if (st != MOE_OK) goto fail;
    f = new_file(path);
    header = moe_malloc((size_t)n);
    if (!f || !header) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)n);
        goto fail;
    }
    st = moe_file_pread(fd, header, (size_t)n, 8, path);
    /* The whole layout, including the file size against the last tensor's end, is checked
     * here, before anything is mapped: a short file can then never SIGBUS a reader. */
    if (st == MOE_OK) st = parse_header(f, header, (size_t)n, size - 8 - n);
    if (st == MOE_OK) st = load_data(f, fd, size, n, options && options->no_mmap);
    if (st != MOE_OK) goto fail;
    moe_free(header);
    /* A mapped file keeps its descriptor: fstat on it measures the very file that is mapped,
     * even after the name was renamed over or removed. */
    if (f->map)
        f->fd = fd;
    else
        close(fd);
    *out = f;
    return MOE_OK;
fail:
    moe_free(header);
    moe_st_close(f);
    close(fd);
    return st;
}

moe_status moe_st_open_memory(const void *buf, size_t len, const char *name, moe_st_file **out)
{
    if (!out || (!buf && len > 0))
        return moe_error(MOE_EINVAL, "moe_st_open_memory: %s is NULL", out ? "buf" : "out");
    if (!name) name = "<memory>";
    if (len < 8) return too_short(name, len);
    const unsigned char *p = buf;
    uint64_t n = 0;
    moe_status st = check_prefix(name, p, len, &n);
    if (st != MOE_OK) return st;
    moe_st_file *f = new_file(name);
    if (!f) return moe_error(MOE_ENOMEM, "%s: out of memory", name);
    st = parse_header(f, p + 8, (size_t)n, len - 8 - n);
    if (st != MOE_OK) {
        moe_st_close(f);
        return st;
    }
    set_data(f, p + 8 + n);
    *out = f;
    return MOE_OK;
}

void moe_st_close(moe_st_file *file)
{
    if (!file) return;
    if (file->map) munmap(file->map, file->map_len);
    if (file->fd >= 0) close(file->fd);
    moe_free(file->buf);
    moe_free(file->strings);
    moe_free(file->meta);
    moe_free(file->byname);
    moe_free(file->tensors);
    moe_free(file->path);
    moe_free(file);
}

void moe_st_release_range(const moe_st_file *file, const moe_tensor *tensor, uint64_t offset,
                          uint64_t len)
{
    if (!file || !file->map || !moe_st_holds(file, tensor)) return;
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || offset >= tensor->nbytes) return;
    if (len > tensor->nbytes - offset) len = tensor->nbytes - offset;
    /* Only whole pages inside the range: the pages at its ends may hold a neighbour's bytes. */
    const uintptr_t begin = (uintptr_t)tensor->data + (uintptr_t)offset,
                    end = begin + (uintptr_t)len;
    const uintptr_t lo = (begin + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    const uintptr_t hi = end / (uintptr_t)page * (uintptr_t)page;
    if (hi <= lo) return;
    /* Advice only: on failure the pages simply stay resident. */
    (void)madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED);
}

void moe_st_release(const moe_st_file *file, const moe_tensor *tensor)
{
    if (tensor) moe_st_release_range(file, tensor, 0, tensor->nbytes);
}

moe_status moe_st_check_size(const moe_st_file *file)
{
    if (!file || file->fd < 0) return MOE_OK;
    struct stat sb;
    if (fstat(file->fd, &sb) != 0) {
        char text[128];
        return moe_error(MOE_EIO, "%s: cannot measure the mapped file again: %s", file->path,
                         moe_errno_text(errno, text, sizeof text));
    }
    if ((uint64_t)sb.st_size < (uint64_t)file->map_len)
        return moe_error(MOE_ETRUNCATED,
                         "%s: the file is now %llu bytes, shorter than the %zu bytes it had when "
                         "it was opened: it changed after open, and its tensors are not read "
                         "(the no_mmap option reads the files at open instead)",
                         file->path, (unsigned long long)sb.st_size, file->map_len);
    return MOE_OK;
}

bool moe_st_holds(const moe_st_file *file, const moe_tensor *tensor)
{
    if (!file || !tensor || file->count == 0) return false;
    /* Integer comparison: the tensor may belong to another file's array. */
    const uintptr_t t = (uintptr_t)tensor, first = (uintptr_t)file->tensors;
    return t >= first && t < first + file->count * sizeof *file->tensors;
}

size_t moe_st_count(const moe_st_file *file) { return file ? file->count : 0; }

const moe_tensor *moe_st_tensor(const moe_st_file *file, size_t index)
{
    if (!file || index >= file->count) return NULL;
    return &file->tensors[index];
}

const moe_tensor *moe_st_find(const moe_st_file *file, const char *name)
{
    if (!file || !name) return NULL;
    size_t lo = 0, hi = file->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, file->byname[mid]->name);
        if (c == 0) return file->byname[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *moe_st_metadata(const moe_st_file *file, const char *key)
{
    if (!file || !key) return NULL;
    st_meta probe = {key, NULL};
    const st_meta *m = bsearch(&probe, file->meta, file->meta_count, sizeof *file->meta, cmp_meta);
    return m ? m->value : NULL;
}
