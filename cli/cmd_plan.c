/* fp4forge plan: headers and config only; refuses a broken recipe (exit 3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

#include "cmd_common.h"
#include "commands.h"

static const cli_opt options[] = {
    {"--json", NULL, "print the plan as JSON"},
    {"--infer", NULL, "print a family description inferred from the names, shapes and config (for --family-file)"},
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

/* --infer: the description on stdout (so `> FILE` keeps it), and on stderr
 * whether it was derived and the plan it gives. */
static int infer_and_print(const char *dir, const recipe_args *r, ff_err *e)
{
    ckpt c;
    int rc = ckpt_open_headers(&c, dir, 1, e);
    ff_infer inf = {0};
    if (!rc)
        rc = ff_family_infer(&c, &inf, e);
    if (!rc) {
        fputs(inf.text, stdout);
        fflush(stdout);
        fprintf(stderr, inf.derived ? "plan --infer: derived: every tensor placed, every count agrees with config.json\n"
                                    : "plan --infer: NOT derived: %s\n", inf.why);
    }
    ff_family *fam = NULL;
    if (!rc)
        rc = ff_family_parse(inf.text, strlen(inf.text), "the inferred description", &fam, e);
    if (!rc) {
        plan p;
        plan_opts o = r->opts;
        o.family = fam;
        rc = plan_build(&p, &c, &o, e);
        if (rc == FF_OK || rc == FF_EPLAN)
            plan_show(&p, &c, 0, stderr);
        plan_free(&p);
        /* an unfinished description may not plan at all: say why, then that it is unfinished */
        if (rc && !inf.derived) {
            fprintf(stderr, "plan --infer: as it stands: %s\n", e->msg);
            rc = FF_OK;
        }
    }
    /* a description with a guess in it is printed for the user to finish,
     * and refused as it stands */
    if (!rc && !inf.derived)
        rc = ff_fail(e, FF_EPLAN, "%s: the description is NOT derived (%s): check it before --family-file", dir, inf.why);
    ff_family_close(fam);
    ff_infer_free(&inf);
    ckpt_close(&c);
    return rc;
}

int cmd_plan(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    recipe_args r;
    plan_seat seat;
    int threads = 0;
    int rc = recipe_from_cli(&a, &r, &e);
    if (!rc)
        rc = cli_threads(&a, &threads, &e);
    if (!rc)
        rc = seat_from_cli(&a, threads, &seat, &e);
    if (!rc && cli_flag(&a, "--infer") && (r.family || r.opts.infer_family || plan_seat_given(&seat)))
        rc = ff_fail(&e, FF_EUSAGE, "--infer prints a description: it takes no --family-file, --infer-family, --budget or --fit");
    if (!rc)
        rc = cli_flag(&a, "--infer") ? infer_and_print(a.pos[0], &r, &e)
                                     : plan_and_print(a.pos[0], &r, &seat, cli_flag(&a, "--json"), &e);
    recipe_free(&r);
    return rc ? cmd_report("plan", &e) : 0;
}
