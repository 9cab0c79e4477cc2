/* fp4forge merge: a PEFT LoRA adapter merged into a bf16 checkpoint in one
 * streaming pass (tensor by tensor, nothing held but the module being merged),
 * behind the same gates quantize --lora runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_common.h"
#include "commands.h"
#include "doctor.h"
#include "fsutil.h"
#include "jsonio.h"
#include "lora.h"
#include "shards.h"

static const cli_opt merge_opts[] = {
    {"--dtype", "bf16", "dtype of the merged weights (only bf16, the base's dtype)"},
    {"--chat-template", "FILE", "write FILE as the output's chat_template.jinja"},
    {"--schema", "legacy|per-layer", "convert the Gemma-4 config schema as doctor --schema does"},
    {"--lora-allow-ignored", NULL, "merge modules the recipe leaves unquantized (vision, routers)"},
    {"--shard-size", "SIZE", "target shard size, e.g. 5GB (default)"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {NULL, NULL, NULL},
};

static const cli_spec merge_spec = {
    "merge", "BASE_DIR ADAPTER_DIR OUT_DIR",
    "Merges a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) into a\n"
    "bf16 checkpoint: W' = W + scale * (B @ A) computed in f32 and rounded once to bf16.\n"
    "Refuses an inert adapter (a lora_B of all zeros), modules outside the quantized set,\n"
    "pairs that match no base Linear, and a merge that changes nothing. The same merge runs\n"
    "inside quantize --lora without an intermediate folder.",
    merge_opts, 3, 3,
};

typedef struct merge_job {
    const char *base_dir, *adapter_dir, *out_dir, *chat_template;
    doctor_schema schema;
    int allow_ignored, force;
    uint64_t shard_size;
} merge_job;

static int parse(const cli_args *a, merge_job *j, ff_err *e)
{
    memset(j, 0, sizeof *j);
    j->base_dir = a->pos[0];
    j->adapter_dir = a->pos[1];
    j->out_dir = a->pos[2];
    j->chat_template = cli_get(a, "--chat-template");
    j->allow_ignored = cli_flag(a, "--lora-allow-ignored");
    j->force = cli_flag(a, "--force");
    j->shard_size = 5000000000ull;
    const char *dt = cli_get(a, "--dtype"), *sc = cli_get(a, "--schema"), *ss = cli_get(a, "--shard-size");
    if (dt && strcmp(dt, "bf16") != 0)
        return ff_fail(e, FF_EUSAGE, "--dtype: only bf16 is supported, not %s", dt);
    if (sc && strcmp(sc, "legacy") && strcmp(sc, "per-layer"))
        return ff_fail(e, FF_EUSAGE, "--schema must be legacy or per-layer, not \"%s\"", sc);
    j->schema = !sc ? DOCTOR_SCHEMA_KEEP : !strcmp(sc, "legacy") ? DOCTOR_SCHEMA_LEGACY : DOCTOR_SCHEMA_PER_LAYER;
    double sz;
    if (ss && (cli_parse_size(ss, &sz) || sz < 1))
        return ff_fail(e, FF_EUSAGE, "--shard-size: not a size: %s", ss);
    if (ss)
        j->shard_size = (uint64_t)sz;
    if (j->chat_template && !fs_exists(j->chat_template))
        return ff_fail(e, FF_EUSAGE, "--chat-template: %s does not exist", j->chat_template);
    return FF_OK;
}

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
static int write_tensors(const ckpt *c, lora_adapter *l, const char *dir, uint64_t shard_size,
                         uint64_t *written, size_t *nshards, ff_err *e)
{
    st_out *outs = calloc(c->ntensors ? c->ntensors : 1, sizeof *outs);
    if (!outs)
        return ff_fail(e, FF_EIO, "out of memory");
    for (size_t i = 0; i < c->ntensors; i++) {
        const st_tensor *t = c->tensors[i].st;
        outs[i] = (st_out){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .nbytes = t->end - t->begin};
        memcpy(outs[i].shape, t->shape, sizeof t->shape);
    }
    shard_set ss;
    int rc = shards_open(&ss, outs, c->ntensors, shard_size, dir, e);
    for (size_t i = 0; rc == FF_OK && i < c->ntensors; i++) {
        const ckpt_tensor *t = &c->tensors[i];
        void *buf = NULL;
        rc = lora_produce(l, t, &buf, e);
        if (!rc)
            rc = shards_write(&ss, i, buf ? buf : ckpt_data(c, t), outs[i].nbytes, e);
        free(buf);
    }
    if (!rc)
        rc = lora_finish(l, e);
    if (!rc)
        rc = shards_close(&ss, dir, e);
    *written = ss.bytes_written;
    *nshards = ss.nshards;
    shards_free(&ss);
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

static int finish_folder(const merge_job *j, const char *dir, ff_err *e)
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

static int run(const merge_job *j, ff_err *e)
{
    ckpt c;
    plan p = {0};
    plan_opts po = {0};
    lora_adapter l;
    int rc = ckpt_open(&c, j->base_dir, 1, e);
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
    fs_stage stage = {0};
    uint64_t written = 0;
    size_t nshards = 0;
    if (!rc && !(rc = fs_stage_begin(&stage, j->out_dir, j->force, e))) {
        rc = write_tensors(&c, &l, stage.tmp_dir, j->shard_size, &written, &nshards, e);
        if (!rc)
            rc = finish_folder(j, stage.tmp_dir, e);
        if (!rc)
            rc = fs_stage_commit(&stage, e);
        if (rc)
            fs_stage_abort(&stage);
    }
    fs_stage_free(&stage);
    if (!rc) {
        printf("fp4forge merge: %s\n", j->out_dir);
        lora_print_summary(&l, stdout);
        printf("  bytes      %.3f GB in %zu shard%s\n", (double)written / 1e9, nshards, nshards == 1 ? "" : "s");
    }
    lora_close(&l);
    plan_free(&p);
    ckpt_close(&c);
    return rc;
}

int cmd_merge(int argc, char **argv)
{
    cli_args a;
    ff_err e = {0};
    merge_job j;
    if (cli_parse(&merge_spec, argc, argv, &a, &e))
        return cmd_report("merge", &e);
    if (a.help) {
        cli_print_help(&merge_spec, stdout);
        return 0;
    }
    if (parse(&a, &j, &e) || run(&j, &e))
        return cmd_report("merge", &e);
    return 0;
}
