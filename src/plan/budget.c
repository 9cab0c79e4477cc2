/* A weight budget turned into a recipe: the plan's dense units measured
 * (sensitivity.c), upgraded greedily where the error removed per byte added
 * is largest, and the plan rebuilt with that choice, so that everything
 * downstream (the executor, quantization_config, verify) sees an ordinary
 * mixed recipe. */
#include <stdlib.h>
#include <string.h>

#include "budget.h"

/* One upgrade of one unit: from -> to, removing gain for cost bytes. */
typedef struct step {
    size_t unit;
    budget_scheme from, to;
    double gain, ratio;
    uint64_t cost;
} step;

static int cmp_step(const void *a, const void *b)
{
    const step *x = a, *y = b;
    if (x->ratio != y->ratio)
        return x->ratio > y->ratio ? -1 : 1;
    if (x->unit != y->unit)
        return x->unit < y->unit ? -1 : 1;
    return (int)x->from - (int)y->from;
}

static step make_step(size_t i, const budget_unit *u, budget_scheme from, budget_scheme to)
{
    step s = {i, from, to, u->score[from] - u->score[to], 0, u->bytes[to] - u->bytes[from]};
    s.ratio = s.cost ? s.gain / (double)s.cost : 0;
    return s;
}

/* A unit's upgrades, at most two. FP8 first unless going straight to kept
 * removes more per byte (then FP8 alone would never be the better buy). */
static size_t unit_steps(size_t i, const budget_unit *u, step *out)
{
    if (u->bytes[SCHEME_FP8] >= u->bytes[SCHEME_KEEP]) {
        out[0] = make_step(i, u, SCHEME_NVFP4, SCHEME_KEEP);
        return 1;
    }
    step a = make_step(i, u, SCHEME_NVFP4, SCHEME_FP8), b = make_step(i, u, SCHEME_FP8, SCHEME_KEEP);
    if (a.ratio < b.ratio) {
        out[0] = make_step(i, u, SCHEME_NVFP4, SCHEME_KEEP);
        return 1;
    }
    out[0] = a;
    out[1] = b;
    return 2;
}

int budget_choose(plan_budget *b)
{
    step *steps = malloc((b->nunits ? b->nunits : 1) * 2 * sizeof *steps);
    if (!steps)
        return -1;
    size_t n = 0;
    b->ceiling = b->floor;
    for (size_t i = 0; i < b->nunits; i++) {
        b->units[i].scheme = SCHEME_NVFP4;
        b->ceiling += b->units[i].bytes[SCHEME_KEEP] - b->units[i].bytes[SCHEME_NVFP4];
        n += unit_steps(i, &b->units[i], steps + n);
    }
    qsort(steps, n, sizeof *steps, cmp_step);
    b->chosen = b->floor;
    for (size_t k = 0; k < n; k++) {
        budget_unit *u = &b->units[steps[k].unit];
        /* a smaller upgrade further down may still fit where this one did not */
        if (u->scheme != steps[k].from || b->chosen + steps[k].cost > b->budget)
            continue;
        u->scheme = steps[k].to;
        b->chosen += steps[k].cost;
    }
    free(steps);
    b->nfp8 = b->nkeep = 0;
    for (size_t i = 0; i < b->nunits; i++) {
        b->nfp8 += b->units[i].scheme == SCHEME_FP8;
        b->nkeep += b->units[i].scheme == SCHEME_KEEP;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every member's module of the upgraded units, by scheme, sorted for the
 * planner's lookup. */
static int fill_choice(plan_budget *b, const plan *base)
{
    plan_choice *ch = &b->choice;
    ch->fp8 = calloc(base->nmembers + 1, sizeof *ch->fp8);
    ch->keep = calloc(base->nmembers + 1, sizeof *ch->keep);
    if (!ch->fp8 || !ch->keep)
        return -1;
    for (size_t i = 0; i < b->nunits; i++) {
        if (b->units[i].scheme == SCHEME_NVFP4)
            continue;
        const plan_unit *pu = &base->units[b->units[i].unit];
        for (size_t k = 0; k < pu->count; k++) {
            const char *name = base->members[pu->first + k].src->st->name, *dot = strrchr(name, '.');
            char *mod = dot ? strndup(name, (size_t)(dot - name)) : strdup(name);
            if (!mod)
                return -1;
            if (b->units[i].scheme == SCHEME_FP8)
                ch->fp8[ch->nfp8++] = mod;
            else
                ch->keep[ch->nkeep++] = mod;
        }
    }
    qsort(ch->fp8, ch->nfp8, sizeof *ch->fp8, cmp_str);
    qsort(ch->keep, ch->nkeep, sizeof *ch->keep, cmp_str);
    return 0;
}

void plan_budget_free(plan_budget *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nunits; i++)
        free(b->units[i].module);
    for (size_t i = 0; i < b->choice.nfp8; i++)
        free(b->choice.fp8[i]);
    for (size_t i = 0; i < b->choice.nkeep; i++)
        free(b->choice.keep[i]);
    free(b->choice.fp8);
    free(b->choice.keep);
    free(b->units);
    free(b);
}

static int refuse_source(ff_err *e)
{
    return ff_fail(e, FF_EUSAGE, "--budget measures bf16, f16 or f32 weights; this checkpoint is a quantized "
                   "source: quantize it first, or dequantize it and budget the copy");
}

/* Measures and chooses over base; b->units and b->choice filled. */
static int choose_over(plan_budget *b, const plan *base, const ckpt *c, int threads, ff_err *e)
{
    int rc = budget_measure(base, c, threads, &b->units, &b->nunits, e);
    if (rc)
        return rc;
    if (budget_choose(b) || fill_choice(b, base))
        return ff_oom(e, "out of memory choosing the budget's schemes");
    return FF_OK;
}

int plan_build_budget(plan *p, const ckpt *c, const plan_opts *o, uint64_t budget, int threads, ff_err *e)
{
    int rc = plan_build(p, c, o, e);
    if (rc)
        return rc;
    if (p->src_view)
        return refuse_source(e);
    plan_budget *b = calloc(1, sizeof *b);
    if (!b)
        return ff_oom(e, "out of memory choosing the budget's schemes");
    b->budget = budget;
    b->floor = b->ceiling = b->chosen = p->bytes_out;
    p->budget = b;
    if (budget < p->bytes_out)
        return ff_fail(e, FF_EPLAN, "--budget %llu bytes is below the smallest output this recipe makes: %llu bytes "
                       "(every quantized Linear NVFP4A16)", (unsigned long long)budget,
                       (unsigned long long)p->bytes_out);
    /* the unquantized weights fit: there is nothing to choose */
    b->holds_source = budget >= p->bytes_in;
    if (b->holds_source)
        return FF_OK;
    if ((rc = choose_over(b, p, c, threads, e)))
        return rc;
    p->budget = NULL;
    plan_free(p);
    plan_opts with = {0};
    if (o)
        with = *o;
    with.choice = &b->choice;
    rc = plan_build(p, c, &with, e);
    p->budget = b;
    if (rc == FF_OK && p->bytes_out != b->chosen)
        rc = ff_fail(e, FF_EPLAN, "internal: the budget chose %llu bytes but the plan writes %llu",
                     (unsigned long long)b->chosen, (unsigned long long)p->bytes_out);
    return rc;
}

/* module with every all-digit component turned into "*". */
static char *class_of(const char *module)
{
    char *s = strdup(module), *w = s;
    for (const char *r = module; s && *r;) {
        const char *end = strchr(r, '.');
        size_t len = end ? (size_t)(end - r) : strlen(r);
        if (len && strspn(r, "0123456789") == len) {
            *w++ = '*';
        } else {
            memcpy(w, r, len);
            w += len;
        }
        r += len;
        if (*r)
            *w++ = *r++;
    }
    if (s)
        *w = 0;
    return s;
}

static int add_to_class(budget_class **cls, size_t *n, const budget_unit *u)
{
    char *name = class_of(u->module);
    if (!name)
        return -1;
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*cls)[i].name, name) == 0) {
            (*cls)[i].count[u->scheme]++;
            free(name);
            return 0;
        }
    budget_class *grown = realloc(*cls, (*n + 1) * sizeof **cls);
    if (!grown) {
        free(name);
        return -1;
    }
    *cls = grown;
    (*cls)[*n] = (budget_class){.name = name};
    (*cls)[(*n)++].count[u->scheme] = 1;
    return 0;
}

int budget_classes(const plan_budget *b, budget_class **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < b->nunits; i++)
        if (add_to_class(out, n, &b->units[i])) {
            budget_classes_free(*out, *n);
            *out = NULL;
            *n = 0;
            return -1;
        }
    return 0;
}

void budget_classes_free(budget_class *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(c[i].name);
    free(c);
}

static const char *const scheme_names[3] = {"nvfp4a16", "fp8", "kept"};

void plan_budget_print(const plan_budget *b, FILE *out)
{
    fprintf(out, "\nbudget       %llu bytes for the weights\n", (unsigned long long)b->budget);
    if (b->from[0])
        fprintf(out, "  from the seat             %s\n", b->from);
    if (b->holds_source) {
        fprintf(out, "  the unquantized weights fit: nothing needs quantizing; serve the input as it is\n");
        return;
    }
    fprintf(out, "  chosen                    %llu bytes (all NVFP4A16 %llu; every dense unit kept %llu)\n",
            (unsigned long long)b->chosen, (unsigned long long)b->floor, (unsigned long long)b->ceiling);
    fprintf(out, "  dense units               %zu: NVFP4A16 %zu, FP8 weight-only %zu, kept %zu\n", b->nunits,
            b->nunits - b->nfp8 - b->nkeep, b->nfp8, b->nkeep);
    budget_class *cls;
    size_t n;
    if (budget_classes(b, &cls, &n))
        return;
    for (size_t i = 0; i < n; i++)
        fprintf(out, "    %-52s NVFP4A16 %zu, FP8 %zu, kept %zu\n", cls[i].name, cls[i].count[0], cls[i].count[1],
                cls[i].count[2]);
    budget_classes_free(cls, n);
}

static json_t *unit_json(const budget_unit *u)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:{s:I, s:I, s:I}, s:{s:f, s:f}, s:{s:f, s:f}, s:f, s:f}", "module", u->module, "scheme",
                     scheme_names[u->scheme], "members", (json_int_t)u->members, "weights", (json_int_t)u->weights,
                     "bytes", "nvfp4a16", (json_int_t)u->bytes[0], "fp8", (json_int_t)u->bytes[1], "kept",
                     (json_int_t)u->bytes[2], "score", "nvfp4", u->score[0], "fp8", u->score[1], "error", "nvfp4", u->err[0], "fp8", u->err[1],
                     "energy", u->energy, "kurtosis", u->kurtosis);
}

json_t *plan_budget_json(const plan_budget *b)
{
    json_t *units = json_array();
    for (size_t i = 0; units && i < b->nunits; i++)
        json_array_append_new(units, unit_json(&b->units[i]));
    return json_pack("{s:I, s:s, s:I, s:I, s:I, s:b, s:I, s:I, s:o*}", "bytes", (json_int_t)b->budget, "from", b->from, "floor",
                     (json_int_t)b->floor, "ceiling", (json_int_t)b->ceiling, "chosen", (json_int_t)b->chosen,
                     "holds_source", b->holds_source, "fp8_units", (json_int_t)b->nfp8, "kept_units",
                     (json_int_t)b->nkeep, "units", units);
}
