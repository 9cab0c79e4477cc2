/* The family table and the generic rule matcher. Adding a family is one
 * line here plus its own folder under src/families/. */
#include "family.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (ff_families[i]->matches(config))
            return ff_families[i];
    return NULL;
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
    m->fam = fam;
    m->config = config;
    m->re = calloc(fam->nrules, sizeof *m->re);
    if (!m->re)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < fam->nrules; i++) {
        if (regcomp(&m->re[i], fam->rules[i].regex, REG_EXTENDED | REG_NOSUB) != 0) {
            m->n = i;
            return ff_fail(e, FF_EIO, "%s: bad rule regex %s", fam->name, fam->rules[i].regex);
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
    if (!fam->geometry || fam->geometry(config, g, e) != FF_OK) {
        if (!fam->geometry)
            ff_fail(e, FF_EIO, "the %s family does not describe its geometry", fam->name);
        free(g);
        return NULL;
    }
    return g;
}
