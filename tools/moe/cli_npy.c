/* cli_npy.c — the .npy arrays the subcommands read: dtype and rank checked, errors named. */
#include <stdio.h>

#include "cli_npy.h"
#include "cli_util.h"
#include "core/shape_text.h"

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
                 moe_shape_text(out->shape, out->ndim, shape, sizeof shape), out->ndim,
                 out->ndim == 1 ? "" : "s", ndim, layout);
        goto fail;
    }
    return 0;
fail:
    moe_npy_free(out);
    return 1;
}
