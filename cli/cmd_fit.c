/* fp4forge fit: will this checkpoint serve on this GPU at this context?
 * Reads config.json and the safetensors headers only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "commands.h"
#include "fit.h"

static const cli_opt options[] = {
    {"--gpu-free", "SIZE", "memory free on the GPU for this seat now (e.g. 19.9GiB)"},
    {"--gpu-total", "SIZE", "the GPU's total memory (e.g. 96GiB)"},
    {"--utilization", "U", "--gpu-memory-utilization the seat would get (with --gpu-total)"},
    {"--context", "N", "tokens per sequence, vLLM's --max-model-len (default 262144)"},
    {"--kv-dtype", "T", "bf16 (default) or fp8"},
    {"--max-seqs", "N", "sequences that must each hold the full context at once (default 1)"},
    {"--batched-tokens", "N", "vLLM --max-num-batched-tokens (default 8192); sliding layers hold these too"},
    {"--block-size", "N", "vLLM --block-size in tokens (default 16); KV is allocated in whole blocks"},
    {"--k-eq-v-single", NULL, "the engine stores one tensor on layers whose V is K (vLLM stores K and V)"},
    {"--text-only", NULL, "served with --language-model-only: no vision weights, no encoder reserve"},
    {"--activation-reserve", "SIZE", "replace the activation estimate"},
    {"--encoder-reserve", "SIZE", "replace the encoder-cache estimate"},
    {"--json", NULL, "print the report as JSON"},
    {NULL, NULL, NULL},
};

const cli_spec fit_spec = {
    "fit", "DIR",
    "Reads config.json and the safetensors headers and answers, before anything is started:\n"
    "weight bytes as loaded (for a bf16 input also what its NVFP4A16 output would weigh), KV\n"
    "bytes per token per layer type (full layers x context, sliding layers capped at their\n"
    "window, KV-shared layers counted once), and whether it fits the budget at the context,\n"
    "the largest context that does, and the --gpu-memory-utilization it needs. Activation and\n"
    "encoder-cache reserves are separate estimates (docs/fit.md). Exit 0 when it fits.",
    options, 1, 1, NULL,
};

/* Sizes are bytes up to 1 PB; counts are positive and bounded so that no
 * product in the KV arithmetic overflows 64 bits. */
static int get_size(const cli_args *a, const char *name, double *dst, ff_err *e)
{
    return cli_size(a, name, 0, 1e15, dst, e);
}

static int get_int(const cli_args *a, const char *name, int64_t *dst, ff_err *e)
{
    long long v = *dst;
    int rc = cli_int(a, name, 1, 1ll << 40, &v, e);
    *dst = v;
    return rc;
}

static int opts_from_cli(const cli_args *a, fit_opts *o, ff_err *e)
{
    fit_opts_default(o);
    int64_t seqs = o->max_seqs;
    int rc = get_size(a, "--gpu-free", &o->gpu_free, e);
    if (!rc) rc = get_size(a, "--gpu-total", &o->gpu_total, e);
    if (!rc) rc = get_size(a, "--activation-reserve", &o->act_reserve, e);
    if (!rc) rc = get_size(a, "--encoder-reserve", &o->enc_reserve, e);
    if (!rc) rc = get_int(a, "--context", &o->context, e);
    if (!rc) rc = get_int(a, "--max-seqs", &seqs, e);
    if (!rc && seqs > (1 << 20))
        rc = ff_fail(e, FF_EUSAGE, "--max-seqs: '%lld' is more than %d", (long long)seqs, 1 << 20);
    if (!rc) rc = get_int(a, "--batched-tokens", &o->batched_tokens, e);
    if (!rc) rc = get_int(a, "--block-size", &o->block_size, e);
    if (rc)
        return rc;
    o->max_seqs = (int)seqs;
    if (cli_get(a, "--utilization")) {
        if (cli_real(a, "--utilization", 1e-6, 1, &o->utilization, e))
            return e->code;
        if (o->gpu_total <= 0)
            return ff_fail(e, FF_EUSAGE, "--utilization needs --gpu-total");
    }
    const char *kv = cli_get(a, "--kv-dtype");
    if (kv && strcmp(kv, "bf16") && strcmp(kv, "fp8"))
        return ff_fail(e, FF_EUSAGE, "--kv-dtype: bf16 or fp8, not %s", kv);
    o->kv_dtype_bytes = kv && strcmp(kv, "fp8") == 0 ? 1 : 2;
    o->k_is_v_single = cli_flag(a, "--k-eq-v-single");
    o->text_only = cli_flag(a, "--text-only");
    return FF_OK;
}

/* Exit 0 when the last column (the one that would be served) fits or no
 * budget was given; 1 when it does not fit. */
static int exit_status(const fit_report *r)
{
    if (r->budget <= 0)
        return 0;
    return r->col[r->ncols - 1].fits && !r->admission_refused ? 0 : 1;
}

int cmd_fit(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    fit_opts o;
    if (opts_from_cli(&a, &o, &e))
        return cmd_report("fit", &e);
    ckpt c;
    fit_report *r = calloc(1, sizeof *r);
    int rc = r ? ckpt_open_headers(&c, a.pos[0], 1, &e) : ff_oom(&e, "out of memory");
    if (!rc)
        rc = fit_run(r, &c, &o, &e);
    if (!rc && cli_flag(&a, "--json")) {
        json_t *j = fit_to_json(r);
        char *s = json_dumps(j, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else if (!rc) {
        fit_print(r, a.pos[0], stdout);
    }
    if (r)
        ckpt_close(&c);
    int status = rc ? cmd_report("fit", &e) : exit_status(r);
    free(r);
    return status;
}
