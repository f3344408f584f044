/* cli_npy.c — the .npy arrays the subcommands read: dtype and rank checked, errors named. */
#include <inttypes.h>
#include <stdio.h>

#include "cli_npy.h"
#include "cli_util.h"

const char *cli_shape_str(const moe_npy *a, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < a->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", a->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

int cli_read_npy(const char *prog, const char *opt, const char *path, moe_dtype want,
                 moe_dtype want2, int ndim, const char *layout, moe_npy *out)
{
    if (moe_npy_read(path, out) != MOE_OK)
        return cli_fail(prog, 1, "%s: %s", opt, moe_last_error());
    char shape[128];
    if (out->dtype != want && out->dtype != want2) {
        cli_fail(prog, 1, "%s %s: dtype %s, want %s%s%s", opt, path, moe_dtype_name(out->dtype),
                 moe_dtype_name(want), want2 != MOE_DTYPE_INVALID ? " or " : "",
                 want2 != MOE_DTYPE_INVALID ? moe_dtype_name(want2) : "");
        goto fail;
    }
    if (out->ndim != ndim) {
        cli_fail(prog, 1, "%s %s: shape %s has %d dimension%s, want %d: %s", opt, path,
                 cli_shape_str(out, shape, sizeof shape), out->ndim, out->ndim == 1 ? "" : "s",
                 ndim, layout);
        goto fail;
    }
    return 0;
fail:
    moe_npy_free(out);
    return 1;
}
