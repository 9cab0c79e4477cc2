/* fp4forge quantize: plan, refuse what breaks an invariant, then stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_common.h"
#include "commands.h"
#include "hfcache.h"
#include "quantize.h"

static const cli_opt options[] = {
    {"--threads", "N", "worker threads (default: all cores)"},
    {"--shard-size", "SIZE", "target shard size, e.g. 5GB (default), 500MB"},
    {"--kernel", "scalar|avx2|avx512", "default: the fastest available; the same bytes"},
    {"--observer", "minmax|mse|expanded-mse", "llm-compressor's weight observers (default minmax), their bytes"},
    {"--dry-run", NULL, "every check of the real run, the plan printed (as fp4forge plan); nothing written"},
    {"--json", NULL, "with --dry-run: the plan as JSON; otherwise a JSON summary"},
    {"--quiet", NULL, "no progress bar"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {"--fix", NULL, "repair what doctor finds (in a shadow copy; the input is never written)"},
    {"--aux-from", "DIR", "with --fix: copy missing processor/chat-template files from DIR"},
    {"--no-doctor", NULL, "skip the doctor checks (exit 4 otherwise when they find something)"},
    {"--lora", "ADAPTER", "merge this PEFT LoRA adapter in the same pass (see fp4forge merge)"},
    {"--lora-allow-ignored", NULL, "with --lora: merge modules the recipe leaves unquantized"},
    {"--base-model", "ORG/NAME", "the card's base_model (default: the cache name, else config's _name_or_path)"},
    {"--hub-id", "ORG/NAME", "the repo the output will be uploaded as: the card's serve line names it"},
    {"--mxfp4-route", "exact|reference", "MXFP4 sources: exact (default) carries codes and exponents bit for bit where E4M3 holds them; reference re-quantizes the decoded bf16 as llm-compressor would"},
    RECIPE_OPTS,
    SEAT_OPTS,
    {NULL, NULL, NULL},
};

const cli_spec quantize_spec = {
    "quantize", "IN_DIR|ORG/NAME[@REV] [OUT_DIR]",
    "Quantizes a bf16 checkpoint to NVFP4A16 (compressed-tensors nvfp4-pack-quantized: E2M1\n"
    "weights, fp8 e4m3 scale per 16, fp32 global scale per tensor, activations 16-bit).\n"
    "Language-model attention and MLP Linears (and MoE experts, split per expert) are\n"
    "quantized; q/k/v share a global scale and gate/up share one. Vision tower, projectors,\n"
    "routers, embeddings, norms and lm_head are copied. Output is staged in OUT_DIR.partial-PID\n"
    "and renamed into place only when complete; OUT_DIR/README.md is then the model card (counts,\n"
    "observer, vllm serve line) with the input's own README.md beneath it. IN may be a Hugging\n"
    "Face cache name (org/name[@revision], read from the local cache, never downloaded); OUT_DIR\n"
    "defaults to ./<name>-NVFP4A16.",
    options, 1, 2, NULL,
};

/* A Hub repo id the card will print and link: org/name, nothing else. */
static int hub_name_option(const cli_args *a, const char *opt, ff_err *e)
{
    const char *v = cli_get(a, opt);
    if (v && (!hfcache_is_name(v) || strchr(v, '@')))
        return ff_fail(e, FF_EUSAGE, "%s %s: not a Hugging Face repo id (ORG/NAME)", opt, v);
    return FF_OK;
}

/* The request from the options, checked as the real run checks them (a dry
 * run too). */
static int request_from_cli(const cli_args *a, const recipe_args *recipe, quantize_request *r, ff_err *e)
{
    quantize_request_default(r);
    if (cli_threads(a, &r->run.threads, e) || cli_shard_size(a, &r->run.shard_size, e) ||
        hub_name_option(a, "--base-model", e) || hub_name_option(a, "--hub-id", e))
        return e->code;
    r->run.kernel = cli_get(a, "--kernel");
    r->recipe = recipe->opts;
    if (seat_from_cli(a, r->run.threads, &r->seat, e))
        return e->code;
    r->observer = cli_get(a, "--observer");
    const char *route = cli_get(a, "--mxfp4-route");
    if (route && strcmp(route, "exact") && strcmp(route, "reference"))
        return ff_fail(e, FF_EUSAGE, "--mxfp4-route is exact or reference, not %s", route);
    r->run.mxfp4_reference = route && strcmp(route, "reference") == 0;
    r->run.force = cli_flag(a, "--force");
    r->run.progress = !cli_flag(a, "--quiet") && isatty(2);
    r->doctor = !cli_flag(a, "--no-doctor");
    r->fix = cli_flag(a, "--fix");
    r->aux_from = cli_get(a, "--aux-from");
    r->lora = cli_get(a, "--lora");
    r->lora_allow_ignored = cli_flag(a, "--lora-allow-ignored");
    r->cache_name = a->hf_repo[0];
    r->base_model = cli_get(a, "--base-model");
    r->hub_id = cli_get(a, "--hub-id");
    r->dry_run = cli_flag(a, "--dry-run");
    r->json = cli_flag(a, "--json");
    r->report = stdout;
    return quantize_request_check(r, e);
}

int cmd_quantize(const cli_args *args)
{
    ff_err e = {0};
    recipe_args recipe;
    quantize_request r;
    int rc = recipe_from_cli(args, &recipe, &e);
    if (!rc)
        rc = request_from_cli(args, &recipe, &r, &e);
    if (!rc && !r.dry_run && args->npos != 2)
        rc = ff_fail(&e, FF_EUSAGE, "missing OUT_DIR (usage: fp4forge quantize IN_DIR OUT_DIR)");
    /* --dry-run: every check of the real run, in its order and with its exit
     * codes, the plan printed, and nothing written but, with --fix, doctor's
     * shadow copy, beside OUT or in the temp folder, removed before the end */
    if (!rc)
        rc = quantize_checkpoint(args->pos[0], args->npos == 2 ? args->pos[1] : NULL, &r, &e);
    recipe_free(&recipe);
    return rc ? cmd_report("quantize", &e) : 0;
}
