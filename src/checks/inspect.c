#include "inspect.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "jsonio.h"
#include "siphash.h"
#include "decode_fp8.h"

static const char *last_component(const char *name)
{
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

/* Split experts ("<base>.<e>.gate_proj") have no rule of their own: they are
 * named by the fused rule's expert_out table, so that table classifies them. */
static const ff_rule *expert_rule(const insp *s, const char *module)
{
    const char *x;
    if (!ff_expert_module_parse(module, NULL, NULL, &x))
        return NULL;
    const ff_family *f = s->m.fam;
    for (size_t i = 0; i < f->nrules; i++)
        for (int k = 0; k < 2; k++)
            if (f->rules[i].expert_out[k] && strcmp(f->rules[i].expert_out[k], x) == 0)
                return &f->rules[i];
    return NULL;
}

/* The rule of the quantized module named by name's first n bytes: its
 * "<mod>.weight" rule, else the split-expert table's. The name is built on
 * the stack, or for a long one on the heap (NULL when that fails: a rule
 * is a classification, and callers have no error path for it). */
static const ff_rule *module_rule(const insp *s, const char *name, size_t n)
{
    char small[512];
    char *mod = n + sizeof ".weight" <= sizeof small ? small : malloc(n + sizeof ".weight");
    if (!mod)
        return NULL;
    memcpy(mod, name, n);
    strcpy(mod + n, ".weight");
    const ff_rule *r = ff_match(&s->m, mod);
    mod[n] = 0;
    if (!r)
        r = expert_rule(s, mod);
    if (mod != small)
        free(mod);
    return r;
}

const ff_rule *insp_rule(const insp *s, const char *tensor_name)
{
    if (!s->have_matcher)
        return NULL;
    const char *suf = last_component(tensor_name);
    int quant = strcmp(suf, DQ_PACKED) == 0 || strcmp(suf, DQ_SCALE) == 0 || strcmp(suf, DQ_GLOBAL) == 0;
    if (!quant)
        return ff_match(&s->m, tensor_name);
    return suf > tensor_name ? module_rule(s, tensor_name, (size_t)(suf - tensor_name) - 1) : NULL;
}

const ff_rule *insp_module_rule(const insp *s, const char *module)
{
    return s->have_matcher ? module_rule(s, module, strlen(module)) : NULL;
}

const char *insp_family(const insp *s, const char *tensor_name)
{
    const ff_rule *r = insp_rule(s, tensor_name);
    return r ? r->group : "other";
}

const json_t *insp_ignore(const insp *s)
{
    const json_t *ig = s->qcfg ? json_object_get(s->qcfg, "ignore") : NULL;
    return json_is_array(ig) ? ig : NULL;
}

const char *insp_class_name(const insp_class *k) { return k->moe ? "moe" : "dense"; }

static size_t row_slot(const insp *s, const char *family, ff_dtype dtype, const char *suffix)
{
    uint64_t h = ff_siphash(s->index_key, suffix, strlen(suffix)) ^ (uint64_t)(uintptr_t)family * 31 ^ (uint64_t)dtype;
    size_t i = (size_t)h & (s->index_cap - 1);
    for (;; i = (i + 1) & (s->index_cap - 1)) {
        size_t r = s->row_index[i];
        if (r == SIZE_MAX || (s->rows[r].family == family && s->rows[r].dtype == dtype &&
                              strcmp(s->rows[r].suffix, suffix) == 0))
            return i;
    }
}

/* Room for one more row, in the array and in its index (kept at most half
 * full, rebuilt when it doubles). */
static int grow_rows(insp *s, ff_err *e)
{
    if (s->nrows == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        insp_row *nr = realloc(s->rows, cap * sizeof *nr);
        if (!nr)
            return ff_oom(e, "out of memory");
        s->rows = nr;
        s->cap = cap;
    }
    if (2 * (s->nrows + 1) <= s->index_cap)
        return FF_OK;
    size_t cap = s->index_cap ? s->index_cap * 2 : 64, *idx = malloc(cap * sizeof *idx);
    if (!idx)
        return ff_oom(e, "out of memory");
    free(s->row_index);
    s->row_index = idx;
    s->index_cap = cap;
    for (size_t i = 0; i < cap; i++)
        idx[i] = SIZE_MAX;
    for (size_t r = 0; r < s->nrows; r++)
        idx[row_slot(s, s->rows[r].family, s->rows[r].dtype, s->rows[r].suffix)] = r;
    return FF_OK;
}

static int add_row(insp *s, const char *family, const st_tensor *t, ff_err *e)
{
    char suf[sizeof s->rows->suffix];
    snprintf(suf, sizeof suf, "%s", last_component(t->name));
    size_t slot = s->index_cap ? row_slot(s, family, t->dtype, suf) : 0;
    if (s->index_cap && s->row_index[slot] != SIZE_MAX) {
        insp_row *r = &s->rows[s->row_index[slot]];
        r->count++;
        r->bytes += t->end - t->begin;
        return FF_OK;
    }
    if (grow_rows(s, e))
        return e->code;
    insp_row *r = &s->rows[s->nrows];
    r->family = family;
    r->dtype = t->dtype;
    memcpy(r->suffix, suf, sizeof suf);
    r->count = 1;
    r->bytes = t->end - t->begin;
    s->row_index[row_slot(s, family, t->dtype, suf)] = s->nrows++;
    return FF_OK;
}

/* Class from config.json (the geometry reader), vision also from tensors. */
static void read_class(insp *s)
{
    insp_class *k = &s->cls;
    k->arch = s->have_matcher ? s->m.fam->name : "unknown";
    if (s->have_matcher && s->c->config) {
        ff_geometry *g = ff_geometry_new(s->m.fam, s->c->config, NULL);
        if (g) {
            k->moe = g->moe;
            k->experts = g->moe ? g->experts : 0;
            k->layers = g->layers;
            k->vision = g->has_vision;
            k->tie_embeddings = g->tie_embeddings;
        }
        free(g);
    }
    for (size_t i = 0; i < s->nrows; i++) {
        if (strcmp(s->rows[i].family, "vision") == 0)
            k->vision = 1;
        if (strcmp(s->rows[i].family, "experts") == 0)
            k->moe = 1;
    }
}

int insp_build(insp *s, const ckpt *c, const ff_family *fam, ff_err *e)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    ff_sipkey_random(s->index_key);
    if (!fam)
        fam = c->config ? ff_family_detect(c->config) : NULL;
    if (fam) {
        int rc = ff_matcher_init(&s->m, fam, c->config, e);
        if (rc)
            return rc;
        s->have_matcher = 1;
    }
    for (size_t i = 0; i < c->ntensors; i++) {
        int rc = add_row(s, insp_family(s, c->tensors[i].st->name), c->tensors[i].st, e);
        if (rc)
            return rc;
    }
    s->qcfg = c->config ? json_object_get(c->config, "quantization_config") : NULL;
    if (s->qcfg && !json_is_object(s->qcfg))
        s->qcfg = NULL;
    read_class(s);
    return FF_OK;
}

void insp_free(insp *s)
{
    if (s->have_matcher)
        ff_matcher_free(&s->m);
    free(s->rows);
    free(s->row_index);
    memset(s, 0, sizeof *s);
}

/* Quantized modules by scheme: NVFP4A16 by their weight_packed, FP8
 * weight-only by an FP8 module's weight (decode_fp8.h). */
static void count_schemes(const insp *s, size_t *nv, size_t *fp8)
{
    size_t longest = 0;
    *nv = *fp8 = 0;
    for (size_t i = 0; i < s->c->ntensors; i++)
        longest = strlen(s->c->tensors[i].st->name) > longest ? strlen(s->c->tensors[i].st->name) : longest;
    char *buf = malloc(longest + 1);
    for (size_t i = 0; buf && i < s->c->ntensors; i++) {
        const char *name = s->c->tensors[i].st->name;
        *nv += dq_module_of(name, buf, longest + 1) != NULL;
        *fp8 += fp8_part(s->c, name) == 1;
    }
    free(buf);
}

/* A mixed output's groups, each with its scheme: the first group's weights
 * alone would call the whole model FP8 (or NVFP4). */
static json_t *groups_summary(const json_t *groups)
{
    json_t *arr = json_array();
    const char *k;
    json_t *g;
    json_object_foreach((json_t *)groups, k, g) {
        const json_t *w = json_object_get(g, "weights");
        json_array_append_new(arr, json_pack("{ss ss sI ss ss sI sI}", "name", k, "format", jsonio_str(g, "format", ""),
                                             "num_bits", (json_int_t)jsonio_int(w, "num_bits", 0), "type",
                                             jsonio_str(w, "type", ""), "strategy", jsonio_str(w, "strategy", ""),
                                             "group_size", (json_int_t)jsonio_int(w, "group_size", 0), "targets",
                                             (json_int_t)json_array_size(json_object_get(g, "targets"))));
    }
    return arr;
}

/* Mixed output (quantize --fp8): "schemes" and "groups" added; an
 * NVFP4-only summary is left as it was. */
static void mixed_summary(const insp *s, json_t *o)
{
    size_t nv, fp8;
    const char *fmt = jsonio_str(s->qcfg, "format", "");
    count_schemes(s, &nv, &fp8);
    if (!fp8 && strcmp(fmt, "mixed-precision") != 0 && strcmp(fmt, FP8_FORMAT) != 0)
        return;
    json_object_set_new(o, "schemes", json_pack("{sI sI}", "nvfp4", (json_int_t)nv, "fp8", (json_int_t)fp8));
    json_object_set_new(o, "groups", groups_summary(json_object_get(s->qcfg, "config_groups")));
}

/* The few fields of quantization_config a deploy gate reads. */
static json_t *qcfg_summary(const insp *s)
{
    if (!s->qcfg)
        return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "quant_method", json_string(jsonio_str(s->qcfg, "quant_method", "")));
    json_object_set_new(o, "format", json_string(jsonio_str(s->qcfg, "format", "")));
    const json_t *groups = json_object_get(s->qcfg, "config_groups");
    json_object_set_new(o, "config_groups", json_integer(json_is_object(groups) ? (json_int_t)json_object_size(groups) : 0));
    const char *k;
    json_t *g, *ia = json_null(), *w = json_null();
    if (json_is_object(groups))
        json_object_foreach((json_t *)groups, k, g) {
            w = json_object_get(g, "weights");
            ia = json_object_get(g, "input_activations");
            break;
        }
    json_t *wsum = json_object();
    json_object_set_new(wsum, "num_bits", json_integer(jsonio_int(w, "num_bits", 0)));
    json_object_set_new(wsum, "type", json_string(jsonio_str(w, "type", "")));
    json_object_set_new(wsum, "strategy", json_string(jsonio_str(w, "strategy", "")));
    json_object_set_new(wsum, "group_size", json_integer(jsonio_int(w, "group_size", 0)));
    json_object_set_new(o, "weights", wsum);
    json_object_set(o, "input_activations", ia ? ia : json_null());
    const json_t *ig = insp_ignore(s);
    json_object_set_new(o, "ignore", json_integer(ig ? (json_int_t)json_array_size(ig) : 0));
    mixed_summary(s, o);
    return o;
}

json_t *insp_to_json(const insp *s)
{
    json_t *j = json_object(), *cls = json_object(), *rows = json_array(), *shards = json_array();
    json_object_set_new(j, "dir", jsonio_string(s->c->dir));
    json_object_set_new(cls, "arch", json_string(s->cls.arch));
    json_object_set_new(cls, "class", json_string(insp_class_name(&s->cls)));
    json_object_set_new(cls, "experts", json_integer(s->cls.experts));
    json_object_set_new(cls, "layers", json_integer(s->cls.layers));
    json_object_set_new(cls, "vision", json_boolean(s->cls.vision));
    json_object_set_new(j, "class", cls);
    for (size_t i = 0; i < s->nrows; i++) {
        const insp_row *r = &s->rows[i];
        json_t *o = json_object();
        json_object_set_new(o, "family", json_string(r->family));
        json_object_set_new(o, "dtype", json_string(ff_dtype_name(r->dtype)));
        json_object_set_new(o, "suffix", json_string(r->suffix));
        json_object_set_new(o, "count", json_integer(r->count));
        json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
        json_array_append_new(rows, o);
    }
    json_object_set_new(j, "tensors", rows);
    json_object_set_new(j, "total_tensors", json_integer((json_int_t)s->c->ntensors));
    json_object_set_new(j, "total_bytes", json_integer((json_int_t)s->c->total_bytes));
    for (size_t i = 0; i < s->c->nfiles; i++) {
        json_t *o = json_object();
        const char *p = s->c->files[i].path, *b = strrchr(p, '/');
        json_object_set_new(o, "file", jsonio_string(b ? b + 1 : p));
        json_object_set_new(o, "bytes", json_integer((json_int_t)s->c->files[i].file_size));
        json_object_set_new(o, "tensors", json_integer((json_int_t)s->c->files[i].ntensors));
        json_array_append_new(shards, o);
    }
    json_object_set_new(j, "shards", shards);
    json_t *q = qcfg_summary(s);
    json_object_set(j, "input_activations", json_is_object(q) ? json_object_get(q, "input_activations") : json_null());
    json_object_set_new(j, "quantization_config", q);
    return j;
}

static int row_cmp(const void *a, const void *b)
{
    const insp_row *x = a, *y = b;
    int c = strcmp(x->family, y->family);
    return c ? c : strcmp(x->suffix, y->suffix);
}

static void print_mixed(const json_t *q, FILE *out)
{
    const json_t *sc = json_object_get(q, "schemes"), *g;
    size_t i;
    if (!sc)
        return;
    fprintf(out, "  schemes    %lld NVFP4A16, %lld FP8 weight-only (weight F8_E4M3, weight_scale per row), %lld "
                 "Linears kept in their dtype (ignore)\n", (long long)jsonio_int(sc, "nvfp4", 0),
            (long long)jsonio_int(sc, "fp8", 0), (long long)jsonio_int(q, "ignore", 0));
    json_array_foreach(json_object_get(q, "groups"), i, g)
    {
        char gs[32] = "";
        if (jsonio_int(g, "group_size", 0))
            snprintf(gs, sizeof gs, "/%lld", (long long)jsonio_int(g, "group_size", 0));
        fprintf(out, "  group      %s %s: %lld-bit %s %s%s, %lld targets\n", jsonio_str(g, "name", "?"),
                jsonio_str(g, "format", "?"), (long long)jsonio_int(g, "num_bits", 0), jsonio_str(g, "type", "?"),
                jsonio_str(g, "strategy", "?"), gs, (long long)jsonio_int(g, "targets", 0));
    }
}

void insp_print(const insp *s, FILE *out)
{
    const insp_class *k = &s->cls;
    fprintf(out, "fp4forge inspect: %s\n", s->c->dir);
    fprintf(out, "  class      %s %s, %d layers, %d experts, vision %s\n", k->arch, insp_class_name(k),
            k->layers, k->experts, k->vision ? "present" : "absent");
    insp_row *sorted = malloc((s->nrows ? s->nrows : 1) * sizeof *sorted);
    if (sorted) {
        if (s->nrows) {   /* rows is NULL for a shard with no tensors */
            memcpy(sorted, s->rows, s->nrows * sizeof *sorted);
            qsort(sorted, s->nrows, sizeof *sorted, row_cmp);
        }
        fprintf(out, "  %-10s %-8s %-22s %8s %14s\n", "family", "dtype", "suffix", "count", "bytes");
        for (size_t i = 0; i < s->nrows; i++)
            fprintf(out, "  %-10s %-8s %-22s %8lld %14llu\n", sorted[i].family,
                    ff_dtype_name(sorted[i].dtype), sorted[i].suffix, (long long)sorted[i].count,
                    (unsigned long long)sorted[i].bytes);
        free(sorted);
    }
    fprintf(out, "  total      %zu tensors, %llu bytes\n", s->c->ntensors, (unsigned long long)s->c->total_bytes);
    for (size_t i = 0; i < s->c->nfiles; i++)
        fprintf(out, "  shard      %s  %llu bytes, %zu tensors\n", s->c->files[i].path,
                (unsigned long long)s->c->files[i].file_size, s->c->files[i].ntensors);
    json_t *q = qcfg_summary(s);
    if (json_is_object(q)) {
        const json_t *w = json_object_get(q, "weights"), *ia = json_object_get(q, "input_activations");
        if (json_object_get(q, "schemes"))   /* one scheme per group: listed below */
            fprintf(out, "  quant      %s, format %s, %lld config groups, %lld ignored\n",
                    jsonio_str(q, "quant_method", "?"), jsonio_str(q, "format", "?"),
                    (long long)jsonio_int(q, "config_groups", 0), (long long)jsonio_int(q, "ignore", 0));
        else
            fprintf(out, "  quant      %s, format %s, weights %lld-bit %s %s/%lld, %lld ignored\n",
                    jsonio_str(q, "quant_method", "?"), jsonio_str(q, "format", "?"),
                    (long long)jsonio_int(w, "num_bits", 0), jsonio_str(w, "type", "?"),
                    jsonio_str(w, "strategy", "?"), (long long)jsonio_int(w, "group_size", 0),
                    (long long)jsonio_int(q, "ignore", 0));
        print_mixed(q, out);
        fprintf(out, "  activations %s\n", json_is_null(ia) ? "none quantized (A16)" : "quantized");
    } else {
        fprintf(out, "  quant      none (no quantization_config)\n");
    }
    json_decref(q);
}

/* "a.12.b" -> "a.N.b". */
static void pattern_of(const char *name, char *buf, size_t n)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 2 < n;) {
        const char *q = p;
        while (isdigit((unsigned char)*q))
            q++;
        if (q > p && (p == name || p[-1] == '.') && (*q == '.' || !*q)) {
            buf[o++] = 'N';
            p = q;
            continue;
        }
        buf[o++] = *p++;
    }
    buf[o] = 0;
}

json_t *insp_group_names(const json_t *names)
{
    json_t *groups = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v) {
        char pat[1024];
        pattern_of(json_string_value(v), pat, sizeof pat);
        json_t *g = NULL, *x;
        size_t k;
        json_array_foreach(groups, k, x)
            if (strcmp(jsonio_str(x, "pattern", ""), pat) == 0)
                g = x;
        if (!g) {
            g = json_object();
            json_object_set_new(g, "pattern", jsonio_string(pat));
            json_object_set_new(g, "count", json_integer(0));
            json_object_set_new(g, "names", json_array());
            json_array_append_new(groups, g);
        }
        json_object_set_new(g, "count", json_integer(jsonio_int(g, "count", 0) + 1));
        json_array_append(json_object_get(g, "names"), v);
    }
    return groups;
}

/* Modules whose global scales must be equal share a key: the parent + the
 * rule's fuse key (q/k/v, gate/up), or for split experts the parent + the
 * group when the fused rule names two outputs; "" when the module stands
 * alone. verify's fused_scales check and repair-scales both group by it, so
 * what verify flags is what repair-scales repairs. */
size_t insp_tie_key(const insp *s, const char *mod, char *key, size_t n)
{
    const ff_rule *r = insp_module_rule(s, mod);
    const char *dot = strrchr(mod, '.');
    int plen = dot ? (int)(dot - mod) : 0, len = 0;
    if (n)
        key[0] = 0;
    if (r && r->fuse)
        len = snprintf(key, n, "%.*s|%s", plen, mod, r->fuse);
    else if (r && (r->role == ROLE_EXPERTS_FUSED2 || r->role == ROLE_EXPERTS_FUSED2_T || r->role == ROLE_EXPERTS_FUSED2I_T) && r->expert_out[1])
        len = snprintf(key, n, "%.*s|%s", plen, mod, r->group);
    return len > 0 ? (size_t)len : 0;
}
