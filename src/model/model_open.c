/* model_open.c — the public moe_model handle: config.json and verified checkpoint tensors. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/model_handle.h"
#include "model/verify.h"

struct moe_model {
    moe_model_desc desc;
    moe_ckpt *ckpt;
};

/* The bytes of moe_open_options this version reads: everything up to and including no_mmap. */
#define OPEN_OPTIONS_MIN_SIZE (offsetof(moe_open_options, no_mmap) + sizeof(bool))

static moe_status read_options(const moe_open_options *options, moe_st_options *st)
{
    memset(st, 0, sizeof *st);
    if (!options) return MOE_OK;
    if (options->size < OPEN_OPTIONS_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         "moe_open_options.size = %zu is smaller than the %zu bytes this version "
                         "reads (set it to sizeof(moe_open_options))",
                         options->size, (size_t)OPEN_OPTIONS_MIN_SIZE);
    st->no_mmap = options->no_mmap;
    return MOE_OK;
}

static moe_status load_config(const char *dir, moe_model_desc *desc)
{
    static const char file[] = "/config.json";
    size_t n = strlen(dir);
    char *path = moe_malloc(n + sizeof file);
    if (!path) return moe_error(MOE_ENOMEM, "%s: allocating the config path", dir);
    memcpy(path, dir, n);
    memcpy(path + n, file, sizeof file);
    moe_status st = moe_model_desc_load(path, desc);
    moe_free(path);
    return st;
}

moe_status moe_model_open_ex(const char *dir, const moe_open_options *options, unsigned flags,
                             moe_model **out)
{
    if (!dir || !*dir)
        return moe_error(MOE_EINVAL, "moe_model_open: argument 'dir' is NULL or empty");
    if (!out) return moe_error(MOE_EINVAL, "moe_model_open: argument 'out' is NULL");
    if (flags & ~MOE_OPEN_SKIP_VERIFY)
        return moe_error(MOE_EINVAL, "moe_model_open: unknown flags 0x%x", flags);
    moe_st_options st_opts;
    moe_status st = read_options(options, &st_opts);
    if (st) return st;
    moe_model *m = moe_calloc(1, sizeof *m);
    if (!m) return moe_error(MOE_ENOMEM, "%s: allocating the model handle", dir);
    if ((st = load_config(dir, &m->desc))) goto fail;
    if ((st = moe_ckpt_open(dir, &st_opts, &m->ckpt))) goto fail;
    if ((st = moe_model_resolve_formats(&m->desc, m->ckpt))) goto fail;
    if (!(flags & MOE_OPEN_SKIP_VERIFY) && (st = moe_model_verify(&m->desc, m->ckpt))) {
        moe_error_context(st, "%s: ", dir);
        goto fail;
    }
    *out = m;
    return MOE_OK;
fail:
    moe_model_close(m);
    return st;
}

moe_status moe_model_open(const char *dir, const moe_open_options *options, moe_model **out)
{
    return moe_model_open_ex(dir, options, 0, out);
}

void moe_model_close(moe_model *model)
{
    if (!model) return;
    if (model->ckpt) moe_ckpt_close(model->ckpt);
    moe_model_desc_free(&model->desc);
    moe_free(model);
}

int moe_model_layer_count(const moe_model *model) { return model ? model->desc.n_layers : 0; }

const moe_model_desc *moe_model_desc_of(const moe_model *model)
{
    return model ? &model->desc : NULL;
}

const moe_ckpt *moe_model_ckpt_of(const moe_model *model) { return model ? model->ckpt : NULL; }
