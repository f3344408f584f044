/* cli_npy.h — the .npy arrays the subcommands read: dtype and rank checked, errors named. */
#ifndef MOE_TOOLS_CLI_NPY_H
#define MOE_TOOLS_CLI_NPY_H

#include <stddef.h>

#include "io/npy.h"

/* Reads OPT's file PATH into OUT and checks its dtype (WANT, or WANT2 if not
 * MOE_DTYPE_INVALID) and its rank (NDIM, laid out as LAYOUT says). Returns 0, or 1 after a
 * one-line message prefixed PROG, with OUT freed. */
int cli_read_npy(const char *prog, const char *opt, const char *path, moe_dtype want,
                 moe_dtype want2, int ndim, const char *layout, moe_npy *out);

/* Reads OPT's floating-point input PATH into OUT as f32 [rank NDIM]: f32 as is, f64 and f16
 * converted once, here; any other dtype is refused with a message saying what is wanted.
 * Returns 0, or 1 after a one-line message prefixed PROG, with OUT freed. */
int cli_read_npy_f32(const char *prog, const char *opt, const char *path, int ndim,
                     const char *layout, moe_npy *out);

#endif
