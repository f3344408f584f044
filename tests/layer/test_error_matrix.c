/* test_error_matrix.c — the bad-input matrix of docs/errors.md: one table drives the test and the
 * doc. */
#define _GNU_SOURCE /* nftw's FTW_DEPTH / FTW_PHYS */
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ckpt_patch.h"
#include "fwd_io.h"
#include "core/error.h"
#include "io/npy.h"
#include "moe_ep.h"

extern char **environ;

/*
 * Every row of the matrix is one bad input and one call: the call must return the row's
 * status (for a CLI row: exit status 1 and exactly one line on stderr), its message must match
 * the row's pattern (the whole message; '*' stands for any text: temporary paths, numbers
 * that depend on the machine), and it must write nothing: out-pointers keep a sentinel,
 * output buffers keep their poison, output files are absent. Leaks are LeakSanitizer's to
 * find (the sanitizer build runs this test).
 *
 * docs/errors.md holds the table this file prints with --markdown, between two marker lines;
 * the test fails when the two differ. `test_error_matrix --write-doc` rewrites that part of
 * the doc; `--show` prints each case's status and message.
 */

/* ---- The context every case works in ------------------------------------------------------ */

#define NO_MESSAGE "(no message was set)"

typedef struct context {
    char root[64];
    char v3[96], v4[96], bf16[96], mxfp4[96], int4[96];
    moe_model *v3m, *v4m;
    moe_layer *moe_l, *dense_l, *hash_l;
    fwd_io moe_b, hash_b;
    moe_router *hash_r;
    char moe_bin[PATH_MAX + 8];
    int sub;            /* numbers fresh sub-folders */
    bool untouched;     /* the case found its outputs as they were */
    char cli_msg[1024]; /* a CLI case's stderr line */
    bool cli_one_line;  /* ... and whether it was exactly one line */
} context;

static context C;

/* ---- Files ------------------------------------------------------------------------------- */

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text));
}

/* A fresh folder under the root; its path in BUF. */
static const char *fresh_dir(char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/case%d", C.root, ++C.sub);
    REQUIRE(mkdir(buf, 0700) == 0);
    return buf;
}

static void path_in(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

/* A .safetensors file: the 8-byte little-endian header length, HEADER, then DATA_LEN zero
 * bytes. */
static void st_file(const char *path, const char *header, size_t data_len)
{
    const size_t n = strlen(header);
    unsigned char *buf = calloc(1, 8 + n + data_len);
    REQUIRE(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

/* A folder with a valid config.json and model.safetensors made of HEADER and DATA_LEN bytes. */
static const char *st_case(char *dir, size_t cap, const char *header, size_t data_len)
{
    char path[256];
    fresh_dir(dir, cap);
    path_in(path, sizeof path, dir, "config.json");
    write_text(path, fam_cases[1].config);
    path_in(path, sizeof path, dir, "model.safetensors");
    st_file(path, header, data_len);
    return dir;
}

static int unlink_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir) { nftw(dir, unlink_cb, 16, FTW_DEPTH | FTW_PHYS); }

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- Calls that must fail and write nothing ------------------------------------------------ */

static int open_dir(const char *dir, const moe_open_options *o)
{
    moe_model *m = SENTINEL;
    const moe_status st = moe_model_open(dir, o, &m);
    if (m != SENTINEL) {
        C.untouched = false;
        if (st == MOE_OK) moe_model_close(m);
    }
    return st;
}

static int open_case(const char *dir) { return open_dir(dir, NULL); }

static int create_layer(const moe_model *m, int layer, const moe_layer_options *o)
{
    moe_layer *l = SENTINEL;
    const moe_status st = moe_layer_create(m, layer, o, &l);
    if (l != SENTINEL) {
        C.untouched = false;
        if (st == MOE_OK) moe_layer_destroy(l);
    }
    return st;
}

/* Opens DIR and creates LAYER: the status of whichever fails (open must not). */
static int open_create(const char *dir, int layer)
{
    moe_model *m = NULL;
    moe_status st = moe_model_open(dir, NULL, &m);
    if (st) return st;
    st = create_layer(m, layer, NULL);
    moe_model_close(m);
    return st;
}

/* ---- Patching one element of a checkpoint tensor in its file ------------------------------ */

typedef struct patch {
    char file[256];
    uint64_t offset;
    unsigned char saved[8];
    size_t len;
} patch;

/* Writes LEN bytes over byte BYTE of the tensor of (layer, group, expert, role) of M,
 * remembering what was there. */
static void patch_apply(patch *p, const moe_model *m, int layer, moe_tensor_group g, int expert,
                        moe_tensor_role role, uint64_t byte, const void *bytes, size_t len)
{
    const moe_tensor *t = fx_find(m, layer, g, expert, role);
    REQUIRE(t && byte + len <= t->nbytes && len <= sizeof p->saved);
    snprintf(p->file, sizeof p->file, "%s", t->file);
    p->offset = ckpt_file_offset(t, byte);
    p->len = len;
    int fd = open(p->file, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(pread(fd, p->saved, len, (off_t)p->offset) == (ssize_t)len);
    REQUIRE(pwrite(fd, bytes, len, (off_t)p->offset) == (ssize_t)len);
    close(fd);
}

static void patch_undo(const patch *p)
{
    int fd = open(p->file, O_WRONLY);
    REQUIRE(fd >= 0 && pwrite(fd, p->saved, p->len, (off_t)p->offset) == (ssize_t)p->len);
    close(fd);
}

/* Patches, opens DIR, creates LAYER, restores: the status of create. */
static int patched_create(const char *dir, const moe_model *m, int layer, moe_tensor_group g,
                          int expert, moe_tensor_role role, uint64_t byte, const void *bytes,
                          size_t len)
{
    patch p;
    patch_apply(&p, m, layer, g, expert, role, byte, bytes, len);
    const int st = open_create(dir, layer);
    patch_undo(&p);
    return st;
}

/* ---- Forward with every output poisoned --------------------------------------------------- */

static int forward(const moe_layer *l, fwd_io *b, const moe_forward_args *a)
{
    poison(b);
    const moe_status st = moe_layer_forward(l, a);
    if (!io_untouched(b)) C.untouched = false;
    return st;
}

/* ---- Router forward with poisoned outputs ------------------------------------------------- */

enum { RT = 5, RE = 16, RK = 4, RVOCAB = 1000 };

static int route(const moe_router *r, const float *logits, const void *tokens, moe_dtype dt)
{
    int32_t ids[RT * RK];
    float w[RT * RK];
    memset(ids, POISON, sizeof ids);
    memset(w, POISON, sizeof w);
    const moe_status st = moe_router_forward(r, RT, logits, tokens, dt, ids, w);
    if (!all_poison(ids, sizeof ids) || !all_poison(w, sizeof w)) C.untouched = false;
    return st;
}

static int router_create(const moe_router_params *p)
{
    moe_router *r = SENTINEL;
    const moe_status st = moe_router_create(p, &r);
    if (r != SENTINEL) {
        C.untouched = false;
        if (st == MOE_OK) moe_router_destroy(r);
    }
    return st;
}

static moe_router_params noaux_params(const float *bias)
{
    const route_cfg c = {"v3", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, RE, RK, 4, 2, true, 2.5f};
    return route_params(&c, bias, NULL, 0);
}

static moe_router_params hash_params(const int32_t *table)
{
    const route_cfg c = {"v4", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, RE, RK, 1, 1, true, 1.5f};
    return route_params(&c, NULL, table, RVOCAB);
}

/* A valid [RVOCAB, RK] table: row r holds r, r+1, r+2, r+3 (mod RE). */
static int32_t *good_table(void)
{
    int32_t *t = malloc(RVOCAB * RK * sizeof *t);
    REQUIRE(t);
    for (int r = 0; r < RVOCAB; r++)
        for (int j = 0; j < RK; j++)
            t[r * RK + j] = (r + j) % RE;
    return t;
}

/* ---- The CLI ---------------------------------------------------------------------------- */

/* Runs moe with ARGV (NULL-terminated, without the program), stderr into a file; returns the
 * exit status (-1 for a signal) and leaves stderr's first line in C.cli_msg. */
static int run_moe(const char *const *argv)
{
    char err[256], out[256];
    path_in(err, sizeof err, C.root, "stderr.txt");
    path_in(out, sizeof out, C.root, "stdout.txt");
    const char *full[32];
    size_t n = 0;
    full[n++] = C.moe_bin;
    for (; argv[n - 1] && n < 31; n++)
        full[n] = argv[n - 1];
    full[n] = NULL;
    posix_spawn_file_actions_t fa;
    REQUIRE(posix_spawn_file_actions_init(&fa) == 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    REQUIRE(posix_spawn(&pid, C.moe_bin, &fa, NULL, (char *const *)full, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int ws;
    REQUIRE(waitpid(pid, &ws, 0) == pid);
    FILE *f = fopen(err, "rb");
    REQUIRE(f);
    C.cli_msg[0] = '\0';
    int lines = 0;
    char line[sizeof C.cli_msg];
    while (fgets(line, sizeof line, f)) {
        if (lines++ == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(C.cli_msg, sizeof C.cli_msg, "%s", line);
        }
    }
    fclose(f);
    C.cli_one_line = lines == 1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* Runs ARGV and checks that none of the OUTS files exists afterwards. */
static int run_moe_outs(const char *const *argv, const char *const *outs)
{
    for (size_t i = 0; outs[i]; i++)
        unlink(outs[i]);
    const int rc = run_moe(argv);
    for (size_t i = 0; outs[i]; i++)
        if (exists(outs[i])) C.untouched = false;
    return rc;
}

/* An f32 [rows, cols] .npy of hidden-state-like values. */
static void npy_f32(const char *path, int64_t rows, int64_t cols)
{
    float *x = malloc((size_t)(rows * cols) * sizeof *x);
    REQUIRE(x);
    fx_hidden(5, (size_t)(rows * cols), x);
    const int64_t shape[2] = {rows, cols};
    REQUIRE(moe_npy_write(path, MOE_DTYPE_F32, 2, shape, x) == MOE_OK);
    free(x);
}

static void npy_i32(const char *path, int ndim, const int64_t *shape, const int32_t *v)
{
    REQUIRE(moe_npy_write(path, MOE_DTYPE_I32, ndim, shape, v) == MOE_OK);
}

/* ==== The cases ============================================================================ */

/* ---- safetensors files ---- */

#define T1 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static int st_absent(void)
{
    char d[128], p[256];
    fresh_dir(d, sizeof d);
    path_in(p, sizeof p, d, "config.json");
    write_text(p, fam_cases[1].config);
    return open_case(d);
}

static int st_short(void)
{
    char d[128], p[256];
    st_case(d, sizeof d, "{}", 0);
    path_in(p, sizeof p, d, "model.safetensors");
    write_bytes(p, "\x02\0\0", 3);
    return open_case(d);
}

static int st_len_limit(void)
{
    char d[128], p[256];
    st_case(d, sizeof d, "{}", 0);
    path_in(p, sizeof p, d, "model.safetensors");
    write_bytes(p, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    return open_case(d);
}

static int st_len_past_end(void)
{
    char d[128], p[256];
    st_case(d, sizeof d, "{}", 0);
    path_in(p, sizeof p, d, "model.safetensors");
    write_bytes(p, "\x00\x10\0\0\0\0\0\0{\"a\":" T1 "}", 8 + 2 + 3 + sizeof T1);
    return open_case(d);
}

static int st_not_json(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d, "{\"a\": {\"dtype\": ", 0));
}

static int st_not_object(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d, "[1, 2, 3]", 0));
}

static int st_duplicate(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d,
        "{\"a\":" T1 ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8));
}

static int st_dtype(void)
{
    char d[128];
    return open_case(
        st_case(d, sizeof d, "{\"a\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4));
}

static int st_bytes(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8));
}

static int st_negative(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4));
}

static int st_overflow(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d,
                             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                             "\"data_offsets\":[0,4]}}",
                             4));
}

static int st_hole(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d,
        "{\"a\":" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12));
}

static int st_overlap(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d,
                             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                             8));
}

static int st_truncated(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12));
}

static int st_trailing(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d, "{\"a\":" T1 "}", 12));
}

static int st_metadata(void)
{
    char d[128];
    return open_case(st_case(d, sizeof d, "{\"__metadata__\":{\"format\":1},\"a\":" T1 "}", 4));
}

static int st_field(void)
{
    char d[128];
    return open_case(st_case(
        d, sizeof d,
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"strides\":[1]}}", 4));
}

/* ---- sharded checkpoints ---- */

/* A folder with the base config, INDEX as model.safetensors.index.json, and two shards: s1
 * holding tensors A1 (and A2, if not NULL), s2 holding B. */
static const char *index_case(char *d, size_t cap, const char *index, const char *b)
{
    char p[256];
    fresh_dir(d, cap);
    path_in(p, sizeof p, d, "config.json");
    write_text(p, fam_cases[1].config);
    path_in(p, sizeof p, d, "model.safetensors.index.json");
    write_text(p, index);
    path_in(p, sizeof p, d, "s1.safetensors");
    st_file(p, "{\"a\":" T1 "}", 4);
    if (b) {
        char h[128];
        snprintf(h, sizeof h, "{\"%s\":" T1 "}", b);
        path_in(p, sizeof p, d, "s2.safetensors");
        st_file(p, h, 4);
    }
    return d;
}

static int idx_path(void)
{
    char d[128];
    return open_case(
        index_case(d, sizeof d,
                   "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"../s2.safetensors\"}}", "b"));
}

static int idx_missing_shard(void)
{
    char d[128];
    return open_case(index_case(
        d, sizeof d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}", NULL));
}

static int idx_wrong_shard(void)
{
    char d[128];
    return open_case(index_case(
        d, sizeof d, "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}", "b"));
}

/* s2 holds b and c; the index lists only a and b. */
static int idx_unlisted(void)
{
    char d[128], p[256];
    index_case(d, sizeof d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
               NULL);
    path_in(p, sizeof p, d, "s2.safetensors");
    st_file(p, "{\"b\":" T1 ",\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    return open_case(d);
}

/* s2 holds b and a, which s1 holds too. */
static int idx_two_shards(void)
{
    char d[128], p[256];
    index_case(d, sizeof d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
               NULL);
    path_in(p, sizeof p, d, "s2.safetensors");
    st_file(p, "{\"a\":" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    return open_case(d);
}

static int idx_no_map(void)
{
    char d[128];
    return open_case(index_case(d, sizeof d, "{\"metadata\":{\"total_size\":8}}", "b"));
}

static int idx_not_object(void)
{
    char d[128];
    return open_case(index_case(d, sizeof d, "[\"s1.safetensors\"]", "b"));
}

/* ---- config.json ---- */

/* A folder whose config.json is BASE with FROM replaced by TO (FROM must occur). */
static int cfg_case_in(const char *base, const char *from, const char *to)
{
    const char *at = strstr(base, from);
    REQUIRE(at);
    char text[2048], d[128], p[256];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    fresh_dir(d, sizeof d);
    path_in(p, sizeof p, d, "config.json");
    write_text(p, text);
    return open_case(d);
}

/* The same from the deepseek_v3 base config. */
static int cfg_case(const char *from, const char *to)
{
    return cfg_case_in(fam_cases[1].config, from, to);
}

static int cfg_absent(void)
{
    char d[128];
    return open_case(fresh_dir(d, sizeof d));
}

static int cfg_not_json(void) { return cfg_case("\"hidden_size\":320,", "\"hidden_size\":"); }
static int cfg_model_type(void) { return cfg_case("deepseek_v3", "deepseek_v9"); }
static int cfg_type(void) { return cfg_case("\"hidden_size\":320", "\"hidden_size\":\"320\""); }
static int cfg_negative(void) { return cfg_case("\"hidden_size\":320", "\"hidden_size\":-320"); }
static int cfg_missing(void) { return cfg_case("\"n_routed_experts\":16,", ""); }
static int cfg_dup(void)
{
    return cfg_case("\"hidden_size\":320", "\"top_k\":1,\"hidden_size\":320,\"hidden_size\":320");
}
static int cfg_topk(void)
{
    return cfg_case("\"num_experts_per_tok\":4", "\"num_experts_per_tok\":17");
}
static int cfg_groups(void) { return cfg_case("\"n_group\":4", "\"n_group\":3"); }
static int cfg_topk_group(void) { return cfg_case("\"topk_group\":2", "\"topk_group\":5"); }
static int cfg_group_of_one(void)
{
    return cfg_case("\"n_group\":4,\"topk_group\":2", "\"n_group\":16,\"topk_group\":4");
}
static int cfg_count_names(void)
{
    return cfg_case("\"n_routed_experts\":16", "\"n_routed_experts\":16,\"num_local_experts\":8");
}
static int cfg_hidden_act(void)
{
    return cfg_case("\"scoring_func\"", "\"hidden_act\":\"gelu\",\"scoring_func\"");
}
static int cfg_swiglu_alpha(void)
{
    return cfg_case_in(fam_cases[6].config, "\"swiglu_limit\"",
                       "\"swiglu_alpha\":0,\"swiglu_limit\"");
}
static int cfg_mlp_layer_types(void)
{
    return cfg_case_in(fam_cases[11].config, "[\"moe\",\"hash_moe\"]", "[\"moe\",\"dense\"]");
}
static int cfg_hash_layers_disagree(void)
{
    return cfg_case_in(fam_cases[11].config, "\"vocab_size\"",
                       "\"num_hash_layers\":1,\"vocab_size\"");
}
static int cfg_scoring(void) { return cfg_case("\"sigmoid\"", "\"tanh\""); }
static int cfg_rsf(void)
{
    return cfg_case("\"routed_scaling_factor\":2.5", "\"routed_scaling_factor\":-1.0");
}

/* ---- the checkpoint against its config ---- */

/* A folder with CONFIG and a hard link to v3's model.safetensors. */
static int relinked(const char *config)
{
    char d[128], p[256], src[256];
    fresh_dir(d, sizeof d);
    path_in(p, sizeof p, d, "config.json");
    write_text(p, config);
    path_in(src, sizeof src, C.v3, "model.safetensors");
    path_in(p, sizeof p, d, "model.safetensors");
    REQUIRE(link(src, p) == 0);
    return open_case(d);
}

static int ck_missing(void)
{
    char d[128];
    const fx_damage drop = {"model.layers.1.mlp.experts.3.up_proj.weight", NULL};
    fx_write_model_ex(fresh_dir(d, sizeof d), fam_cases[2].config, 9, &drop);
    return open_case(d);
}

static int ck_dtype(void) { return relinked(fam_cases[1].config); }

/* The v3 FP8 config with FROM replaced by TO, over v3's tensors. */
static int ck_config(const char *from, const char *to)
{
    const char *base = fam_cases[2].config;
    const char *at = strstr(base, from);
    REQUIRE(at);
    char text[2048];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    return relinked(text);
}

static int ck_shape(void)
{
    return ck_config("\"moe_intermediate_size\":192", "\"moe_intermediate_size\":160");
}

static int ck_hidden(void) { return ck_config("\"hidden_size\":320", "\"hidden_size\":256"); }

/* ---- INT4 (compressed-tensors): config fields, shapes, values ---- */

static const char *int4_config(void)
{
    for (size_t i = 0; i < N_FAM_CASES; i++)
        if (!strcmp(fam_cases[i].name, "kimi_k2_int4")) return fam_cases[i].config;
    REQUIRE(false);
    return NULL;
}

static int i4_cfg(const char *from, const char *to) { return cfg_case_in(int4_config(), from, to); }
static int i4_bits(void) { return i4_cfg("\"num_bits\":4", "\"num_bits\":8"); }
static int i4_asym(void) { return i4_cfg("\"symmetric\":true", "\"symmetric\":false"); }
static int i4_channel(void) { return i4_cfg("\"strategy\":\"group\"", "\"strategy\":\"channel\""); }
static int i4_actorder(void) { return i4_cfg("\"actorder\":null", "\"actorder\":\"group\""); }
static int i4_dynamic(void) { return i4_cfg("\"dynamic\":false", "\"dynamic\":true"); }
static int i4_w4a8(void)
{
    return i4_cfg("\"input_activations\":null",
                  "\"input_activations\":{\"num_bits\":8,\"type\":\"int\",\"dynamic\":true}");
}
static int i4_group48(void) { return i4_cfg("\"group_size\":32", "\"group_size\":48"); }
static int i4_group64(void) { return i4_cfg("\"group_size\":32", "\"group_size\":64"); }
static int i4_format(void)
{
    return i4_cfg("\"format\":\"pack-quantized\"", "\"format\":\"marlin-24\"");
}
static int i4_partial(void)
{
    return i4_cfg("\"lm_head\",", "\"lm_head\",\"model.layers.1.mlp.experts.3.up_proj\",");
}
static int i4_bad_regex(void) { return i4_cfg("\"lm_head\",", "\"lm_head\",\"re:(\","); }

/* The INT4 tensors under a config that says another expert width. */
static int i4_shape(void)
{
    const char *base = int4_config(), *from = "\"moe_intermediate_size\":160";
    const char *at = strstr(base, from);
    REQUIRE(at);
    char text[2048], d[128], p[256], src[256];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, "\"moe_intermediate_size\":192",
             at + strlen(from));
    fresh_dir(d, sizeof d);
    path_in(p, sizeof p, d, "config.json");
    write_text(p, text);
    path_in(src, sizeof src, C.int4, "model.safetensors");
    path_in(p, sizeof p, d, "model.safetensors");
    REQUIRE(link(src, p) == 0);
    return open_case(d);
}

/* weight_shape of expert 6's down_proj says [256, 128] (element 1 is byte 8). */
static int i4_shape_value(void)
{
    const int64_t v = 128;
    moe_model *m = fx_open(C.int4, false);
    const int st = patched_create(C.int4, m, 1, MOE_GROUP_ROUTED, 6, MOE_ROLE_DOWN_SHAPE, 8, &v, 8);
    moe_model_close(m);
    return st;
}

/* A NaN bf16 group scale: expert 4's gate_proj.weight_scale [160, 8], element [2, 3]. */
static int i4_scale_nan(void)
{
    const uint16_t v = 0x7FC0;
    moe_model *m = fx_open(C.int4, false);
    const int st =
        patched_create(C.int4, m, 1, MOE_GROUP_ROUTED, 4, MOE_ROLE_GATE_SCALE, 2 * 19, &v, 2);
    moe_model_close(m);
    return st;
}

/* ---- tensor values (checked when the layer is created) ---- */

static int val_scale_nan(void)
{
    const float v = NAN;
    return patched_create(C.v3, C.v3m, 1, MOE_GROUP_ROUTED, 3, MOE_ROLE_UP_SCALE, 4, &v, 4);
}

static int val_scale_zero(void)
{
    const float v = 0.0f;
    return patched_create(C.v3, C.v3m, 1, MOE_GROUP_SHARED, -1, MOE_ROLE_DOWN_SCALE, 0, &v, 4);
}

static int val_e8m0_nan(void)
{
    const unsigned char v = 0xFF;
    return patched_create(C.v4, C.v4m, 1, MOE_GROUP_ROUTED, 2, MOE_ROLE_GATE_SCALE, 1, &v, 1);
}

static int val_code_nan(void)
{
    const unsigned char v = 0x7F;
    return patched_create(C.v3, C.v3m, 1, MOE_GROUP_ROUTED, 5, MOE_ROLE_DOWN, 0, &v, 1);
}

static int val_router_nan(void)
{
    const uint16_t v = 0x7FC0; /* bf16 NaN */
    return patched_create(C.v3, C.v3m, 1, MOE_GROUP_ROUTER, -1, MOE_ROLE_ROUTER_WEIGHT, 2 * 325, &v,
                          2);
}

static int val_bias_inf(void)
{
    const moe_tensor *t = fx_find(C.v3m, 1, MOE_GROUP_ROUTER, -1, MOE_ROLE_CORRECTION_BIAS);
    REQUIRE(t && (t->dtype == MOE_DTYPE_F32 || t->dtype == MOE_DTYPE_BF16));
    const float f = INFINITY;
    const uint16_t h = 0x7F80;
    const size_t w = moe_dtype_bits(t->dtype) / 8;
    return patched_create(C.v3, C.v3m, 1, MOE_GROUP_ROUTER, -1, MOE_ROLE_CORRECTION_BIAS, 7 * w,
                          w == 4 ? (const void *)&f : (const void *)&h, w);
}

/* Sets tid2eid[ROW][COL] of v4's hash layer 0 to V (in the table's own width). */
static int val_table(int64_t row, int col, int64_t v)
{
    const moe_tensor *t = fx_find(C.v4m, 0, MOE_GROUP_ROUTER, -1, MOE_ROLE_TID2EID);
    REQUIRE(t && (t->dtype == MOE_DTYPE_I32 || t->dtype == MOE_DTYPE_I64));
    const int k = moe_model_desc_of(C.v4m)->layers[0].routing.top_k;
    const size_t w = moe_dtype_bits(t->dtype) / 8;
    const int32_t v32 = (int32_t)v;
    return patched_create(C.v4, C.v4m, 0, MOE_GROUP_ROUTER, -1, MOE_ROLE_TID2EID,
                          (uint64_t)(row * k + col) * w,
                          w == 4 ? (const void *)&v32 : (const void *)&v, w);
}

static int val_table_range(void) { return val_table(3, 1, 16); }
static int val_table_negative(void) { return val_table(4, 0, -1); }

static int val_table_repeat(void)
{
    const moe_tensor *t = fx_find(C.v4m, 0, MOE_GROUP_ROUTER, -1, MOE_ROLE_TID2EID);
    REQUIRE(t);
    return val_table(7, 2, (int64_t)fx_decode(t, 7 * 4 + 0));
}

/* gpt-oss MXFP4 experts, stacked: gate_up_proj_scales [4, 128, 2]; [2, 5, 1] is byte 523. */
static int val_mxfp4_scale(void)
{
    const unsigned char v = 0xFF;
    moe_model *m = fx_open(C.mxfp4, false);
    const int st =
        patched_create(C.mxfp4, m, 0, MOE_GROUP_ROUTED, -1, MOE_ROLE_GATE_UP_SCALE, 523, &v, 1);
    moe_model_close(m);
    return st;
}

/* ---- moe_model_open and moe_layer_create arguments ---- */

static int open_null(void) { return open_case(NULL); }

static int open_nowhere(void)
{
    char d[128];
    snprintf(d, sizeof d, "%s/no-such-folder", C.root);
    return open_case(d);
}

static int open_options(void)
{
    const moe_open_options o = {4, false};
    return open_dir(C.v3, &o);
}

static int create_null_model(void) { return create_layer(NULL, 1, NULL); }
static int create_null_out(void) { return moe_layer_create(C.v3m, 1, NULL, NULL); }
static int create_index(void) { return create_layer(C.v3m, 2, NULL); }

static int create_threads(void)
{
    const moe_layer_options o = {
        .size = sizeof o, .threads = -1, .logits_dtype = MOE_DTYPE_INVALID};
    return create_layer(C.v3m, 1, &o);
}

static int create_logits(void)
{
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_I8};
    return create_layer(C.v3m, 1, &o);
}

static int create_recipe(void)
{
    const moe_layer_options o = {.size = sizeof o,
                                 .threads = 1,
                                 .logits_dtype = MOE_DTYPE_INVALID,
                                 .experts_recipe = (moe_experts_recipe)4};
    return create_layer(C.v3m, 1, &o);
}

static int create_size(void)
{
    const moe_layer_options o = {.size = 4, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    return create_layer(C.v3m, 1, &o);
}

/* ---- Expert parallelism (moe_ep.h) ---- */

static int32_t ep_table[16]; /* experts 0-7 on rank 0, 8-15 on rank 1 */

static int create_ep(int rank, int n, size_t size, size_t entries, int bad_entry)
{
    for (int e = 0; e < 16; e++)
        ep_table[e] = e < 8 ? 0 : 1;
    if (bad_entry >= 0) ep_table[bad_entry] = 2;
    const moe_ep_placement pl = {size, rank, n, ep_table, entries};
    moe_layer *l = SENTINEL;
    const moe_status st = moe_layer_create_ep(C.v3m, 1, NULL, &pl, &l);
    if (l != SENTINEL) {
        C.untouched = false;
        if (st == MOE_OK) moe_layer_destroy(l);
    }
    return st;
}

static int ep_entry(void) { return create_ep(0, 2, sizeof(moe_ep_placement), 16, 5); }
static int ep_entries(void) { return create_ep(0, 2, sizeof(moe_ep_placement), 15, -1); }
static int ep_rank(void) { return create_ep(2, 2, sizeof(moe_ep_placement), 16, -1); }
static int ep_size(void) { return create_ep(0, 2, 8, 16, -1); }

/* Rank 0 of 2 (contiguous): experts 0-7. */
static moe_layer *ep_layer(void)
{
    const moe_ep_placement pl = {sizeof pl, 0, 2, NULL, 0};
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create_ep(C.v3m, 1, NULL, &pl, &l) == MOE_OK);
    return l;
}

static int ep_whole_forward(void)
{
    moe_layer *l = ep_layer();
    moe_forward_args a = args_of(&C.moe_b);
    const moe_status st = forward(l, &C.moe_b, &a);
    moe_layer_destroy(l);
    return st;
}

static int ep_other_rank(void)
{
    moe_layer *l = ep_layer();
    fwd_io *b = &C.moe_b;
    const size_t wsb = moe_ep_workspace_size(l, 0, 3);
    void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
    REQUIRE(ws);
    const int32_t ex[3] = {1, 9, 2};
    poison(b);
    const moe_ep_rows_args a = {.size = sizeof a,
                                .n_rows = 3,
                                .hidden_size = b->h,
                                .rows = b->x,
                                .rows_dtype = MOE_DTYPE_F32,
                                .experts = ex,
                                .y = b->out,
                                .workspace = ws,
                                .workspace_size = wsb};
    const moe_status st = moe_ep_experts(l, &a);
    if (!io_untouched(b)) C.untouched = false;
    free(ws);
    moe_layer_destroy(l);
    return st;
}

static int ep_dense_route(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    poison(&C.moe_b);
    const moe_status st = moe_ep_route(C.dense_l, &a);
    if (!io_untouched(&C.moe_b)) C.untouched = false;
    return st;
}

static int ep_nan_weight(void)
{
    moe_layer *l = ep_layer();
    fwd_io *b = &C.moe_b;
    const size_t t = 2, wsb = moe_ep_workspace_size(l, t, 0);
    void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
    float *y = calloc(t * b->k * b->h, sizeof(float)), w[2 * 16];
    REQUIRE(ws && y && b->k <= 16);
    for (size_t i = 0; i < t * b->k; i++)
        w[i] = 0.25f;
    w[b->k + 1] = NAN;
    poison(b);
    const moe_ep_combine_args a = {.size = sizeof a,
                                   .n_tokens = t,
                                   .hidden_size = b->h,
                                   .hidden = b->x,
                                   .hidden_dtype = MOE_DTYPE_F32,
                                   .weights = w,
                                   .y = y,
                                   .out = b->out,
                                   .workspace = ws,
                                   .workspace_size = wsb};
    const moe_status st = moe_ep_combine(l, &a);
    if (!io_untouched(b)) C.untouched = false;
    free(ws);
    free(y);
    moe_layer_destroy(l);
    return st;
}

/* A llama4 layer (its weights scale the experts' inputs), rank 1 of 2 (experts 8-15): three
 * rows whose weights are NULL, or whose row 1 has weight inf. */
static int ep_llama4_rows(bool inf)
{
    const fam_case *l4 = NULL;
    for (size_t i = 0; i < N_FAM_CASES; i++)
        if (!strcmp(fam_cases[i].name, "llama4")) l4 = &fam_cases[i];
    REQUIRE(l4);
    char d[128];
    fx_write_model(fresh_dir(d, sizeof d), l4->config, 25);
    moe_model *m = fx_open(d, false);
    const moe_ep_placement pl = {sizeof pl, 1, 2, NULL, 0};
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create_ep(m, l4->moe_layer, NULL, &pl, &l) == MOE_OK);
    fwd_io b;
    io_make(&b, l, 3);
    const size_t wsb = moe_ep_workspace_size(l, 0, 3);
    void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
    REQUIRE(ws);
    const int32_t ex[3] = {8, 9, 15};
    const float w[3] = {0.5f, INFINITY, 0.25f};
    poison(&b);
    const moe_ep_rows_args a = {.size = sizeof a,
                                .n_rows = 3,
                                .hidden_size = b.h,
                                .rows = b.x,
                                .rows_dtype = MOE_DTYPE_F32,
                                .experts = ex,
                                .y = b.out,
                                .workspace = ws,
                                .workspace_size = wsb,
                                .weights = inf ? w : NULL};
    const moe_status st = moe_ep_experts(l, &a);
    if (!io_untouched(&b)) C.untouched = false;
    free(ws);
    io_free(&b);
    moe_layer_destroy(l);
    moe_model_close(m);
    return st;
}

static int ep_llama4_no_weights(void) { return ep_llama4_rows(false); }
static int ep_llama4_inf_weight(void) { return ep_llama4_rows(true); }

/* ---- moe_layer_forward ---- */

static int fw_null_layer(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    return forward(NULL, &C.moe_b, &a);
}

static int fw_null_args(void)
{
    poison(&C.moe_b);
    const moe_status st = moe_layer_forward(C.moe_l, NULL);
    if (!io_untouched(&C.moe_b)) C.untouched = false;
    return st;
}

static int fw_size(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.size = 8;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_hidden_size(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.hidden_size = 7168;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_hidden_dtype(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.hidden_dtype = MOE_DTYPE_F16;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_hidden_null(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.hidden = NULL;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_out_null(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.out = NULL;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_ws_null(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.workspace = NULL;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_ws_align(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.workspace = (char *)a.workspace + 16;
    a.workspace_size -= 16;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_ws_small(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.workspace_size = moe_layer_workspace_size(C.moe_l, a.n_tokens - 1);
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_ws_overflow(void)
{
    moe_forward_args a = args_of(&C.moe_b);
    a.n_tokens = SIZE_MAX / 64;
    return forward(C.moe_l, &C.moe_b, &a);
}

static int fw_ids_null(void)
{
    moe_forward_args a = args_of(&C.hash_b);
    a.token_ids = NULL;
    return forward(C.hash_l, &C.hash_b, &a);
}

static int fw_ids_dtype(void)
{
    moe_forward_args a = args_of(&C.hash_b);
    a.token_id_dtype = MOE_DTYPE_F32;
    return forward(C.hash_l, &C.hash_b, &a);
}

static int fw_ids_vocab(void)
{
    moe_forward_args a = args_of(&C.hash_b);
    const int32_t keep = C.hash_b.tokens[4];
    C.hash_b.tokens[4] = 1000;
    const int st = forward(C.hash_l, &C.hash_b, &a);
    C.hash_b.tokens[4] = keep;
    return st;
}

static int fw_ids_negative(void)
{
    int64_t ids[7] = {1, 2, 3, 4, 5, 6, -7};
    moe_forward_args a = args_of(&C.hash_b);
    a.token_ids = ids;
    a.token_id_dtype = MOE_DTYPE_I64;
    return forward(C.hash_l, &C.hash_b, &a);
}

/* ---- moe_layer_forward_experts ---- */

/* The caller's routing for the MoE layer's 7 tokens: ids 0, 1, ... in each row, weights 0.5. */
static int32_t xf_ids[7 * 16];
static float xf_w[7 * 16];

static moe_experts_args xf_args(void)
{
    fwd_io *b = &C.moe_b;
    for (size_t i = 0; i < b->n * b->k; i++) {
        xf_ids[i] = (int32_t)(i % b->k);
        xf_w[i] = 0.5f;
    }
    return xargs_of(b, xf_ids, MOE_DTYPE_I32, xf_w, true);
}

static int experts(const moe_layer *l, const moe_experts_args *a)
{
    poison(&C.moe_b);
    const moe_status st = moe_layer_forward_experts(l, a);
    if (!io_untouched(&C.moe_b)) C.untouched = false;
    return st;
}

static int xf_dense(void)
{
    moe_experts_args a = xf_args();
    return experts(C.dense_l, &a);
}

static int xf_size(void)
{
    moe_experts_args a = xf_args();
    a.size = 8;
    return experts(C.moe_l, &a);
}

static int xf_top_k(void)
{
    moe_experts_args a = xf_args();
    a.top_k = 2;
    return experts(C.moe_l, &a);
}

static int xf_id_range(void)
{
    moe_experts_args a = xf_args();
    xf_ids[3 * C.moe_b.k + 1] = 16;
    return experts(C.moe_l, &a);
}

static int xf_id_repeat(void)
{
    moe_experts_args a = xf_args();
    xf_ids[5 * C.moe_b.k + 2] = xf_ids[5 * C.moe_b.k];
    return experts(C.moe_l, &a);
}

static int xf_ids_dtype(void)
{
    moe_experts_args a = xf_args();
    a.ids_dtype = MOE_DTYPE_U8;
    return experts(C.moe_l, &a);
}

static int xf_weight_nan(void)
{
    moe_experts_args a = xf_args();
    xf_w[6 * C.moe_b.k + 3] = NAN;
    return experts(C.moe_l, &a);
}

static int xf_weights_null(void)
{
    moe_experts_args a = xf_args();
    a.weights = NULL;
    return experts(C.moe_l, &a);
}

/* ---- call order ---- */

static moe_layer *fresh_layer(moe_dtype logits)
{
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = logits};
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create(C.v3m, 1, &o, &l) == MOE_OK);
    return l;
}

static int order_twice(void)
{
    moe_layer *l = fresh_layer(MOE_DTYPE_INVALID);
    REQUIRE(moe_layer_set_logits_dtype(l, MOE_DTYPE_BF16) == MOE_OK);
    const char *before = moe_layer_explain(l);
    const int st = moe_layer_set_logits_dtype(l, MOE_DTYPE_F32);
    if (moe_layer_explain(l) != before) C.untouched = false;
    moe_layer_destroy(l);
    return st;
}

static int order_after_forward(void)
{
    moe_layer *l = fresh_layer(MOE_DTYPE_INVALID);
    moe_forward_args z;
    memset(&z, 0, sizeof z);
    z.size = sizeof z; /* zero tokens: a forward all the same */
    REQUIRE(moe_layer_forward(l, &z) == MOE_OK);
    const char *before = moe_layer_explain(l);
    const int st = moe_layer_set_logits_dtype(l, MOE_DTYPE_BF16);
    if (moe_layer_explain(l) != before) C.untouched = false;
    moe_layer_destroy(l);
    return st;
}

static int order_options(void)
{
    moe_layer *l = fresh_layer(MOE_DTYPE_F32);
    const int st = moe_layer_set_logits_dtype(l, MOE_DTYPE_BF16);
    moe_layer_destroy(l);
    return st;
}

static int order_dense(void) { return moe_layer_set_logits_dtype(C.dense_l, MOE_DTYPE_BF16); }
static int order_null(void) { return moe_layer_set_logits_dtype(NULL, MOE_DTYPE_BF16); }

/* The message of the first call, kept across the check above. */
static char order_msg[1024];

static int order_dtype_msg(void)
{
    moe_layer *l = fresh_layer(MOE_DTYPE_INVALID);
    const int st = moe_layer_set_logits_dtype(l, MOE_DTYPE_I32);
    snprintf(order_msg, sizeof order_msg, "%s", moe_last_error());
    if (moe_layer_set_logits_dtype(l, MOE_DTYPE_BF16) != MOE_OK) C.untouched = false;
    moe_layer_destroy(l);
    moe_error(MOE_OK, "%s", order_msg);
    return st;
}

static int noop_layer(void)
{
    moe_layer_destroy(NULL);
    return -1;
}

static int noop_model(void)
{
    moe_model_close(NULL);
    return -1;
}

static int noop_router(void)
{
    moe_router_destroy(NULL);
    return -1;
}

/* ---- routers ---- */

static int rt_null(void) { return router_create(NULL); }

static int rt_size(void)
{
    float bias[RE] = {0};
    moe_router_params p = noaux_params(bias);
    p.size = 16;
    return router_create(&p);
}

static int rt_topk(void)
{
    float bias[RE] = {0};
    moe_router_params p = noaux_params(bias);
    p.top_k = 17;
    return router_create(&p);
}

static int rt_groups(void)
{
    float bias[RE] = {0};
    moe_router_params p = noaux_params(bias);
    p.n_group = 5;
    return router_create(&p);
}

static int rt_no_bias(void)
{
    moe_router_params p = noaux_params(NULL);
    p.correction_bias = NULL;
    return router_create(&p);
}

static int rt_bias_nan(void)
{
    float bias[RE] = {0};
    bias[9] = NAN;
    moe_router_params p = noaux_params(bias);
    return router_create(&p);
}

static int rt_rsf(void)
{
    float bias[RE] = {0};
    moe_router_params p = noaux_params(bias);
    p.routed_scaling_factor = 0.0f;
    return router_create(&p);
}

static int rt_table_range(void)
{
    int32_t *t = good_table();
    t[500 * RK + 3] = RE;
    moe_router_params p = hash_params(t);
    const int st = router_create(&p);
    free(t);
    return st;
}

static int rt_table_repeat(void)
{
    int32_t *t = good_table();
    t[999 * RK + 3] = t[999 * RK + 1];
    moe_router_params p = hash_params(t);
    const int st = router_create(&p);
    free(t);
    return st;
}

static int rt_table_dtype(void)
{
    int32_t *t = good_table();
    moe_router_params p = hash_params(t);
    p.tid2eid_dtype = MOE_DTYPE_U32;
    const int st = router_create(&p);
    free(t);
    return st;
}

static float rt_logits[RT * RE];

static int rt_fw_null(void)
{
    const int32_t tok[RT] = {1, 2, 3, 4, 5};
    return route(NULL, rt_logits, tok, MOE_DTYPE_I32);
}

static int rt_fw_logits(void)
{
    const int32_t tok[RT] = {1, 2, 3, 4, 5};
    return route(C.hash_r, NULL, tok, MOE_DTYPE_I32);
}

static int rt_fw_no_ids(void) { return route(C.hash_r, rt_logits, NULL, MOE_DTYPE_I32); }

static int rt_fw_vocab(void)
{
    const int64_t tok[RT] = {1, 2, 1000, 4, 5};
    return route(C.hash_r, rt_logits, tok, MOE_DTYPE_I64);
}

static int rt_fw_dtype(void)
{
    const int32_t tok[RT] = {1, 2, 3, 4, 5};
    return route(C.hash_r, rt_logits, tok, MOE_DTYPE_U8);
}

static int rt_from_dense(void)
{
    moe_router *r = SENTINEL;
    const moe_status st = moe_router_create_from_model(C.v3m, 0, &r);
    if (r != SENTINEL) {
        C.untouched = false;
        if (st == MOE_OK) moe_router_destroy(r);
    }
    return st;
}

/* ---- the CLI ---- */

static int cli_hidden_size(void)
{
    char x[256], out[256];
    path_in(x, sizeof x, C.root, "x321.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    npy_f32(x, 3, 321);
    const char *argv[] = {"run", "--model", C.v3, "--hidden", x, "--out", out, NULL};
    const char *outs[] = {out, NULL};
    return run_moe_outs(argv, outs);
}

static int cli_no_input_ids(void)
{
    char x[256], out[256];
    path_in(x, sizeof x, C.root, "x256.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    npy_f32(x, 3, 256);
    const char *argv[] = {"run",      "--model", C.v4,    "--layer", "0",
                          "--hidden", x,         "--out", out,       NULL};
    const char *outs[] = {out, NULL};
    return run_moe_outs(argv, outs);
}

static int cli_input_ids(void)
{
    char x[256], ids[256], out[256], ids_out[256];
    path_in(x, sizeof x, C.root, "x256.npy");
    path_in(ids, sizeof ids, C.root, "ids.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    path_in(ids_out, sizeof ids_out, C.root, "ids_out.npy");
    npy_f32(x, 3, 256);
    const int32_t v[3] = {5, 1000, 7};
    const int64_t shape[1] = {3};
    npy_i32(ids, 1, shape, v);
    const char *argv[] = {"run",      "--model",   C.v4,          "--layer", "0",
                          "--hidden", x,           "--input-ids", ids,       "--out",
                          out,        "--ids-out", ids_out,       NULL};
    const char *outs[] = {out, ids_out, NULL};
    return run_moe_outs(argv, outs);
}

static int cli_npy_truncated(void)
{
    char x[256], out[256];
    path_in(x, sizeof x, C.root, "xt.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    npy_f32(x, 3, 320);
    REQUIRE(truncate(x, 1000) == 0);
    const char *argv[] = {"run", "--model", C.v3, "--hidden", x, "--out", out, NULL};
    const char *outs[] = {out, NULL};
    return run_moe_outs(argv, outs);
}

static int cli_npy_dtype(void)
{
    char x[256], out[256];
    path_in(x, sizeof x, C.root, "xbf.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    /* A version 1.0 header for '<V2' [2, 320] (what NumPy saves for a bf16 array: raw 2-byte
     * voids), padded to 128 bytes, and zero data. f64 and f16 are read (converted to f32). */
    char head[128];
    memset(head, ' ', sizeof head);
    memcpy(head, "\x93NUMPY\x01\x00\x76\x00", 10);
    const char dict[] = "{'descr': '<V2', 'fortran_order': False, 'shape': (2, 320), }";
    memcpy(head + 10, dict, sizeof dict - 1);
    head[127] = '\n';
    const size_t data = 2 * 320 * 2;
    unsigned char *buf = calloc(1, sizeof head + data);
    REQUIRE(buf);
    memcpy(buf, head, sizeof head);
    write_bytes(x, buf, sizeof head + data);
    free(buf);
    const char *argv[] = {"run", "--model", C.v3, "--hidden", x, "--out", out, NULL};
    const char *outs[] = {out, NULL};
    return run_moe_outs(argv, outs);
}

static int cli_nan_scale(void)
{
    char x[256], out[256];
    path_in(x, sizeof x, C.root, "x320.npy");
    path_in(out, sizeof out, C.root, "y.npy");
    npy_f32(x, 2, 320);
    const float v = NAN;
    patch p;
    patch_apply(&p, C.v3m, 1, MOE_GROUP_ROUTED, 11, MOE_ROLE_GATE_SCALE, 0, &v, 4);
    const char *argv[] = {"run",      "--model", C.v3,    "--layer", "1",
                          "--hidden", x,         "--out", out,       NULL};
    const char *outs[] = {out, NULL};
    const int rc = run_moe_outs(argv, outs);
    patch_undo(&p);
    return rc;
}

static int cli_route_table(void)
{
    char cfg[256], logits[256], table[256], ids[256], ids_out[256], w_out[256];
    path_in(cfg, sizeof cfg, C.v4, "config.json");
    path_in(logits, sizeof logits, C.root, "logits16.npy");
    path_in(table, sizeof table, C.root, "table.npy");
    path_in(ids, sizeof ids, C.root, "ids3.npy");
    path_in(ids_out, sizeof ids_out, C.root, "route_ids.npy");
    path_in(w_out, sizeof w_out, C.root, "route_w.npy");
    npy_f32(logits, 3, 16);
    int32_t *t = good_table();
    t[42 * RK + 2] = 99;
    const int64_t tshape[2] = {RVOCAB, RK}, ishape[1] = {3};
    npy_i32(table, 2, tshape, t);
    free(t);
    const int32_t v[3] = {1, 2, 3};
    npy_i32(ids, 1, ishape, v);
    const char *argv[] = {"route", "--config",      cfg,   "--layer",     "0", "--logits",
                          logits,  "--tid2eid",     table, "--input-ids", ids, "--ids-out",
                          ids_out, "--weights-out", w_out, NULL};
    const char *outs[] = {ids_out, w_out, NULL};
    return run_moe_outs(argv, outs);
}

/* ==== The table ============================================================================ */

enum { NOOP = -1 };

typedef struct matrix_case {
    const char *area;    /* what is being fed */
    const char *input;   /* the bad input, in words */
    const char *call;    /* the call, or the CLI command */
    bool cli;            /* want is an exit status, the message is the stderr line */
    int want;            /* a moe_status, an exit status, or NOOP (a void call: no message) */
    const char *pattern; /* the whole message; '*' matches any text */
    int (*run)(void);
} matrix_case;

#define OPEN "moe_model_open(dir, NULL, &m)"
#define CREATE "moe_layer_create(m, layer, NULL, &l)"
#define FWD "moe_layer_forward(l, &args)"
#define XFWD "moe_layer_forward_experts(l, &args)"
#define SET "moe_layer_set_logits_dtype(l, dt)"
#define RCREATE "moe_router_create(&p, &r)"
#define RFWD "moe_router_forward(r, 5, logits, ids, dt, ...)"

static const matrix_case cases[] = {
    /* safetensors */
    {"safetensors", "neither model.safetensors nor an index in the folder", OPEN, false,
     MOE_EMISSING, "'*/case*' has neither model.safetensors.index.json nor model.safetensors",
     st_absent},
    {"safetensors", "a 3-byte file", OPEN, false, MOE_ETRUNCATED,
     "*/model.safetensors: file is 3 bytes, shorter than the 8-byte header length", st_short},
    {"safetensors", "header length 2^63 - 1", OPEN, false, MOE_EHEADER,
     "*/model.safetensors: header length 9223372036854775807 exceeds the limit of 100000000 bytes",
     st_len_limit},
    {"safetensors", "header length past the end of the file", OPEN, false, MOE_ETRUNCATED,
     "*/model.safetensors: header length 4096 runs past the end of the file (62 bytes)",
     st_len_past_end},
    {"safetensors", "header that is not JSON", OPEN, false, MOE_EJSON,
     "*/model.safetensors: header is not valid JSON: *", st_not_json},
    {"safetensors", "header that is a JSON array", OPEN, false, MOE_EJSON,
     "*/model.safetensors: header is an array, not a JSON object", st_not_object},
    {"safetensors", "a tensor name twice", OPEN, false, MOE_EDUPLICATE,
     "*/model.safetensors: header: duplicate key \"a\" (line *)", st_duplicate},
    {"safetensors", "unknown dtype \"F7\"", OPEN, false, MOE_EDTYPE,
     "*/model.safetensors: tensor 'a': unknown dtype 'F7'", st_dtype},
    {"safetensors", "shape [3] of F32 over 8 bytes", OPEN, false, MOE_ESHAPE,
     "*/model.safetensors: tensor 'a': shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] "
     "hold 8",
     st_bytes},
    {"safetensors", "a negative dimension", OPEN, false, MOE_ESHAPE,
     "*/model.safetensors: tensor 'a': shape[0] = -1 is negative", st_negative},
    {"safetensors", "shape [2^32, 2^32]: the element count overflows", OPEN, false, MOE_EOVERFLOW,
     "*/model.safetensors: tensor 'a': element count of shape [4294967296, 4294967296] overflows "
     "64 bits",
     st_overflow},
    {"safetensors", "a hole between two tensors", OPEN, false, MOE_EOFFSET,
     "*/model.safetensors: tensor 'b': hole of 4 bytes between 'a' (ends at 4) and 'b' (starts at "
     "8)",
     st_hole},
    {"safetensors", "two tensors overlapping", OPEN, false, MOE_EOFFSET,
     "*/model.safetensors: tensor 'b': [4, 8) overlaps 'a' [0, 8)", st_overlap},
    {"safetensors", "the data shorter than the header says", OPEN, false, MOE_ETRUNCATED,
     "*/model.safetensors: tensor 'a' ends at byte 16 of the data area, but the file holds only 12 "
     "data bytes",
     st_truncated},
    {"safetensors", "bytes after the last tensor", OPEN, false, MOE_EOFFSET,
     "*/model.safetensors: 8 trailing bytes after the last tensor 'a'", st_trailing},
    {"safetensors", "__metadata__ value that is not a string", OPEN, false, MOE_EJSON,
     "*/model.safetensors: __metadata__ value of 'format' is an integer, not a string",
     st_metadata},
    {"safetensors", "an unknown field in a tensor entry", OPEN, false, MOE_EHEADER,
     "*/model.safetensors: tensor 'a': unknown field 'strides'", st_field},
    /* sharded */
    {"sharded index", "a shard name with a path (\"../s2.safetensors\")", OPEN, false, MOE_EPATH,
     "*/model.safetensors.index.json: tensor 'b': shard name '../s2.safetensors' contains '..'; it "
     "must be a plain file name",
     idx_path},
    {"sharded index", "a shard the index names is absent", OPEN, false, MOE_EMISSING,
     "*/model.safetensors.index.json: shard 's2.safetensors': '*/s2.safetensors' does not exist",
     idx_missing_shard},
    {"sharded index", "a tensor in another shard than the index says", OPEN, false, MOE_EMISSING,
     "*/model.safetensors.index.json: tensor 'a' is mapped to shard 's2.safetensors', which does "
     "not contain it (it is in 's1.safetensors')",
     idx_wrong_shard},
    {"sharded index", "a tensor in a shard but not in weight_map", OPEN, false, MOE_EMISSING,
     "*/model.safetensors.index.json: tensor 'c' in shard 's2.safetensors' is not listed in "
     "weight_map",
     idx_unlisted},
    {"sharded index", "a tensor in two shards", OPEN, false, MOE_EDUPLICATE,
     "*/model.safetensors.index.json: tensor 'a' is in both 's1.safetensors' and 's2.safetensors'",
     idx_two_shards},
    {"sharded index", "no weight_map", OPEN, false, MOE_EMISSING,
     "*/model.safetensors.index.json: missing field 'weight_map'", idx_no_map},
    {"sharded index", "the index is a JSON array", OPEN, false, MOE_EJSON,
     "*/model.safetensors.index.json: the index is an array, not a JSON object", idx_not_object},
    /* config.json */
    {"config.json", "config.json absent", OPEN, false, MOE_EMISSING,
     "'*/config.json' does not exist", cfg_absent},
    {"config.json", "not JSON", OPEN, false, MOE_EJSON,
     "*/config.json: not valid JSON: line 1 column *", cfg_not_json},
    {"config.json", "unknown model_type", OPEN, false, MOE_EUNSUPPORTED,
     "*/config.json: field 'model_type': 'deepseek_v9' is not supported (supported: deepseek_v2, "
     "deepseek_v3, kimi_k2, deepseek_v4, qwen3_moe, mixtral, gpt_oss, *)",
     cfg_model_type},
    {"config.json", "hidden_size is a string", OPEN, false, MOE_EJSON,
     "*/config.json: field 'hidden_size': must be an integer, not a string", cfg_type},
    {"config.json", "hidden_size negative", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'hidden_size': -320 is outside [1, 1048576]", cfg_negative},
    {"config.json", "n_routed_experts absent", OPEN, false, MOE_EMISSING,
     "*/config.json: field 'n_routed_experts': required field is missing (nor is "
     "num_local_experts present)",
     cfg_missing},
    {"config.json", "n_routed_experts and num_local_experts disagree", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'n_routed_experts': 16 disagrees with num_local_experts = 8",
     cfg_count_names},
    {"config.json", "hidden_act gelu", OPEN, false, MOE_EUNSUPPORTED,
     "*/config.json: field 'hidden_act': 'gelu' is not supported (only silu, which transformers "
     "also calls swish)",
     cfg_hidden_act},
    {"config.json", "gpt-oss swiglu_alpha 0", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'swiglu_alpha': 0 must be > 0", cfg_swiglu_alpha},
    {"config.json", "DeepSeek-V4 mlp_layer_types entry 'dense'", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'mlp_layer_types': element 1 'dense' is not one of \"hash_moe\", "
     "\"moe\"",
     cfg_mlp_layer_types},
    {"config.json", "DeepSeek-V4 mlp_layer_types and num_hash_layers disagree", OPEN, false,
     MOE_ECONFIG,
     "*/config.json: field 'mlp_layer_types': element 0 'moe' disagrees with num_hash_layers = 1 "
     "(layers below it are \"hash_moe\", the rest \"moe\")",
     cfg_hash_layers_disagree},
    {"config.json", "a key twice", OPEN, false, MOE_EDUPLICATE,
     "*/config.json: line 1: key 'hidden_size' appears twice in one object", cfg_dup},
    {"config.json", "num_experts_per_tok 17 of 16 experts", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'num_experts_per_tok': 17 must be in [1, n_routed_experts = 16]",
     cfg_topk},
    {"config.json", "n_group 3 does not divide 16 experts", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'n_group': 3 must be >= 1 and divide n_routed_experts = 16", cfg_groups},
    {"config.json", "topk_group 5 > n_group 4", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'topk_group': 5 must be in [1, n_group = 4]", cfg_topk_group},
    {"config.json", "noaux_tc with one expert per group", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'n_group': 16 leaves 1 expert per group, but the noaux_tc group score "
     "sums the top 2 of each group",
     cfg_group_of_one},
    {"config.json", "unknown scoring_func", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'scoring_func': unknown scoring function 'tanh' (known here: softmax, "
     "sigmoid)",
     cfg_scoring},
    {"config.json", "routed_scaling_factor negative", OPEN, false, MOE_ECONFIG,
     "*/config.json: field 'routed_scaling_factor': -1 is outside [0, 3.40282e+38]", cfg_rsf},
    /* checkpoint vs config */
    {"checkpoint vs config", "an expert tensor absent", OPEN, false, MOE_EMISSING,
     "*: layer 1: tensor 'model.layers.1.mlp.experts.3.up_proj.weight' is missing (expected "
     "f8_e4m3 [192, 320])",
     ck_missing},
    {"checkpoint vs config", "FP8 tensors under a bf16 config", OPEN, false, MOE_EDTYPE,
     "*: layer 0: tensor 'model.layers.0.mlp.gate_proj.weight' (*/model.safetensors) has dtype "
     "f8_e4m3; accepted: f32, f16, bf16",
     ck_dtype},
    {"checkpoint vs config", "expert shapes disagree with moe_intermediate_size", OPEN, false,
     MOE_ESHAPE,
     "*: layer 1: tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' (*/model.safetensors) has "
     "shape [192, 320]; expected [160, 320]",
     ck_shape},
    {"checkpoint vs config", "tensors of another hidden size", OPEN, false, MOE_ESHAPE,
     "*: layer 0: tensor 'model.layers.0.mlp.gate_proj.weight' (*/model.safetensors) has shape "
     "[352, 320]; expected [352, 256]",
     ck_hidden},
    /* values */
    {"tensor values", "NaN f32 FP8 block scale", CREATE, false, MOE_EVALUE,
     "layer 1 routed experts: expert 3 gate/up: up: block scale nan at block (0, 1) is not in (0, "
     "2^120)",
     val_scale_nan},
    {"tensor values", "zero FP8 block scale", CREATE, false, MOE_EVALUE,
     "layer 1 shared experts: expert 0 down: down: block scale 0 at block (0, 0) is not in (0, "
     "2^120)",
     val_scale_zero},
    {"tensor values", "E8M0 FP8 block scale 0xFF (NaN)", CREATE, false, MOE_EVALUE,
     "layer 1 routed experts: expert 2 gate/up: gate: block scale nan at block (0, 1) is not in "
     "(0, 2^120)",
     val_e8m0_nan},
    {"tensor values", "NaN E4M3 weight code 0x7F", CREATE, false, MOE_EVALUE,
     "layer 1 routed experts: expert 5 down: down: NaN E4M3 code 0x7F at row 0, col 0",
     val_code_nan},
    {"tensor values", "NaN in the router weight", CREATE, false, MOE_EVALUE,
     "layer 1 gate: router gate weight [1, 5] is NaN (bits 0x7fc0); every router weight must be "
     "finite",
     val_router_nan},
    {"tensor values", "Inf in the correction bias", CREATE, false, MOE_EVALUE,
     "layer 1 (deepseek_v3) router: moe_router_create: correction_bias[7] = inf is not finite",
     val_bias_inf},
    {"tensor values", "tid2eid entry 16 of 16 experts", CREATE, false, MOE_ERANGE,
     "layer 0 (deepseek_v4) router: moe_router_create: tid2eid[3][1] = 16 is not an expert id in "
     "[0, 16)",
     val_table_range},
    {"tensor values", "tid2eid entry -1", CREATE, false, MOE_ERANGE,
     "layer 0 (deepseek_v4) router: moe_router_create: tid2eid[4][0] = -1 is not an expert id in "
     "[0, 16)",
     val_table_negative},
    {"tensor values", "tid2eid row naming an expert twice", CREATE, false, MOE_EVALUE,
     "layer 0 (deepseek_v4) router: moe_router_create: tid2eid row 7 names expert 1 twice (columns "
     "0 and 2)",
     val_table_repeat},
    {"tensor values", "MXFP4 block scale 0xFF (E8M0 NaN)", CREATE, false, MOE_EVALUE,
     "layer 0 routed experts: expert 2: tensor 'model.layers.0.mlp.experts.gate_up_proj_scales' "
     "holds the E8M0 scale 0xFF (NaN) at [2, 5, 1]; no MXFP4 block scale may be NaN",
     val_mxfp4_scale},
    /* open / create arguments */
    {"moe_model_open", "dir NULL", "moe_model_open(NULL, NULL, &m)", false, MOE_EINVAL,
     "moe_model_open: argument 'dir' is NULL or empty", open_null},
    {"moe_model_open", "a folder that does not exist", OPEN, false, MOE_EMISSING,
     "'*/no-such-folder/config.json' does not exist", open_nowhere},
    {"moe_model_open", "options->size 4", "moe_model_open(dir, &o, &m)", false, MOE_EINVAL,
     "moe_open_options.size = 4 is smaller than the * bytes this version reads (set it to "
     "sizeof(moe_open_options))",
     open_options},
    {"moe_layer_create", "model NULL", "moe_layer_create(NULL, 1, NULL, &l)", false, MOE_EINVAL,
     "moe_layer_create: argument 'model' is NULL", create_null_model},
    {"moe_layer_create", "out NULL", "moe_layer_create(m, 1, NULL, NULL)", false, MOE_EINVAL,
     "moe_layer_create: argument 'out' is NULL", create_null_out},
    {"moe_layer_create", "layer 2 of 2", "moe_layer_create(m, 2, NULL, &l)", false, MOE_EINVAL,
     "moe_layer_create: layer 2 is outside [0, 2)", create_index},
    {"moe_layer_create", "options->threads -1", "moe_layer_create(m, 1, &o, &l)", false, MOE_EINVAL,
     "layer 1: options->threads = -1 is outside [0, 4096] (0 = the number of cores)",
     create_threads},
    {"moe_layer_create", "options->logits_dtype i8", "moe_layer_create(m, 1, &o, &l)", false,
     MOE_EINVAL, "layer 1: options->logits_dtype = i8 is not f32, bf16 or invalid (decide later)",
     create_logits},
    {"moe_layer_create", "options->experts_recipe 4", "moe_layer_create(m, 1, &o, &l)", false,
     MOE_EINVAL,
     "layer 1: options->experts_recipe = 4 is not default (0), f32 (1), bf16 (2) or tile (3)",
     create_recipe},
    {"moe_layer_create", "options->size 4", "moe_layer_create(m, 1, &o, &l)", false, MOE_EINVAL,
     "layer 1: options->size = 4 is smaller than the * bytes this version reads (set it to "
     "sizeof(moe_layer_options))",
     create_size},
    /* expert parallelism */
    {"moe_layer_create_ep", "placement->expert_rank[5] = 2 of 2 ranks",
     "moe_layer_create_ep(m, 1, NULL, &p, &l)", false, MOE_ERANGE,
     "layer 1: placement->expert_rank[5] = 2 is outside [0, 2) (n_ranks)", ep_entry},
    {"moe_layer_create_ep", "a table of 15 entries for 16 experts",
     "moe_layer_create_ep(m, 1, NULL, &p, &l)", false, MOE_EINVAL,
     "layer 1: placement->n_entries = 15, but the layer has 16 routed experts (one rank per "
     "expert)",
     ep_entries},
    {"moe_layer_create_ep", "rank 2 of 2", "moe_layer_create_ep(m, 1, NULL, &p, &l)", false,
     MOE_EINVAL,
     "layer 1: placement rank 2 of n_ranks 2: n_ranks must be at least 1 and rank in [0, n_ranks)",
     ep_rank},
    {"moe_layer_create_ep", "placement->size 8", "moe_layer_create_ep(m, 1, NULL, &p, &l)", false,
     MOE_EINVAL,
     "layer 1: placement->size = 8 is smaller than the * bytes this version reads (set it to "
     "sizeof(moe_ep_placement))",
     ep_size},
    {"moe_layer_forward", "a placed layer (rank 0 of 2) run whole", FWD, false, MOE_ESTATE,
     "moe_layer_forward: layer 1 is placed on rank 0 of 2, which packs 8 of its 16 routed "
     "experts: run its forward in steps (moe_ep.h, moe_mpi_forward)",
     ep_whole_forward},
    {"moe_ep_experts", "a row for expert 9 on rank 0 (experts 0-7)", "moe_ep_experts(l, &args)",
     false, MOE_ERANGE, "moe_ep_experts: layer 1: experts[1] = 9 is not one of rank 0",
     ep_other_rank},
    {"moe_ep_route", "a dense layer", "moe_ep_route(l, &args)", false, MOE_EINVAL,
     "moe_ep_route: layer 0 is a dense layer: every rank runs its own tokens with "
     "moe_layer_forward",
     ep_dense_route},
    {"moe_ep_combine", "weights[1][1] NaN", "moe_ep_combine(l, &args)", false, MOE_EVALUE,
     "moe_ep_combine: layer 1: weights[1][1] = nan is not finite", ep_nan_weight},
    /* forward */
    {"moe_layer_forward", "layer NULL", "moe_layer_forward(NULL, &args)", false, MOE_EINVAL,
     "moe_layer_forward: argument 'layer' is NULL", fw_null_layer},
    {"moe_layer_forward", "args NULL", "moe_layer_forward(l, NULL)", false, MOE_EINVAL,
     "moe_layer_forward: argument 'args' is NULL", fw_null_args},
    {"moe_layer_forward", "args.size 8", FWD, false, MOE_EINVAL,
     "moe_layer_forward: args->size = 8 is smaller than the * bytes this version reads (set it to "
     "sizeof(moe_forward_args))",
     fw_size},
    {"moe_layer_forward", "hidden_size 7168 for a model of 320", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 1: args->hidden_size = 7168, but the model's hidden size is 320",
     fw_hidden_size},
    {"moe_layer_forward", "hidden_dtype f16", FWD, false, MOE_EDTYPE,
     "moe_layer_forward: layer 1: args->hidden_dtype f16 is not f32 or bf16", fw_hidden_dtype},
    {"moe_layer_forward", "hidden NULL", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 1: args->hidden is NULL with n_tokens = 7", fw_hidden_null},
    {"moe_layer_forward", "out NULL", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 1: args->out is NULL with n_tokens = 7", fw_out_null},
    {"moe_layer_forward", "workspace NULL", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 1: args->workspace is NULL; 7 tokens need moe_layer_workspace_size "
     "= * bytes",
     fw_ws_null},
    {"moe_layer_forward", "workspace not 64-byte aligned", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 1: args->workspace * is not 64-byte aligned", fw_ws_align},
    {"moe_layer_forward", "too many tokens for the workspace", FWD, false, MOE_ERANGE,
     "moe_layer_forward: layer 1: too many tokens for the workspace: n_tokens = 7 needs * bytes "
     "(moe_layer_workspace_size), args->workspace_size is *",
     fw_ws_small},
    {"moe_layer_forward", "n_tokens whose workspace size overflows", FWD, false, MOE_EOVERFLOW,
     "moe_layer_forward: layer 1: n_tokens = 288230376151711743 is too many: the workspace size "
     "overflows; run fewer tokens per forward",
     fw_ws_overflow},
    {"moe_layer_forward", "hash layer, token_ids NULL", FWD, false, MOE_EINVAL,
     "moe_layer_forward: layer 0 is hash-routed (tid2eid) and needs the token id of every row: "
     "args->token_ids is NULL (the CLI takes them with --input-ids)",
     fw_ids_null},
    {"moe_layer_forward", "hash layer, token_id_dtype f32", FWD, false, MOE_EDTYPE,
     "moe_layer_forward: layer 0: args->token_id_dtype f32 is not i32 or i64", fw_ids_dtype},
    {"moe_layer_forward", "hash layer, token id 1000 of a 1000-token vocabulary", FWD, false,
     MOE_ERANGE, "moe_layer_forward: layer 0: token_ids[4] = 1000 is outside [0, 1000)",
     fw_ids_vocab},
    {"moe_layer_forward", "hash layer, token id -7 (i64)", FWD, false, MOE_ERANGE,
     "moe_layer_forward: layer 0: token_ids[6] = -7 is outside [0, 1000)", fw_ids_negative},
    /* moe_layer_forward_experts: the rows are checked as moe_layer_forward checks them */
    {"moe_layer_forward_experts", "a dense layer", XFWD, false, MOE_EINVAL,
     "moe_layer_forward_experts: layer 0 is a dense layer: it has no routed experts (run it with "
     "moe_layer_forward)",
     xf_dense},
    {"moe_layer_forward_experts", "args.size 8", XFWD, false, MOE_EINVAL,
     "moe_layer_forward_experts: args->size = 8 is smaller than the * bytes this version reads "
     "(set it to sizeof(moe_experts_args))",
     xf_size},
    {"moe_layer_forward_experts", "top_k 2 for a top-4 layer", XFWD, false, MOE_EINVAL,
     "moe_layer_forward_experts: layer 1: args->top_k = 2, but the layer's top_k is 4", xf_top_k},
    {"moe_layer_forward_experts", "expert id 16 of 16", XFWD, false, MOE_ERANGE,
     "moe_layer_forward_experts: layer 1: ids[3][1] = 16 is outside [0, 16)", xf_id_range},
    {"moe_layer_forward_experts", "an expert twice in a row", XFWD, false, MOE_ERANGE,
     "moe_layer_forward_experts: layer 1: ids[5][2] = 0 repeats ids[5][0]: a token visits each "
     "expert once",
     xf_id_repeat},
    {"moe_layer_forward_experts", "ids_dtype u8", XFWD, false, MOE_EDTYPE,
     "moe_layer_forward_experts: layer 1: args->ids_dtype u8 is not i32 or i64", xf_ids_dtype},
    {"moe_layer_forward_experts", "a NaN weight", XFWD, false, MOE_EVALUE,
     "moe_layer_forward_experts: layer 1: weights[6][3] = nan is not finite", xf_weight_nan},
    {"moe_layer_forward_experts", "weights NULL", XFWD, false, MOE_EINVAL,
     "moe_layer_forward_experts: layer 1: args->weights is NULL with n_tokens = 7",
     xf_weights_null},
    /* call order */
    {"call order", "set_logits_dtype twice", SET, false, MOE_ESTATE,
     "moe_layer_set_logits_dtype: layer 1: the logits dtype is already decided (bf16, an earlier "
     "call)",
     order_twice},
    {"call order", "set_logits_dtype after a forward (of 0 tokens)", SET, false, MOE_ESTATE,
     "moe_layer_set_logits_dtype: layer 1 has already run a forward; the logits dtype is set once, "
     "before the first forward",
     order_after_forward},
    {"call order", "set_logits_dtype when options->logits_dtype decided", SET, false, MOE_ESTATE,
     "moe_layer_set_logits_dtype: layer 1: the logits dtype is already decided (f32, "
     "options->logits_dtype)",
     order_options},
    {"call order", "set_logits_dtype on a dense layer", SET, false, MOE_EINVAL,
     "moe_layer_set_logits_dtype: layer 0 is dense: it has no router logits", order_dense},
    {"call order", "set_logits_dtype on NULL", "moe_layer_set_logits_dtype(NULL, dt)", false,
     MOE_EINVAL, "moe_layer_set_logits_dtype: argument 'layer' is NULL", order_null},
    {"call order", "set_logits_dtype(i32) (a valid call may follow)", SET, false, MOE_EINVAL,
     "moe_layer_set_logits_dtype: layer 1: dtype i32 is not f32 or bf16", order_dtype_msg},
    {"call order", "destroy NULL", "moe_layer_destroy(NULL)", false, NOOP, NULL, noop_layer},
    {"call order", "close NULL", "moe_model_close(NULL)", false, NOOP, NULL, noop_model},
    {"call order", "destroy a NULL router", "moe_router_destroy(NULL)", false, NOOP, NULL,
     noop_router},
    /* routers */
    {"moe_router", "params NULL", "moe_router_create(NULL, &r)", false, MOE_EINVAL,
     "moe_router_create: argument 'params' is NULL", rt_null},
    {"moe_router", "params->size 16", RCREATE, false, MOE_EINVAL,
     "moe_router_create: params->size = 16 is smaller than the * bytes this version reads (set it "
     "to sizeof(moe_router_params))",
     rt_size},
    {"moe_router", "top_k 17 of 16 experts", RCREATE, false, MOE_EINVAL,
     "moe_router_create: params->top_k: 17 must be in [1, n_experts = 16]", rt_topk},
    {"moe_router", "n_group 5 of 16 experts", RCREATE, false, MOE_EINVAL,
     "moe_router_create: params->n_group: 5 must be >= 1 and divide n_experts = 16", rt_groups},
    {"moe_router", "noaux_tc without a correction bias", RCREATE, false, MOE_EINVAL,
     "moe_router_create: params->correction_bias is NULL, but noaux_tc selects by score + "
     "correction bias",
     rt_no_bias},
    {"moe_router", "NaN in the correction bias", RCREATE, false, MOE_EVALUE,
     "moe_router_create: correction_bias[9] = nan is not finite", rt_bias_nan},
    {"moe_router", "routed_scaling_factor 0", RCREATE, false, MOE_EINVAL,
     "moe_router_create: params->routed_scaling_factor = 0 must be finite and > 0 (1 for none)",
     rt_rsf},
    {"moe_router", "tid2eid entry 16 of 16 experts", RCREATE, false, MOE_ERANGE,
     "moe_router_create: tid2eid[500][3] = 16 is not an expert id in [0, 16)", rt_table_range},
    {"moe_router", "tid2eid row naming an expert twice", RCREATE, false, MOE_EVALUE,
     "moe_router_create: tid2eid row 999 names expert 8 twice (columns 1 and 3)", rt_table_repeat},
    {"moe_router", "tid2eid_dtype u32", RCREATE, false, MOE_EDTYPE,
     "moe_router_create: params->tid2eid_dtype u32 is not i32 or i64", rt_table_dtype},
    {"moe_router", "router NULL", "moe_router_forward(NULL, 5, ...)", false, MOE_EINVAL,
     "moe_router_forward: argument 'router' is NULL", rt_fw_null},
    {"moe_router", "logits NULL", RFWD, false, MOE_EINVAL,
     "moe_router_forward: argument 'logits' is NULL with n_tokens = 5", rt_fw_logits},
    {"moe_router", "hash router without token ids", RFWD, false, MOE_EINVAL,
     "moe_router_forward: this layer is hash-routed (tid2eid) and needs the token id of every row "
     "(token_ids is NULL; the CLI takes them with --input-ids)",
     rt_fw_no_ids},
    {"moe_router", "hash router, token id 1000 of 1000", RFWD, false, MOE_ERANGE,
     "moe_router_forward: token_ids[2] = 1000 is outside [0, 1000)", rt_fw_vocab},
    {"moe_router", "hash router, token_id_dtype u8", RFWD, false, MOE_EDTYPE,
     "moe_router_forward: token_id_dtype u8 is not i32 or i64", rt_fw_dtype},
    {"moe_router", "a dense layer", "moe_router_create_from_model(m, 0, &r)", false, MOE_EINVAL,
     "moe_router_create_from_model: layer 0 is dense (one MLP, no router)", rt_from_dense},
    /* CLI */
    {"moe run", "--hidden of width 321 for hidden_size 320",
     "moe run --model DIR --hidden X.npy --out Y.npy", true, 1,
     "moe run: --hidden */x321.npy: shape [3, 321]: hidden size 321, but the model's hidden_size "
     "is 320",
     cli_hidden_size},
    {"moe run", "a hash layer without --input-ids",
     "moe run --model DIR --layer 0 --hidden X.npy --out Y.npy", true, 1,
     "moe run: layer 0 is hash-routed (num_hash_layers = 1): --input-ids is required (the token id "
     "of each row of --hidden)",
     cli_no_input_ids},
    {"moe run", "--input-ids with a token id past the vocabulary",
     "moe run ... --input-ids I.npy --out Y.npy --ids-out IDS.npy", true, 1,
     "moe run: --input-ids */ids.npy: moe_layer_forward: layer 0: token_ids[1] = 1000 is "
     "outside [0, 1000)",
     cli_input_ids},
    {"moe run", "--hidden .npy truncated", "moe run --model DIR --hidden X.npy --out Y.npy", true,
     1,
     "moe run: --hidden: */xt.npy: truncated: the array needs 3840 data bytes, the file holds 872",
     cli_npy_truncated},
    {"moe run", "--hidden .npy of bf16 bits ('<V2')",
     "moe run --model DIR --hidden X.npy --out Y.npy", true, 1,
     "moe run: --hidden */xbf.npy: descr '<V2' is not supported: want f32 ('<f4'), or f64 ('<f8') "
     "or f16 ('<f2'), converted to f32 once as read (.npy has no bf16 dtype: save bf16 arrays as "
     "f32)",
     cli_npy_dtype},
    {"moe run", "a NaN FP8 block scale in the checkpoint",
     "moe run --model DIR --layer 1 --hidden X.npy --out Y.npy", true, 1,
     "moe run: --model */v3: layer 1 routed experts: expert 11 gate/up: gate: block scale nan at "
     "block (0, 0) is not in (0, 2^120)",
     cli_nan_scale},
    {"moe route", "--tid2eid with an entry 99 of 16 experts",
     "moe route --config C --layer 0 --tid2eid T.npy ... --ids-out A --weights-out B", true, 1,
     "moe route: layer 0 (hash), --tid2eid */table.npy: moe_router_create: tid2eid[42][2] = 99 is "
     "not an expert id in [0, 16)",
     cli_route_table},
    /* INT4 (compressed-tensors pack-quantized) */
    {"INT4 (compressed-tensors)", "num_bits 8", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.num_bits': 8 is "
     "not supported (only 4)",
     i4_bits},
    {"INT4 (compressed-tensors)", "symmetric false", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.symmetric': "
     "false is not supported (only symmetric int4: no zero points)",
     i4_asym},
    {"INT4 (compressed-tensors)", "strategy channel", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.strategy': "
     "'channel' is not supported (only group)",
     i4_channel},
    {"INT4 (compressed-tensors)", "actorder group", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.actorder': must "
     "be null or absent (activation reordering needs g_idx, not supported)",
     i4_actorder},
    {"INT4 (compressed-tensors)", "dynamic true", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.dynamic': true "
     "is not supported (the weight scales are stored)",
     i4_dynamic},
    {"INT4 (compressed-tensors)", "input_activations int8 (W4A8)", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.input_activations': "
     "must be null or absent (W4A16: activations are not quantised)",
     i4_w4a8},
    {"INT4 (compressed-tensors)", "group_size 48", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.config_groups.group_0.weights.group_size': 48 "
     "is not supported (a multiple of 32: the activations' block)",
     i4_group48},
    {"INT4 (compressed-tensors)", "group_size 64 does not divide 160", OPEN, false, MOE_ECONFIG,
     "*config.json: field 'quantization_config.config_groups': group_size 64 does not divide "
     "the width 160 of 'model.layers.1.mlp.experts.0.down_proj.weight_scale'",
     i4_group64},
    {"INT4 (compressed-tensors)", "format marlin-24", OPEN, false, MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.format': 'marlin-24' is not supported (only "
     "pack-quantized)",
     i4_format},
    {"INT4 (compressed-tensors)", "ignore names one projection of the routed experts", OPEN, false,
     MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.ignore': ignores "
     "'model.layers.1.mlp.experts.3.up_proj' but not "
     "'model.layers.1.mlp.experts.0.gate_proj': one MLP group must be all INT4 or all "
     "unquantised",
     i4_partial},
    {"INT4 (compressed-tensors)", "ignore pattern 're:(' does not compile", OPEN, false,
     MOE_EUNSUPPORTED,
     "*config.json: field 'quantization_config.ignore': entry 1 're:(' is not a POSIX "
     "extended regular expression",
     i4_bad_regex},
    {"INT4 (compressed-tensors)", "weight_packed shape disagrees with moe_intermediate_size", OPEN,
     false, MOE_ESHAPE,
     "*: layer 1: tensor 'model.layers.1.mlp.experts.0.gate_proj.weight_packed' "
     "(*/model.safetensors) has shape [160, 32]; expected [192, 32]",
     i4_shape},
    {"INT4 (compressed-tensors)", "weight_shape value disagrees", CREATE, false, MOE_ESHAPE,
     "layer 1 routed experts: expert 6: tensor "
     "'model.layers.1.mlp.experts.6.down_proj.weight_shape' says [256, 128]; the config and "
     "weight_packed say [256, 160]",
     i4_shape_value},
    {"INT4 (compressed-tensors)", "NaN bf16 group scale", CREATE, false, MOE_EVALUE,
     "layer 1 routed experts: expert 4: tensor "
     "'model.layers.1.mlp.experts.4.gate_proj.weight_scale' holds a NaN or infinite group "
     "scale at [2, 3]; INT4 scales must be finite",
     i4_scale_nan},
    /* expert parallelism of a layer whose weights scale the experts' inputs (llama4) */
    {"moe_ep_experts", "a llama4 layer's rows without their weights", "moe_ep_experts(l, &args)",
     false, MOE_EINVAL,
     "moe_ep_experts: layer 1: its routing weights scale the experts' inputs (llama4): "
     "args->weights (each row's weight from moe_ep_route) is NULL",
     ep_llama4_no_weights},
    {"moe_ep_experts", "a llama4 row's weight inf", "moe_ep_experts(l, &args)", false, MOE_EVALUE,
     "moe_ep_experts: layer 1: weights[1] = inf is not finite", ep_llama4_inf_weight},
};

#define N_CASES (sizeof cases / sizeof cases[0])

/* ==== Matching, the doc, and the walk ===================================================== */

/* Whether TEXT is PATTERN with each '*' standing for any run of characters (greedy with
 * backtracking to the last star: linear enough for one-line messages). */
static bool glob_match(const char *pattern, const char *text)
{
    const char *star = NULL, *resume = NULL;
    while (*text) {
        if (*pattern == '*') {
            star = pattern++;
            resume = text;
        } else if (*pattern == *text) {
            pattern++;
            text++;
        } else if (star) {
            pattern = star + 1;
            text = ++resume;
        } else {
            return false;
        }
    }
    while (*pattern == '*')
        pattern++;
    return *pattern == '\0';
}

static const char *status_name(moe_status st)
{
    static const char *const names[] = {
        "MOE_OK",           "MOE_EINVAL",    "MOE_ENOMEM",     "MOE_EIO",      "MOE_ESTATE",
        "MOE_EUNSUPPORTED", "MOE_EOVERFLOW", "MOE_ERANGE",     "MOE_EMISSING", "MOE_ETRUNCATED",
        "MOE_EHEADER",      "MOE_EJSON",     "MOE_EDUPLICATE", "MOE_EOFFSET",  "MOE_EDTYPE",
        "MOE_ESHAPE",       "MOE_EPATH",     "MOE_ECONFIG",    "MOE_EVALUE"};
    const unsigned i = (unsigned)st;
    return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

/* Markdown cell text: '|' escaped. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static void markdown(FILE *f)
{
    fprintf(f, "| # | area | bad input | call | status | message (`*`: any text) |\n");
    fprintf(f, "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < N_CASES; i++) {
        const matrix_case *c = &cases[i];
        fprintf(f, "| %zu | ", i + 1);
        md_cell(f, c->area);
        fputs(" | ", f);
        md_cell(f, c->input);
        fputs(" | `", f);
        md_cell(f, c->call);
        fputs("` | ", f);
        if (c->cli)
            fprintf(f, "exit %d", c->want);
        else if (c->want == NOOP)
            fputs("none (a no-op)", f);
        else
            fputs(status_name((moe_status)c->want), f);
        fputs(" | ", f);
        if (c->pattern) {
            fputs("`", f);
            md_cell(f, c->pattern);
            fputs("`", f);
        } else {
            fputs("(none: the last error is unchanged)", f);
        }
        fputs(" |\n", f);
    }
}

#define DOC_BEGIN "<!-- error matrix: generated by tests/layer/test_error_matrix.c --markdown -->\n"
#define DOC_END "<!-- end of the error matrix -->\n"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    REQUIRE(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* docs/errors.md: from MOE_TEST_DATA (<repo>/tests/data), else the working directory. */
static void doc_path(char *buf, size_t cap)
{
    const char *data = getenv("MOE_TEST_DATA");
    if (data && strlen(data) > 11 && !strcmp(data + strlen(data) - 11, "/tests/data"))
        snprintf(buf, cap, "%.*s/docs/errors.md", (int)(strlen(data) - 11), data);
    else
        snprintf(buf, cap, "docs/errors.md");
}

/* Checks (or, with WRITE, rewrites) the generated part of the doc. */
static bool doc_sync(bool write)
{
    char path[PATH_MAX], *gen = NULL;
    size_t len = 0, gen_len = 0;
    doc_path(path, sizeof path);
    char *doc = slurp(path, &len);
    if (!doc) {
        fprintf(stderr, "%s: cannot read\n", path);
        return false;
    }
    FILE *mem = open_memstream(&gen, &gen_len);
    REQUIRE(mem);
    markdown(mem);
    fclose(mem);
    char *b = strstr(doc, DOC_BEGIN), *e = b ? strstr(b, DOC_END) : NULL;
    bool ok = b && e;
    if (!ok) fprintf(stderr, "%s: the matrix markers are missing\n", path);
    if (ok) {
        char *body = b + strlen(DOC_BEGIN);
        const bool same = (size_t)(e - body) == gen_len && !memcmp(body, gen, gen_len);
        if (write && !same) {
            FILE *f = fopen(path, "wb");
            REQUIRE(f);
            fwrite(doc, 1, (size_t)(body - doc), f);
            fwrite(gen, 1, gen_len, f);
            fputs(e, f);
            REQUIRE(fclose(f) == 0);
        } else if (!same) {
            fprintf(stderr,
                    "%s: the error matrix differs from this test's table; regenerate it with "
                    "`test_error_matrix --write-doc` (from the repository root)\n",
                    path);
            ok = false;
        }
    }
    free(gen);
    free(doc);
    return ok;
}

static void run_case(size_t i, bool show)
{
    const matrix_case *c = &cases[i];
    C.untouched = true;
    moe_error(MOE_OK, "%s", NO_MESSAGE);
    const int got = c->run();
    const char *msg = c->cli ? C.cli_msg : moe_last_error();
    if (show)
        printf("%3zu %-16s %s\n    %s\n", i + 1,
               c->cli        ? (got == 1 ? "exit 1" : "exit ?")
               : got == NOOP ? "none"
                             : status_name(got),
               c->input, msg);
    CHECKF(got == c->want, "case %zu (%s: %s): got %d, want %d: %s", i + 1, c->area, c->input, got,
           c->want, msg);
    if (c->pattern)
        CHECKF(glob_match(c->pattern, msg),
               "case %zu (%s: %s): message\n  '%s'\n  does not match\n  '%s'", i + 1, c->area,
               c->input, msg, c->pattern);
    else
        CHECKF(!strcmp(msg, NO_MESSAGE), "case %zu (%s): a no-op set the message '%s'", i + 1,
               c->input, msg);
    if (c->cli)
        CHECKF(C.cli_one_line, "case %zu (%s): not exactly one line on stderr", i + 1, c->input);
    CHECKF(C.untouched, "case %zu (%s: %s): an output was written", i + 1, c->area, c->input);
}

/* ---- Fixtures ------------------------------------------------------------------------------ */

static const char cfg_mxfp4[] =
    "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":1,"
    "\"intermediate_size\":64,\"num_local_experts\":4,\"num_experts_per_tok\":2,"
    "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}";

static moe_layer *make_layer(const moe_model *m, int layer)
{
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    return fx_layer(m, layer, &o, NULL);
}

static void setup(void)
{
    snprintf(C.root, sizeof C.root, "/tmp/moe_error_matrix_XXXXXX");
    REQUIRE(mkdtemp(C.root));
    snprintf(C.v3, sizeof C.v3, "%s/v3", C.root);
    snprintf(C.v4, sizeof C.v4, "%s/v4", C.root);
    snprintf(C.mxfp4, sizeof C.mxfp4, "%s/mxfp4", C.root);
    snprintf(C.int4, sizeof C.int4, "%s/int4", C.root);
    REQUIRE(mkdir(C.v3, 0700) == 0 && mkdir(C.v4, 0700) == 0 && mkdir(C.mxfp4, 0700) == 0);
    REQUIRE(mkdir(C.int4, 0700) == 0);
    fx_write_model(C.int4, int4_config(), 24);
    fx_write_model(C.v3, fam_cases[2].config, 21);
    fx_write_model(C.v4, fam_cases[7].config, 22);
    fx_write_model(C.mxfp4, cfg_mxfp4, 23);
    C.v3m = fx_open(C.v3, false);
    C.v4m = fx_open(C.v4, false);
    C.moe_l = make_layer(C.v3m, 1);
    C.dense_l = make_layer(C.v3m, 0);
    C.hash_l = make_layer(C.v4m, 0);
    io_make(&C.moe_b, C.moe_l, 7);
    io_make(&C.hash_b, C.hash_l, 7);
    int32_t *t = good_table();
    moe_router_params p = hash_params(t);
    REQUIRE(moe_router_create(&p, &C.hash_r) == MOE_OK);
    free(t);
    for (size_t i = 0; i < RT * RE; i++)
        rt_logits[i] = (float)fx_gauss(8, i);
    /* moe sits next to this program in the build folder. */
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    REQUIRE(n > 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    REQUIRE(slash);
    *slash = '\0';
    snprintf(C.moe_bin, sizeof C.moe_bin, "%s/moe", self);
}

static void teardown(void)
{
    io_free(&C.moe_b);
    io_free(&C.hash_b);
    moe_router_destroy(C.hash_r);
    moe_layer_destroy(C.moe_l);
    moe_layer_destroy(C.dense_l);
    moe_layer_destroy(C.hash_l);
    moe_model_close(C.v3m);
    moe_model_close(C.v4m);
    rm_tree(C.root);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "--markdown")) {
        markdown(stdout);
        return 0;
    }
    if (!strcmp(mode, "--write-doc")) return doc_sync(true) ? 0 : 1;
    const bool show = !strcmp(mode, "--show");
    CHECK(doc_sync(false));
    CHECK(N_CASES >= 30);
    setup();
    if (access(C.moe_bin, X_OK) != 0)
        fprintf(stderr, "%s is not built: build the moe target for the CLI rows\n", C.moe_bin);
    for (size_t i = 0; i < N_CASES; i++) {
        if (cases[i].cli && access(C.moe_bin, X_OK) != 0) {
            CHECKF(false, "case %zu needs %s", i + 1, C.moe_bin);
            continue;
        }
        run_case(i, show);
    }
    teardown();
    return TEST_END();
}
