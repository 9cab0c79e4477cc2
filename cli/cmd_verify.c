/* fp4forge verify: exit 0 when every check passes, 6 when one fails. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cliopt.h"
#include "cmd_common.h"
#include "commands.h"
#include "verify.h"

static const cli_opt options[] = {
    {"--against", "SRC_DIR", "also compare with the bf16 source: coverage, kept bytes, error per tensor"},
    {"--family-file", "FILE", "the family as a description (docs/family-files.md), for an architecture fp4forge has none for"},
    {"--max-rel-error", "X", "per-tensor relative error ceiling (default 0.25)"},
    {"--min-snr", "DB", "per-tensor SNR floor in dB (default 12)"},
    {"--max-mean-rel-error", "X", "mean relative error ceiling (default 0.16)"},
    {"--worst", "N", "list the N worst tensors (default 5)"},
    {"--json", NULL, "print the result as JSON"},
    {"--html", "FILE", "also write one self-contained page: heatmaps of the error by layer, failing checks first"},
    {"--threads", "N", "worker threads (default: all cores; the figures do not depend on it)"},
    {"--quiet", NULL, "no progress bar"},
    {NULL, NULL, NULL},
};

const cli_spec verify_spec = {
    "verify", "OUT_DIR",
    "Checks an NVFP4A16 output: every quantized module decodes without NaN/Inf, fused groups\n"
    "(q/k/v, gate/up, each expert's gate/up) share one global scale, routers, vision,\n"
    "embeddings, norms and lm_head are not quantized, the ignore list equals the Linears left\n"
    "unquantized, tokenizer.json has truncation null, quantization_config is nvfp4 A16.\n"
    "A mixed output (quantize --fp8): FP8 weight-only modules have an F8_E4M3 weight and a\n"
    "positive finite scale per row; each quantized module is in exactly one config group of\n"
    "its format (naive-quantized, nvfp4-pack-quantized); their error is reported apart.\n"
    "With --against SRC_DIR: every source tensor is in the output (quantized or kept) and\n"
    "nothing else, kept tensors are byte-identical, and each quantized tensor's relative error\n"
    "and SNR against the source are within limits. Exit 0 pass, 6 fail, 1 unreadable input.",
    options, 1, 1, NULL,
};

/* Thresholds: any finite number (a relative error, an SNR in dB). */
static int num_opt(const cli_args *a, const char *name, double *v, ff_err *e)
{
    return cli_real(a, name, -1e9, 1e9, v, e);
}

int cmd_verify(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    verify_opts o = {cli_get(&a, "--against"), VERIFY_MAX_REL, VERIFY_MIN_SNR, VERIFY_MAX_MEAN_REL, VERIFY_WORST,
                     0, !cli_flag(&a, "--quiet") && isatty(2), NULL};
    double worst = o.worst;
    if (cli_threads(&a, &o.threads, &e) || num_opt(&a, "--max-rel-error", &o.max_rel, &e) || num_opt(&a, "--min-snr", &o.min_snr, &e) ||
        num_opt(&a, "--max-mean-rel-error", &o.max_mean_rel, &e) || num_opt(&a, "--worst", &worst, &e))
        return cmd_report("verify", &e);
    o.worst = (int)worst;
    ff_family *fam = NULL;
    const char *file = cli_get(&a, "--family-file");
    if (file && ff_family_load(file, &fam, &e))
        return cmd_report("verify", &e);
    o.family = fam;
    json_t *r;
    int rc = verify_run(a.pos[0], &o, &r, &e);
    ff_family_close(fam);
    if (rc)
        return cmd_report("verify", &e);
    const char *html = cli_get(&a, "--html");
    if (html && cmd_write_page(html, verify_write_html, r, &e)) {
        json_decref(r);
        return cmd_report("verify", &e);
    }
    if (cli_flag(&a, "--json")) {
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
    } else {
        verify_print(r, stdout);
    }
    int ok = json_is_true(json_object_get(r, "ok"));
    json_decref(r);
    return ok ? 0 : FF_EVERIFY;
}
