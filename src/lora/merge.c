/* A PEFT LoRA adapter merged into a bf16 checkpoint in one streaming pass
 * (tensor by tensor, nothing held but the module being merged), behind the
 * same gates quantize --lora runs. */
#include "merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fsutil.h"
#include "lora.h"
#include "plan.h"
#include "writer.h"

/* Merged weights keep the base's dtype; --dtype bf16 promises bf16. */
static int check_dtypes(const lora_adapter *l, ff_err *e)
{
    for (size_t i = 0; i < l->nmods; i++)
        if (l->mods[i].base->st->dtype != FF_DT_BF16)
            return ff_fail(e, FF_EIO, "adapter module %s: base weight is %s; merge writes bf16 only",
                           l->mods[i].module, ff_dtype_name(l->mods[i].base->st->dtype));
    return FF_OK;
}

/* Every tensor in the base's order, merged where the adapter targets it. */
static int write_tensors(const ckpt *c, lora_adapter *l, ckpt_writer *w, uint64_t shard_size, ff_err *e)
{
    st_out *outs = calloc(c->ntensors ? c->ntensors : 1, sizeof *outs);
    if (!outs)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < c->ntensors; i++) {
        const st_tensor *t = c->tensors[i].st;
        outs[i] = (st_out){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .nbytes = t->end - t->begin};
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
    }
    int rc = ckpt_writer_layout(w, outs, c->ntensors, shard_size, e);
    if (!rc)   /* blocks allocated first: the writes then only fill the cache */
        rc = ckpt_writer_reserve(w, e);
    for (size_t i = 0; rc == FF_OK && i < c->ntensors; i++) {
        const ckpt_tensor *t = &c->tensors[i];
        void *buf = NULL;
        rc = lora_produce(l, t, &buf, e);
        if (!rc)
            rc = ckpt_writer_put(w, i, buf ? buf : ckpt_data(c, t), outs[i].nbytes, e);
        /* written: the next tensor reuses the buffer (fresh pages cost a fault
         * and a zeroing each), and RSS holds one tensor, not the model */
        lora_give_back(l, buf, outs[i].nbytes);
        st_drop_tensor(&c->files[t->file], t->st);
    }
    if (!rc)
        rc = lora_finish(l, e);
    if (!rc)
        rc = ckpt_writer_close(w, NULL, NULL, 0, e);
    free(outs);
    return rc;
}

/* --schema: doctor's own conversion, run on the staged folder; only its
 * schema finding is fixed, and its backup files are dropped (the input is
 * untouched, so there is nothing to back up). */
static int convert_schema(const char *dir, doctor_schema schema, ff_err *e)
{
    doctor_opts o = {.schema = schema, .stamp = "merge"};
    doctor_report r = {0};
    int rc = doctor_check(dir, &o, &r, e);
    size_t keep = 0;
    for (size_t i = 0; rc == FF_OK && i < r.n; i++)
        if (strcmp(r.f[i].code, "SCHEMA_PER_LAYER_DRIFT") == 0)
            r.f[keep++] = r.f[i];
    r.n = keep;
    if (rc == FF_OK && keep)
        rc = doctor_fix(dir, &o, &r, e);
    for (size_t i = 0; rc == FF_OK && i < r.n; i++)
        if (!r.f[i].fixed)
            rc = ff_fail(e, FF_EIO, "--schema: %s", r.f[i].note[0] ? r.f[i].note : r.f[i].msg);
    for (size_t i = 0; i < r.nbackups; i++)
        remove(r.backups[i]);
    doctor_report_free(&r);
    return rc;
}

static int finish_folder(const merge_opts *j, const char *dir, ff_err *e)
{
    int rc = ckpt_copy_aux(j->base_dir, dir, 1, e);
    if (!rc && j->chat_template) {
        char *dst = fs_join(dir, "chat_template.jinja");
        rc = fs_copy_file(j->chat_template, dst, e);
        free(dst);
    }
    if (!rc && j->schema != DOCTOR_SCHEMA_KEEP)
        rc = convert_schema(dir, j->schema, e);
    return rc;
}

/* --chat-template names a regular file: a FIFO is refused now, not once the
 * shards are written. */
static int check_chat_template(const char *path, ff_err *e)
{
    if (!path)
        return FF_OK;
    if (!fs_exists(path))
        return ff_fail(e, FF_EUSAGE, "--chat-template: %s does not exist", path);
    int fd = fs_open_regular(path, e);
    if (fd < 0)
        return e->code;
    close(fd);
    return FF_OK;
}

int merge_run(const merge_opts *j, FILE *report, ff_err *e)
{
    ckpt c;
    plan p = {0};
    plan_opts po = {0};
    lora_adapter l;
    int rc = check_chat_template(j->chat_template, e);
    if (rc)
        return rc;
    rc = ckpt_open(&c, j->base_dir, 1, e);
    if (rc)
        return rc;
    rc = plan_build(&p, &c, &po, e);
    if (!rc)
        rc = lora_open(&l, j->adapter_dir, e);
    else
        memset(&l, 0, sizeof l);
    if (!rc)
        rc = lora_bind(&l, &c, &p, j->allow_ignored, e);
    if (!rc)
        rc = check_dtypes(&l, e);
    if (!rc && (fs_same(j->out_dir, j->base_dir) || fs_same(j->out_dir, j->adapter_dir)))
        rc = ff_fail(e, FF_EUSAGE, "%s: output folder is an input folder", j->out_dir);
    ckpt_writer *w = NULL;
    const char *inputs[] = {j->base_dir, j->adapter_dir, NULL};
    if (!rc && !(w = ckpt_writer_begin(j->out_dir, j->force, inputs, e)))
        rc = e->code;
    if (!rc)
        rc = write_tensors(&c, &l, w, j->shard_size, e);
    if (!rc)
        rc = finish_folder(j, ckpt_writer_dir(w), e);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    if (!rc && report) {
        fprintf(report, "fp4forge merge: %s\n", j->out_dir);
        lora_print_summary(&l, report);
        size_t nshards = ckpt_writer_shard_count(w);
        fprintf(report, "  bytes      %.3f GB in %zu shard%s\n", (double)ckpt_writer_bytes(w) / 1e9, nshards,
                nshards == 1 ? "" : "s");
    }
    ckpt_writer_free(w);
    lora_close(&l);
    plan_free(&p);
    ckpt_close(&c);
    return rc;
}

