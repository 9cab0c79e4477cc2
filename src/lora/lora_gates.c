/* The gates an adapter passes before the pass starts: every pair lands on a
 * base Linear of its shape, on a Linear the recipe quantizes, and no lora_B
 * is all zeros. Each failure names the module; figures go in the summary. */
#include "lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"

static int bind_shape(const lora_adapter *l, lora_module *m, const ckpt *base, ff_err *e)
{
    char name[1100];
    snprintf(name, sizeof name, "%s.weight", m->module);
    m->base = ckpt_find(base, name);
    if (!m->base)
        return ff_fail(e, FF_EIO, "adapter module %s: the base has no tensor %s (adapter for another model?)",
                       m->module, name);
    const st_tensor *w = m->base->st;
    int64_t out = m->b->st->shape[0], in = m->a->st->shape[1];
    /* fan_in_fan_out (GPT-2 Conv1D) stores the weight as [in, out]. */
    int64_t want0 = l->fan_in_fan_out ? in : out, want1 = l->fan_in_fan_out ? out : in;
    if (w->ndim != 2 || w->shape[0] != want0 || w->shape[1] != want1) {
        char got[96];
        return ff_fail(e, FF_EIO, "adapter module %s: base %s has shape %s, the adapter's B @ A is [%lld, %lld]%s",
                       m->module, name, st_shape_str(w->shape, w->ndim, got, sizeof got), (long long)want0,
                       (long long)want1, l->fan_in_fan_out ? " (fan_in_fan_out)" : "");
    }
    if (!ff_dtype_is_quantizable(w->dtype))
        return ff_fail(e, FF_EIO, "adapter module %s: base %s is %s, not a float type", m->module, name,
                       ff_dtype_name(w->dtype));
    return FF_OK;
}

static int in_quant_set(const plan *p, const ckpt_tensor *t)
{
    for (size_t i = 0; i < p->nmembers; i++)
        if (p->members[i].src == t)
            return 1;
    return 0;
}

/* A module outside the quantized set: vision, router, PLE, lm_head, or one
 * --ignore / --only leaves alone. Merging there is rarely what a tune meant. */
static int bind_target(const plan *p, const lora_module *m, int allow, ff_err *e)
{
    if (!p || allow || in_quant_set(p, m->base))
        return FF_OK;
    ff_matcher am;
    ff_err ig = {0};
    const char *family = "unknown";
    if (p->fam && ff_matcher_init(&am, p->fam, NULL, &ig) == FF_OK) {
        const ff_rule *r = ff_match(&am, m->base->st->name);
        family = r ? r->group : "unknown";
        ff_matcher_free(&am);
    }
    return ff_fail(e, FF_EIO,
                   "adapter module %s targets a %s Linear the recipe leaves unquantized (vision tower, router, "
                   "or ignored); pass --lora-allow-ignored to merge it anyway", m->module, family);
}

static void b_stats(const lora_adapter *l, lora_module *m)
{
    const void *b = ckpt_data(&l->ck, m->b);
    uint64_t n = st_numel(m->b->st);
    double ss = 0;
    m->b_nonzero = 0;
    for (uint64_t i = 0; i < n; i++) {
        double v = lora_load(b, m->b->st->dtype, i);
        m->b_nonzero += v != 0.0;
        ss += v * v;
    }
    m->b_norm = sqrt(ss);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* An inert adapter (lora_B all zeros: an untrained init) merges to the base
 * exactly; it must not ship as a tune. */
static int gate_inert(lora_adapter *l, ff_err *e)
{
    double *norms = malloc(l->nmods * sizeof *norms);
    if (!norms)
        return ff_oom(e, "out of memory");
    const lora_module *dead = NULL;
    size_t ndead = 0;
    l->b_live = 0;
    for (size_t i = 0; i < l->nmods; i++) {
        b_stats(l, &l->mods[i]);
        norms[i] = l->mods[i].b_norm;
        if (l->mods[i].b_nonzero)
            l->b_live++;
        else if (ndead++ == 0)
            dead = &l->mods[i];
    }
    qsort(norms, l->nmods, sizeof *norms, cmp_double);
    l->b_median_norm = l->nmods % 2 ? norms[l->nmods / 2]
                                    : (norms[l->nmods / 2 - 1] + norms[l->nmods / 2]) / 2;
    free(norms);
    if (!dead)
        return FF_OK;
    return ff_fail(e, FF_EIO,
                   "inert adapter: lora_B of module %s is all zeros (%zu of %zu lora_B are all zeros; "
                   "%zu/%zu non-zero, median ||B|| = %.3g): merging it ships the base's numbers as a tune",
                   dead->module, ndead, l->nmods, l->b_live, l->nmods, l->b_median_norm);
}

int lora_bind(lora_adapter *l, const ckpt *base, const plan *p, int allow_ignored, ff_err *e)
{
    int rc = FF_OK;
    l->base = base;
    for (size_t i = 0; i < l->nmods && rc == FF_OK; i++)
        rc = bind_shape(l, &l->mods[i], base, e);
    for (size_t i = 0; i < l->nmods && rc == FF_OK; i++)
        rc = bind_target(p, &l->mods[i], allow_ignored, e);
    return rc ? rc : gate_inert(l, e);
}

void lora_print_summary(const lora_adapter *l, FILE *out)
{
    const lora_module *least = NULL;
    for (size_t i = 0; i < l->nmods; i++) {
        const lora_module *m = &l->mods[i];
        double f = m->merged ? (double)m->changed / (double)st_numel(m->base->st) : 1.0;
        if (m->merged && (!least || f < (double)least->changed / (double)st_numel(least->base->st)))
            least = m;
    }
    fprintf(out, "  lora       %zu modules (%zu tensors) from %s: r %lld, alpha %g%s; merged %zu/%zu\n",
            l->nmods, l->ntensors, l->dir, (long long)l->r, l->alpha, l->rslora ? ", rslora" : "",
            l->nmerged, l->nmods);
    fprintf(out, "  lora_B     %zu/%zu non-zero, median ||B|| = %.4g\n", l->b_live, l->nmods, l->b_median_norm);
    if (least)
        fprintf(out, "  changed    %llu of %llu merged elements differ from the base (%.2f%%); least: %s %.2f%%\n",
                (unsigned long long)l->changed_elems, (unsigned long long)l->merged_elems,
                l->merged_elems ? 100.0 * (double)l->changed_elems / (double)l->merged_elems : 0.0,
                least->module, 100.0 * (double)least->changed / (double)st_numel(least->base->st));
}
