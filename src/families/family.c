/* The family table and the generic rule matcher. Adding a family is one
 * line here plus its own folder under src/families/. */
#include "family.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "famdesc.h"
#include "fsutil.h"
#include "jsonio.h"

/* The family table: one entry a family, in detection order. Each names the
 * ff_family ff_family_<name> its folder defines. */
#define FF_FAMILY_TABLE(X) \
    X(gemma4)              \
    X(llama)               \
    X(qwen_moe)            \
    X(mixtral)             \
    X(glm4_moe)            \
    X(llama4)              \
    X(deepseek_v3)         \
    X(qwen3_5)             \
    X(qwen3_next)          \
    X(minimax_m2)          \
    X(glm4_moe_lite)       \
    X(deepseek_v32)        \
    X(kimi_k25)            \
    X(gpt_oss)             \
    X(kimi_k3)             \
    /* end of the table */

#define DECLARE_FAMILY(name) extern const ff_family ff_family_##name;
#define LIST_FAMILY(name) &ff_family_##name,
FF_FAMILY_TABLE(DECLARE_FAMILY)

const ff_family *const ff_families[] = {FF_FAMILY_TABLE(LIST_FAMILY) NULL};

const ff_family *ff_family_detect(const json_t *config)
{
    for (size_t i = 0; ff_families[i]; i++)
        if (ff_family_claims(ff_families[i], config))
            return ff_families[i];
    return NULL;
}

int ff_family_open(const ff_family *f, const ff_family **out, ff_family **own, ff_err *e)
{
    *own = NULL;
    *out = f;
    if (!f->desc_text || f->desc)
        return FF_OK;
    char origin[128];
    snprintf(origin, sizeof origin, "built-in family %s", f->name);
    ff_famdesc *d;
    int rc = famdesc_parse(f->desc_text, strlen(f->desc_text), origin, f, &d, e);
    if (rc)
        return rc;
    *out = *own = &d->fam;
    return FF_OK;
}

void ff_family_close(ff_family *f)
{
    if (f)
        famdesc_free((ff_famdesc *)f->desc);
}

int ff_family_parse(const char *text, size_t len, const char *origin, ff_family **out, ff_err *e)
{
    ff_famdesc *d;
    int rc = famdesc_parse(text, len, origin, NULL, &d, e);
    *out = rc ? NULL : &d->fam;
    return rc;
}

int ff_family_load(const char *path, ff_family **out, ff_err *e)
{
    *out = NULL;
    size_t len;
    char *text = fs_read_all(path, &len, e);
    if (!text)
        return e->code;
    int rc = ff_family_parse(text, len, path, out, e);
    free(text);
    return rc;
}

/* A described family's text parsed for one question (a plan keeps its
 * instance; detection and geometry ask once). */
static int with_desc(const ff_family *f, const ff_famdesc **d, ff_family **own, ff_err *e)
{
    const ff_family *inst;
    int rc = ff_family_open(f, &inst, own, e);
    *d = rc ? NULL : inst->desc;
    return rc;
}

/* Whether a description's model-type line lists mt, read off the text:
 * detection tries every family and must not allocate (an allocation that
 * failed would read as "not this family"). */
static int text_claims(const char *text, const char *mt)
{
    size_t n = strlen(mt);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, "model-type", 10) != 0 || (l[10] != ' ' && l[10] != '\t'))
            continue;
        for (const char *w = l + 10; *w && *w != '\n' && *w != '#';) {
            w += strspn(w, " \t\r");
            size_t len = strcspn(w, " \t\r\n#");
            if (len && len == n && strncmp(w, mt, n) == 0)
                return 1;
            w += len;
        }
        return 0;
    }
    return 0;
}

int ff_family_claims(const ff_family *f, const json_t *config)
{
    if (f->matches)
        return f->matches(config);
    if (f->desc)
        return famdesc_claims(f->desc, config);
    return f->desc_text && text_claims(f->desc_text, jsonio_str(config, "model_type", ""));
}

int ff_family_expect(const ff_family *f, const json_t *config, ff_expect *x, ff_err *e)
{
    if (f->expect)
        return f->expect(config, x, e);
    const ff_famdesc *d;
    ff_family *own;
    int rc = with_desc(f, &d, &own, e);
    if (!rc && !d)
        rc = ff_fail(e, FF_EIO, "the %s family says nothing of what its config implies", f->name);
    if (!rc)
        rc = famdesc_expect(d, config, x, e);
    ff_family_close(own);
    return rc;
}

const ff_family *ff_family_by_name(const char *name)
{
    for (size_t i = 0; ff_families[i]; i++)
        if (strcmp(ff_families[i]->name, name) == 0)
            return ff_families[i];
    return NULL;
}

const ff_family *ff_family_by_preset(const char *preset)
{
    for (size_t i = 0; ff_families[i]; i++)
        for (const ff_synth_preset *p = ff_families[i]->synth_presets; p && p->name; p++)
            if (strcmp(p->name, preset) == 0)
                return ff_families[i];
    return NULL;
}

void ff_expert_module(char *buf, size_t n, const char *fused, int64_t e, const char *out)
{
    const char *dot = strrchr(fused, '.');
    snprintf(buf, n, "%.*s.%lld.%s", dot ? (int)(dot - fused) : 0, fused, (long long)e, out);
}

int ff_expert_module_parse(const char *module, size_t *parent_len, long *e, const char **out)
{
    const char *last = strrchr(module, '.'), *num = last;
    while (num && num > module && isdigit((unsigned char)num[-1]))
        num--;
    if (!last || num == last || num == module || num[-1] != '.')
        return 0;
    if (parent_len)
        *parent_len = (size_t)(num - 1 - module);
    if (e)
        *e = strtol(num, NULL, 10);
    if (out)
        *out = last + 1;
    return 1;
}

/* Appends with snprintf semantics: never overruns, always terminated. */
static void append(char *buf, size_t n, size_t *len, const char *s)
{
    if (*len + 1 >= n)
        return;
    int w = snprintf(buf + *len, n - *len, "%s", s);
    *len += w > 0 ? (size_t)w : 0;
    if (*len >= n)
        *len = n - 1;
}

void ff_family_list(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; ff_families[i]; i++) {
        append(buf, n, &len, i ? "; " : "");
        append(buf, n, &len, ff_families[i]->name);
        append(buf, n, &len, " (");
        append(buf, n, &len, ff_families[i]->model_types);
        append(buf, n, &len, ")");
    }
}

void ff_family_presets(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; ff_families[i]; i++)
        for (const ff_synth_preset *p = ff_families[i]->synth_presets; p && p->name; p++) {
            append(buf, n, &len, len ? "|" : "");
            append(buf, n, &len, p->name);
        }
}

int ff_matcher_init(ff_matcher *m, const ff_family *fam, const json_t *config, ff_err *e)
{
    memset(m, 0, sizeof *m);
    int rc = ff_family_open(fam, &fam, &m->own, e);
    if (rc)
        return rc;
    m->fam = fam;
    m->config = config;
    m->re = calloc(fam->nrules, sizeof *m->re);
    /* a matcher that failed holds nothing: callers free only one that opened */
    if (!m->re) {
        ff_matcher_free(m);
        return ff_oom(e, "out of memory");
    }
    for (size_t i = 0; i < fam->nrules; i++) {
        if (regcomp(&m->re[i], fam->rules[i].regex, REG_EXTENDED | REG_NOSUB) != 0) {
            rc = ff_fail(e, FF_EIO, "%s: bad rule regex %s", fam->name, fam->rules[i].regex);
            ff_matcher_free(m);
            return rc;
        }
        m->n = i + 1;
    }
    return FF_OK;
}

void ff_matcher_free(ff_matcher *m)
{
    for (size_t i = 0; i < m->n; i++)
        regfree(&m->re[i]);
    free(m->re);
    ff_family_close(m->own);
    memset(m, 0, sizeof *m);
}

const ff_rule *ff_match(const ff_matcher *m, const char *name)
{
    const ff_rule *over = m->fam->override_rule && m->config ? m->fam->override_rule(m->config, name) : NULL;
    if (over)
        return over;
    for (size_t i = 0; i < m->n; i++)
        if (regexec(&m->re[i], name, 0, NULL, 0) == 0)
            return &m->fam->rules[i];
    return NULL;
}

ff_geometry *ff_geometry_new(const ff_family *fam, const json_t *config, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g) {
        ff_oom(e, "out of memory");
        return NULL;
    }
    const ff_famdesc *d = NULL;
    ff_family *own = NULL;
    int rc = fam->geometry ? fam->geometry(config, g, e) : with_desc(fam, &d, &own, e);
    if (!rc && !fam->geometry)
        rc = d ? famdesc_geometry(d, config, g, e)
               : ff_fail(e, FF_EIO, "the %s family does not describe its geometry", fam->name);
    ff_family_close(own);
    if (rc) {
        free(g);
        return NULL;
    }
    return g;
}

/* vLLM's packed_modules_mapping: Linears it loads into one GEMM, which must
 * share one scheme and one global scale. */
static const struct {
    const char *leaf, *group;
} fused_leaves[] = {
    {"q_proj", "qkv"},         {"k_proj", "qkv"},         {"v_proj", "qkv"},
    {"gate_proj", "gate_up"},  {"up_proj", "gate_up"},    {"w1", "w13"}, {"w3", "w13"},
    {"q_a_proj", "mla_a"},     {"kv_a_proj_with_mqa", "mla_a"},
    {NULL, NULL},
};

const char *ff_fused_group(const char *leaf, size_t len)
{
    for (size_t i = 0; fused_leaves[i].leaf; i++)
        if (strlen(fused_leaves[i].leaf) == len && memcmp(fused_leaves[i].leaf, leaf, len) == 0)
            return fused_leaves[i].group;
    return NULL;
}

const char *ff_fused_partner(const char *group, size_t k)
{
    for (size_t i = 0; fused_leaves[i].leaf; i++)
        if (strcmp(fused_leaves[i].group, group) == 0 && k-- == 0)
            return fused_leaves[i].leaf;
    return NULL;
}

const char *const ff_expert_count_keys[] = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts",
                                            NULL};

int64_t ff_config_experts(const json_t *config, const char **key)
{
    const json_t *tc = json_object_get(config, "text_config");
    const json_t *objs[] = {config, json_is_object(tc) ? tc : NULL};
    for (size_t o = 0; o < 2; o++)
        for (int i = 0; objs[o] && ff_expert_count_keys[i]; i++) {
            const json_t *v = json_object_get(objs[o], ff_expert_count_keys[i]);
            if (json_is_integer(v) && json_integer_value(v) > 0) {
                *key = ff_expert_count_keys[i];
                return json_integer_value(v);
            }
        }
    *key = NULL;
    return 0;
}

int ff_linear_leaf(const char *leaf, size_t len)
{
    static const char *const leaves[] = {
        "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "query_key_value", "gate_proj", "up_proj", "down_proj",
        "gate_up_proj", "w1", "w2", "w3", "fc1", "fc2", "dense", "out_proj", "q_a_proj", "q_b_proj",
        "kv_a_proj_with_mqa", "kv_b_proj", "c_attn", "c_proj", "c_fc", "dense_h_to_4h", "dense_4h_to_h",
        "wq_b", /* the DeepSeek sparse-attention indexer's query projection: vLLM builds it with quant_config */
        NULL};
    for (int i = 0; leaves[i]; i++)
        if (strlen(leaves[i]) == len && memcmp(leaves[i], leaf, len) == 0)
            return 1;
    return 0;
}
