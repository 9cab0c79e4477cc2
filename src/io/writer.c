#include "writer.h"

#include <stdlib.h>

#include "checkpoint.h"
#include "fsutil.h"
#include "input_files.h"
#include "jsonio.h"
#include "shards.h"

struct ckpt_writer {
    fs_stage stage;
    shard_set ss;
    int laid_out, committed;
};

void ckpt_writer_discard(const char *out_dir)
{
    char *paths[] = {fs_stage_path(out_dir), fs_shadow_path(out_dir)};
    for (size_t i = 0; i < 2; i++) {
        if (paths[i])
            fs_rm_rf(paths[i]);
        free(paths[i]);
    }
}

int ckpt_writer_check(const char *out_dir, int force, const char *const *inputs, ff_err *e)
{
    int rc = input_files_check(inputs, e);
    return rc ? rc : fs_stage_check(out_dir, force, inputs, e);
}

ckpt_writer *ckpt_writer_begin(const char *out_dir, int force, const char *const *inputs, ff_err *e)
{
    ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) {
        ff_oom(e, "out of memory");
        return NULL;
    }
    /* the inputs' files are checked before OUT is touched: the aux files
     * are copied (and README.md read for the card) only after the shards */
    if (input_files_check(inputs, e) || fs_stage_begin(&w->stage, out_dir, force, inputs, e)) {
        fs_stage_free(&w->stage);
        free(w);
        return NULL;
    }
    return w;
}

const char *ckpt_writer_dir(const ckpt_writer *w) { return w->stage.tmp_dir; }

int ckpt_writer_layout(ckpt_writer *w, const st_out *outs, size_t n, uint64_t shard_size, ff_err *e)
{
    w->laid_out = 1;
    return shards_open(&w->ss, outs, n, shard_size, w->stage.tmp_dir, e);
}

int ckpt_writer_put(ckpt_writer *w, size_t out, const void *buf, uint64_t n, ff_err *e)
{
    return shards_write(&w->ss, out, buf, n, e);
}

int ckpt_writer_put_at(ckpt_writer *w, size_t out, uint64_t at, const void *buf, uint64_t n, ff_err *e)
{
    return shards_write_part(&w->ss, out, at, buf, n, e);
}

int ckpt_writer_locate(const ckpt_writer *w, size_t out, uint64_t at, uint64_t n, ckpt_place *p, ff_err *e)
{
    return shards_place(&w->ss, out, at, n, &p->shard, &p->off, e);
}

int ckpt_writer_writev(ckpt_writer *w, ckpt_place p, struct iovec *iov, int n, ff_err *e)
{
    return shards_pwritev(&w->ss, p.shard, p.off, iov, n, e);
}

int ckpt_writer_reserve(ckpt_writer *w, ff_err *e) { return shards_reserve(&w->ss, e); }

const char *ckpt_writer_tensor_name(const ckpt_writer *w, size_t out) { return w->ss.outs[out].name; }

int ckpt_writer_holes(ckpt_writer *w, ff_err *e) { return shards_holes(&w->ss, e); }

int ckpt_writer_close(ckpt_writer *w, const json_t *config, const char *aux_from, int aux_config, ff_err *e)
{
    int rc = w->laid_out ? shards_close(&w->ss, w->stage.tmp_dir, e) : FF_OK;
    if (!rc && config) {
        char *p = fs_join(w->stage.tmp_dir, "config.json");
        rc = p ? jsonio_save(p, config, e) : ff_oom(e, "out of memory");
        free(p);
    }
    if (!rc && aux_from)
        rc = ckpt_copy_aux(aux_from, w->stage.tmp_dir, aux_config, e);
    return rc;
}

int ckpt_writer_commit(ckpt_writer *w, ff_err *e)
{
    int rc = fs_stage_commit(&w->stage, e);
    w->committed = rc == FF_OK;
    return rc;
}

uint64_t ckpt_writer_bytes(const ckpt_writer *w) { return w->laid_out ? shards_bytes_written(&w->ss) : 0; }

size_t ckpt_writer_shard_count(const ckpt_writer *w) { return w->ss.nshards; }

void ckpt_writer_free(ckpt_writer *w)
{
    if (!w)
        return;
    shards_free(&w->ss);
    if (!w->committed)
        fs_stage_abort(&w->stage);
    fs_stage_free(&w->stage);
    free(w);
}
