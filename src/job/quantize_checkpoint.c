/* The quantize job behind one call, as llama.cpp's llama_model_quantize(in,
 * out, &params): doctor's gate, the input opened once, the plan, a LoRA
 * adapter bound as the source, the run (the card written in its staging
 * folder), the summary. The CLI only fills the request and reports. It
 * drives the doctor, LoRA and the executor, so it sits above all three
 * (src/job/, the library's top layer). */
#include "quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "budget.h"
#include "card.h"
#include "doctor_shadow.h"
#include "fsutil.h"
#include "jsonio.h"
#include "lora.h"
#include "nvfp4_mse.h"

void quantize_request_default(quantize_request *r)
{
    memset(r, 0, sizeof *r);
    r->doctor = 1;
    plan_seat_default(&r->seat);
}

/* What needs no input: the observer's name and what it combines with. */
int quantize_request_check(const quantize_request *r, ff_err *e)
{
    nvfp4_obs obs;
    if (r->observer && nvfp4_obs_from_name(r->observer, &obs))
        return ff_fail(e, FF_EUSAGE, "--observer %s: unknown (minmax, mse, expanded-mse; or llm-compressor's "
                       "memoryless_minmax, memoryless_mse, mse, nvfp4_expanded_mse, fouroversix)", r->observer);
    /* llm-compressor would run that observer over the FP8 groups too; their
     * bytes are proven for min/max only */
    if (r->recipe.nfp8 && r->observer && obs.kind != NVFP4_OBS_MINMAX)
        return ff_fail(e, FF_EUSAGE, "--fp8 takes the minmax observer only, not --observer %s", r->observer);
    return FF_OK;
}

/* The run's and the dry run's common state; zeroed, each part closes as a
 * no-op. */
typedef struct job {
    doctor_input din;
    ckpt c;
    plan p;
    lora_adapter l;
    quant_source qs;
    nvfp4_obs obs;
    quant_opts run;
} job;

/* The input opened first: an unreadable shard is bad input (exit 1), not a
 * doctor finding. Doctor's checks next (a drifted config or a missing
 * processor file fails far from its cause once served); with fix, the run
 * reads a shadow copy beside shadow_base, opened in its turn. */
static int open_checked(job *j, const char *in, const char *shadow_base, const quantize_request *r, ff_err *e)
{
    j->din.dir = in;
    int rc = ckpt_open(&j->c, in, 1, e);
    if (rc || !r->doctor)
        return rc;
    rc = doctor_input_prepare(&j->din, in, shadow_base, r->fix, r->aux_from, r->findings ? r->findings : stderr,
                              e);
    if (rc || strcmp(j->din.dir, in) == 0)
        return rc;
    ckpt_close(&j->c);
    return ckpt_open(&j->c, j->din.dir, 1, e);
}

static int job_prepare(job *j, const char *in, const char *out, const quantize_request *r, ff_err *e)
{
    memset(j, 0, sizeof *j);
    j->run = r->run;
    j->run.input_dir = in;
    if (r->observer && nvfp4_obs_from_name(r->observer, &j->obs) == 0)
        j->run.observer = &j->obs;
    /* a dry run without OUT stages --fix's shadow in the temp folder */
    const char *shadow = r->shadow_base ? r->shadow_base : out ? out : P_tmpdir "/fp4forge-dry-run";
    int rc = open_checked(j, in, shadow, r, e);
    if (!rc) {
        rc = plan_build_seat(&j->p, &j->c, &r->recipe, &r->seat, e);
        if (r->dry_run && r->report && (rc == FF_OK || rc == FF_EPLAN))
            plan_show(&j->p, &j->c, r->json, r->report);
    }
    if (!rc && r->lora) {
        rc = lora_open(&j->l, r->lora, e);
        if (!rc)
            rc = lora_bind(&j->l, &j->c, &j->p, r->lora_allow_ignored, e);
        lora_quant_source(&j->l, &j->qs);
        j->run.source = &j->qs;
    }
    return rc;
}

static void job_close(job *j)
{
    lora_close(&j->l);
    plan_free(&j->p);
    ckpt_close(&j->c);
    doctor_input_done(&j->din);
}

static uint64_t peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

static void summary_json(const plan *p, const quant_stats *st, const char *out, FILE *f)
{
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
                          (json_int_t)st->mx_requantized, "requantized_groups", (json_int_t)st->mx_requantized_groups);
    char *text = j ? json_dumps(j, JSON_PRESERVE_ORDER) : NULL;
    fprintf(f, "%s\n", text ? text : "{}");
    free(text);
    json_decref(j);
}

static void summary_text(const plan *p, const quant_stats *st, const char *out, const char *card_note, FILE *f)
{
    double gbps = st->seconds > 0 ? (double)st->bytes_read / 1e9 / st->seconds : 0;
    fprintf(f, "fp4forge quantize: %s\n", out);
    fprintf(f, "  quantized  %lld dense Linears, %lld expert Linears (%s, %d layers)\n",
            (long long)p->q_dense, (long long)p->q_experts, p->arch_class, p->layers);
    if (p->q_fp8)
        fprintf(f, "  fp8        %lld of them FP8 weight-only channel-wise (--fp8), the rest NVFP4A16\n",
                (long long)p->q_fp8);
    if (p->budget)
        fprintf(f, "  budget     %llu bytes: %zu dense units FP8, %zu kept, %llu bytes of weights (all NVFP4A16 %llu)\n",
                (unsigned long long)p->budget->budget, p->budget->nfp8, p->budget->nkeep,
                (unsigned long long)p->budget->chosen, (unsigned long long)p->budget->floor);
    fprintf(f, "  ignored    %zu modules left in their dtype (quantization_config.ignore)\n", p->nignore);
    fprintf(f, "  bytes      %.3f GB in -> %.3f GB out in %zu shard%s\n", (double)st->bytes_read / 1e9,
            (double)st->bytes_written / 1e9, st->shards, st->shards == 1 ? "" : "s");
    fprintf(f, "  time       %.2f s (%.2f GB/s read), %d threads, %s kernel, peak RSS %.0f MB\n",
            st->seconds, gbps, st->threads, st->kernel, (double)peak_rss_bytes() / 1e6);
    if (st->mx_exact + st->mx_requantized)
        fprintf(f, "  mxfp4      %llu weights carried exactly (%llu groups of 16), %llu re-quantized from bf16 "
                "(%llu groups)%s\n", (unsigned long long)st->mx_exact, (unsigned long long)st->mx_exact_groups,
                (unsigned long long)st->mx_requantized, (unsigned long long)st->mx_requantized_groups,
                st->mx_requantized ? ": their exponents span more than E4M3 holds, or --mxfp4-route reference" : "");
    for (int i = 0; i < p->nnotes; i++)
        fprintf(f, "  note: %s\n", p->notes[i]);
    if (*card_note)
        fprintf(f, "  note: %s\n", card_note);
}

/* The writes (the shards and the card, staged together), then the summary. */
static int job_run(job *j, const char *in, const char *out, const quantize_request *r, ff_err *e)
{
    char card_note[400] = "";   /* what the card could not carry of the input's README.md */
    char *base_card = fs_join(in, "README.md");
    card_info ci = {r->base_model ? r->base_model : r->cache_name, base_card, out,
                    j->run.observer ? j->obs.llmc_name : NULL, r->cache_name ? r->cache_name : in, r->hub_id,
                    card_note, sizeof card_note};
    quant_opts o = j->run;
    o.card = &ci;
    quant_stats st;
    int rc = base_card ? quantize_run(&j->c, &j->p, out, &o, &st, e) : ff_oom(e, "out of memory");
    free(base_card);
    if (rc || !r->report)
        return rc;
    if (r->json)
        summary_json(&j->p, &st, out, r->report);
    else
        summary_text(&j->p, &st, out, card_note, r->report);
    if (j->run.source && !r->json)
        lora_print_summary(&j->l, r->report);
    return FF_OK;
}

int quantize_checkpoint(const char *in, const char *out, const quantize_request *r, ff_err *e)
{
    int rc = quantize_request_check(r, e);
    if (rc)
        return rc;
    job j;
    rc = job_prepare(&j, in, out, r, e);
    if (!rc && !r->dry_run && j.p.budget && j.p.budget->holds_source)
        rc = ff_fail(e, FF_EUSAGE, "--budget %llu bytes holds the unquantized weights (%llu bytes): nothing needs "
                     "quantizing; serve %s as it is", (unsigned long long)j.p.budget->budget,
                     (unsigned long long)j.p.bytes_in, in);
    if (!rc)
        rc = r->dry_run ? quantize_check(&j.c, &j.p, out, &j.run, e) : job_run(&j, in, out, r, e);
    job_close(&j);
    return rc;
}
