/* cli_util.h — what the moe subcommands share: options, strict numbers, messages, output paths. */
#ifndef MOE_TOOLS_CLI_UTIL_H
#define MOE_TOOLS_CLI_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "moe.h"

/* Walks argv after the subcommand name. Messages go to stderr prefixed with PROG
 * ("moe gen"), so every usage error is one line naming the option. */
typedef struct cli_args {
    const char *prog;
    int argc;
    char **argv;
    int i;    /* index of the argument being looked at */
    bool bad; /* a usage error was already reported */
} cli_args;

void cli_args_init(cli_args *a, const char *prog, int argc, char **argv);

/* The argument being looked at, or NULL at the end. */
const char *cli_peek(const cli_args *a);

/* True when the current argument is the flag NAME (no value); consumes it. */
bool cli_flag(cli_args *a, const char *name);

/* True when the current argument is NAME followed by a value ("--x V" or "--x=V"); consumes
 * both and sets *value. A NAME without a value reports a usage error (a->bad) and returns
 * true with *value = NULL, so the caller's option loop stops. */
bool cli_option(cli_args *a, const char *name, const char **value);

/* A flag and a value option, each taken at most once: *slot false / NULL until given. */
typedef struct cli_flag_option {
    const char *name;
    bool *slot;
} cli_flag_option;
typedef struct cli_value_option {
    const char *name;
    const char **slot;
} cli_value_option;

/* Walks every argument: each must be one of the N_FLAGS flags or the N_VALUES value options,
 * or --help / -h. Returns 0 when all are taken, -1 at --help, or 2 after a one-line usage
 * error naming the argument (unknown, unexpected, given twice, a value missing or empty). */
int cli_take_options(cli_args *a, const cli_flag_option *flags, size_t n_flags,
                     const cli_value_option *values, size_t n_values);

/* Strict decimal integers: optional sign only where MIN < 0, digits only, no spaces, no
 * trailing characters, within [MIN, MAX]. On error prints one line naming OPT and the text,
 * sets a->bad and returns false. */
bool cli_int(cli_args *a, const char *opt, const char *text, int64_t min, int64_t max,
             int64_t *out);
bool cli_u64(cli_args *a, const char *opt, const char *text, uint64_t *out);

/* --recipe's value: "f32" or "bf16" (moe_layer_options.experts_recipe); otherwise one line
 * naming the option and the text, a->bad set, false. */
bool cli_recipe(cli_args *a, const char *text, moe_experts_recipe *out);

/* Whether PATH can be written as a file: it is one already and writable, or its folder exists
 * and is writable; errno says why not (EISDIR for a folder). For outputs written at the end of
 * a long run, checked before it. */
bool cli_path_writable(const char *path);

/* The highest ISA level (moe.h) whose defining feature caps has: what `moe caps` prints as
 * "level" for the allowed features. */
moe_isa_level cli_isa_level(const moe_cpu_caps *caps);

/* Prints "PROG: MESSAGE" on stderr as exactly one line: control characters in MESSAGE (a
 * file or tensor name can hold a newline) are written as \n, \t or \xHH. */
void cli_print_error(const char *prog, const char *message);

/* Formats a message (printf-style), prints it with cli_print_error and returns CODE. */
int cli_fail(const char *prog, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints "PROG: <message>" on stderr as one line, sets a->bad. Returns 2 (usage). */
int cli_usage_error(cli_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
