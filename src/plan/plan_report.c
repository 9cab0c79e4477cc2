/* Printing a plan: the human table and the JSON a deploy script reads. */
#include <stdlib.h>
#include <string.h>

#include "jsonio.h"
#include "plan.h"
#include "budget.h"

static double gb(uint64_t b) { return (double)b / 1e9; }

static int64_t sum_quantized(const plan *p)
{
    int64_t n = 0;
    for (int i = 0; i < p->nfam; i++)
        n += p->fam_stats[i].quantized;
    return n;
}

void plan_print(const plan *p, const ckpt *c, FILE *out)
{
    fprintf(out, "checkpoint   %s (%zu tensors in %zu shard%s, %.3f GB)\n", c->dir, c->ntensors, c->nfiles,
            c->nfiles == 1 ? "" : "s", gb(c->total_bytes));
    fprintf(out, "family       %s, %s, %d layers%s\n", p->fam->name, p->arch_class, p->layers,
            p->has_vision ? ", vision tower" : "");
    if (p->experts)
        fprintf(out, "experts      %d per layer\n", p->experts);
    fprintf(out, "\n%-12s %10s %8s %8s %12s %12s\n", "family", "quantized", "kept", "(Linear)", "GB in",
            "GB out");
    for (int i = 0; i < p->nfam; i++) {
        const plan_family_stat *f = &p->fam_stats[i];
        fprintf(out, "%-12s %10lld %8lld %8lld %12.4f %12.4f\n", f->family, (long long)f->quantized,
                (long long)f->kept, (long long)f->kept_linears, gb(f->bytes_in), gb(f->bytes_out));
    }
    fprintf(out, "%-12s %10lld %8s %8zu %12.4f %12.4f\n", "total", (long long)sum_quantized(p), "",
            p->nignore, gb(p->bytes_in), gb(p->bytes_out));
    fprintf(out, "\ninvariants\n");
    fprintf(out, "  dense Linears quantized   %lld (config implies %lld)\n", (long long)p->q_dense,
            (long long)p->expect.dense_linears);
    fprintf(out, "  expert Linears quantized  %lld (config implies %lld)\n", (long long)p->q_experts,
            (long long)p->expect.expert_linears);
    if (p->q_fp8) {   /* --fp8: printed only then, so a plain plan reads as it always has */
        fprintf(out, "  FP8 weight-only (--fp8)   %lld Linears (", (long long)p->q_fp8);
        for (int i = 0, k = 0; i < p->nfam; i++)
            if (p->fam_stats[i].fp8)
                fprintf(out, "%s%s %lld", k++ ? ", " : "", p->fam_stats[i].family, (long long)p->fam_stats[i].fp8);
        fprintf(out, "), channel-wise; the other quantized ones NVFP4A16\n");
    }
    fprintf(out, "  routers ignored           %lld, quantized %lld\n", (long long)p->kept_routers,
            (long long)p->q_routers);
    fprintf(out, "  ignore list               %zu modules\n", p->nignore);
    if (p->budget)
        plan_budget_print(p->budget, out);
    for (int i = 0; i < p->nnotes; i++)
        fprintf(out, "note: %s\n", p->notes[i]);
    for (int i = 0; i < p->nviolations; i++)
        fprintf(out, "VIOLATION: %s\n", p->violations[i]);
    fprintf(out, "%s\n", p->nviolations ? "plan: REFUSED" : "plan: ok");
}

json_t *plan_to_json(const plan *p, const ckpt *c)
{
    json_t *j = json_object(), *fams = json_array(), *ign = json_array(), *notes = json_array(),
           *viol = json_array();
    json_object_set_new(j, "checkpoint", jsonio_string(c->dir));
    json_object_set_new(j, "family", json_string(p->fam->name));
    json_object_set_new(j, "arch_class", json_string(p->arch_class ? p->arch_class : "?"));
    json_object_set_new(j, "layers", json_integer(p->layers));
    json_object_set_new(j, "experts", json_integer(p->experts));
    json_object_set_new(j, "vision", json_boolean(p->has_vision));
    for (int i = 0; i < p->nfam; i++) {
        const plan_family_stat *f = &p->fam_stats[i];
        json_t *o = json_object();
        json_object_set_new(o, "family", json_string(f->family));
        json_object_set_new(o, "quantized", json_integer(f->quantized));
        json_object_set_new(o, "fp8", json_integer(f->fp8));
        json_object_set_new(o, "kept", json_integer(f->kept));
        json_object_set_new(o, "kept_linears", json_integer(f->kept_linears));
        json_object_set_new(o, "bytes_in", json_integer((json_int_t)f->bytes_in));
        json_object_set_new(o, "bytes_out", json_integer((json_int_t)f->bytes_out));
        json_array_append_new(fams, o);
    }
    json_object_set_new(j, "families", fams);
    json_object_set_new(j, "quantized_dense", json_integer(p->q_dense));
    json_object_set_new(j, "expected_dense", json_integer(p->expect.dense_linears));
    json_object_set_new(j, "quantized_experts", json_integer(p->q_experts));
    json_object_set_new(j, "quantized_fp8", json_integer(p->q_fp8));
    json_object_set_new(j, "expected_experts", json_integer(p->expect.expert_linears));
    json_object_set_new(j, "routers_ignored", json_integer(p->kept_routers));
    json_object_set_new(j, "routers_quantized", json_integer(p->q_routers));
    json_object_set_new(j, "bytes_in", json_integer((json_int_t)p->bytes_in));
    json_object_set_new(j, "bytes_out", json_integer((json_int_t)p->bytes_out));
    for (size_t i = 0; i < p->nignore; i++)
        json_array_append_new(ign, jsonio_string(p->ignore[i]));
    json_object_set_new(j, "ignore", ign);
    for (int i = 0; i < p->nnotes; i++)
        json_array_append_new(notes, jsonio_string(p->notes[i]));
    json_object_set_new(j, "notes", notes);
    for (int i = 0; i < p->nviolations; i++)
        json_array_append_new(viol, jsonio_string(p->violations[i]));
    json_object_set_new(j, "violations", viol);
    if (p->budget)
        json_object_set_new(j, "budget", plan_budget_json(p->budget));
    json_object_set_new(j, "ok", json_boolean(p->nviolations == 0));
    return j;
}

void plan_show(const plan *p, const ckpt *c, int json, FILE *out)
{
    if (!p->fam)
        return;   /* refused before there was a plan (a seat with no room for weights) */
    if (!json) {
        plan_print(p, c, out);
        return;
    }
    json_t *j = plan_to_json(p, c);
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    fprintf(out, "%s\n", s ? s : "{}");
    free(s);
    json_decref(j);
}
