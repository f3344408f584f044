/* st_writer.c — stream a .safetensors file to disk tensor by tensor, in bounded chunks. */
#include "io/st_writer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "dtype/dtype.h"
#include "io/file.h"
#include "io/json_util.h"
#include "io/safetensors.h"

/* The fill callback's largest chunk: memory stays at this whatever the tensor sizes. */
#define STW_CHUNK ((size_t)1 << 20)

typedef struct stw_tensor {
    char *name;
    moe_dtype dtype;
    int ndim;
    int64_t shape[MOE_MAX_DIMS];
    uint64_t nbytes;
    size_t index; /* declaration order, what FILL is told */
    uint64_t begin;
} stw_tensor;

typedef struct stw_meta {
    char *key;
    char *value;
} stw_meta;

struct moe_st_writer {
    stw_tensor *tensors;
    size_t count, cap;
    /* Open addressing over tensor indices + 1 (0 = empty), so a 50k-tensor file does not
     * pay a quadratic duplicate check. */
    size_t *slots;
    size_t nslots;
    stw_meta *meta;
    size_t meta_count, meta_cap;
};

moe_status moe_st_writer_create(moe_st_writer **out)
{
    if (!out) return moe_error(MOE_EINVAL, "moe_st_writer_create: out is NULL");
    moe_st_writer *w = moe_calloc(1, sizeof *w);
    if (!w) return moe_error(MOE_ENOMEM, "out of memory creating a safetensors writer");
    *out = w;
    return MOE_OK;
}

void moe_st_writer_destroy(moe_st_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->count; i++)
        moe_free(w->tensors[i].name);
    for (size_t i = 0; i < w->meta_count; i++) {
        moe_free(w->meta[i].key);
        moe_free(w->meta[i].value);
    }
    moe_free(w->tensors);
    moe_free(w->slots);
    moe_free(w->meta);
    moe_free(w);
}

/* ---- the name set -------------------------------------------------------------------- */

static size_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a 64 */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

/* The slot holding NAME, or the empty slot where it would go. nslots is a power of two. */
static size_t *find_slot(const moe_st_writer *w, const char *name)
{
    size_t mask = w->nslots - 1;
    for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        size_t *s = &w->slots[i];
        if (*s == 0 || strcmp(w->tensors[*s - 1].name, name) == 0) return s;
    }
}

/* Keeps the table at most half full, so probes stay short and an empty slot always exists. */
static moe_status grow_slots(moe_st_writer *w)
{
    if ((w->count + 1) * 2 <= w->nslots) return MOE_OK;
    size_t n = w->nslots ? w->nslots * 2 : 64;
    size_t *slots = moe_calloc(n, sizeof *slots);
    if (!slots) return moe_error(MOE_ENOMEM, "out of memory for %zu tensor names", w->count + 1);
    moe_free(w->slots);
    w->slots = slots;
    w->nslots = n;
    for (size_t i = 0; i < w->count; i++)
        *find_slot(w, w->tensors[i].name) = i + 1;
    return MOE_OK;
}

/* jansson refuses strings that are not UTF-8; asking it keeps one notion of valid text. */
static bool valid_utf8(const char *s)
{
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

/* ---- declaring ----------------------------------------------------------------------- */

static moe_status check_tensor(const char *name, moe_dtype dtype, int ndim, const int64_t *shape,
                               uint64_t *nbytes)
{
    if (!name || name[0] == '\0')
        return moe_error(MOE_EINVAL, "moe_st_writer_add: tensor name is %s",
                         name ? "empty" : "NULL");
    if (strcmp(name, "__metadata__") == 0)
        return moe_error(MOE_EINVAL,
                         "moe_st_writer_add: '__metadata__' is reserved, not a tensor name");
    if (!valid_utf8(name))
        return moe_error(MOE_EINVAL, "moe_st_writer_add: tensor name is not valid UTF-8");
    const char *dt = moe_dtype_safetensors_name(dtype);
    if (!dt)
        return moe_error(MOE_EDTYPE, "tensor '%s': dtype %s has no safetensors name", name,
                         moe_dtype_name(dtype));
    if (ndim < 0 || ndim > MOE_MAX_DIMS || (ndim > 0 && !shape))
        return moe_error(MOE_EINVAL, "tensor '%s': ndim %d (want 0..%d with a shape)", name, ndim,
                         MOE_MAX_DIMS);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > MOE_JSON_MAX_INT)
            return moe_error(MOE_ESHAPE, "tensor '%s': shape[%d] = %lld is outside [0, 2^48-1]",
                             name, i, (long long)shape[i]);
        if (moe_mul_overflow_u64(count, (uint64_t)shape[i], &count))
            return moe_error(MOE_EOVERFLOW, "tensor '%s': the element count overflows", name);
    }
    uint64_t bits;
    if (moe_mul_overflow_u64(count, moe_dtype_bits(dtype), &bits) || bits / 8 > MOE_JSON_MAX_INT)
        return moe_error(MOE_EOVERFLOW, "tensor '%s': the byte size exceeds 2^48-1", name);
    if (bits % 8 != 0)
        return moe_error(MOE_ESHAPE, "tensor '%s': %llu elements of %s do not fill whole bytes",
                         name, (unsigned long long)count, dt);
    *nbytes = bits / 8;
    return MOE_OK;
}

moe_status moe_st_writer_add(moe_st_writer *w, const char *name, moe_dtype dtype, int ndim,
                             const int64_t *shape)
{
    if (!w) return moe_error(MOE_EINVAL, "moe_st_writer_add: writer is NULL");
    uint64_t nbytes = 0;
    moe_status st = check_tensor(name, dtype, ndim, shape, &nbytes);
    if (st != MOE_OK) return st;
    st = grow_slots(w);
    if (st != MOE_OK) return st;
    size_t *slot = find_slot(w, name);
    if (*slot) return moe_error(MOE_EDUPLICATE, "tensor '%s' is declared twice", name);
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        stw_tensor *t = moe_realloc(w->tensors, cap * sizeof *t);
        if (!t) return moe_error(MOE_ENOMEM, "out of memory adding tensor '%s'", name);
        w->tensors = t;
        w->cap = cap;
    }
    stw_tensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    t->name = moe_strdup(name);
    if (!t->name) return moe_error(MOE_ENOMEM, "out of memory adding tensor '%s'", name);
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->nbytes = nbytes;
    t->index = w->count;
    *slot = ++w->count;
    return MOE_OK;
}

moe_status moe_st_writer_metadata(moe_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value)
        return moe_error(MOE_EINVAL, "moe_st_writer_metadata: %s is NULL",
                         !w     ? "writer"
                         : !key ? "key"
                                : "value");
    if (!valid_utf8(key) || !valid_utf8(value))
        return moe_error(MOE_EINVAL, "metadata '%s': key or value is not valid UTF-8", key);
    for (size_t i = 0; i < w->meta_count; i++)
        if (strcmp(w->meta[i].key, key) == 0)
            return moe_error(MOE_EDUPLICATE, "metadata key '%s' is set twice", key);
    if (w->meta_count == w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap * 2 : 8;
        stw_meta *m = moe_realloc(w->meta, cap * sizeof *m);
        if (!m) return moe_error(MOE_ENOMEM, "out of memory adding metadata '%s'", key);
        w->meta = m;
        w->meta_cap = cap;
    }
    char *k = moe_strdup(key), *v = moe_strdup(value);
    if (!k || !v) {
        moe_free(k);
        moe_free(v);
        return moe_error(MOE_ENOMEM, "out of memory adding metadata '%s'", key);
    }
    w->meta[w->meta_count++] = (stw_meta){k, v};
    return MOE_OK;
}

/* ---- writing ------------------------------------------------------------------------- */

static uint64_t align_of(const stw_tensor *t)
{
    unsigned bytes = moe_dtype_bits(t->dtype) / 8;
    return bytes ? bytes : 1;
}

/* Larger elements first, so every tensor starts at a multiple of its own element size once
 * the data area starts at a multiple of 8 (the reference writer's order, safetensors #148);
 * then by name, so the layout does not depend on the declaration order. */
static int cmp_file_order(const void *a, const void *b)
{
    const stw_tensor *x = *(const stw_tensor *const *)a, *y = *(const stw_tensor *const *)b;
    uint64_t ax = align_of(x), ay = align_of(y);
    if (ax != ay) return ax > ay ? -1 : 1;
    return strcmp(x->name, y->name);
}

static json_t *tensor_json(const stw_tensor *t)
{
    json_t *shape = json_array();
    for (int i = 0; shape && i < t->ndim; i++)
        if (json_array_append_new(shape, json_integer(t->shape[i])) != 0) {
            json_decref(shape);
            return NULL;
        }
    json_t *offsets = json_array();
    if (offsets &&
        (json_array_append_new(offsets, json_integer((json_int_t)t->begin)) != 0 ||
         json_array_append_new(offsets, json_integer((json_int_t)(t->begin + t->nbytes))) != 0)) {
        json_decref(offsets);
        offsets = NULL;
    }
    json_t *e = json_object();
    if (!shape || !offsets || !e ||
        json_object_set_new(e, "dtype", json_string(moe_dtype_safetensors_name(t->dtype))) != 0 ||
        json_object_set(e, "shape", shape) != 0 ||
        json_object_set(e, "data_offsets", offsets) != 0) {
        json_decref(e);
        e = NULL;
    }
    json_decref(shape);
    json_decref(offsets);
    return e;
}

static json_t *header_json(const moe_st_writer *w, stw_tensor *const *order)
{
    json_t *root = json_object();
    if (!root) return NULL;
    if (w->meta_count > 0) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) goto fail;
        for (size_t i = 0; i < w->meta_count; i++)
            if (json_object_set_new(meta, w->meta[i].key, json_string(w->meta[i].value)) != 0)
                goto fail;
    }
    for (size_t i = 0; i < w->count; i++) {
        json_t *e = tensor_json(order[i]);
        if (!e || json_object_set_new(root, order[i]->name, e) != 0) goto fail;
    }
    return root;
fail:
    json_decref(root);
    return NULL;
}

/* The header bytes: the 8-byte length, the compact JSON, spaces up to a multiple of 8. */
static moe_status build_header(const moe_st_writer *w, stw_tensor *const *order, const char *path,
                               char **out, size_t *out_len)
{
    json_t *root = header_json(w, order);
    if (!root) return moe_error(MOE_ENOMEM, "%s: out of memory building the header", path);
    size_t json_len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    size_t total = (8 + json_len + 7) / 8 * 8;
    moe_status st = MOE_OK;
    char *buf = NULL;
    if (json_len == 0) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory serialising the header", path);
        goto done;
    }
    if (total - 8 > MOE_ST_MAX_HEADER) {
        st = moe_error(MOE_EOVERFLOW, "%s: the header (%zu bytes) exceeds the limit of %u", path,
                       json_len, MOE_ST_MAX_HEADER);
        goto done;
    }
    buf = moe_malloc(total);
    if (!buf) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for a %zu-byte header", path, total);
        goto done;
    }
    uint64_t n = total - 8;
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((n >> (8 * i)) & 0xff);
    json_dumpb(root, buf + 8, json_len, JSON_COMPACT);
    memset(buf + 8 + json_len, ' ', total - 8 - json_len);
    *out = buf;
    *out_len = total;
done:
    json_decref(root);
    return st;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Streams one tensor through FILL in chunks of at most STW_CHUNK bytes; a chunk of zeros
 * becomes a hole in the file (moe_atomic_zeros). */
static moe_status write_tensor(moe_atomic_file *af, const stw_tensor *t, moe_st_fill_fn fill,
                               void *ctx, unsigned char *buf)
{
    for (uint64_t off = 0; off < t->nbytes;) {
        size_t len = t->nbytes - off < STW_CHUNK ? (size_t)(t->nbytes - off) : STW_CHUNK;
        moe_status st = fill(ctx, t->index, off, buf, len);
        if (st != MOE_OK)
            return moe_error_context(st, "%s: tensor '%s' at byte %llu: ", af->path, t->name,
                                     (unsigned long long)off);
        st = all_zero(buf, len) ? moe_atomic_zeros(af, len) : moe_atomic_write(af, buf, len);
        if (st != MOE_OK) return st;
        off += len;
    }
    return MOE_OK;
}

/* The file order and each tensor's offsets; the total must stay within the format's 2^48. */
static moe_status plan(moe_st_writer *w, const char *path, stw_tensor ***order_out,
                       uint64_t *largest)
{
    stw_tensor **order = moe_calloc(w->count, sizeof *order);
    if (!order) return moe_error(MOE_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < w->count; i++)
        order[i] = &w->tensors[i];
    qsort(order, w->count, sizeof *order, cmp_file_order);
    uint64_t off = 0, big = 0;
    for (size_t i = 0; i < w->count; i++) {
        order[i]->begin = off;
        off += order[i]->nbytes; /* each < 2^48, so the sum cannot wrap before the check */
        if (off > MOE_JSON_MAX_INT) {
            moe_free(order);
            return moe_error(MOE_EOVERFLOW, "%s: the data area exceeds the format's 2^48-1 bytes",
                             path);
        }
        if (order[i]->nbytes > big) big = order[i]->nbytes;
    }
    *order_out = order;
    *largest = big;
    return MOE_OK;
}

moe_status moe_st_writer_write(moe_st_writer *w, const char *path, moe_st_fill_fn fill, void *ctx)
{
    if (!w || !path)
        return moe_error(MOE_EINVAL, "moe_st_writer_write: %s is NULL", w ? "path" : "writer");
    stw_tensor **order = NULL;
    char *header = NULL;
    unsigned char *buf = NULL;
    size_t header_len = 0;
    uint64_t largest = 0;
    moe_status st = plan(w, path, &order, &largest);
    if (st != MOE_OK) return st;
    if (largest > 0 && !fill) {
        st = moe_error(MOE_EINVAL, "%s: fill is NULL but the tensors hold data", path);
        goto done;
    }
    st = build_header(w, order, path, &header, &header_len);
    if (st != MOE_OK) goto done;
    size_t chunk = largest < STW_CHUNK ? (size_t)largest : STW_CHUNK;
    buf = moe_malloc(chunk);
    if (!buf) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for a %zu-byte buffer", path, chunk);
        goto done;
    }
    moe_atomic_file af;
    st = moe_atomic_open(&af, path);
    if (st != MOE_OK) goto done;
    st = moe_atomic_write(&af, header, header_len);
    for (size_t i = 0; st == MOE_OK && i < w->count; i++)
        st = write_tensor(&af, order[i], fill, ctx, buf);
    if (st == MOE_OK)
        st = moe_atomic_commit(&af);
    else
        moe_atomic_abort(&af);
done:
    moe_free(buf);
    moe_free(header);
    moe_free(order);
    return st;
}
