#include "plan.h"
#include "plan_int.h"

#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "fp8_block.h"
#include "infer.h"
#include "qsource.h"
#include "jsonio.h"
#include "nvfp4.h"

/* Growable arrays: every push goes through grow() so capacity logic lives once. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    void *n = realloc(*arr, nc * elem);
    if (!n)
        return -1;
    *arr = n;
    *cap = nc;
    return 0;
}
#define PUSH(p, field, val)                                                                  \
    (grow((void **)&(p)->field, &(p)->cap_##field, (p)->n##field + 1, sizeof *(p)->field)    \
         ? -1                                                                                \
         : ((p)->field[(p)->n##field++] = (val), 0))

void plan_note(char **list, int *n, const char *fmt, ...)
{
    if (*n >= PLAN_MAX_NOTES)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* a note lost to memory exhaustion must not lose a violation: the
     * caller still sees nviolations > 0 through the placeholder */
    /* NULL when out of memory: plan_build turns any NULL into an error, so a
     * violation is never lost silently */
    list[(*n)++] = strdup(buf);
}

static int any_null(char *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (!list[i])
            return 1;
    return 0;
}

static plan_family_stat *fam_stat(plan *p, const char *family)
{
    for (int i = 0; i < p->nfam; i++)
        if (strcmp(p->fam_stats[i].family, family) == 0)
            return &p->fam_stats[i];
    if (p->nfam == PLAN_MAX_FAMILIES)
        return &p->fam_stats[PLAN_MAX_FAMILIES - 1];
    p->fam_stats[p->nfam].family = family;
    return &p->fam_stats[p->nfam++];
}

static char *strip_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    if (a >= b && strcmp(s + a - b, suf) == 0)
        return strndup(s, a - b);
    return strdup(s);
}

/* Index of the first of the user's regexes matching s, or -1. */
static int first_match(int n, const regex_t *compiled, const char *s)
{
    for (int i = 0; i < n; i++)
        if (regexec(&compiled[i], s, 0, NULL, 0) == 0)
            return i;
    return -1;
}

/* Per-tensor decision, made before any unit is formed. */
typedef struct decision {
    const ff_rule *rule;
    ff_role role;        /* effective role (a forced --only Linear becomes ROLE_LINEAR) */
    char *module;
    char *fuse_key;        /* "<parent>|<fuse>" or NULL */
    /* the fused unit the tensor belongs to whatever was decided ("<parent>|<fuse>"
     * of any Linear whose rule ties it), to refuse a recipe that splits one */
    char *tie;
    int fp8;               /* quantized FP8 weight-only (--fp8) instead of NVFP4 */
    int drop;              /* no output: an input_scale beside a weight that has no use for it */
} decision;

/* The compiled user regexes decisions read. */
typedef struct recipe_re {
    regex_t *ign, *only, *fp8;
    int nign, nonly, nfp8;
} recipe_re;

/* Compiles the user's regexes; *ok counts the compiled ones, which are the
 * only ones free_all may regfree. */
static int compile_all(const char *const *res, int n, regex_t **out, int *ok, ff_err *e)
{
    *ok = 0;
    *out = calloc((size_t)(n ? n : 1), sizeof **out);
    if (!*out)
        return ff_oom(e, "out of memory");
    for (int i = 0; i < n; i++, (*ok)++) {
        int rc = regcomp(&(*out)[i], res[i], REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[256];   /* REG_ESPACE (out of memory) is not a syntax error: say which */
            regerror(rc, &(*out)[i], why, sizeof why);
            return ff_fail(e, rc == REG_ESPACE ? FF_EIO : FF_EUSAGE, "regular expression %s: %s", res[i], why);
        }
    }
    return FF_OK;
}

static void free_all(regex_t *re, int n)
{
    for (int i = 0; i < n; i++)
        regfree(&re[i]);
    free(re);
}

/* name, or prefix.suffix when suffix is given (a module's name has no
 * length limit: a fixed buffer cut long ones into other names). */
static int add_out(plan *p, const char *name, const char *suffix, ff_dtype dt, int ndim, const int64_t *shape,
                   uint64_t nbytes, size_t *idx)
{
    size_t n = strlen(name) + (suffix ? strlen(suffix) + 2 : 1);
    char *full = malloc(n);
    if (!full)
        return -1;
    snprintf(full, n, suffix ? "%s.%s" : "%s", name, suffix);
    st_out o = {.name = full, .dtype = dt, .ndim = ndim, .nbytes = nbytes};
    memcpy(o.shape, shape, sizeof(int64_t) * (size_t)ndim);
    *idx = p->nouts;
    if (PUSH(p, outs, o) == 0)
        return 0;
    free(full);
    return -1;
}

/* Bytes elems elements of t take as stored: the dtype's size each, or
 * less for a quantized weight read through the BF16 view (1 for FP8, half
 * and a bit for INT4 and MXFP4). */
static uint64_t stored_bytes(const ckpt_tensor *t, uint64_t elems)
{
    uint64_t numel = st_numel(t->st), stored = t->st->end - t->st->begin;
    uint64_t esz = ff_dtype_size(t->st->dtype);
    if (!numel || stored >= numel * esz)
        return elems * esz;
    return (uint64_t)((double)elems * (double)stored / (double)numel);
}

/* FP8 channel-wise: weight F8_E4M3 [rows, cols] and weight_scale [rows, 1]
 * in the weight's dtype, as compressed-tensors saves them (no zero point:
 * symmetric; no input_scale: weight-only). */
static int fp8_outs(plan *p, const char *module, uint64_t rows, uint64_t cols, ff_dtype dt, size_t *weight)
{
    int64_t s[2] = {(int64_t)rows, (int64_t)cols};
    size_t unused;
    if (add_out(p, module, "weight", FF_DT_F8_E4M3, 2, s, rows * cols, weight))
        return -1;
    s[1] = 1;
    return add_out(p, module, "weight_scale", dt, 2, s, rows * ff_dtype_size(dt), &unused);
}

/* Bytes a quantized member is written as. */
static uint64_t member_bytes_out(const plan_member *m)
{
    if (m->fp8)
        return m->rows * m->cols + m->rows * ff_dtype_size(m->src->st->dtype);
    return m->rows * m->cols / 2 + m->rows * m->cols / NVFP4_GROUP + 4;
}

/* The three tensors a quantized module is written as. */
static int member_outs(plan *p, const char *module, uint64_t rows, uint64_t cols, size_t *packed)
{
    int64_t s[2] = {(int64_t)rows, (int64_t)(cols / 2)};
    size_t unused;
    if (add_out(p, module, "weight_packed", FF_DT_U8, 2, s, rows * cols / 2, packed))
        return -1;
    s[1] = (int64_t)(cols / NVFP4_GROUP);
    if (add_out(p, module, "weight_scale", FF_DT_F8_E4M3, 2, s, rows * cols / NVFP4_GROUP, &unused))
        return -1;
    s[0] = 1;
    return add_out(p, module, "weight_global_scale", FF_DT_F32, 1, s, 4, &unused);
}

/* Takes module (malloc'd), freed here when the member cannot be added. */
static int add_member(plan *p, const ckpt_tensor *src, uint64_t row0, uint64_t rows,
                      uint64_t cols, char *module, const char *family, int fp8)
{
    plan_member m = {.src = src, .row0 = row0, .rows = rows, .cols = cols, .module = module,
                     .family = family, .fp8 = fp8};
    if (!module ||
        (fp8 ? fp8_outs(p, module, rows, cols, src->st->dtype, &m.out) : member_outs(p, module, rows, cols, &m.out)) ||
        PUSH(p, members, m)) {
        free(module);
        return -1;
    }
    plan_family_stat *fs = fam_stat(p, family);
    fs->quantized++;
    fs->fp8 += fp8;
    p->q_fp8 += fp8;
    uint64_t in = stored_bytes(src, rows * cols);
    uint64_t out = member_bytes_out(&m);
    fs->bytes_in += in;
    fs->bytes_out += out;
    p->bytes_in += in;
    p->bytes_out += out;
    return 0;
}

/* A fused 3-D expert tensor kept as it is (ignored by the recipe, or an MTP
 * head's) holds E Linears per name vLLM and compressed-tensors know: each
 * goes in ignore by the per-expert name ("<parent>.<e>.gate_proj"), the one
 * vLLM's fused-MoE scheme lookup asks for, not the tensor's own name. */
static int ignore_kept_experts(plan *p, const ckpt_tensor *t, const ff_rule *r)
{
    for (int64_t e = 0; e < t->st->shape[0]; e++)
        for (int k = 0; k < 2 && r->expert_out[k]; k++) {
            char buf[1024];
            ff_expert_module(buf, sizeof buf, t->st->name, e, r->expert_out[k]);
            char *mod = strdup(buf);
            if (!mod || PUSH(p, ignore, mod)) {
                free(mod);
                return -1;
            }
        }
    return 0;
}

static int add_keep(plan *p, const ckpt_tensor *t, const char *family, const decision *d)
{
    plan_item it = {.kind = ITEM_KEEP, .src = t};
    /* a kept stored weight of a quantized source is written decoded, as bf16 */
    uint64_t nb = plan_source_weight(p, t) ? st_numel(t->st) * 2 : t->st->end - t->st->begin;
    if (add_out(p, t->st->name, NULL, t->st->dtype, t->st->ndim, t->st->shape, nb, &it.out))
        return -1;
    plan_family_stat *fs = fam_stat(p, family);
    fs->kept++;
    fs->bytes_in += t->st->end - t->st->begin;   /* nb but for a decoded FP8 weight */
    fs->bytes_out += nb;
    p->bytes_in += t->st->end - t->st->begin;
    p->bytes_out += nb;
    if (d->rule && d->rule->linear && d->rule->expert_out[0] && t->st->ndim == 3) {
        fs->kept_linears++;
        if (ignore_kept_experts(p, t, d->rule))
            return -1;
    } else if (d->rule && d->rule->linear) {
        fs->kept_linears++;
        char *mod = strip_suffix(t->st->name, ".weight");
        if (!mod)
            return -1;
        if (d->rule->ignore_parent) {
            char *dot = strrchr(mod, '.');
            char *parent = dot ? strndup(mod, (size_t)(dot - mod)) : NULL;
            if (dot && (!parent || PUSH(p, ignore, parent))) {
                free(parent);
                free(mod);
                return -1;
            }
        }
        if (PUSH(p, ignore, mod)) {
            free(mod);
            return -1;
        }
    }
    if (d->rule && d->rule->guard == GUARD_ROUTER && d->rule->linear)
        p->kept_routers++;
    return PUSH(p, items, it);
}

static int role_transposed(ff_role r)
{
    return r == ROLE_EXPERTS_FUSED2_T || r == ROLE_EXPERTS_ONE_T || r == ROLE_EXPERTS_FUSED2I_T;
}
static int role_fused2(ff_role r)
{
    return r == ROLE_EXPERTS_FUSED2 || r == ROLE_EXPERTS_FUSED2_T || r == ROLE_EXPERTS_FUSED2I_T;
}

/* Quantizable shape: 2-D (or 3-D experts), in multiple of 16, float dtype.
 * The input dimension is the last one, or the middle one when transposed. */
static const char *unquantizable(const ckpt_tensor *t, ff_role role)
{
    const st_tensor *s = t->st;
    if (!ff_dtype_is_quantizable(s->dtype))
        return "dtype is not BF16, F16 or F32";
    int want = role == ROLE_LINEAR ? 2 : 3;
    if (s->ndim != want)
        return want == 2 ? "not a 2-D Linear weight" : "not a 3-D fused expert tensor";
    if (s->shape[role_transposed(role) ? 1 : s->ndim - 1] % NVFP4_GROUP != 0)
        return "input dimension is not a multiple of 16";
    if (role_fused2(role) && s->shape[role_transposed(role) ? 2 : 1] % 2 != 0)
        return "fused gate/up dimension is odd";
    return NULL;
}

/* "<parent>|<tie>" of module, malloc'd; NULL when out of memory. */
static char *tie_key(const char *module, const char *tie)
{
    const char *dot = strrchr(module, '.');
    size_t plen = dot ? (size_t)(dot - module) : 0;
    size_t n = plen + strlen(tie) + 2;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%.*s|%s", (int)plen, module, tie);
    return k;
}

static int cmp_name(const void *key, const void *elem)
{
    return strcmp(key, *(char *const *)elem);
}

/* Whether module is in a budget's sorted list. */
static int chosen(char *const *list, size_t n, const char *module)
{
    return n && bsearch(module, list, n, sizeof *list, cmp_name) != NULL;
}

/* --fp8 on a Linear the recipe quantizes: FP8 weight-only instead of NVFP4.
 * Experts are refused: vLLM 0.32's compressed-tensors fused MoE has no
 * weight-only FP8 scheme (a channel group without input activations is
 * taken for WNA16 and refused, compressed_tensors_moe.py), so an FP8
 * expert could not be served. */
static int decide_fp8(const plan_opts *o, const recipe_re *rr, decision *x, ff_err *e)
{
    int k = x->role != ROLE_KEEP ? first_match(rr->nfp8, rr->fp8, x->module) : -1;
    if (k < 0 && x->role == ROLE_LINEAR && o->choice && chosen(o->choice->fp8, o->choice->nfp8, x->module))
        x->fp8 = 1;   /* the budget picks dense Linears only */
    if (k < 0)
        return FF_OK;
    if (x->role != ROLE_LINEAR || x->rule->expert)
        return ff_fail(e, FF_EUSAGE, "--fp8 %s matches the MoE expert Linear %s: vLLM serves compressed-tensors "
                       "experts as NVFP4 or unquantized only (no FP8 weight-only MoE scheme); keep experts out of "
                       "--fp8", o->fp8_re[k], x->module);
    x->fp8 = 1;
    return FF_OK;
}

static int decide_one(plan *p, const ckpt *c, const ff_matcher *am, const plan_opts *o, const recipe_re *rr,
                      const ckpt_tensor *t, decision *x, ff_err *e)
{
    const char *name = t->st->name;
    x->rule = ff_match(am, name);
    x->role = x->rule ? x->rule->role : ROLE_KEEP;
    x->module = x->role == ROLE_LINEAR || (x->rule && x->rule->linear && x->role == ROLE_KEEP)
                    ? strip_suffix(name, ".weight")
                    : strdup(name);
    if (!x->module)
        return ff_oom(e, "out of memory while planning");
    int candidate = x->rule && (x->role != ROLE_KEEP || x->rule->linear);
    int q = x->role != ROLE_KEEP;
    if (o->nonly)
        q = candidate && first_match(rr->nonly, rr->only, x->module) >= 0;
    if (q && o->nignore && first_match(rr->nign, rr->ign, x->module) >= 0)
        q = 0;
    if (q && o->choice && chosen(o->choice->keep, o->choice->nkeep, x->module)) {
        q = 0;
        p->budget_kept++;
    }
    if (x->rule && x->rule->fuse && x->rule->linear && !(x->tie = tie_key(x->module, x->rule->fuse)))
        return ff_oom(e, "out of memory while planning");
    if (!x->rule) {
        p->unknown++;
        plan_note(p->notes, &p->nnotes, "%s: not a tensor the %s rules know; kept as is", name, p->fam->name);
    }
    if (q && x->role == ROLE_KEEP) {
        /* the user's --only reaches a Linear the rules keep */
        if (x->rule->guard == GUARD_FIXED)
            plan_note(p->violations, &p->nviolations,
                 "%s: the recipe quantizes a %s Linear, which vLLM loads unquantized", x->module, x->rule->group);
        else if (x->rule->guard == GUARD_ROUTER && !o->allow_router)
            plan_note(p->violations, &p->nviolations,
                 "%s: the recipe quantizes a router; a quantized router serves NaN (pass --allow-router-quantization to insist)",
                 x->module);
        else if (x->rule->guard == GUARD_ROUTER)
            plan_note(p->notes, &p->nnotes, "WARNING %s: router quantized on request; expect NaN or degraded routing", x->module);
        x->role = ROLE_LINEAR;
    }
    if (!q)
        x->role = ROLE_KEEP;
    const char *why = q ? unquantizable(t, x->role) : NULL;
    if (why) {
        if (x->role != ROLE_LINEAR || !ff_dtype_is_quantizable(t->st->dtype))
            return ff_fail(e, FF_EIO, "%s: tensor %s: %s", ckpt_path(c, t), name, why);
        plan_note(p->notes, &p->nnotes, "%s: %s; kept unquantized and listed in ignore", name, why);
        x->role = ROLE_KEEP;
    }
    if (x->role == ROLE_LINEAR && x->rule->fuse && !(x->fuse_key = strdup(x->tie)))
        return ff_oom(e, "out of memory while planning");
    return decide_fp8(o, rr, x, e);
}

/* "<mod>.weight" when name is "<mod>.input_scale" and that weight exists. */
static const ckpt_tensor *input_scale_weight(const ckpt *c, const char *name)
{
    static const char suf[] = ".input_scale";
    size_t n = strlen(name), k = sizeof suf - 1;
    char buf[1100];
    if (n <= k || strcmp(name + n - k, suf) != 0 || n - k + sizeof ".weight" > sizeof buf)
        return NULL;
    snprintf(buf, sizeof buf, "%.*s.weight", (int)(n - k), name);
    return ckpt_find(c, buf);
}

/* An input_scale is a static FP8 source's activation scale. Its Linear comes
 * out NVFP4A16 (16-bit activations) or, kept, decoded to bf16: either way no
 * reader wants it, and vLLM's loaders fail on a parameter the layer lacks
 * (its NVFP4A16 scheme registers weight_packed, weight_scale and
 * weight_global_scale only). llm-compressor's output, made from the bf16
 * copy transformers decodes, has none; so it is dropped, with a note, rather
 * than the source refused: the weights are all there. Decided after its
 * weight, which may come later in the file. */
static int decide_input_scales(plan *p, const ckpt *c, const ff_matcher *am, const plan_opts *o,
                               const recipe_re *rr, decision *d, ff_err *e)
{
    int64_t dropped = 0;
    for (size_t i = 0; i < c->ntensors; i++) {
        const ckpt_tensor *w = input_scale_weight(c, c->tensors[i].st->name);
        if (!w)
            continue;
        d[i].drop = d[w - c->tensors].role != ROLE_KEEP || plan_source_weight(p, w);
        dropped += d[i].drop;
        int rc = d[i].drop ? FF_OK : decide_one(p, c, am, o, rr, &c->tensors[i], &d[i], e);
        if (rc)
            return rc;
    }
    if (dropped)
        plan_note(p->notes, &p->nnotes, "%lld input_scale tensors dropped: static FP8 activation scales of the source; "
                                   "NVFP4A16 reads 16-bit activations", (long long)dropped);
    return FF_OK;
}

static const char *scheme_name(const decision *x)
{
    return x->role == ROLE_KEEP ? "kept" : x->fp8 ? "FP8" : "NVFP4";
}

static int cmp_tie(const void *a, const void *b, void *decisions)
{
    const decision *d = decisions;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(d[x].tie, d[y].tie);
    return c ? c : (x > y) - (x < y);
}

/* The members of fused unit run[0..n) (a q/k/v, a gate/up, MLA's q_a +
 * kv_a, as the family's rules tie them) with their schemes, one line. */
static int split_fail(const decision *d, const size_t *run, size_t n, ff_err *e)
{
    char list[700] = "";
    size_t len = 0;
    for (size_t k = 0; k < n && len < sizeof list; k++) {
        const char *dot = strrchr(d[run[k]].module, '.');
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %s", k ? ", " : "", dot ? dot + 1 : d[run[k]].module,
                                scheme_name(&d[run[k]]));
    }
    const char *bar = strchr(d[run[0]].tie, '|');
    return ff_fail(e, FF_EUSAGE, "--fp8/--ignore/--only split the fused unit %.*s (%s): %s; vLLM runs it as one "
                   "layer with one scheme: match all its members or none", (int)(bar - d[run[0]].tie), d[run[0]].tie,
                   bar + 1, list);
}

/* Every fused unit gets one scheme: vLLM fuses its members into one layer
 * (QKVParallelLinear, MergedColumnParallelLinear) and reads one scheme for
 * it, refusing a half-ignored one at load and serving a half-FP8 one with
 * the wrong weights. Refused before any work. */
static int check_ties(const decision *d, size_t n, ff_err *e)
{
    size_t *idx = malloc((n ? n : 1) * sizeof *idx), k = 0;
    if (!idx)
        return ff_oom(e, "out of memory while planning");
    for (size_t i = 0; i < n; i++)
        if (d[i].tie && !d[i].drop)
            idx[k++] = i;
    qsort_r(idx, k, sizeof *idx, cmp_tie, (void *)d);
    int rc = FF_OK;
    for (size_t a = 0, b; a < k && rc == FF_OK; a = b) {
        int mixed = 0;
        for (b = a + 1; b < k && strcmp(d[idx[a]].tie, d[idx[b]].tie) == 0; b++)
            mixed |= strcmp(scheme_name(&d[idx[a]]), scheme_name(&d[idx[b]])) != 0;
        if (mixed)
            rc = split_fail(d, idx + a, b - a, e);
    }
    free(idx);
    return rc;
}

static int decide(plan *p, const ckpt *c, const ff_matcher *am, const plan_opts *o,
                  const recipe_re *rr, decision *d, ff_err *e)
{
    for (size_t i = 0; i < c->ntensors; i++) {
        const char *name = c->tensors[i].st->name;
        if (input_scale_weight(c, name))
            continue;
        int rc = decide_one(p, c, am, o, rr, &c->tensors[i], &d[i], e);
        if (rc)
            return rc;
    }
    int rc = decide_input_scales(p, c, am, o, rr, d, e);
    return rc ? rc : check_ties(d, c->ntensors, e);
}

/* decide() under the user's regexes, compiled for it and freed after. */
static int decide_recipe(plan *p, const ckpt *c, const ff_matcher *am, const plan_opts *o, decision *d, ff_err *e)
{
    recipe_re rr = {0};
    int rc = compile_all(o->ignore_re, o->nignore, &rr.ign, &rr.nign, e);
    if (!rc)
        rc = compile_all(o->only_re, o->nonly, &rr.only, &rr.nonly, e);
    if (!rc)
        rc = compile_all(o->fp8_re, o->nfp8, &rr.fp8, &rr.nfp8, e);
    if (!rc)
        rc = decide(p, c, am, o, &rr, d, e);
    free_all(rr.ign, rr.nign);
    free_all(rr.only, rr.nonly);
    free_all(rr.fp8, rr.nfp8);
    return rc;
}

static int check_expert_shape(plan *p, const ckpt *c, const ckpt_tensor *t, ff_role role)
{
    const int64_t *s = t->st->shape;
    const ff_expect *x = &p->expect;
    /* [E, out, in] as stored, or [E, in, out] transposed */
    int64_t out = role_fused2(role) ? 2 * x->expert_inter : x->hidden;
    int64_t in = role_fused2(role) ? x->hidden : x->expert_inter;
    int64_t want1 = role_transposed(role) ? in : out, want2 = role_transposed(role) ? out : in;
    if (s[0] != x->experts || s[1] != want1 || s[2] != want2) {
        char got[96];
        plan_note(p->violations, &p->nviolations, "%s: tensor %s has shape %s, config implies [%lld, %lld, %lld]",
             ckpt_path(c, t), t->st->name, st_shape_str(s, 3, got, sizeof got), (long long)x->experts,
             (long long)want1, (long long)want2);
        return 1;
    }
    return 0;
}

/* One expert's Linear k (0 gate or the only one, 1 up) as a member. */
static int add_expert_member(plan *p, const ckpt_tensor *t, const decision *d, uint64_t ex, size_t k)
{
    const int64_t *s = t->st->shape;
    int fused2 = role_fused2(d->role);
    uint64_t R = (uint64_t)s[1], C = (uint64_t)s[2];
    char mod[1024];
    ff_expert_module(mod, sizeof mod, t->st->name, (int64_t)ex, d->rule->expert_out[k]);
    if (!role_transposed(d->role)) {
        uint64_t rows = fused2 ? R / 2 : R;
        return add_member(p, t, ex * R + k * rows, rows, C, strdup(mod), d->rule->group, 0);
    }
    /* [E, in, out]: the Linear is columns [col0, col0 + rows) of expert ex's [in, out] block,
     * or every other column from col0 when gate and up interleave */
    uint64_t rows = fused2 ? C / 2 : C;
    if (add_member(p, t, ex * R, rows, R, strdup(mod), d->rule->group, 0))
        return -1;
    plan_member *m = &p->members[p->nmembers - 1];
    int interleaved = d->role == ROLE_EXPERTS_FUSED2I_T;
    m->transposed = 1;
    m->col0 = interleaved ? k : k * rows;
    m->col_step = interleaved ? 2 : 1;
    m->stride = C;
    return 0;
}

static int emit_experts(plan *p, const ckpt *c, const ckpt_tensor *t, const decision *d)
{
    if (p->expect.experts && check_expert_shape(p, c, t, d->role))
        return 0;
    uint64_t E = (uint64_t)t->st->shape[0];
    for (uint64_t ex = 0; ex < E; ex++) {
        plan_unit u = {.first = p->nmembers, .count = role_fused2(d->role) ? 2 : 1};
        for (size_t k = 0; k < u.count; k++) {
            if (add_expert_member(p, t, d, ex, k))
                return -1;
            p->q_experts++;
        }
        plan_item it = {.kind = ITEM_QUANT, .unit = p->nunits};
        if (PUSH(p, units, u) || PUSH(p, items, it))
            return -1;
    }
    return 0;
}

/* Does the checkpoint hold "<module>.weight"? */
static int has_module_tensor(const ckpt *c, const char *module)
{
    char name[512];
    snprintf(name, sizeof name, "%s.weight", module);
    return ckpt_find(c, name) != NULL;
}

/* A family may name an implicit module in each layout it reads (Llama-4's
 * language_model.lm_head and the text-only lm_head): one applies only when
 * its parent holds tensors in this checkpoint and no module of that name is
 * in the ignore list already. */
static int implicit_applies(const plan *p, const ckpt *c, const char *module)
{
    const char *dot = strrchr(module, '.'), *last = dot ? dot + 1 : module;
    size_t plen = dot ? (size_t)(dot - module) + 1 : 0, llen = strlen(last);
    int parent = plen == 0;
    for (size_t i = 0; !parent && i < c->ntensors; i++)
        parent = strncmp(c->tensors[i].st->name, module, plen) == 0;
    for (size_t i = 0; parent && i < p->nignore; i++) {
        size_t n = strlen(p->ignore[i]);
        if (n >= llen && strcmp(p->ignore[i] + n - llen, last) == 0 && (n == llen || p->ignore[i][n - llen - 1] == '.'))
            return 0;
    }
    return parent;
}

/* The quantized module's output name: the source's, or with its last
 * component replaced by the rule's out_name. malloc'd; NULL if out of memory. */
static char *output_module(const decision *d)
{
    const char *dot = strrchr(d->module, '.');
    if (!d->rule->out_name || !dot)
        return strdup(d->module);
    size_t plen = (size_t)(dot - d->module), n = plen + strlen(d->rule->out_name) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%.*s.%s", (int)plen, d->module, d->rule->out_name);
    return s;
}

/* Links the members of each fused group in file order (next[i], SIZE_MAX
 * at the end) by sorting on the tie key once: scanning the rest of the
 * checkpoint for each group was quadratic, a second on the 36,096 expert
 * Linears of a Qwen3-235B. */
static int cmp_fuse(const void *a, const void *b, void *decisions)
{
    const decision *d = decisions;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(d[x].fuse_key, d[y].fuse_key);
    return c ? c : (x > y) - (x < y);
}

static size_t *link_groups(const decision *d, size_t n)
{
    size_t *next = malloc((n ? n : 1) * sizeof *next), *idx = malloc((n ? n : 1) * sizeof *idx), k = 0;
    if (!next || !idx) {
        free(next), free(idx);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        next[i] = SIZE_MAX;
        if (d[i].fuse_key)
            idx[k++] = i;
    }
    qsort_r(idx, k, sizeof *idx, cmp_fuse, (void *)d);
    for (size_t i = 0; i + 1 < k; i++)
        if (strcmp(d[idx[i]].fuse_key, d[idx[i + 1]].fuse_key) == 0)
            next[idx[i]] = idx[i + 1];
    free(idx);
    return next;
}

static int emit(plan *p, const ckpt *c, decision *d, ff_err *e)
{
    char *done = calloc(c->ntensors ? c->ntensors : 1, 1);
    size_t *next = link_groups(d, c->ntensors);
    int rc = done && next ? 0 : -1;
    for (size_t i = 0; i < c->ntensors && rc == 0; i++) {
        const ckpt_tensor *t = &c->tensors[i];
        if (done[i] || d[i].drop)
            continue;
        decision *x = &d[i];
        const char *family = x->rule ? x->rule->group : "other";
        if (x->role == ROLE_KEEP) {
            rc = add_keep(p, t, family, x);
        } else if (x->role != ROLE_LINEAR) {
            rc = emit_experts(p, c, t, x);
        } else {
            plan_unit u = {.first = p->nmembers, .fp8 = x->fp8, .dense = 1};
            for (size_t j = i; j != SIZE_MAX && rc == 0; j = next[j]) {
                const ckpt_tensor *m = &c->tensors[j];
                if (m->st->dtype != t->st->dtype || m->st->shape[1] != t->st->shape[1]) {
                    rc = ff_fail(e, FF_EIO, "%s: tensor %s: fused with %s but dtype or input width differ",
                                 ckpt_path(c, m), m->st->name, t->st->name);
                    break;
                }
                rc = add_member(p, m, 0, (uint64_t)m->st->shape[0], (uint64_t)m->st->shape[1],
                                output_module(&d[j]), d[j].rule->group, d[j].fp8);
                if (d[j].rule->guard == GUARD_ROUTER)
                    p->q_routers++;
                else if (d[j].rule->role == ROLE_LINEAR && d[j].rule->expert)
                    p->q_experts++;
                else if (d[j].rule->role == ROLE_LINEAR)
                    p->q_dense++;
                u.dense &= d[j].rule->guard != GUARD_ROUTER && d[j].rule->role == ROLE_LINEAR && !d[j].rule->expert;
                done[j] = 1;
                u.count++;
            }
            plan_item it = {.kind = ITEM_QUANT, .unit = p->nunits};
            if (rc == 0 && (PUSH(p, units, u) || PUSH(p, items, it)))
                rc = -1;
        }
    }
    free(done);
    free(next);
    if (rc < 0)
        return ff_oom(e, "out of memory while planning");
    return rc;
}

static void check_invariants(plan *p, const plan_opts *o)
{
    const ff_expect *x = &p->expect;
    int partial = o->allow_partial;
    /* a budget's kept Linears are chosen, not lost: they still count */
    int64_t dense = p->q_dense + p->budget_kept;
    if (dense != x->dense_linears && !(partial && dense < x->dense_linears))
        plan_note(p->violations, &p->nviolations,
             "dense Linears quantized: %lld, but the config implies %lld (%s)",
             (long long)dense, (long long)x->dense_linears, p->fam->dense_rule);
    if (p->q_experts != x->expert_linears && !(partial && p->q_experts < x->expert_linears))
        plan_note(p->violations, &p->nviolations,
             "expert Linears quantized: %lld, but the config implies %lld (%lld layers x %lld experts x 3)",
             (long long)p->q_experts, (long long)x->expert_linears, (long long)x->moe_layers, (long long)x->experts);
    if (p->q_routers && !o->allow_router)
        plan_note(p->violations, &p->nviolations, "%lld routers in the quantize set", (long long)p->q_routers);
    if (x->routers && p->kept_routers + p->q_routers != x->routers)
        plan_note(p->violations, &p->nviolations, "routers found: %lld, but the config implies %lld",
             (long long)(p->kept_routers + p->q_routers), (long long)x->routers);
}

/* A weight_scale_inv belongs to an F8_E4M3 weight. Beside any other the
 * source is inconsistent (half converted?): whether the weight is already
 * scaled is unknown, and quantizing it would carry the scale into the output
 * beside weight_packed. */
static int check_scale_inv(const ckpt *c, ff_err *e)
{
    static const char suf[] = "." FP8B_SCALE_SUFFIX;
    const size_t k = sizeof suf - 1;
    char buf[1100];
    for (size_t i = 0; i < c->ntensors; i++) {
        const ckpt_tensor *t = &c->tensors[i];
        size_t n = strlen(t->st->name);
        if (n <= k || strcmp(t->st->name + n - k, suf) != 0 || n - k + sizeof ".weight" > sizeof buf)
            continue;
        snprintf(buf, sizeof buf, "%.*s.weight", (int)(n - k), t->st->name);
        const ckpt_tensor *w = ckpt_find(c, buf);
        if (w && w->st->dtype != FF_DT_F8_E4M3)
            return ff_fail(e, FF_EIO, "%s: tensor %s: an FP8-block scale beside %s, which is %s, not F8_E4M3: the source "
                                      "is inconsistent (is that weight already scaled?)", ckpt_path(c, t), t->st->name,
                           w->st->name, ff_dtype_name(w->st->dtype));
    }
    return FF_OK;
}

/* The BF16 view of a quantized source (src/io/qsource.h). */
static int source_view_build(plan *p, const ckpt *c, const qs_format *f, ff_err *e)
{
    p->src_view = calloc(1, sizeof *p->src_view);
    if (!p->src_view)
        return ff_oom(e, "out of memory while planning");
    int rc = qs_view_build(p->src_view, c, f, e);
    p->src_weights = p->src_view->nweights;
    return rc;
}

const qs_weight *plan_source_weight(const plan *p, const ckpt_tensor *t)
{
    return qs_weight_of(p->src_view, t);
}

/* The config's quantization_config: none, a source the view decodes, or a
 * refusal that names what fp4forge does not decode; with none, a layout the
 * view splits. */
static int source_format(const ckpt *c, qs_format *f, ff_err *e)
{
    char why[400];
    int q = qs_config(c->config, f, why, sizeof why);
    if (q == 0)
        qs_layout(c, f);   /* unquantized, but maybe stored fused (gpt-oss bf16) */
    if (q >= 0)
        return FF_OK;
    const char *method = jsonio_str(qs_config_object(c->config), "quant_method", "?");
    if (strcmp(method, "fp8") == 0)
        return ff_fail(e, FF_EIO, "%s/config.json: an FP8 quantization_config fp4forge does not decode: %s", c->dir, why);
    return ff_fail(e, FF_EIO, "%s/config.json: a %s quantization_config fp4forge does not decode: %s", c->dir, method,
                   why);
}

/* --infer-family: the description inferred from the checkpoint, taken only
 * when nothing in it had to be guessed. */
static int infer_family(plan *p, const ckpt *c, ff_err *e)
{
    ff_infer r;
    int rc = ff_family_infer(c, &r, e);
    if (rc)
        return rc;
    if (!r.derived)
        rc = ff_fail(e, FF_EPLAN, "--infer-family: %s/config.json: model_type '%s': the description cannot be derived "
                     "(%s); `fp4forge plan %s --infer > FILE` writes what it can, check it, then pass --family-file FILE",
                     c->dir, jsonio_str(c->config, "model_type", "?"), r.why, c->dir);
    else
        rc = ff_family_parse(r.text, strlen(r.text), "the inferred description", &p->fam_own, e);
    ff_infer_free(&r);
    if (rc)
        return rc;
    p->fam = p->fam_own;
    plan_note(p->notes, &p->nnotes, "the family was inferred from the tensor names and config.json (plan --infer prints it)");
    return FF_OK;
}

/* The family that plans c: --family-file's, the one the config names, or
 * with --infer-family an inferred one. */
static int plan_family(plan *p, const ckpt *c, const plan_opts *o, ff_err *e)
{
    const ff_family *fam = o->family ? o->family : ff_family_detect(c->config);
    /* a description written for another architecture must not plan this one */
    if (o->family && !ff_family_claims(o->family, c->config))
        return ff_fail(e, FF_EIO, "%s/config.json: model_type '%s' is not one the family %s claims (%s)", c->dir,
                       jsonio_str(c->config, "model_type", "?"), o->family->name, o->family->model_types);
    if (fam)
        return ff_family_open(fam, &p->fam, &p->fam_own, e);
    if (o->infer_family)
        return infer_family(p, c, e);
    char known[512];
    ff_family_list(known, sizeof known);
    return ff_fail(e, FF_EIO, "%s/config.json: model_type '%s' is not a family fp4forge knows (%s); "
                   "`fp4forge plan %s --infer` proposes a description for --family-file",
                   c->dir, jsonio_str(c->config, "model_type", "?"), known, c->dir);
}

int plan_build(plan *p, const ckpt *c, const plan_opts *o, ff_err *e)
{
    memset(p, 0, sizeof *p);
    static const plan_opts none;
    if (!o)
        o = &none;
    if (!c->config)
        return ff_fail(e, FF_EIO, "%s: missing config.json", c->dir);
    int rc = plan_family(p, c, o, e);
    if (rc)
        return rc;
    qs_format qf;
    if ((rc = source_format(c, &qf, e)))
        return rc;
    if ((rc = ff_family_expect(p->fam, c->config, &p->expect, e)))
        return ff_wrap(e, "%s/", c->dir);
    if ((rc = check_scale_inv(c, e)))
        return rc;
    if (qf.kind) {
        if ((rc = source_view_build(p, c, &qf, e)))
            return rc;
        c = &p->src_view->ck;   /* decisions and members read the view */
    }
    ff_matcher am;
    if ((rc = ff_matcher_init(&am, p->fam, c->config, e)))
        return rc;
    decision *d = calloc(c->ntensors ? c->ntensors : 1, sizeof *d);
    if (!d) {
        ff_matcher_free(&am);
        return ff_oom(e, "out of memory while planning");
    }
    rc = decide_recipe(p, c, &am, o, d, e);
    if (!rc)
        rc = emit(p, c, d, e);
    for (size_t i = 0; i < c->ntensors; i++) {
        free(d[i].module);
        free(d[i].fuse_key);
        free(d[i].tie);
    }
    free(d);
    ff_matcher_free(&am);
    if (rc)
        return rc;
    /* A tied lm_head has no tensor but is still a Linear module left alone. */
    for (const char *const *m = p->fam->implicit_ignore; m && *m; m++) {
        if (has_module_tensor(c, *m) || !implicit_applies(p, c, *m))
            continue;
        char *copy = strdup(*m);
        if (!copy || PUSH(p, ignore, copy)) {
            free(copy);
            return ff_oom(e, "out of memory while planning");
        }
    }
    if (p->fam->note)
        plan_note(p->notes, &p->nnotes, "%s", p->fam->note);
    if (o->nfp8 && !p->q_fp8)
        plan_note(p->notes, &p->nnotes, "--fp8 matched no Linear the recipe quantizes: every one is NVFP4");
    p->arch_class = strdup(p->expect.experts ? "moe" : "dense");
    if (!p->arch_class)
        return ff_oom(e, "out of memory while planning");
    p->experts = (int)p->expect.experts;
    /* a geometry the config cannot give leaves the counts unknown (the
     * plan stands on the tensors); one that could not be allocated would
     * print "0 layers" in the card */
    ff_err ge = {0};
    ff_geometry *g = ff_geometry_new(p->fam, c->config, &ge);
    if (!g && ge.oom)
        return ff_oom(e, "out of memory while planning");
    if (g) {
        p->layers = g->layers;
        p->has_vision = g->has_vision;
    }
    free(g);
    check_invariants(p, o);
    plan_guard(p, c, o);
    if (any_null(p->notes, p->nnotes) || any_null(p->violations, p->nviolations))
        return ff_oom(e, "out of memory while planning");
    if (p->nviolations)
        return ff_fail(e, FF_EPLAN, "plan refused: %s%s", p->violations[0],
                       p->nviolations > 1 ? " (and more: see the plan)" : "");
    return FF_OK;
}

void plan_free(plan *p)
{
    for (size_t i = 0; i < p->nmembers; i++)
        free(p->members[i].module);
    for (size_t i = 0; i < p->nouts; i++)
        free((char *)p->outs[i].name);
    for (size_t i = 0; i < p->nignore; i++)
        free(p->ignore[i]);
    for (int i = 0; i < p->nnotes; i++)
        free(p->notes[i]);
    for (int i = 0; i < p->nviolations; i++)
        free(p->violations[i]);
    free(p->members);
    free(p->units);
    free(p->items);
    free(p->outs);
    free(p->ignore);
    free(p->arch_class);
    plan_budget_free(p->budget);
    if (p->src_view)
        qs_view_free(p->src_view);
    free(p->src_view);
    ff_family_close(p->fam_own);
    memset(p, 0, sizeof *p);
}

uint64_t plan_unit_bytes_in(const plan *p, const plan_unit *u)
{
    uint64_t n = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        n += stored_bytes(m->src, m->rows * m->cols);
    }
    return n;
}

const uint8_t *plan_member_rows(const plan_member *m, const uint8_t *base, void **owned, ff_err *e)
{
    size_t esz = ff_dtype_size(m->src->st->dtype);
    *owned = NULL;
    if (!m->transposed)
        return base + m->row0 * m->cols * esz;
    uint64_t bytes = m->rows * m->cols * esz;
    uint8_t *t = malloc(bytes > 0 ? bytes : 1);
    if (!t) {
        ff_oom(e, "out of memory transposing %s", m->module);
        return NULL;
    }
    /* source row i of the expert block is input element i of every output row */
    const uint8_t *blk = base + m->row0 * m->stride * esz;
    for (uint64_t i = 0; i < m->cols; i++) {
        const uint8_t *src = blk + (i * m->stride + m->col0) * esz;
        for (uint64_t r = 0; r < m->rows; r++)
            memcpy(t + (r * m->cols + i) * esz, src + r * m->col_step * esz, esz);
    }
    *owned = t;
    return t;
}

void plan_member_span(const plan_member *m, uint64_t *lo, uint64_t *hi)
{
    /* A whole tensor is its stored bytes: a decoded view's (FP8, INT4, MXFP4,
     * a gpt-oss expert's slab) are not its bf16 elements' count */
    if (!m->transposed && m->row0 == 0 && m->rows * m->cols == st_numel(m->src->st)) {
        *lo = m->src->st->begin;
        *hi = m->src->st->end;
        return;
    }
    uint64_t width = m->transposed ? m->stride : m->cols, nrows = m->transposed ? m->cols : m->rows;
    *lo = m->src->st->begin + stored_bytes(m->src, m->row0 * width);
    *hi = *lo + stored_bytes(m->src, nrows * width);
}
