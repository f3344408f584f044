/* cli_npy.c — the .npy arrays the subcommands read: dtype and rank checked, errors named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_npy.h"
#include "cli_util.h"
#include "core/alloc.h"
#include "core/shape_text.h"
#include "dtype/dtype.h"

/* What a floating-point input accepts, for its messages. */
#define FLOAT_WANT                                                                                 \
    "want f32 ('<f4'), or f64 ('<f8') or f16 ('<f2'), converted to f32 once as read (.npy has "    \
    "no bf16 dtype: save bf16 arrays as f32)"

static int check_rank(const char *prog, const char *opt, const char *path, int ndim,
                      const char *layout, moe_npy *out)
{
    if (out->ndim == ndim) return 0;
    char shape[128];
    cli_fail(prog, 1, "%s %s: shape %s has %d dimension%s, want %d: %s", opt, path,
             moe_shape_text(out->shape, out->ndim, shape, sizeof shape), out->ndim,
             out->ndim == 1 ? "" : "s", ndim, layout);
    moe_npy_free(out);
    return 1;
}

/* ---- f64 and f16: converted at the door ---------------------------------------------------
 * libmoe's .npy reader takes f32, i32 and i64 only. An f64 or f16 file is read whole, its
 * descr rewritten to '<i8' (same text length) and its data widened to 8-byte slots, so the
 * reader checks the header, shape and size as for any file; each slot's first bytes are then
 * the f64 or f16 value, converted to f32. */

typedef struct file_image {
    unsigned char *bytes;
    size_t len;
} file_image;

static bool read_whole(const char *path, file_image *img)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool ok = fseek(f, 0, SEEK_END) == 0;
    const long n = ok ? ftell(f) : -1;
    ok = n >= 0 && fseek(f, 0, SEEK_SET) == 0;
    img->len = ok ? (size_t)n : 0;
    img->bytes = ok ? moe_malloc(img->len ? img->len : 1) : NULL;
    ok = img->bytes && fread(img->bytes, 1, img->len, f) == img->len;
    fclose(f);
    return ok;
}

/* The offset and length of the header text (format versions 1-3), or false. */
static bool header_of(const file_image *img, size_t *off, size_t *len)
{
    if (img->len < 10 || memcmp(img->bytes, "\x93NUMPY", 6)) return false;
    const unsigned char *p = img->bytes;
    if (p[6] == 1) {
        *off = 10;
        *len = (size_t)p[8] | (size_t)p[9] << 8;
    } else {
        if (img->len < 12) return false;
        *off = 12;
        *len = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    }
    return *len <= img->len - *off;
}

/* The descr's string value in the header ("<f8"), NUL-terminated in BUF; where it starts,
 * or NULL when there is none. */
static char *find_descr(const file_image *img, size_t off, size_t len, char buf[16])
{
    const char *h = (const char *)img->bytes + off, *end = h + len;
    const char *k = NULL;
    for (const char *c = h; !k && c + 5 <= end; c++)
        if (!memcmp(c, "descr", 5)) k = c;
    if (!k) return NULL;
    const char *q = memchr(k + 5, ':', (size_t)(end - k - 5));
    if (!q) return NULL;
    for (q++; q < end && *q == ' ';)
        q++;
    if (q == end || *q != '\'') return NULL; /* a structured descr is a list */
    const char *v = q + 1, *e = memchr(v, '\'', (size_t)(end - v));
    if (!e || e - v >= 16) return NULL;
    memcpy(buf, v, (size_t)(e - v));
    buf[e - v] = '\0';
    return (char *)v;
}

/* The descr of the .npy file PATH, or false when it cannot be found. */
static bool file_descr(const char *path, char descr[16])
{
    file_image img = {0};
    size_t off = 0, len = 0;
    const bool ok =
        read_whole(path, &img) && header_of(&img, &off, &len) && find_descr(&img, off, len, descr);
    moe_free(img.bytes);
    return ok;
}

/* Converts the parsed slots of W bytes each (8 or 2) to f32 in place of OUT's data. */
static bool narrow(moe_npy *out, size_t w)
{
    float *f = moe_malloc(out->count ? out->count * sizeof *f : 1);
    if (!f) return false;
    const unsigned char *s = out->data;
    for (size_t i = 0; i < out->count; i++) {
        if (w == 8) {
            double d;
            memcpy(&d, s + i * 8, 8);
            f[i] = (float)d;
        } else {
            uint16_t hcode;
            memcpy(&hcode, s + i * 8, 2);
            f[i] = moe_f16_to_f32(hcode);
        }
    }
    moe_free(out->data);
    out->data = f;
    out->dtype = MOE_DTYPE_F32;
    out->nbytes = out->count * sizeof *f;
    return true;
}

/* After the reader refused FILE's dtype (its message in WHY): f64 and f16 read and converted;
 * anything else refused naming what is wanted. */
static int read_other_float(const char *prog, const char *opt, const char *path, const char *why,
                            moe_npy *out)
{
    file_image img = {0}, wide = {0};
    size_t off = 0, len = 0;
    char descr[16] = "";
    char *at = NULL;
    int rc = 1;
    if (!read_whole(path, &img) || !header_of(&img, &off, &len) ||
        !(at = find_descr(&img, off, len, descr))) {
        cli_fail(prog, 1, "%s: %s", opt, why); /* not a descr the reader named: its words */
        goto done;
    }
    const size_t w = !strcmp(descr, "<f8") ? 8 : !strcmp(descr, "<f2") ? 2 : 0;
    const size_t data_off = off + len, data_len = img.len - data_off;
    if (!w) {
        cli_fail(prog, 1, "%s %s: descr '%s' is not supported: %s", opt, path, descr, FLOAT_WANT);
        goto done;
    }
    if (data_len % w || data_len / w > (SIZE_MAX - data_off) / 8) {
        cli_fail(prog, 1, "%s %s: its %zu data bytes are not whole '%s' elements", opt, path,
                 data_len, descr);
        goto done;
    }
    memcpy(at, "<i8", 3);
    wide.len = data_off + data_len / w * 8;
    wide.bytes = moe_calloc(wide.len, 1);
    if (!wide.bytes) {
        cli_fail(prog, 1, "%s %s: out of memory for %zu bytes", opt, path, wide.len);
        goto done;
    }
    memcpy(wide.bytes, img.bytes, data_off);
    for (size_t i = 0; i < data_len / w; i++)
        memcpy(wide.bytes + data_off + i * 8, img.bytes + data_off + i * w, w);
    const moe_status st = moe_npy_parse(wide.bytes, wide.len, out);
    if (st == MOE_ETRUNCATED || st == MOE_EOFFSET) {
        cli_fail(prog, 1,
                 "%s %s: its %zu data bytes are not the '%s' array its header's shape "
                 "describes",
                 opt, path, data_len, descr);
        goto done;
    }
    if (st != MOE_OK) {
        cli_fail(prog, 1, "%s %s: %s", opt, path, moe_last_error());
        goto done;
    }
    if (!narrow(out, w)) {
        moe_npy_free(out);
        cli_fail(prog, 1, "%s %s: out of memory converting '%s' to f32", opt, path, descr);
        goto done;
    }
    rc = 0;
done:
    moe_free(img.bytes);
    moe_free(wide.bytes);
    return rc;
}

int cli_read_npy(const char *prog, const char *opt, const char *path, moe_dtype want,
                 moe_dtype want2, int ndim, const char *layout, moe_npy *out)
{
    const moe_status st = moe_npy_read(path, out);
    char descr[16];
    const char * or = want2 != MOE_DTYPE_INVALID ? " or " : "";
    const char *name2 = want2 != MOE_DTYPE_INVALID ? moe_dtype_name(want2) : "";
    if (st == MOE_EDTYPE && file_descr(path, descr)) /* the reader's own list would mislead */
        return cli_fail(prog, 1, "%s %s: descr '%s' is not supported: want %s%s%s", opt, path,
                        descr, moe_dtype_name(want), or, name2);
    if (st != MOE_OK) return cli_fail(prog, 1, "%s: %s", opt, moe_last_error());
    if (out->dtype != want && out->dtype != want2) {
        cli_fail(prog, 1, "%s %s: dtype %s, want %s%s%s", opt, path, moe_dtype_name(out->dtype),
                 moe_dtype_name(want), or, name2);
        moe_npy_free(out);
        return 1;
    }
    return check_rank(prog, opt, path, ndim, layout, out);
}

int cli_read_npy_f32(const char *prog, const char *opt, const char *path, int ndim,
                     const char *layout, moe_npy *out)
{
    const moe_status st = moe_npy_read(path, out);
    if (st == MOE_EDTYPE) {
        char why[512];
        snprintf(why, sizeof why, "%s", moe_last_error());
        if (read_other_float(prog, opt, path, why, out)) return 1;
    } else if (st != MOE_OK) {
        return cli_fail(prog, 1, "%s: %s", opt, moe_last_error());
    } else if (out->dtype != MOE_DTYPE_F32) {
        cli_fail(prog, 1, "%s %s: dtype %s: %s", opt, path, moe_dtype_name(out->dtype), FLOAT_WANT);
        moe_npy_free(out);
        return 1;
    }
    return check_rank(prog, opt, path, ndim, layout, out);
}
