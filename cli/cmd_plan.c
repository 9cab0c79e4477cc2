/* fp4forge plan: headers and config only; refuses a broken recipe (exit 3). */
#include <stdio.h>
#include <stdlib.h>

#include "cmd_common.h"
#include "commands.h"

static const cli_opt options[] = {
    {"--json", NULL, "print the plan as JSON"},
    {"--threads", "N", "with --budget or --fit: threads measuring the weights (default: all cores)"},
    RECIPE_OPTS,
    SEAT_OPTS,
    {NULL, NULL, NULL},
};

const cli_spec plan_spec = {
    "plan", "IN_DIR",
    "Reads only config.json and the safetensors headers and prints what quantize would do:\n"
    "the quantize and ignore sets by family with counts and bytes before/after, and the\n"
    "invariants (experts quantized == layers x experts x 3, dense Linears == what the config\n"
    "implies, no routers/vision/embeddings/norms/lm_head quantized). A violation exits 3.\n"
    "With --budget or --fit it also reads the weights, measures what NVFP4 would cost each\n"
    "dense unit, and prints which go FP8 weight-only or stay bf16 and the predicted size.",
    options, 1, 1, NULL,
};

int plan_and_print(const char *dir, const recipe_args *r, const plan_seat *seat, int json, ff_err *e)
{
    ckpt c;
    plan p;
    /* a plan reads names, dtypes and shapes; a budget reads the weights too */
    int rc = plan_seat_given(seat) ? ckpt_open(&c, dir, 1, e) : ckpt_open_headers(&c, dir, 1, e);
    if (rc) {
        ckpt_close(&c);
        return rc;
    }
    rc = plan_build_seat(&p, &c, &r->opts, seat, e);
    if (rc == FF_OK || rc == FF_EPLAN)
        plan_show(&p, &c, json, stdout);
    plan_free(&p);
    ckpt_close(&c);
    return rc;
}

int cmd_plan(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    recipe_args r;
    recipe_from_cli(&a, &r);
    plan_seat seat;
    int threads = 0;
    int rc = cli_threads(&a, &threads, &e);
    if (!rc)
        rc = seat_from_cli(&a, threads, &seat, &e);
    if (!rc)
        rc = plan_and_print(a.pos[0], &r, &seat, cli_flag(&a, "--json"), &e);
    return rc ? cmd_report("plan", &e) : 0;
}
