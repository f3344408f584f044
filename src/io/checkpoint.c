/* checkpoint.c — a model folder's tensors: one model.safetensors, or shards through the index. */
#include "io/checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json_util.h"

#define CKPT_INDEX "model.safetensors.index.json"
#define CKPT_SINGLE "model.safetensors"
/* Real checkpoints have at most a few hundred shards (DeepSeek-V3: 163); the cap bounds the
 * file descriptors and mappings a hostile index can make us hold. */
#define CKPT_MAX_SHARDS 100000
/* The index is a map of names; real ones are a few MB (DeepSeek-V3: ~9 MB). */
#define CKPT_MAX_INDEX_BYTES ((uint64_t)MOE_ST_MAX_HEADER)
#define SHARD_SUFFIX ".safetensors"

struct moe_ckpt {
    moe_st_file **shards;
    size_t shard_count;
    const moe_tensor **tensors; /* every tensor of every shard, sorted by name */
    size_t count;
};

/* A tensor and the shard (index into the shard list) that holds it. */
typedef struct ckpt_ref {
    const moe_tensor *t;
    size_t shard;
} ckpt_ref;

/* One weight_map entry; both strings point into the parsed JSON. */
typedef struct map_entry {
    const char *tensor;
    const char *shard;
} map_entry;

static int cmp_ref(const void *a, const void *b)
{
    const ckpt_ref *x = a, *y = b;
    return strcmp(x->t->name, y->t->name);
}

static int cmp_entry(const void *a, const void *b)
{
    const map_entry *x = a, *y = b;
    return strcmp(x->tensor, y->tensor);
}

static int cmp_str(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

void moe_ckpt_close(moe_ckpt *ckpt)
{
    if (!ckpt) return;
    for (size_t i = 0; i < ckpt->shard_count; i++)
        moe_st_close(ckpt->shards[i]);
    moe_free(ckpt->shards);
    moe_free(ckpt->tensors);
    moe_free(ckpt);
}

/* ---- the index ----------------------------------------------------------------------- */

/* Not isalpha: the C library's answer depends on the locale. */
static bool ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Shard names are joined to the model folder, so anything but a plain file name in it
 * could load weights from elsewhere (transformers #46272, unsloth-zoo #829). */
static moe_status check_shard_name(const char *file, const char *tensor, const char *s)
{
    size_t n = strlen(s);
    size_t suffix = strlen(SHARD_SUFFIX);
    const char *why = NULL;
    if (n == 0)
        why = "is empty";
    else if (n > 255)
        why = "is longer than 255 bytes";
    else if (s[0] == '/' || s[0] == '\\' || (ascii_letter(s[0]) && s[1] == ':'))
        why = "is an absolute path or has a drive letter";
    else if (strstr(s, ".."))
        why = "contains '..'";
    else if (strchr(s, '/') || strchr(s, '\\'))
        why = "contains a path separator";
    else if (s[0] == '.')
        why = "starts with '.'";
    else if (strchr(s, ':'))
        why = "contains ':' (a drive letter or stream name)";
    else if (n <= suffix || strcmp(s + n - suffix, SHARD_SUFFIX) != 0)
        why = "does not end in '" SHARD_SUFFIX "'";
    for (size_t i = 0; !why && i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) why = "contains a control character";
    if (!why) return MOE_OK;
    return moe_error(MOE_EPATH, "%s: tensor '%s': shard name '%s' %s; it must be a plain file name",
                     file, tensor, s, why);
}

/* The JSON shape of an index: {"metadata": {...} (optional), "weight_map": {name: shard}}.
 * Other top-level keys are ignored, as every reader does. */
static moe_status check_index(const json_t *root, const char *file, const json_t **wmap)
{
    if (!json_is_object(root))
        return moe_error(MOE_EJSON, "%s: the index is %s, not a JSON object", file,
                         moe_json_type_name(root));
    const json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta))
        return moe_error(MOE_EJSON, "%s: 'metadata' is %s, not an object", file,
                         moe_json_type_name(meta));
    const json_t *map = json_object_get(root, "weight_map");
    if (!map) return moe_error(MOE_EMISSING, "%s: missing field 'weight_map'", file);
    if (!json_is_object(map))
        return moe_error(MOE_EJSON, "%s: 'weight_map' is %s, not an object", file,
                         moe_json_type_name(map));
    if (json_object_size(map) == 0)
        return moe_error(MOE_EMISSING, "%s: 'weight_map' is empty: the index names no tensors",
                         file);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)map, key, v)
    {
        if (key[0] == '\0')
            return moe_error(MOE_EJSON, "%s: 'weight_map' has an empty tensor name", file);
        if (!json_is_string(v))
            return moe_error(MOE_EJSON, "%s: weight_map['%s'] is %s, not a shard file name", file,
                             key, moe_json_type_name(v));
        moe_status st = check_shard_name(file, key, json_string_value(v));
        if (st != MOE_OK) return st;
    }
    *wmap = map;
    return MOE_OK;
}

static moe_status parse_index(const void *json, size_t len, const char *file, json_t **root,
                              const json_t **wmap)
{
    moe_status st = moe_json_parse(json, len, file, "index", root);
    if (st != MOE_OK) return st;
    st = check_index(*root, file, wmap);
    if (st != MOE_OK) {
        json_decref(*root);
        *root = NULL;
    }
    return st;
}

moe_status moe_ckpt_check_index(const void *json, size_t len, const char *name)
{
    if (!json && len > 0) return moe_error(MOE_EINVAL, "moe_ckpt_check_index: json is NULL");
    json_t *root;
    const json_t *wmap;
    moe_status st = parse_index(json, len, name ? name : CKPT_INDEX, &root, &wmap);
    if (st == MOE_OK) json_decref(root);
    return st;
}

/* ---- assembling the shards ----------------------------------------------------------- */

/* Collects every tensor of every shard, sorted by name; a name in two shards is an error. */
static moe_status gather(moe_ckpt *c, const char *file, const char *const *shard_names,
                         ckpt_ref **out)
{
    size_t total = 0;
    for (size_t i = 0; i < c->shard_count; i++)
        total += moe_st_count(c->shards[i]);
    ckpt_ref *refs = moe_calloc(total, sizeof *refs);
    c->tensors = moe_calloc(total, sizeof *c->tensors);
    if (!refs || !c->tensors) {
        moe_free(refs);
        return moe_error(MOE_ENOMEM, "%s: out of memory for %zu tensors", file, total);
    }
    size_t k = 0;
    for (size_t i = 0; i < c->shard_count; i++)
        for (size_t j = 0; j < moe_st_count(c->shards[i]); j++)
            refs[k++] = (ckpt_ref){moe_st_tensor(c->shards[i], j), i};
    qsort(refs, total, sizeof *refs, cmp_ref);
    for (size_t i = 0; i + 1 < total; i++)
        if (strcmp(refs[i].t->name, refs[i + 1].t->name) == 0) {
            moe_status st = moe_error(MOE_EDUPLICATE, "%s: tensor '%s' is in both '%s' and '%s'",
                                      file, refs[i].t->name, shard_names[refs[i].shard],
                                      shard_names[refs[i + 1].shard]);
            moe_free(refs);
            return st;
        }
    for (size_t i = 0; i < total; i++)
        c->tensors[i] = refs[i].t;
    c->count = total;
    *out = refs;
    return MOE_OK;
}

/* Walks the sorted map and the sorted tensors together: each side must name exactly the
 * other's tensors, and each tensor must sit in the shard the map names. */
static moe_status match_map(const char *file, const map_entry *map, size_t nmap,
                            const ckpt_ref *refs, size_t nrefs, const char *const *shard_names)
{
    size_t i = 0, j = 0;
    while (i < nmap || j < nrefs) {
        int c = i == nmap ? 1 : j == nrefs ? -1 : strcmp(map[i].tensor, refs[j].t->name);
        if (c < 0)
            return moe_error(MOE_EMISSING,
                             "%s: tensor '%s' is mapped to shard '%s', which does not contain it",
                             file, map[i].tensor, map[i].shard);
        if (c > 0)
            return moe_error(MOE_EMISSING,
                             "%s: tensor '%s' in shard '%s' is not listed in weight_map", file,
                             refs[j].t->name, shard_names[refs[j].shard]);
        const char *in = shard_names[refs[j].shard];
        if (strcmp(map[i].shard, in) != 0)
            return moe_error(MOE_EMISSING,
                             "%s: tensor '%s' is mapped to shard '%s', which does not contain "
                             "it (it is in '%s')",
                             file, map[i].tensor, map[i].shard, in);
        i++;
        j++;
    }
    return MOE_OK;
}

/* The distinct shard names of the map, sorted, as one allocation of pointers into the JSON.
 * Each shard is opened once however many tensors name it. */
static moe_status distinct_shards(const char *file, const map_entry *map, size_t nmap,
                                  const char ***names, size_t *count)
{
    const char **s = moe_calloc(nmap, sizeof *s);
    if (!s) return moe_error(MOE_ENOMEM, "%s: out of memory", file);
    for (size_t i = 0; i < nmap; i++)
        s[i] = map[i].shard;
    qsort(s, nmap, sizeof *s, cmp_str);
    size_t n = 0;
    for (size_t i = 0; i < nmap; i++)
        if (n == 0 || strcmp(s[n - 1], s[i]) != 0) s[n++] = s[i];
    if (n > CKPT_MAX_SHARDS) {
        moe_free(s);
        return moe_error(MOE_EOVERFLOW, "%s: %zu shards exceed the limit of %d", file, n,
                         CKPT_MAX_SHARDS);
    }
    *names = s;
    *count = n;
    return MOE_OK;
}

static moe_status open_shards(moe_ckpt *c, const char *dir, const char *file,
                              const char *const *names, size_t n, const moe_st_options *options)
{
    c->shards = moe_calloc(n, sizeof *c->shards);
    if (!c->shards) return moe_error(MOE_ENOMEM, "%s: out of memory for %zu shards", file, n);
    for (size_t i = 0; i < n; i++) {
        char *path = moe_path_join(dir, names[i]);
        if (!path) return moe_error(MOE_ENOMEM, "%s: out of memory", file);
        moe_status st = moe_st_open(path, options, &c->shards[i]);
        moe_free(path);
        if (st != MOE_OK) return moe_error_context(st, "%s: shard '%s': ", file, names[i]);
        c->shard_count = i + 1;
    }
    return MOE_OK;
}

static moe_status open_index(const char *dir, const char *file, const void *json, size_t len,
                             const moe_st_options *options, moe_ckpt **out)
{
    json_t *root = NULL;
    const json_t *wmap;
    map_entry *map = NULL;
    const char **names = NULL;
    ckpt_ref *refs = NULL;
    moe_ckpt *c = NULL;
    size_t nshards = 0;
    moe_status st = parse_index(json, len, file, &root, &wmap);
    if (st != MOE_OK) return st;
    size_t nmap = json_object_size(wmap);
    map = moe_calloc(nmap, sizeof *map);
    c = moe_calloc(1, sizeof *c);
    if (!map || !c) {
        st = moe_error(MOE_ENOMEM, "%s: out of memory for %zu entries", file, nmap);
        goto done;
    }
    const char *key;
    const json_t *v;
    size_t k = 0;
    json_object_foreach((json_t *)wmap, key, v) map[k++] = (map_entry){key, json_string_value(v)};
    qsort(map, nmap, sizeof *map, cmp_entry);
    st = distinct_shards(file, map, nmap, &names, &nshards);
    if (st == MOE_OK) st = open_shards(c, dir, file, names, nshards, options);
    if (st == MOE_OK) st = gather(c, file, names, &refs);
    if (st == MOE_OK) st = match_map(file, map, nmap, refs, c->count, names);
    if (st == MOE_OK) {
        *out = c;
        c = NULL;
    }
done:
    moe_ckpt_close(c);
    moe_free(refs);
    moe_free((void *)names);
    moe_free(map);
    json_decref(root);
    return st;
}

moe_status moe_ckpt_open_file(const char *path, const moe_st_options *options, moe_ckpt **out)
{
    if (!path || !out)
        return moe_error(MOE_EINVAL, "moe_ckpt_open_file: %s is NULL", path ? "out" : "path");
    moe_ckpt *c = moe_calloc(1, sizeof *c);
    ckpt_ref *refs = NULL;
    if (!c) return moe_error(MOE_ENOMEM, "out of memory opening '%s'", path);
    c->shards = moe_calloc(1, sizeof *c->shards);
    if (!c->shards) {
        moe_ckpt_close(c);
        return moe_error(MOE_ENOMEM, "out of memory opening '%s'", path);
    }
    moe_status st = moe_st_open(path, options, &c->shards[0]);
    if (st == MOE_OK) {
        c->shard_count = 1;
        const char *names[1] = {path};
        st = gather(c, path, names, &refs);
    }
    moe_free(refs);
    if (st != MOE_OK) {
        moe_ckpt_close(c);
        return st;
    }
    *out = c;
    return MOE_OK;
}

moe_status moe_ckpt_open(const char *dir, const moe_st_options *options, moe_ckpt **out)
{
    if (!dir || !out)
        return moe_error(MOE_EINVAL, "moe_ckpt_open: %s is NULL", dir ? "out" : "dir");
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        char text[128];
        if (errno == ENOENT)
            return moe_error(MOE_EMISSING, "model folder '%s' does not exist", dir);
        return moe_error(MOE_EIO, "cannot open model folder '%s': %s", dir,
                         moe_errno_text(errno, text, sizeof text));
    }
    if (!S_ISDIR(sb.st_mode))
        return moe_error(MOE_EIO, "'%s' is %s, not a folder", dir, moe_file_kind(sb.st_mode));
    char *index = moe_path_join(dir, CKPT_INDEX);
    char *single = moe_path_join(dir, CKPT_SINGLE);
    void *json = NULL;
    size_t len = 0;
    moe_status st;
    if (!index || !single) {
        st = moe_error(MOE_ENOMEM, "out of memory opening '%s'", dir);
        goto done;
    }
    st = moe_file_read_all(index, CKPT_MAX_INDEX_BYTES, &json, &len);
    if (st == MOE_OK) {
        st = open_index(dir, index, json, len, options, out);
        goto done;
    }
    if (st != MOE_EMISSING) goto done;
    /* Asked apart from the open, because the open's own MOE_EMISSING may also mean a
     * missing field inside the file. */
    if (stat(single, &sb) != 0 && errno == ENOENT) {
        st = moe_error(MOE_EMISSING, "'%s' has neither %s nor %s", dir, CKPT_INDEX, CKPT_SINGLE);
        goto done;
    }
    st = moe_ckpt_open_file(single, options, out);
done:
    moe_free(json);
    moe_free(index);
    moe_free(single);
    return st;
}

size_t moe_ckpt_count(const moe_ckpt *ckpt) { return ckpt ? ckpt->count : 0; }

const moe_tensor *moe_ckpt_tensor(const moe_ckpt *ckpt, size_t index)
{
    if (!ckpt || index >= ckpt->count) return NULL;
    return ckpt->tensors[index];
}

void moe_ckpt_release(const moe_ckpt *ckpt, const moe_tensor *tensor)
{
    if (tensor) moe_ckpt_release_range(ckpt, tensor, 0, tensor->nbytes);
}

void moe_ckpt_release_range(const moe_ckpt *ckpt, const moe_tensor *tensor, uint64_t offset,
                            uint64_t len)
{
    if (!ckpt || !tensor) return;
    for (size_t i = 0; i < ckpt->shard_count; i++) /* a no-op for every shard but its own */
        moe_st_release_range(ckpt->shards[i], tensor, offset, len);
}

moe_status moe_ckpt_check_files(const moe_ckpt *ckpt, const moe_tensor *const *tensors, size_t n)
{
    if (!ckpt || (!tensors && n > 0))
        return moe_error(MOE_EINVAL, "moe_ckpt_check_files: %s is NULL", ckpt ? "tensors" : "ckpt");
    /* Shards outer, tensors inner: each shard is measured once however many tensors it holds,
     * with no allocation; a layer names a few thousand tensors of a few hundred shards. */
    for (size_t s = 0; s < ckpt->shard_count; s++) {
        bool used = false;
        for (size_t i = 0; i < n && !used; i++)
            used = moe_st_holds(ckpt->shards[s], tensors[i]);
        if (!used) continue;
        moe_status st = moe_st_check_size(ckpt->shards[s]);
        if (st != MOE_OK) return st;
    }
    return MOE_OK;
}

const moe_tensor *moe_ckpt_find(const moe_ckpt *ckpt, const char *name)
{
    if (!ckpt || !name) return NULL;
    size_t lo = 0, hi = ckpt->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, ckpt->tensors[mid]->name);
        if (c == 0) return ckpt->tensors[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t moe_ckpt_shard_count(const moe_ckpt *ckpt) { return ckpt ? ckpt->shard_count : 0; }
