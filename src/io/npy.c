/* npy.c — NumPy .npy arrays (f32, i32, i64, C order): a strict header parser, an atomic writer. */
#include "io/npy.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "io/file.h"

/* Arrays travel as they are in memory; libmoe targets little-endian x86-64. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* A header with 8 dimensions is under 200 bytes; numpy itself refuses headers over 10000
 * bytes by default, so 1 MiB is generous and still keeps a hostile length from allocating. */
#define NPY_MAX_HEADER (1u << 20)
/* numpy pads so the data starts at a multiple of 64 bytes. */
#define NPY_ALIGN 64

/* Where the header text is and where the data starts, from the fixed prefix. */
typedef struct npy_prefix {
    size_t header_off;
    size_t header_len;
    size_t data_off;
} npy_prefix;

/* What the header dictionary says. */
typedef struct npy_header {
    moe_dtype dtype;
    int ndim;
    int64_t shape[MOE_NPY_MAX_DIMS];
    size_t count;
    size_t nbytes;
} npy_header;

static size_t elem_size(moe_dtype dtype)
{
    switch (dtype) {
    case MOE_DTYPE_F32:
    case MOE_DTYPE_I32: return 4;
    case MOE_DTYPE_I64: return 8;
    default: return 0;
    }
}

static const char *descr_of(moe_dtype dtype)
{
    switch (dtype) {
    case MOE_DTYPE_F32: return "<f4";
    case MOE_DTYPE_I32: return "<i4";
    case MOE_DTYPE_I64: return "<i8";
    default: return NULL;
    }
}

/* ---- the prefix: magic, version, header length ---------------------------------------- */

/* P holds the first AVAIL bytes of a TOTAL-byte file (AVAIL >= min(TOTAL, 12)). */
static moe_status parse_prefix(const unsigned char *p, size_t avail, uint64_t total,
                               const char *name, npy_prefix *out)
{
    size_t m = avail < NPY_MAGIC_LEN ? avail : NPY_MAGIC_LEN;
    if (m > 0 && memcmp(p, NPY_MAGIC, m) != 0)
        return moe_error(MOE_EHEADER, "%s: not a .npy file (bad magic)", name);
    if (total < 10)
        return moe_error(MOE_ETRUNCATED, "%s: file is %llu bytes, shorter than the .npy prefix",
                         name, (unsigned long long)total);
    unsigned major = p[6], minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return moe_error(MOE_EHEADER, "%s: unsupported .npy version %u.%u (want 1.0, 2.0 or 3.0)",
                         name, major, minor);
    /* Version 1 has a 16-bit header length; 2 and 3 a 32-bit one (3 adds UTF-8 text). */
    size_t len_bytes = major == 1 ? 2 : 4;
    if (total < 8 + len_bytes)
        return moe_error(MOE_ETRUNCATED, "%s: file is %llu bytes, shorter than the .npy prefix",
                         name, (unsigned long long)total);
    uint32_t hlen = (uint32_t)p[8] | (uint32_t)p[9] << 8;
    if (len_bytes == 4) hlen |= (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return moe_error(MOE_EHEADER, "%s: header length %u exceeds the limit of %u bytes", name,
                         hlen, NPY_MAX_HEADER);
    out->header_off = 8 + len_bytes;
    out->header_len = hlen;
    out->data_off = out->header_off + hlen;
    if (out->data_off > total)
        return moe_error(MOE_ETRUNCATED,
                         "%s: header length %u runs past the end of the file (%llu bytes)", name,
                         hlen, (unsigned long long)total);
    return MOE_OK;
}

/* ---- the header: a Python dict literal ---------------------------------------------- */

/*
 * The grammar accepted, which is what numpy writes (and a little slack in whitespace):
 *   header := ws '{' ws [ item (ws ',' ws item)* [ws ','] ] ws '}' ws
 *   item   := str ws ':' ws value,   str := '...' or "..." without escapes
 *   descr: str; fortran_order: True | False; shape: '(' [int (',' int)* [',']] ')' where a
 *   single int needs its trailing comma, as in Python; int := digits with an optional 'L'
 *   (Python 2 numpy wrote 3L).
 * Each key exactly once. Nothing is evaluated.
 */
typedef struct cursor {
    const char *p, *end;
    const char *name; /* for messages */
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static moe_status syntax(const cursor *c, const char *want, const char *start)
{
    return moe_error(MOE_EHEADER, "%s: header is not a valid .npy dict: expected %s at byte %zu",
                     c->name, want, (size_t)(c->p - start));
}

/* A quoted string without escapes: *s points into the header, *n is its length. */
static moe_status parse_str(cursor *c, const char *start, const char **s, size_t *n)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return syntax(c, "a quoted string", start);
    char q = *c->p++;
    const char *b = c->p;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n') return syntax(c, "a string without escapes", start);
        c->p++;
    }
    if (c->p >= c->end) return syntax(c, "a closing quote", start);
    *s = b;
    *n = (size_t)(c->p - b);
    c->p++;
    return MOE_OK;
}

static bool eat_word(cursor *c, const char *w)
{
    size_t n = strlen(w);
    skip_ws(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
    c->p += n;
    return true;
}

static moe_status parse_descr(cursor *c, const char *start, npy_header *h)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == '[')
        return moe_error(MOE_EDTYPE,
                         "%s: structured descr is not supported (want '<f4', '<i4' "
                         "or '<i8')",
                         c->name);
    const char *s;
    size_t n;
    moe_status st = parse_str(c, start, &s, &n);
    if (st != MOE_OK) return st;
    static const moe_dtype known[] = {MOE_DTYPE_F32, MOE_DTYPE_I32, MOE_DTYPE_I64};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        const char *d = descr_of(known[i]);
        if (n == strlen(d) && memcmp(s, d, n) == 0) {
            h->dtype = known[i];
            return MOE_OK;
        }
    }
    return moe_error(MOE_EDTYPE, "%s: descr '%.*s' is not supported (want '<f4', '<i4' or '<i8')",
                     c->name, (int)(n > 32 ? 32 : n), s);
}

static moe_status parse_fortran(cursor *c, const char *start)
{
    if (eat_word(c, "False")) return MOE_OK;
    if (eat_word(c, "True"))
        return moe_error(MOE_EUNSUPPORTED, "%s: fortran_order is True; only C order is supported",
                         c->name);
    return syntax(c, "True or False for 'fortran_order'", start);
}

static moe_status parse_dim(cursor *c, const char *start, int i, int64_t *out)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == '-')
        return moe_error(MOE_ESHAPE, "%s: shape[%d] is negative", c->name, i);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return syntax(c, "a dimension", start);
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (moe_mul_overflow_u64(v, 10, &v) ||
            moe_add_overflow_u64(v, (uint64_t)(*c->p - '0'), &v) || v > INT64_MAX)
            return moe_error(MOE_EOVERFLOW, "%s: shape[%d] does not fit in 63 bits", c->name, i);
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') c->p++;
    *out = (int64_t)v;
    return MOE_OK;
}

static moe_status parse_shape(cursor *c, const char *start, npy_header *h)
{
    if (!eat(c, '(')) return syntax(c, "'(' starting the shape tuple", start);
    int n = 0;
    bool comma = false;
    while (!eat(c, ')')) {
        if (n > 0 && !comma) return syntax(c, "',' or ')' in the shape tuple", start);
        if (n == MOE_NPY_MAX_DIMS)
            return moe_error(MOE_EUNSUPPORTED, "%s: shape has more than %d dimensions", c->name,
                             MOE_NPY_MAX_DIMS);
        moe_status st = parse_dim(c, start, n, &h->shape[n]);
        if (st != MOE_OK) return st;
        n++;
        comma = eat(c, ',');
    }
    /* "(3)" is the integer 3 in Python, not a tuple. */
    if (n == 1 && !comma) return syntax(c, "a trailing ',' in the 1-element shape tuple", start);
    h->ndim = n;
    return MOE_OK;
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static moe_status parse_item(cursor *c, const char *start, unsigned *seen, npy_header *h)
{
    const char *k;
    size_t n;
    moe_status st = parse_str(c, start, &k, &n);
    if (st != MOE_OK) return st;
    if (!eat(c, ':')) return syntax(c, "':'", start);
    unsigned key = 0;
    if (n == 5 && memcmp(k, "descr", 5) == 0) key = KEY_DESCR;
    if (n == 13 && memcmp(k, "fortran_order", 13) == 0) key = KEY_FORTRAN;
    if (n == 5 && memcmp(k, "shape", 5) == 0) key = KEY_SHAPE;
    if (!key)
        return moe_error(MOE_EHEADER, "%s: unknown header key '%.*s'", c->name,
                         (int)(n > 32 ? 32 : n), k);
    if (*seen & key)
        return moe_error(MOE_EDUPLICATE, "%s: header key '%.*s' appears twice", c->name, (int)n, k);
    *seen |= key;
    if (key == KEY_DESCR) return parse_descr(c, start, h);
    if (key == KEY_FORTRAN) return parse_fortran(c, start);
    return parse_shape(c, start, h);
}

static moe_status parse_dict(const char *text, size_t len, const char *name, npy_header *h)
{
    cursor c = {text, text + len, name};
    unsigned seen = 0;
    if (!eat(&c, '{')) return syntax(&c, "'{'", text);
    while (!eat(&c, '}')) {
        moe_status st = parse_item(&c, text, &seen, h);
        if (st != MOE_OK) return st;
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return syntax(&c, "',' or '}'", text);
    }
    skip_ws(&c);
    if (c.p != c.end) return syntax(&c, "the end of the header", text);
    static const struct {
        unsigned bit;
        const char *name;
    } need[] = {{KEY_DESCR, "descr"}, {KEY_FORTRAN, "fortran_order"}, {KEY_SHAPE, "shape"}};
    for (size_t i = 0; i < 3; i++)
        if (!(seen & need[i].bit))
            return moe_error(MOE_EMISSING, "%s: header has no '%s'", name, need[i].name);
    return MOE_OK;
}

/* The element count and byte size of a SHAPE of non-negative dims, as the reader and the
 * writer both compute them (dims in order, then the element size), so a shape one accepts
 * the other accepts too. MOE_EOVERFLOW naming NAME. */
static moe_status array_sizes(const char *name, moe_dtype dtype, int ndim, const int64_t *shape,
                              size_t *count_out, size_t *nbytes_out)
{
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        if ((uint64_t)shape[i] > SIZE_MAX || moe_mul_overflow_size(count, (size_t)shape[i], &count))
            return moe_error(MOE_EOVERFLOW, "%s: shape[%d] = %lld makes the element count overflow",
                             name, i, (long long)shape[i]);
    size_t nbytes;
    if (moe_mul_overflow_size(count, elem_size(dtype), &nbytes))
        return moe_error(MOE_EOVERFLOW, "%s: the byte size of the array overflows", name);
    *count_out = count;
    *nbytes_out = nbytes;
    return MOE_OK;
}

static moe_status parse_header(const char *text, size_t len, const char *name, npy_header *h)
{
    memset(h, 0, sizeof *h);
    moe_status st = parse_dict(text, len, name, h);
    if (st != MOE_OK) return st;
    return array_sizes(name, h->dtype, h->ndim, h->shape, &h->count, &h->nbytes);
}

/* The data must end exactly at the end of the file. */
static moe_status check_total(const char *name, size_t data_off, size_t nbytes, uint64_t total)
{
    uint64_t avail = total - data_off;
    if (avail < nbytes)
        return moe_error(MOE_ETRUNCATED,
                         "%s: truncated: the array needs %zu data bytes, the file holds %llu", name,
                         nbytes, (unsigned long long)avail);
    if (avail > nbytes)
        return moe_error(MOE_EOFFSET, "%s: %llu trailing bytes after the array data", name,
                         (unsigned long long)(avail - nbytes));
    return MOE_OK;
}

static void set_out(moe_npy *out, const npy_header *h, void *data)
{
    memset(out, 0, sizeof *out);
    out->dtype = h->dtype;
    out->ndim = h->ndim;
    memcpy(out->shape, h->shape, sizeof h->shape);
    out->count = h->count;
    out->nbytes = h->nbytes;
    out->data = data;
}

moe_status moe_npy_parse(const void *buf, size_t len, moe_npy *out)
{
    const char *name = ".npy image";
    if (!out || (!buf && len > 0))
        return moe_error(MOE_EINVAL, "moe_npy_parse: %s is NULL", out ? "buf" : "out");
    const unsigned char *p = buf;
    npy_prefix pre = {0};
    npy_header h;
    moe_status st = parse_prefix(p, len, len, name, &pre);
    if (st == MOE_OK) st = parse_header((const char *)p + pre.header_off, pre.header_len, name, &h);
    if (st == MOE_OK) st = check_total(name, pre.data_off, h.nbytes, len);
    if (st != MOE_OK) return st;
    void *data = moe_malloc(h.nbytes);
    if (!data) return moe_error(MOE_ENOMEM, "%s: out of memory for %zu bytes", name, h.nbytes);
    memcpy(data, p + pre.data_off, h.nbytes);
    set_out(out, &h, data);
    return MOE_OK;
}

moe_status moe_npy_read(const char *path, moe_npy *out)
{
    if (!path || !out)
        return moe_error(MOE_EINVAL, "moe_npy_read: %s is NULL", path ? "out" : "path");
    int fd;
    uint64_t total;
    moe_status st = moe_file_open_read(path, &fd, &total);
    if (st != MOE_OK) return st;
    unsigned char prefix[12];
    char *text = NULL;
    void *data = NULL;
    npy_prefix pre = {0};
    npy_header h;
    size_t avail = total < sizeof prefix ? (size_t)total : sizeof prefix;
    st = moe_file_pread(fd, prefix, avail, 0, path);
    if (st == MOE_OK) st = parse_prefix(prefix, avail, total, path, &pre);
    if (st != MOE_OK) goto done;
    text = moe_malloc(pre.header_len);
    if (!text) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for the header", path);
        goto done;
    }
    /* The header and the sizes are checked before the data is allocated, so a lying shape
     * cannot make us allocate more than the file holds. */
    st = moe_file_pread(fd, text, pre.header_len, pre.header_off, path);
    if (st == MOE_OK) st = parse_header(text, pre.header_len, path, &h);
    if (st == MOE_OK) st = check_total(path, pre.data_off, h.nbytes, total);
    if (st != MOE_OK) goto done;
    data = moe_malloc(h.nbytes);
    if (!data) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for %zu bytes", path, h.nbytes);
        goto done;
    }
    st = moe_file_pread(fd, data, h.nbytes, pre.data_off, path);
    if (st != MOE_OK) goto done;
    set_out(out, &h, data);
    data = NULL;
done:
    moe_free(data);
    moe_free(text);
    close(fd);
    return st;
}

void moe_npy_free(moe_npy *npy)
{
    if (!npy) return;
    moe_free(npy->data);
    npy->data = NULL;
}

/* ---- writing ------------------------------------------------------------------------- */

/* The version 1.0 header numpy writes, padded with spaces and a final newline so the data
 * starts at a multiple of 64. With at most 8 dimensions the text stays far below the 64 KiB
 * that would call for version 2.0. Returns the prefix length. */
static size_t build_header(char buf[static 512], moe_dtype dtype, int ndim, const int64_t *shape)
{
    char dict[400];
    size_t pre = 10;
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr_of(dtype));
    for (int i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)shape[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    size_t total = (pre + (size_t)n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    size_t hlen = total - pre;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + pre, dict, (size_t)n);
    memset(buf + pre + n, ' ', hlen - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

moe_status moe_npy_write(const char *path, moe_dtype dtype, int ndim, const int64_t *shape,
                         const void *data)
{
    if (!path) return moe_error(MOE_EINVAL, "moe_npy_write: path is NULL");
    if (!descr_of(dtype))
        return moe_error(MOE_EDTYPE, "%s: cannot write dtype %s to .npy (want f32, i32 or i64)",
                         path, moe_dtype_name(dtype));
    if (ndim < 0 || ndim > MOE_NPY_MAX_DIMS || (ndim > 0 && !shape))
        return moe_error(MOE_EINVAL, "%s: ndim %d (want 0..%d with a shape)", path, ndim,
                         MOE_NPY_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return moe_error(MOE_EINVAL, "%s: shape[%d] = %lld is negative", path, i,
                             (long long)shape[i]);
    /* Zero until array_sizes succeeds: the compiler cannot see that moe_error never returns
     * MOE_OK, so it must not find a path that reads them unset. */
    size_t count = 0, nbytes = 0;
    moe_status sz = array_sizes(path, dtype, ndim, shape, &count, &nbytes);
    if (sz != MOE_OK) return sz;
    if (nbytes > 0 && !data) return moe_error(MOE_EINVAL, "%s: data is NULL", path);
    char header[512];
    size_t hlen = build_header(header, dtype, ndim, shape);
    moe_atomic_file af;
    moe_status st = moe_atomic_open(&af, path);
    if (st != MOE_OK) return st;
    st = moe_atomic_write(&af, header, hlen);
    if (st == MOE_OK) st = moe_atomic_write(&af, data, nbytes);
    if (st != MOE_OK) {
        moe_atomic_abort(&af);
        return st;
    }
    return moe_atomic_commit(&af);
}
