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

/* After the reader refused a file's descr ("PATH: descr 'X' is not supported (want ...)"): its
 * message up to the list of what the reader takes, then what OPT takes (WANT). */
static int fail_descr(const char *prog, const char *opt, const char *want)
{
    const char *msg = moe_last_error(), *cut = strstr(msg, " (want ");
    return cli_fail(prog, 1, "%s %.*s: %s", opt, cut ? (int)(cut - msg) : (int)strlen(msg), msg,
                    want);
}

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

/* OUT's f64 or f16 values as f32, in place of its data: the conversion at the door. */
static bool to_f32(moe_npy *out)
{
    float *f = moe_malloc(out->count ? out->count * sizeof *f : 1);
    if (!f) return false;
    for (size_t i = 0; i < out->count; i++)
        f[i] = out->dtype == MOE_DTYPE_F64 ? (float)((const double *)out->data)[i]
                                           : moe_f16_to_f32(((const uint16_t *)out->data)[i]);
    moe_free(out->data);
    out->data = f;
    out->dtype = MOE_DTYPE_F32;
    out->nbytes = out->count * sizeof *f;
    return true;
}

int cli_read_npy(const char *prog, const char *opt, const char *path, moe_dtype want,
                 moe_dtype want2, int ndim, const char *layout, moe_npy *out)
{
    const moe_status st = moe_npy_read(path, out);
    const char * or = want2 != MOE_DTYPE_INVALID ? " or " : "";
    const char *name2 = want2 != MOE_DTYPE_INVALID ? moe_dtype_name(want2) : "";
    char wanted[64];
    snprintf(wanted, sizeof wanted, "want %s%s%s", moe_dtype_name(want), or, name2);
    if (st == MOE_EDTYPE) return fail_descr(prog, opt, wanted);
    if (st != MOE_OK) return cli_fail(prog, 1, "%s: %s", opt, moe_last_error());
    if (out->dtype != want && out->dtype != want2) {
        cli_fail(prog, 1, "%s %s: dtype %s, %s", opt, path, moe_dtype_name(out->dtype), wanted);
        moe_npy_free(out);
        return 1;
    }
    return check_rank(prog, opt, path, ndim, layout, out);
}

int cli_read_npy_f32(const char *prog, const char *opt, const char *path, int ndim,
                     const char *layout, moe_npy *out)
{
    const moe_status st = moe_npy_read(path, out);
    if (st == MOE_EDTYPE) return fail_descr(prog, opt, FLOAT_WANT);
    if (st != MOE_OK) return cli_fail(prog, 1, "%s: %s", opt, moe_last_error());
    if (out->dtype != MOE_DTYPE_F32 && out->dtype != MOE_DTYPE_F64 && out->dtype != MOE_DTYPE_F16) {
        cli_fail(prog, 1, "%s %s: dtype %s: %s", opt, path, moe_dtype_name(out->dtype), FLOAT_WANT);
        moe_npy_free(out);
        return 1;
    }
    if (out->dtype != MOE_DTYPE_F32 && !to_f32(out)) {
        cli_fail(prog, 1, "%s %s: out of memory converting %s to f32", opt, path,
                 moe_dtype_name(out->dtype));
        moe_npy_free(out);
        return 1;
    }
    return check_rank(prog, opt, path, ndim, layout, out);
}
