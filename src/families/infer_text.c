/* plan --infer, part two: what the placed templates say about the layers
 * (Linears per dense and per MoE layer, routers, which layers carry
 * experts and the config rule that predicts it, the config keys of the
 * expert count and width), checked against each other, and the description
 * written. `derived` is set only when nothing had to be guessed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "famdesc.h"
#include "infer_int.h"
#include "jsonio.h"
#include "qsource.h"

typedef struct infer_counts {
    int64_t dense_per_layer, dense_per_moe_layer, routers_per_moe_layer;
    int moe_seen, dense_seen;
    famdesc_moe_layers moe;
    const char *experts_key, *top_k_key, *width_key;
    const char *kinds_key;    /* the config's list of layer kinds, when the counts follow it */
    /* or a list of the layer numbers of one kind (layer-kind-numbers) */
    int kinds_numbered;
    int64_t kinds_base;
    char numbered_key[128], numbered_kind[64];
    famdesc_kind_count kinds[2][FAMDESC_MAX_KEYS];
    int nkinds[2];
    int derived;
    char *why;
    size_t why_size;
} infer_counts;

static void not_derived(infer_counts *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void not_derived(infer_counts *k, const char *fmt, ...)
{
    if (!k->derived)
        return;            /* the first reason is the one to fix first */
    k->derived = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why, k->why_size, fmt, ap);
    va_end(ap);
}

/* A config list naming each layer's kind (transformers' layer_types), or
 * NULL: the key the counts may follow when layers of one class differ. */
static const char *layer_kinds_key(const infer_scan *s)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s->cfg, key, v) {
        if (!json_is_array(v) || (int64_t)json_array_size(v) != s->layers)
            continue;
        size_t i = 0;
        while (i < json_array_size(v) && json_is_string(json_array_get(v, i)))
            i++;
        if (i == json_array_size(v))
            return key;
    }
    return NULL;
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."

/* Where a layer's kind comes from: a list of kinds, or a list of the layer
 * numbers of one kind counted from base. */
typedef struct kinds_src {
    const char *key;
    int numbered;
    int64_t base;
    const char *named;
} kinds_src;

static const char *kind_of(const infer_scan *s, const kinds_src *src, int64_t l)
{
    const json_t *list = jsonio_path(s->cfg, src->key);
    if (!src->numbered)
        return json_string_value(json_array_get(list, (size_t)l));
    return famdesc_number_listed(list, l, src->base) ? src->named : "other";
}

/* Every layer of a kind holds the same count: a count for each kind, the
 * first layer's kind the default. 0 when a kind's layers disagree. */
static int counts_follow(infer_counts *k, const infer_scan *s, const kinds_src *src, const int64_t *n,
                         const char *moe, int want_moe, int64_t *out)
{
    const char *kinds[FAMDESC_MAX_KEYS + 1];
    int64_t count[FAMDESC_MAX_KEYS + 1] = {0};
    int nk = 0;
    for (int64_t l = 0; l < s->layers; l++) {
        if (moe[l] != want_moe)
            continue;
        const char *kind = kind_of(s, src, l);
        /* written back as one word of a directive */
        if (!kind || !*kind || strspn(kind, NAME_CHARS) != strlen(kind))
            return 0;
        int i = 0;
        while (i < nk && strcmp(kinds[i], kind) != 0)
            i++;
        if (i == nk && nk == FAMDESC_MAX_KEYS + 1)
            return 0;
        if (i == nk)
            kinds[nk] = kind, count[nk++] = n[l];
        else if (count[i] != n[l])
            return 0;
    }
    *out = count[0];
    for (int i = 1; i < nk; i++)
        if (count[i] != count[0])
            k->kinds[want_moe][k->nkinds[want_moe]++] = (famdesc_kind_count){.kind = kinds[i], .dense = count[i]};
    return 1;
}

/* A list of layer numbers counted from base: every entry names a layer. */
static int numbers_fit(const json_t *list, int64_t layers, int64_t base)
{
    return json_is_array(list) && json_array_size(list) && famdesc_first_bad_number(list, layers, base) < 0;
}

/* The list at KEY[.SUB] as one kind's layer numbers: taken (1) when its
 * layers, from exactly one of the two bases, explain the counts. The kind
 * is the key's last word less "_layers"; a list that fits from both bases
 * is a guess. */
static int numbers_explain(infer_counts *k, const infer_scan *s, const int64_t *n, const char *moe, int want_moe,
                           int64_t *out, const char *key, const char *sub, const json_t *list)
{
    char path[128], kind[64];
    snprintf(path, sizeof path, "%s%s%s", key, *sub ? "." : "", sub);
    snprintf(kind, sizeof kind, "%s", *sub ? sub : key);
    char *tail = strstr(kind, "_layers");
    if (tail && !tail[7])
        *tail = 0;
    if (strlen(path) >= sizeof k->numbered_key || strlen(kind) >= sizeof k->numbered_kind)
        return 0;
    memcpy(k->numbered_key, path, strlen(path) + 1), memcpy(k->numbered_kind, kind, strlen(kind) + 1);
    kinds_src src = {.key = k->numbered_key, .numbered = 1, .named = k->numbered_kind};
    int fit[2], nk0 = k->nkinds[want_moe];
    for (int base = 0; base < 2; base++) {
        src.base = base;
        fit[base] = numbers_fit(list, s->layers, base) && counts_follow(k, s, &src, n, moe, want_moe, out);
        k->nkinds[want_moe] = nk0;   /* a failed trial's kinds are dropped */
    }
    if (fit[0] + fit[1] != 1)
        return 0;
    src.base = k->kinds_base = fit[1];
    counts_follow(k, s, &src, n, moe, want_moe, out);
    k->kinds_key = k->numbered_key, k->kinds_numbered = 1;
    return 1;
}

/* Config lists of layer numbers, at the top or one object down (Kimi-K3's
 * linear_attn_config.kda_layers, 1-based): the first that explains the
 * counts. */
static int counts_by_numbers(infer_counts *k, const infer_scan *s, const int64_t *n, const char *moe, int want_moe,
                             int64_t *out)
{
    const char *key, *sub;
    json_t *v, *w;
    json_object_foreach((json_t *)s->cfg, key, v) {
        if (!json_is_object(v)) {
            if (numbers_explain(k, s, n, moe, want_moe, out, key, "", v))
                return 1;
            continue;
        }
        json_object_foreach(v, sub, w)
            if (numbers_explain(k, s, n, moe, want_moe, out, key, sub, w))
                return 1;
    }
    return 0;
}

/* The layers of one class hold different counts: a count for each kind of
 * the config's list of kinds, or of a list of one kind's layer numbers. 0
 * when no list explains them. */
static int counts_by_kind(infer_counts *k, const infer_scan *s, const int64_t *n, const char *moe, int want_moe,
                          int64_t *out)
{
    if (k->kinds_key) {   /* the other class chose the list: one list for both */
        kinds_src src = {.key = k->kinds_key, .numbered = k->kinds_numbered, .base = k->kinds_base,
                         .named = k->numbered_kind};
        return counts_follow(k, s, &src, n, moe, want_moe, out);
    }
    kinds_src src = {.key = layer_kinds_key(s)};
    if (src.key && counts_follow(k, s, &src, n, moe, want_moe, out)) {
        k->kinds_key = src.key;
        return 1;
    }
    return counts_by_numbers(k, s, n, moe, want_moe, out);
}

/* Every dense layer must quantize the same number of Linears, and every MoE
 * layer, or each kind of layer its own (kinds: 1 to allow that); a layer
 * that differs is named. */
static void same_per_layer(infer_counts *k, const infer_scan *s, const int64_t *n, const char *moe, int want_moe,
                           int kinds, int64_t *out)
{
    int64_t first = -1;
    for (int64_t l = 0; l < s->layers; l++) {
        if (moe[l] != want_moe)
            continue;
        if (first < 0) {
            first = l, *out = n[l];
        } else if (n[l] != *out) {
            if (kinds && counts_by_kind(k, s, n, moe, want_moe, out))
                return;
            not_derived(k, "layers %lld and %lld are both %s but hold %lld and %lld Linears the rules quantize",
                        (long long)first, (long long)l, want_moe ? "MoE" : "dense", (long long)*out, (long long)n[l]);
            return;
        }
    }
}

/* The config rule that gives exactly the layers seen carrying experts. */
static void moe_rule(infer_counts *k, const infer_scan *s, const char *moe)
{
    static const famdesc_moe_layers rules[] = {
        {.all = 1},
        {.first_dense = "first_k_dense_replace", .freq = "moe_layer_freq"},
        {.step = "decoder_sparse_step", .except = "mlp_only_layers"},
        {.start = "moe_layer_start_index", .end = "moe_layer_end_index", .interval = "moe_layer_interval"},
    };
    for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
        famdesc_moe_layers m = rules[r];
        const char **keys[] = {&m.first_dense, &m.freq, &m.step, &m.except, &m.start, &m.end, &m.interval};
        int present = m.all;
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            if (*keys[i] && !json_object_get(s->cfg, *keys[i]))
                *keys[i] = NULL;
            present |= *keys[i] != NULL;
        }
        int64_t l = 0;
        while (present && l < s->layers && famdesc_is_moe_layer(&m, s->cfg, (int)l) == moe[l])
            l++;
        if (present && l == s->layers) {
            k->moe = m;
            return;
        }
    }
    k->moe.all = 1;
    not_derived(k, "no config rule (all; first_k_dense_replace/moe_layer_freq; decoder_sparse_step/mlp_only_layers; "
                   "moe_layer_start_index/end/interval) gives the layers that hold experts");
}

static int64_t expert_width(const infer_scan *s)
{
    for (size_t i = 0; i < s->ntmpl; i++) {
        const infer_tmpl *t = &s->tmpl[i];
        if (t->kind == K_EXPERT && (strstr(t->name, "down") || strstr(t->name, ".w2.")))
            return t->st->shape[1];
    }
    return s->fused_width;
}

static void expert_keys(infer_counts *k, const infer_scan *s)
{
    static const char *const top_k[] = {"num_experts_per_tok", "moe_k", "top_k", "num_experts_per_token", "moe_topk",
                                        "top_k_experts", NULL};
    static const char *const width[] = {"moe_intermediate_size", "intermediate_size", "expert_intermediate_size",
                                        "moe_ffn_hidden_size", NULL};
    int64_t seen = s->seen_experts ? s->seen_experts : s->experts;
    if (!infer_first_key(s->cfg, ff_expert_count_keys, seen, &k->experts_key))
        not_derived(k, "no config key (num_experts, num_local_experts, n_routed_experts, moe_num_experts) equals the "
                       "%lld experts the tensors hold", (long long)seen);
    if (!infer_first_key(s->cfg, top_k, -1, &k->top_k_key))
        not_derived(k, "no config key gives the experts per token (num_experts_per_tok, moe_k, top_k)");
    int64_t w = expert_width(s);
    if (!infer_first_key(s->cfg, width, w, &k->width_key))
        not_derived(k, "no config key (moe_intermediate_size, intermediate_size, ...) equals the expert width %lld",
                    (long long)w);
}

static int derive(infer_counts *k, const infer_scan *s, ff_err *e)
{
    int64_t *quant = calloc((size_t)s->layers, sizeof *quant), *routers = calloc((size_t)s->layers, sizeof *routers);
    char *moe = calloc((size_t)s->layers, 1);
    if (!quant || !routers || !moe) {
        free(quant), free(routers), free(moe);
        return ff_oom(e, "out of memory");
    }
    for (size_t i = 0; i < s->ntensors; i++) {
        long l = s->layer_of[i];
        if (s->tmpl_of[i] == SIZE_MAX || l < 0 || l >= s->layers)
            continue;
        infer_kind kind = s->tmpl[s->tmpl_of[i]].kind;
        quant[l] += kind == K_QUANT;
        routers[l] += kind == K_ROUTER;
        moe[l] |= kind == K_EXPERT || (kind >= K_FUSED2 && kind <= K_ONE_T);
    }
    for (int64_t l = 0; l < s->layers; l++)
        k->moe_seen |= moe[l], k->dense_seen |= !moe[l];
    same_per_layer(k, s, quant, moe, 0, 1, &k->dense_per_layer);
    same_per_layer(k, s, quant, moe, 1, 1, &k->dense_per_moe_layer);
    same_per_layer(k, s, routers, moe, 1, 0, &k->routers_per_moe_layer);
    if (k->moe_seen) {
        moe_rule(k, s, moe);
        expert_keys(k, s);
    } else if (s->experts > 0) {
        not_derived(k, "the config gives %lld experts but no tensor is placed as one", (long long)s->experts);
    }
    free(quant), free(routers), free(moe);
    return FF_OK;
}

/* ---- the text ---- */

/* A template as an ERE: dots literal, the indices any number; anchored at
 * the end unless it is the layer prefix's define. */
static void put_pattern(FILE *f, const char *name, const char *prefix, int end)
{
    size_t pl = prefix ? strlen(prefix) : 0;
    if (pl && strncmp(name, prefix, pl) == 0) {
        fputs("$(L)", f);
        name += pl;
    } else {
        fputc('^', f);
    }
    for (; *name; name++)
        fputs(*name == '.' ? "[.]" : *name == '#' || *name == '@' ? "[0-9]+" : (char[2]){*name, 0}, f);
    if (end)
        fputc('$', f);
}

/* A renamed expert's rule under its output name, so verify and
 * repair-scales find its fused partner in the quantized checkpoint. */
static void put_output_rule(FILE *f, const infer_tmpl *t, const char *prefix)
{
    char out[512];
    const char *dot = strrchr(t->name, '.'), *leaf = dot;
    while (leaf > t->name && leaf[-1] != '.')
        leaf--;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(leaf - t->name), t->name, t->out, dot);
    fputs("expert ", f);
    put_pattern(f, out, prefix, 1);
    if (t->fuse)
        fprintf(f, " fuse=%s", t->fuse);
    fputc('\n', f);
}

static const char *const layouts[] = {[K_FUSED2] = "fused2", [K_FUSED2_T] = "fused2-t", [K_ONE] = "one",
                                      [K_ONE_T] = "one-t"};

static void put_rule(FILE *f, const infer_tmpl *t, const char *prefix)
{
    static const char *const verbs[] = {[K_UNPLACED] = "keep", [K_QUANT] = "quant", [K_EXPERT] = "expert",
                                        [K_FUSED2] = "experts", [K_FUSED2_T] = "experts", [K_ONE] = "experts",
                                        [K_ONE_T] = "experts", [K_ROUTER] = "router", [K_KEEP] = "keep",
                                        [K_TOWER] = "tower"};
    if (t->kind == K_UNPLACED)
        fprintf(f, "# unplaced: no rule places %s (%dD): kept as it is\n", t->name, t->st->ndim);
    if (t->ambiguous)
        fprintf(f, "# its shape cannot tell the layout (expert width == hidden): taken as transformers stores it\n");
    if (t->oriented_by)
        fprintf(f, "# its shape fits both layouts (expert width == hidden): laid out as %s is\n", t->oriented_by);
    fprintf(f, "%s ", verbs[t->kind]);
    put_pattern(f, t->name, prefix, 1);
    if (t->kind == K_QUANT || t->kind == K_KEEP || t->kind == K_TOWER)
        fprintf(f, " group=%s", t->group ? t->group : t->kind == K_TOWER ? "vision" : "other");
    if (t->kind == K_UNPLACED)
        fprintf(f, " group=unplaced");
    if (t->kind == K_UNPLACED && t->linear)
        fprintf(f, " linear");
    if (t->fuse)
        fprintf(f, " fuse=%s", t->fuse);
    if ((t->kind == K_EXPERT || t->kind == K_KEEP) && t->out)
        fprintf(f, " out=%s", t->out);
    if (t->kind >= K_FUSED2 && t->kind <= K_ONE_T) {
        char lb[128];
        const char *dot = strrchr(t->name, '.');
        snprintf(lb, sizeof lb, "%s", dot ? dot + 1 : t->name);
        fprintf(f, " layout=%s out=%s", layouts[t->kind], t->out ? t->out : lb);
    }
    if (t->parent)
        fprintf(f, " parent");
    if (t->fixed)
        fprintf(f, " guard=fixed");
    if (t->linear && t->kind != K_UNPLACED)
        fprintf(f, " linear");
    fputc('\n', f);
    if (t->kind == K_EXPERT && t->out)
        put_output_rule(f, t, prefix);
}

/* The decoder's layer prefix ("model.layers."): the text before '#' in the
 * first quantized template. */
static char *layer_prefix(const infer_scan *s)
{
    for (size_t i = 0; i < s->ntmpl; i++) {
        const char *hash = strchr(s->tmpl[i].name, '#');
        if (s->tmpl[i].kind == K_QUANT && hash)
            return strndup(s->tmpl[i].name, (size_t)(hash - s->tmpl[i].name) + 2);
    }
    return NULL;
}

static void put_rules(FILE *f, const infer_scan *s, const char *prefix)
{
    static const infer_kind order[] = {K_QUANT, K_EXPERT, K_FUSED2, K_FUSED2_T, K_ONE, K_ONE_T,
                                       K_ROUTER, K_KEEP, K_TOWER, K_UNPLACED};
    for (size_t o = 0; o < sizeof order / sizeof *order; o++)
        for (size_t i = 0; i < s->ntmpl; i++)
            if (s->tmpl[i].kind == order[o])
                put_rule(f, &s->tmpl[i], prefix);
}

/* A head tied to the embeddings has no tensor, but verify still reads the
 * ignore list's lm_head through a rule that names it. */
static void put_tied_head(FILE *f, const infer_scan *s)
{
    for (size_t i = 0; i < s->ntmpl; i++)
        if (s->tmpl[i].group && strcmp(s->tmpl[i].group, "lm_head") == 0)
            return;
    fputs("# no lm_head tensor (tied to the embeddings): named for the ignore list\n"
          "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n", f);
}

static void put_moe(FILE *f, const infer_counts *k)
{
    const famdesc_moe_layers *m = &k->moe;
    if (m->all) {
        fputs("moe-layers all\n", f);
        return;
    }
    fputs("moe-layers", f);
    const struct {
        const char *term, *key;
    } terms[] = {{"step", m->step}, {"freq", m->freq}, {"first-dense", m->first_dense}, {"start", m->start},
                 {"end", m->end}, {"interval", m->interval}, {"except", m->except}};
    for (size_t i = 0; i < sizeof terms / sizeof *terms; i++)
        if (terms[i].key)
            fprintf(f, " %s=%s", terms[i].term, terms[i].key);
    fputc('\n', f);
}

static void put_invariants(FILE *f, const infer_scan *s, const infer_counts *k)
{
    fputs("\n# the invariants, from config.json\nlayers num_hidden_layers\n", f);
    if (k->moe_seen) {
        if (k->experts_key)
            fprintf(f, "experts-key %s\n", k->experts_key);
        if (k->top_k_key)
            fprintf(f, "top-k-key %s\n", k->top_k_key);
        if (k->width_key)
            fprintf(f, "expert-width-key %s\n", k->width_key);
        put_moe(f, k);
    }
    if (k->kinds_key && k->kinds_numbered)
        fprintf(f, "# the layers %s numbers (from %lld) quantize another number of Linears\n"
                   "layer-kind-numbers %s %lld %s other\n",
                k->kinds_key, (long long)k->kinds_base, k->kinds_key, (long long)k->kinds_base, k->numbered_kind);
    else if (k->kinds_key)
        fprintf(f, "# layers of some kinds (%s) quantize another number of Linears\nlayer-kinds %s\n", k->kinds_key,
                k->kinds_key);
    fprintf(f, "dense-per-layer %lld\n", (long long)(k->dense_seen ? k->dense_per_layer : 0));
    for (int i = 0; i < k->nkinds[0]; i++)
        fprintf(f, "dense-per-layer-kind %s %lld\n", k->kinds[0][i].kind, (long long)k->kinds[0][i].dense);
    if (k->moe_seen)
        fprintf(f, "dense-per-moe-layer %lld\n", (long long)k->dense_per_moe_layer);
    for (int i = 0; i < k->nkinds[1]; i++)
        fprintf(f, "dense-per-moe-layer-kind %s %lld\n", k->kinds[1][i].kind, (long long)k->kinds[1][i].dense);
    if (k->moe_seen)
        fprintf(f, "routers-per-moe-layer %lld\n", (long long)k->routers_per_moe_layer);
    if (s->mtp)
        fputs("# layers at num_hidden_layers and past it are multi-token prediction: kept\nmtp\n", f);
    fputs("implicit-ignore lm_head\n", f);
}

static void put_text(FILE *f, const ckpt *c, const infer_scan *s, const infer_counts *k, const char *type)
{
    fprintf(f, "# fp4forge family description, proposed by `fp4forge plan --infer` for %s\n", c->dir);
    if (k->derived)
        fputs("# derived: every tensor is placed, and every count below agrees with config.json\n", f);
    else
        fprintf(f, "# NOT derived: %s\n# check every line before passing it back with --family-file\n", k->why);
    fprintf(f, "format 1\nfamily %s\nmodel-type %s\n", type, type);
    if (s->section)
        fprintf(f, "config-section %s\n", s->section);
    char *prefix = layer_prefix(s);
    if (prefix) {
        fputs("define L ", f);
        put_pattern(f, prefix, NULL, 0);
        fputc('\n', f);
    }
    fputc('\n', f);
    put_rules(f, s, prefix);
    put_tied_head(f, s);
    free(prefix);
    put_invariants(f, s, k);
}

static int write_text(ff_infer *r, const ckpt *c, const infer_scan *s, const infer_counts *k, ff_err *e)
{
    const char *type = jsonio_str(c->config, "model_type", "");
    if (!*type || strspn(type, NAME_CHARS) != strlen(type))
        return ff_fail(e, FF_EIO, "%s/config.json: model_type '%s' cannot name a family", c->dir, type);
    size_t len;
    FILE *f = open_memstream(&r->text, &len);
    if (!f)
        return ff_oom(e, "out of memory");
    put_text(f, c, s, k, type);
    if (fclose(f) != 0 || !r->text)
        return ff_oom(e, "out of memory");
    return FF_OK;
}

static int infer_from(const ckpt *c, ff_infer *r, ff_err *e)
{
    infer_scan s;
    int rc = infer_scan_build(&s, c, e);
    infer_counts k = {.derived = 1, .why = r->why, .why_size = sizeof r->why};
    for (size_t i = 0; rc == FF_OK && i < s.ntmpl; i++) {
        r->unplaced += s.tmpl[i].kind == K_UNPLACED;
        if (s.tmpl[i].kind == K_UNPLACED)
            not_derived(&k, "no rule places %s", s.tmpl[i].name);
        else if (s.tmpl[i].ambiguous)
            not_derived(&k, "the shape of %s cannot tell its layout (expert width == hidden size)", s.tmpl[i].name);
        else if (s.tmpl[i].kind == K_FUSED2 || s.tmpl[i].kind == K_FUSED2_T)
            /* both exist: transformers' MoE experts chunk gate|up in halves, gpt-oss's
             * interleave them by column; the wrong split serves wrong weights silently */
            not_derived(&k, "%s fuses gate and up, and no shape tells halves (layout=fused2%s) from gpt-oss's "
                        "interleaving (layout=fused2i-t): check the model's code", s.tmpl[i].name,
                        s.tmpl[i].kind == K_FUSED2_T ? "-t" : "");
    }
    if (!rc)
        rc = derive(&k, &s, e);
    if (!rc)
        rc = write_text(r, c, &s, &k, e);
    r->derived = k.derived;
    infer_scan_free(&s);
    if (rc)
        ff_infer_free(r);
    return rc;
}

/* The tensors as the planner reads them: a quantized source's bf16 view, and
 * gpt-oss's fused experts split per expert (src/io/qsource.h). A proposal
 * names what plan will match, so passing it back plans what the built-in
 * plans (gpt-oss's MXFP4 blocks and fused gate/up are the view's to read,
 * not a description's). A format the view refuses is plan's to report. */
int ff_family_infer(const ckpt *c, ff_infer *r, ff_err *e)
{
    memset(r, 0, sizeof *r);
    if (!c->config)
        return ff_fail(e, FF_EIO, "%s: missing config.json", c->dir);
    qs_format f;
    char why[400];
    int q = qs_config(c->config, &f, why, sizeof why);
    if (q < 0 || (q == 0 && !qs_layout(c, &f)))
        return infer_from(c, r, e);
    qs_view v;
    int rc = qs_view_build(&v, c, &f, e);
    if (!rc)
        rc = infer_from(&v.ck, r, e);
    qs_view_free(&v);
    return rc;
}

void ff_infer_free(ff_infer *r)
{
    free(r->text);
    r->text = NULL;
}
