/* cli_util.c — what the moe subcommands share: options, strict numbers, messages, output paths. */
#include "cli_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_args_init(cli_args *a, const char *prog, int argc, char **argv)
{
    a->prog = prog;
    a->argc = argc;
    a->argv = argv;
    a->i = 1; /* argv[0] is the subcommand */
    a->bad = false;
}

const char *cli_peek(const cli_args *a) { return a->i < a->argc ? a->argv[a->i] : NULL; }

/* The line is built first and written with one call: several processes writing to one
 * stream (mpirun's ranks) then do not interleave inside each other's lines. A message longer
 * than the buffer goes out in buffer-sized pieces. */
void cli_print_error(const char *prog, const char *message)
{
    char line[8192];
    size_t n = (size_t)snprintf(line, sizeof line, "%s: ", prog);
    if (n >= sizeof line) n = sizeof line - 1;
    for (const unsigned char *p = (const unsigned char *)message;; p++) {
        if (n + 5 > sizeof line) { /* room for the longest escape and the newline */
            fwrite(line, 1, n, stderr);
            n = 0;
        }
        if (!*p) break;
        if (*p == '\n')
            n += (size_t)snprintf(line + n, sizeof line - n, "\\n");
        else if (*p == '\t')
            n += (size_t)snprintf(line + n, sizeof line - n, "\\t");
        else if (*p < 0x20 || *p == 0x7F)
            n += (size_t)snprintf(line + n, sizeof line - n, "\\x%02X", *p);
        else
            line[n++] = (char)*p;
    }
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}

static int vfail(const char *prog, int code, const char *fmt, va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    cli_print_error(prog, msg);
    return code;
}

int cli_fail(const char *prog, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(prog, code, fmt, ap);
    va_end(ap);
    return code;
}

int cli_usage_error(cli_args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(a->prog, 2, fmt, ap);
    va_end(ap);
    a->bad = true;
    return 2;
}

bool cli_flag(cli_args *a, const char *name)
{
    const char *arg = cli_peek(a);
    if (!arg || strcmp(arg, name) != 0) return false;
    a->i++;
    return true;
}

bool cli_option(cli_args *a, const char *name, const char **value)
{
    const char *arg = cli_peek(a);
    size_t n = strlen(name);
    if (!arg || strncmp(arg, name, n) != 0) return false;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        a->i++;
        return true;
    }
    if (arg[n] != '\0') return false; /* a longer option that merely starts with NAME */
    if (a->i + 1 >= a->argc) {
        *value = NULL;
        cli_usage_error(a, "option %s needs a value", name);
        return true;
    }
    *value = a->argv[a->i + 1];
    a->i += 2;
    return true;
}

/* Takes the current argument if it is one of the flags or value options (*matched). */
static int take_option(cli_args *a, const cli_flag_option *flags, size_t n_flags,
                       const cli_value_option *values, size_t n_values, bool *matched)
{
    *matched = true;
    for (size_t i = 0; i < n_flags; i++) {
        if (!cli_flag(a, flags[i].name)) continue;
        if (*flags[i].slot) return cli_usage_error(a, "option %s given twice", flags[i].name);
        *flags[i].slot = true;
        return 0;
    }
    for (size_t i = 0; i < n_values; i++) {
        const char *v = NULL;
        if (!cli_option(a, values[i].name, &v)) continue;
        if (!v) return 2;
        if (*values[i].slot) return cli_usage_error(a, "option %s given twice", values[i].name);
        if (!*v) return cli_usage_error(a, "option %s has an empty value", values[i].name);
        *values[i].slot = v;
        return 0;
    }
    *matched = false;
    return 0;
}

int cli_take_options(cli_args *a, const cli_flag_option *flags, size_t n_flags,
                     const cli_value_option *values, size_t n_values)
{
    for (const char *arg; (arg = cli_peek(a));) {
        bool matched;
        if (cli_flag(a, "--help") || cli_flag(a, "-h")) return -1;
        int rc = take_option(a, flags, n_flags, values, n_values, &matched);
        if (rc) return rc;
        if (matched) continue;
        if (arg[0] == '-' && arg[1] != '\0')
            return cli_usage_error(a, "unknown option '%s' (%s --help)", arg, a->prog);
        return cli_usage_error(a, "unexpected argument '%s' (%s --help)", arg, a->prog);
    }
    return 0;
}

bool cli_path_writable(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return access(path, W_OK) == 0;
        errno = EISDIR;
        return false;
    }
    if (errno != ENOENT) return false;
    const char *slash = strrchr(path, '/');
    if (!slash) return access(".", W_OK | X_OK) == 0;
    char dir[4096];
    const size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return false;
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    return access(dir, W_OK | X_OK) == 0;
}

static bool all_digits(const char *s)
{
    return s[0] != '\0' && strspn(s, "0123456789") == strlen(s);
}

/* Parses digits into *mag, false on anything that is not a digit or on overflow. */
static bool parse_digits(const char *s, uint64_t *mag)
{
    uint64_t v = 0;
    if (*s == '\0') return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *mag = v;
    return true;
}

bool cli_int(cli_args *a, const char *opt, const char *text, int64_t min, int64_t max, int64_t *out)
{
    bool neg = text[0] == '-';
    const char *digits = neg ? text + 1 : text;
    uint64_t mag = UINT64_MAX;
    if ((neg && min >= 0) || (!parse_digits(digits, &mag) && !all_digits(digits))) {
        cli_usage_error(a, "%s '%s' is not %s integer", opt, text,
                        min >= 0 ? "a non-negative" : "an");
        return false;
    }
    /* Magnitudes past INT64_MAX (or past 2^64: mag stays UINT64_MAX) are out of range
     * whatever MIN and MAX say. */
    bool in_range = neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX;
    int64_t v = 0;
    if (in_range)
        v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    if (!in_range || v < min || v > max) {
        cli_usage_error(a, "%s %s is out of range [%lld, %lld]", opt, text, (long long)min,
                        (long long)max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_u64(cli_args *a, const char *opt, const char *text, uint64_t *out)
{
    uint64_t v;
    if (!parse_digits(text, &v)) {
        /* Tell overflow apart from junk: the user typed digits, just too many. */
        if (all_digits(text))
            cli_usage_error(a, "%s %s is out of range [0, %llu]", opt, text,
                            (unsigned long long)UINT64_MAX);
        else
            cli_usage_error(a, "%s '%s' is not a non-negative integer", opt, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_recipe(cli_args *a, const char *text, moe_experts_recipe *out)
{
    if (!strcmp(text, "f32") || !strcmp(text, "bf16") || !strcmp(text, "tile")) {
        *out = text[0] == 'f'   ? MOE_EXPERTS_RECIPE_F32
               : text[0] == 'b' ? MOE_EXPERTS_RECIPE_BF16
                                : MOE_EXPERTS_RECIPE_TILE;
        return true;
    }
    cli_usage_error(a, "--recipe '%s' is not f32, bf16 or tile", text);
    return false;
}

moe_isa_level cli_isa_level(const moe_cpu_caps *c)
{
    if (c->avx512_bf16) return MOE_ISA_AVX512BF16;
    if (c->avx512) return MOE_ISA_AVX512;
    if (c->avx2) return MOE_ISA_AVX2;
    return MOE_ISA_SCALAR;
}
