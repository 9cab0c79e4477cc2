/* A seat turned into a weight budget. fit says what vLLM would hold beside
 * the weights (KV at the context, activations, the encoder cache), so a
 * budget derived here is the one `fit` checks the output against. It reads
 * fit (src/checks) and plans, so it sits in the top layer. */
#include "seat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_seat_default(plan_seat *s)
{
    s->budget = 0;
    s->fit = 0;
    fit_opts_default(&s->fit_opts);
    s->threads = 0;
}

int plan_seat_given(const plan_seat *s)
{
    return s->budget > 0 || s->fit;
}

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* The bytes left for the weights once fit's other claims are met. Vision
 * weights a --text-only seat never loads still travel in the output, so
 * the plan's budget includes them. */
static int weights_budget(const ckpt *c, const fit_opts *o, uint64_t *out, char *from, size_t len, ff_err *e)
{
    fit_report *r = calloc(1, sizeof *r);
    if (!r)
        return ff_oom(e, "out of memory");
    int rc = fit_run(r, c, o, e);
    if (rc == FF_OK && r->budget <= 0)
        rc = ff_fail(e, FF_EUSAGE, "--fit needs the seat: --gpu-free, or --gpu-total (with --utilization)");
    double claims = (double)(r->kv_bytes + r->act_reserve + r->enc_reserve);
    if (rc == FF_OK && r->budget <= claims)
        rc = ff_fail(e, FF_EPLAN, "--fit: the seat (%.2f GiB, %s) does not hold even the KV cache and reserves "
                     "(%.2f GiB at context %lld): no weights fit", gib(r->budget), r->budget_from, gib(claims),
                     (long long)o->context);
    if (rc == FF_OK) {
        uint64_t vision = o->text_only ? r->col[0].w.vision : 0;
        *out = (uint64_t)(r->budget - claims) + vision;
        snprintf(from, len, "%.3f GiB (%s) - KV %.3f GiB (context %lld x %d seqs, %s) - activations %.3f GiB - "
                 "encoder %.3f GiB%s", gib(r->budget), r->budget_from, gib((double)r->kv_bytes),
                 (long long)o->context, o->max_seqs, o->kv_dtype_bytes == 1 ? "fp8" : "bf16",
                 gib((double)r->act_reserve), gib((double)r->enc_reserve),
                 vision ? " (+ the vision weights --text-only never loads)" : "");
    }
    free(r);
    return rc;
}

int plan_build_seat(plan *p, const ckpt *c, const plan_opts *o, const plan_seat *s, ff_err *e)
{
    if (!plan_seat_given(s))
        return plan_build(p, c, o, e);
    memset(p, 0, sizeof *p);   /* plan_free-able whatever fails first */
    if (s->budget && s->fit)
        return ff_fail(e, FF_EUSAGE, "--budget and --fit both give the budget: pass one");
    uint64_t budget = s->budget;
    char from[400] = "";
    if (s->fit) {
        int rc = weights_budget(c, &s->fit_opts, &budget, from, sizeof from, e);
        if (rc)
            return rc;
    }
    int rc = plan_build_budget(p, c, o, budget, s->threads, e);
    if (p->budget)
        snprintf(p->budget->from, sizeof p->budget->from, "%s", from);
    return rc;
}
