/* Invariants that hold whatever a family's rules say. A description is
 * data a user wrote or a guess fp4forge made, and the mistakes it can hold
 * are the ones that look like success after quantizing: experts left in
 * bf16, a router quantized (served, it gives NaN), one GEMM of vLLM's split
 * over two global scales or two schemes. These read only the config's
 * numbers and the tensor names, never the rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "jsonio.h"
#include "plan_int.h"

/* A member that is its source's whole 2-D tensor (not an expert's slice). */
static int whole_linear(const plan_member *m)
{
    const st_tensor *st = m->src->st;
    return st->ndim == 2 && !m->transposed && m->row0 == 0 && m->rows == (uint64_t)st->shape[0];
}

static void experts_left_out(plan *p, const ckpt *c, int64_t experts, const char *key)
{
    if (experts > 0 && p->expect.expert_linears == 0)
        plan_note(p->violations, &p->nviolations,
                  "%s/config.json gives %lld experts (%s), but the family quantizes no expert Linear: the experts, most "
                  "of a MoE model's bytes, would stay in their dtype", c->dir, (long long)experts, key);
}

/* The last name component before ".weight" of a Linear's tensor. */
static const char *leaf_of(const char *name, size_t *len)
{
    size_t n = strlen(name);
    if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
        n -= 7;
    const char *leaf = name + n;
    while (leaf > name && leaf[-1] != '.')
        leaf--;
    *len = (size_t)(name + n - leaf);
    return leaf;
}

/* A quantized Linear as wide as the expert count whose name is no Linear
 * vLLM's models quantize (q/k/v_proj may be that wide by chance: 8 KV
 * heads of 16 against 128 experts). */
static void router_shaped(plan *p, int64_t experts, const plan_opts *o)
{
    for (size_t i = 0; experts > 0 && !o->allow_router && i < p->nmembers; i++) {
        const plan_member *m = &p->members[i];
        size_t len;
        const char *leaf = leaf_of(m->src->st->name, &len);
        if (whole_linear(m) && m->rows == (uint64_t)experts && !ff_linear_leaf(leaf, len)) {
            plan_note(p->violations, &p->nviolations,
                      "%s is router-shaped (its output width is the config's %lld experts) and would be quantized: a "
                      "quantized router serves NaN", m->src->st->name, (long long)experts);
            return;
        }
    }
}

/* Each quantized whole Linear's unit + 1, by tensor index; 0: not quantized. */
static size_t *units_by_tensor(const plan *p, const ckpt *c)
{
    size_t *u = calloc(c->ntensors ? c->ntensors : 1, sizeof *u);
    for (size_t k = 0; u && k < p->nunits; k++)
        for (size_t m = 0; m < p->units[k].count; m++) {
            const plan_member *pm = &p->members[p->units[k].first + m];
            if (whole_linear(pm) && pm->src >= c->tensors && pm->src < c->tensors + c->ntensors)
                u[pm->src - c->tensors] = k + 1;
        }
    return u;
}

/* A partner of tensor i (".<leaf>.weight") in vLLM's fused GEMM: kept while
 * i is quantized, or quantized under another global scale. */
static int partner_breaks(plan *p, const ckpt *c, const size_t *unit, size_t i)
{
    const char *name = c->tensors[i].st->name;
    size_t len;
    const char *leaf = leaf_of(name, &len);
    if (!fs_ends_with(name, ".weight"))
        return 0;
    const char *group = ff_fused_group(leaf, len), *partner;
    for (size_t k = 0; group && (partner = ff_fused_partner(group, k)); k++) {
        char full[64];
        snprintf(full, sizeof full, "%s.weight", partner);
        const ckpt_tensor *t = ckpt_find_join(c, name, (size_t)(leaf - name), full);
        if (!t || (size_t)(t - c->tensors) == i || t->st->ndim != 2)
            continue;
        size_t pu = unit[t - c->tensors];
        if (pu == unit[i])
            continue;
        plan_note(p->violations, &p->nviolations,
                  pu ? "%s and %s are one GEMM in vLLM (%s) but would get two global scales: the family ties no fuse "
                       "between them"
                     : "%s is quantized but %s, its partner in vLLM's fused %s GEMM, is kept: one GEMM takes one scheme",
                  name, t->st->name, group);
        return 1;
    }
    return 0;
}

static void fused_partners(plan *p, const ckpt *c)
{
    size_t *unit = units_by_tensor(p, c);
    if (!unit) {
        plan_note(p->violations, &p->nviolations, "out of memory checking fused partners");
        return;
    }
    for (size_t i = 0; i < c->ntensors; i++)
        if (unit[i] && partner_breaks(p, c, unit, i))
            break;     /* one line names the mistake; the rest repeat it layer by layer */
    free(unit);
}

void plan_guard(plan *p, const ckpt *c, const plan_opts *o)
{
    const char *key;
    int64_t experts = ff_config_experts(c->config, &key);
    experts_left_out(p, c, experts, key);
    router_shaped(p, experts, o);
    fused_partners(p, c);
}
