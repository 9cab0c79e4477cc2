/* fp4forge quantize: plan, refuse what breaks an invariant, then stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "card.h"
#include "cmd_common.h"
#include "fsutil.h"
#include "hfcache.h"
#include "commands.h"
#include "lora.h"
#include "doctor_shadow.h"
#include "quantize.h"
#include "nvfp4_mse.h"

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

static void summary(const plan *p, const quant_stats *st, const char *out, const char *card_note, int json)
{
    double gbps = st->seconds > 0 ? (double)st->bytes_read / 1e9 / st->seconds : 0;
    if (json) {
        /* built with jansson: paths are user text and must be escaped */
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:s, s:I, s:{s:I, s:I, s:I, s:I}}",
                              "output", out,
                              "quantized_dense", (json_int_t)p->q_dense, "quantized_experts", (json_int_t)p->q_experts,
                              "quantized_fp8", (json_int_t)p->q_fp8,
                              "ignored", (json_int_t)p->nignore, "shards", (json_int_t)st->shards,
                              "bytes_in", (json_int_t)st->bytes_read, "bytes_out", (json_int_t)st->bytes_written,
                              "seconds", st->seconds, "threads", st->threads, "kernel", st->kernel,
                              "peak_rss", (json_int_t)peak_rss_bytes(), "mxfp4", "exact", (json_int_t)st->mx_exact,
                              "exact_groups", (json_int_t)st->mx_exact_groups, "requantized",
                              (json_int_t)st->mx_requantized, "requantized_groups",
                              (json_int_t)st->mx_requantized_groups);
        char *text = j ? json_dumps(j, JSON_PRESERVE_ORDER) : NULL;
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(j);
        return;
    }
    printf("fp4forge quantize: %s\n", out);
    printf("  quantized  %lld dense Linears, %lld expert Linears (%s, %d layers)\n",
           (long long)p->q_dense, (long long)p->q_experts, p->arch_class, p->layers);
    if (p->q_fp8)
        printf("  fp8        %lld of them FP8 weight-only channel-wise (--fp8), the rest NVFP4A16\n",
               (long long)p->q_fp8);
    printf("  ignored    %zu modules left in their dtype (quantization_config.ignore)\n",
           p->nignore);
    printf("  bytes      %.3f GB in -> %.3f GB out in %zu shard%s\n", (double)st->bytes_read / 1e9,
           (double)st->bytes_written / 1e9, st->shards, st->shards == 1 ? "" : "s");
    printf("  time       %.2f s (%.2f GB/s read), %d threads, %s kernel, peak RSS %.0f MB\n",
           st->seconds, gbps, st->threads, st->kernel, (double)peak_rss_bytes() / 1e6);
    if (st->mx_exact + st->mx_requantized)
        printf("  mxfp4      %llu weights carried exactly (%llu groups of 16), %llu re-quantized from bf16 (%llu "
               "groups)%s\n", (unsigned long long)st->mx_exact, (unsigned long long)st->mx_exact_groups,
               (unsigned long long)st->mx_requantized, (unsigned long long)st->mx_requantized_groups,
               st->mx_requantized ? ": their exponents span more than E4M3 holds, or --mxfp4-route reference" : "");
    for (int i = 0; i < p->nnotes; i++)
        printf("  note: %s\n", p->notes[i]);
    if (*card_note)
        printf("  note: %s\n", card_note);
}

/* The model card's inputs. quantize_run writes it into the staging folder
 * (so OUT never appears without it), over the README.md copied from the
 * input, which is kept beneath it. base_card is malloc'd; NULL when out of
 * memory. */
static char *card_for(const cli_args *a, card_info *ci, nvfp4_obs *obs, char *note, size_t note_size)
{
    char *base_card = fs_join(a->pos[0], "README.md");
    const char *obs_name = cli_get(a, "--observer"), *base = cli_get(a, "--base-model");
    *ci = (card_info){base ? base : a->hf_repo[0], base_card, a->pos[1],
                      obs_name && nvfp4_obs_from_name(obs_name, obs) == 0 ? obs->llmc_name : NULL,
                      a->hf_repo[0] ? a->hf_repo[0] : a->pos[0], cli_get(a, "--hub-id"), note, note_size};
    return base_card;
}

/* A Hub repo id the card will print and link: org/name, nothing else. */
static int hub_name_option(const cli_args *a, const char *opt, ff_err *e)
{
    const char *v = cli_get(a, opt);
    if (v && (!hfcache_is_name(v) || strchr(v, '@')))
        return ff_fail(e, FF_EUSAGE, "%s %s: not a Hugging Face repo id (ORG/NAME)", opt, v);
    return FF_OK;
}

/* The options' values, checked as the real run checks them (a dry run too). */
static int quant_options(const cli_args *a, quant_opts *o, nvfp4_obs *obs, ff_err *e)
{
    memset(o, 0, sizeof *o);
    if (cli_threads(a, &o->threads, e) || cli_shard_size(a, &o->shard_size, e) ||
        hub_name_option(a, "--base-model", e) || hub_name_option(a, "--hub-id", e))
        return e->code;
    o->kernel = cli_get(a, "--kernel");
    const char *obs_name = cli_get(a, "--observer");
    if (obs_name && nvfp4_obs_from_name(obs_name, obs))
        return ff_fail(e, FF_EUSAGE, "--observer %s: unknown (minmax, mse, expanded-mse; or llm-compressor's "
                       "memoryless_minmax, memoryless_mse, mse, nvfp4_expanded_mse, fouroversix)", obs_name);
    o->observer = obs_name ? obs : NULL;
    /* llm-compressor would run that observer over the FP8 groups too; their
     * bytes are proven for min/max only */
    if (cli_get(a, "--fp8") && o->observer && o->observer->kind != NVFP4_OBS_MINMAX)
        return ff_fail(e, FF_EUSAGE, "--fp8 takes the minmax observer only, not --observer %s", obs_name);
    const char *route = cli_get(a, "--mxfp4-route");
    if (route && strcmp(route, "exact") && strcmp(route, "reference"))
        return ff_fail(e, FF_EUSAGE, "--mxfp4-route is exact or reference, not %s", route);
    o->mxfp4_reference = route && strcmp(route, "reference") == 0;
    o->input_dir = a->pos[0];
    o->force = cli_flag(a, "--force");
    o->progress = !cli_flag(a, "--quiet") && isatty(2);
    return FF_OK;
}

/* What the real run and the dry run both hold: doctor's view of the input,
 * the checkpoint, the plan, the LoRA adapter bound to it. Zeroed, every part
 * closes as a no-op. */
typedef struct job {
    doctor_input din;
    ckpt c;
    plan p;
    lora_adapter l;
    quant_source qs;
} job;

/* The steps before any write, in the real run's order: the input opened
 * (unreadable shards are bad input, exit 1, not a doctor finding), doctor's
 * checks (a drifted config or a missing processor file fails far from its
 * cause once served; with --fix, a shadow copy beside shadow_base), the plan
 * (printed as fp4forge plan prints it when print, refused or not), the LoRA
 * adapter bound to it as the quantizer's source. */
static int job_prepare(job *j, const cli_args *a, const recipe_args *r, quant_opts *o, const char *shadow_base,
                       int print, int json, ff_err *e)
{
    memset(j, 0, sizeof *j);
    j->din.dir = a->pos[0];
    int rc = ckpt_open(&j->c, a->pos[0], 1, e);
    ckpt_close(&j->c);
    if (!rc && !cli_flag(a, "--no-doctor"))
        rc = doctor_input_prepare(&j->din, a->pos[0], shadow_base, cli_flag(a, "--fix"), cli_get(a, "--aux-from"),
                                  stderr, e);
    if (!rc)
        rc = ckpt_open(&j->c, j->din.dir, 1, e);
    if (!rc) {
        rc = plan_build(&j->p, &j->c, &r->opts, e);
        if (print && (rc == FF_OK || rc == FF_EPLAN))
            print_plan(&j->p, &j->c, json);
    }
    if (!rc && cli_get(a, "--lora")) {
        rc = lora_open(&j->l, cli_get(a, "--lora"), e);
        if (!rc)
            rc = lora_bind(&j->l, &j->c, &j->p, cli_flag(a, "--lora-allow-ignored"), e);
        lora_quant_source(&j->l, &j->qs);
        o->source = &j->qs;
    }
    return rc;
}

/* The writes (the shards and the card, staged together), then the summary. */
static int job_run(job *j, const cli_args *a, const quant_opts *o, int json, ff_err *e)
{
    quant_stats st;
    char card_note[400] = "";   /* what the card could not carry of the input's README.md */
    card_info ci;
    nvfp4_obs obs;
    quant_opts with_card = *o;
    with_card.card = &ci;
    char *base_card = card_for(a, &ci, &obs, card_note, sizeof card_note);
    int rc = base_card ? quantize_run(&j->c, &j->p, a->pos[1], &with_card, &st, e)
                       : ff_oom(e, "out of memory");
    free(base_card);
    if (rc)
        return rc;
    summary(&j->p, &st, a->pos[1], card_note, json);
    if (o->source && !json)
        lora_print_summary(&j->l, stdout);
    return FF_OK;
}

static void job_close(job *j)
{
    lora_close(&j->l);
    plan_free(&j->p);
    ckpt_close(&j->c);
    doctor_input_done(&j->din);
}

int cmd_quantize(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    recipe_args r;
    recipe_from_cli(&a, &r);
    int json = cli_flag(&a, "--json"), dry = cli_flag(&a, "--dry-run");
    quant_opts o;
    nvfp4_obs obs;
    if (quant_options(&a, &o, &obs, &e))
        return cmd_report("quantize", &e);
    if (!dry && a.npos != 2) {
        ff_fail(&e, FF_EUSAGE, "missing OUT_DIR (usage: fp4forge quantize IN_DIR OUT_DIR)");
        return cmd_report("quantize", &e);
    }
    /* --dry-run: every check of the real run, in its order and with its exit
     * codes, the plan printed, and nothing written but, with --fix, doctor's
     * shadow copy, beside OUT or in the temp folder, removed before the end */
    const char *out = a.npos == 2 ? a.pos[1] : NULL;
    job j;
    int rc = job_prepare(&j, &a, &r, &o, out ? out : P_tmpdir "/fp4forge-dry-run", dry, json, &e);
    if (!rc)
        rc = dry ? quantize_check(&j.c, &j.p, out, &o, &e) : job_run(&j, &a, &o, json, &e);
    job_close(&j);
    return rc ? cmd_report("quantize", &e) : 0;
}
