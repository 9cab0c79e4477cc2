/* fp4forge quantize: plan, refuse what breaks an invariant, then stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "card.h"
#include "cmd_common.h"
#include "fsutil.h"
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

static void summary(const plan *p, const quant_stats *st, const char *out, int json)
{
    double gbps = st->seconds > 0 ? (double)st->bytes_read / 1e9 / st->seconds : 0;
    if (json) {
        /* built with jansson: paths are user text and must be escaped */
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:s, s:I}", "output", out,
                              "quantized_dense", (json_int_t)p->q_dense, "quantized_experts", (json_int_t)p->q_experts,
                              "ignored", (json_int_t)p->nignore, "shards", (json_int_t)st->shards,
                              "bytes_in", (json_int_t)st->bytes_read, "bytes_out", (json_int_t)st->bytes_written,
                              "seconds", st->seconds, "threads", st->threads, "kernel", st->kernel,
                              "peak_rss", (json_int_t)peak_rss_bytes());
        char *text = j ? json_dumps(j, JSON_PRESERVE_ORDER) : NULL;
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(j);
        return;
    }
    printf("fp4forge quantize: %s\n", out);
    printf("  quantized  %lld dense Linears, %lld expert Linears (%s, %d layers)\n",
           (long long)p->q_dense, (long long)p->q_experts, p->arch_class, p->layers);
    printf("  ignored    %zu modules left in their dtype (quantization_config.ignore)\n",
           p->nignore);
    printf("  bytes      %.3f GB in -> %.3f GB out in %zu shard%s\n", (double)st->bytes_read / 1e9,
           (double)st->bytes_written / 1e9, st->shards, st->shards == 1 ? "" : "s");
    printf("  time       %.2f s (%.2f GB/s read), %d threads, %s kernel, peak RSS %.0f MB\n",
           st->seconds, gbps, st->threads, st->kernel, (double)peak_rss_bytes() / 1e6);
    for (int i = 0; i < p->nnotes; i++)
        printf("  note: %s\n", p->notes[i]);
}

/* The model card goes in after the output is in place (quantize_run
 * renames the staging folder itself): it replaces the README.md copied from
 * the input with the card, the input's README.md kept beneath it. */
static int write_card(const cli_args *a, const plan *p, const ckpt *c, ff_err *e)
{
    char *base_card = fs_join(a->pos[0], "README.md");
    /* no serve path: the card, like the weights, must not depend on where
     * OUT is (runs into different folders are compared byte for byte) */
    nvfp4_obs obs;
    const char *obs_name = cli_get(a, "--observer");
    card_info ci = {a->hf_repo[0], base_card, NULL,
                    obs_name && nvfp4_obs_from_name(obs_name, &obs) == 0 ? obs.llmc_name : NULL};
    int rc = base_card ? card_write(a->pos[1], p, c, &ci, e) : ff_fail(e, FF_EIO, "out of memory");
    free(base_card);
    return rc ? ff_wrap(e, "model card: ") : FF_OK;
}

/* The options' values, checked as the real run checks them (a dry run too). */
static int quant_options(const cli_args *a, quant_opts *o, nvfp4_obs *obs, ff_err *e)
{
    memset(o, 0, sizeof *o);
    if (cli_threads(a, &o->threads, e) || cli_shard_size(a, &o->shard_size, e))
        return e->code;
    o->kernel = cli_get(a, "--kernel");
    const char *obs_name = cli_get(a, "--observer");
    if (obs_name && nvfp4_obs_from_name(obs_name, obs))
        return ff_fail(e, FF_EUSAGE, "--observer %s: unknown (minmax, mse, expanded-mse; or llm-compressor's "
                       "memoryless_minmax, memoryless_mse, mse, nvfp4_expanded_mse, fouroversix)", obs_name);
    o->observer = obs_name ? obs : NULL;
    o->input_dir = a->pos[0];
    o->force = cli_flag(a, "--force");
    o->progress = !cli_flag(a, "--quiet") && isatty(2);
    return FF_OK;
}

/* A LoRA adapter bound to the plan, its tensors the quantizer's source. */
static int bind_lora(const cli_args *a, lora_adapter *l, const ckpt *c, plan *p, quant_source *qs,
                     quant_opts *o, ff_err *e)
{
    if (!cli_get(a, "--lora"))
        return FF_OK;
    int rc = lora_open(l, cli_get(a, "--lora"), e);
    if (!rc)
        rc = lora_bind(l, c, p, cli_flag(a, "--lora-allow-ignored"), e);
    lora_quant_source(l, qs);
    o->source = qs;
    return rc;
}

/* --dry-run: every check the real run makes (options, input, doctor, plan,
 * LoRA adapter, kernel, OUT), in its order and with its exit codes, and the
 * plan printed. Nothing is written but, with --fix, doctor's shadow copy
 * (small files copied, shards linked), beside OUT or in the temp folder, and
 * removed before it returns. */
static int dry_run(const cli_args *a, const recipe_args *r, quant_opts *o, int json, ff_err *e)
{
    doctor_input din = {.dir = a->pos[0]};
    ckpt c;
    plan p = {0};
    lora_adapter l = {0};
    quant_source qs;
    char beside[4096];
    snprintf(beside, sizeof beside, "%s", a->npos == 2 ? a->pos[1] : P_tmpdir "/fp4forge-dry-run");
    int rc = ckpt_open(&c, a->pos[0], 1, e);
    ckpt_close(&c);
    if (!rc && !cli_flag(a, "--no-doctor"))
        rc = doctor_input_prepare(&din, a->pos[0], beside, cli_flag(a, "--fix"), cli_get(a, "--aux-from"), stderr, e);
    int opened = !rc && !(rc = ckpt_open(&c, din.dir, 1, e));
    if (!rc) {
        rc = plan_build(&p, &c, &r->opts, e);
        if (rc == FF_OK || rc == FF_EPLAN)
            print_plan(&p, &c, json);
    }
    if (!rc)
        rc = bind_lora(a, &l, &c, &p, &qs, o, e);
    if (!rc)
        rc = quantize_check(&c, &p, a->npos == 2 ? a->pos[1] : NULL, o, e);
    lora_close(&l);
    plan_free(&p);
    if (opened)
        ckpt_close(&c);
    doctor_input_done(&din);
    return rc;
}

int cmd_quantize(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    recipe_args r;
    recipe_from_cli(&a, &r);
    int json = cli_flag(&a, "--json");
    quant_opts o;
    nvfp4_obs obs;
    if (quant_options(&a, &o, &obs, &e))
        return cmd_report("quantize", &e);
    if (cli_flag(&a, "--dry-run"))
        return dry_run(&a, &r, &o, json, &e) ? cmd_report("quantize", &e) : 0;
    if (a.npos != 2) {
        ff_fail(&e, FF_EUSAGE, "missing OUT_DIR (usage: fp4forge quantize IN_DIR OUT_DIR)");
        return cmd_report("quantize", &e);
    }

    /* The same checks as `fp4forge doctor`, first: a drifted config or a
     * missing processor file fails far from its cause once served. */
    doctor_input din = {.dir = a.pos[0]};
    ckpt c;
    /* Unreadable shards are bad input (one line, exit 1), not a finding. */
    int rc = ckpt_open(&c, a.pos[0], 1, &e);
    ckpt_close(&c);
    if (!rc && !cli_flag(&a, "--no-doctor"))
        rc = doctor_input_prepare(&din, a.pos[0], a.pos[1], cli_flag(&a, "--fix"), cli_get(&a, "--aux-from"),
                                  stderr, &e);
    if (rc) {
        doctor_input_done(&din);
        return cmd_report("quantize", &e);
    }
    plan p = {0};
    quant_stats st;
    lora_adapter l = {0};
    quant_source qs;
    rc = ckpt_open(&c, din.dir, 1, &e);
    if (!rc)
        rc = plan_build(&p, &c, &r.opts, &e);
    if (!rc)
        rc = bind_lora(&a, &l, &c, &p, &qs, &o, &e);
    if (!rc)
        rc = quantize_run(&c, &p, a.pos[1], &o, &st, &e);
    if (!rc)
        rc = write_card(&a, &p, &c, &e);
    if (!rc)
        summary(&p, &st, a.pos[1], json);
    if (!rc && o.source && !json)
        lora_print_summary(&l, stdout);
    lora_close(&l);
    plan_free(&p);
    ckpt_close(&c);
    doctor_input_done(&din);
    return rc ? cmd_report("quantize", &e) : 0;
}
