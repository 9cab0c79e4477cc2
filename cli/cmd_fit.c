/* fp4forge fit: will this checkpoint serve on this GPU at this context?
 * Reads config.json and the safetensors headers only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_common.h"
#include "commands.h"
#include "fit.h"

static const cli_opt options[] = {
    SEAT_FIT_OPTS,
    {"--batched-tokens", "N", "vLLM --max-num-batched-tokens (default 8192); sliding layers hold these too"},
    {"--block-size", "N", "vLLM --block-size in tokens (default 16); KV is allocated in whole blocks"},
    {"--k-eq-v-single", NULL, "the engine stores one tensor on layers whose V is K (vLLM stores K and V)"},
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
    if (fit_opts_from_cli(&a, &o, &e))
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
