/* fp4forge merge: a PEFT LoRA adapter merged into a bf16 checkpoint in one
 * streaming pass (tensor by tensor, nothing held but the module being merged),
 * behind the same gates quantize --lora runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_common.h"
#include "commands.h"
#include "merge.h"

static const cli_opt options[] = {
    {"--dtype", "bf16", "dtype of the merged weights (only bf16, the base's dtype)"},
    {"--chat-template", "FILE", "write FILE as the output's chat_template.jinja"},
    {"--schema", "legacy|per-layer", "convert the config schema as doctor --schema does"},
    {"--lora-allow-ignored", NULL, "merge modules the recipe leaves unquantized (vision, routers)"},
    {"--shard-size", "SIZE", "target shard size, e.g. 5GB (default)"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {NULL, NULL, NULL},
};

const cli_spec merge_spec = {
    "merge", "BASE_DIR ADAPTER_DIR OUT_DIR",
    "Merges a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) into a\n"
    "bf16 checkpoint: W' = W + scale * (B @ A) computed in f32 and rounded once to bf16.\n"
    "Refuses an inert adapter (a lora_B of all zeros), modules outside the quantized set,\n"
    "pairs that match no base Linear, and a merge that changes nothing. The same merge runs\n"
    "inside quantize --lora without an intermediate folder.",
    options, 3, 3, NULL,
};

static int parse(const cli_args *a, merge_opts *j, ff_err *e)
{
    memset(j, 0, sizeof *j);
    j->base_dir = a->pos[0];
    j->adapter_dir = a->pos[1];
    j->out_dir = a->pos[2];
    j->chat_template = cli_get(a, "--chat-template");
    j->allow_ignored = cli_flag(a, "--lora-allow-ignored");
    j->force = cli_flag(a, "--force");
    j->shard_size = 5000000000ull;
    const char *dt = cli_get(a, "--dtype"), *sc = cli_get(a, "--schema");
    if (dt && strcmp(dt, "bf16") != 0)
        return ff_fail(e, FF_EUSAGE, "--dtype: only bf16 is supported, not %s", dt);
    if (sc && strcmp(sc, "legacy") && strcmp(sc, "per-layer"))
        return ff_fail(e, FF_EUSAGE, "--schema must be legacy or per-layer, not \"%s\"", sc);
    j->schema = !sc ? DOCTOR_SCHEMA_KEEP : !strcmp(sc, "legacy") ? DOCTOR_SCHEMA_LEGACY : DOCTOR_SCHEMA_PER_LAYER;
    return cli_shard_size(a, &j->shard_size, e);
}

int cmd_merge(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    merge_opts j;
    if (parse(&a, &j, &e) || merge_run(&j, stdout, &e))
        return cmd_report("merge", &e);
    return 0;
}
