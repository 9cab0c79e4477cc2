#include "arch.h"

#include <stdlib.h>
#include <string.h>

extern const arch_family arch_gemma4, arch_llama;

const arch_family *const arch_families[] = {&arch_gemma4, &arch_llama, NULL};

const arch_family *arch_detect(const json_t *config)
{
    for (size_t i = 0; arch_families[i]; i++)
        if (arch_families[i]->matches(config))
            return arch_families[i];
    return NULL;
}

const arch_family *arch_by_name(const char *name)
{
    for (size_t i = 0; arch_families[i]; i++)
        if (strcmp(arch_families[i]->name, name) == 0)
            return arch_families[i];
    return NULL;
}

int arch_matcher_init(arch_matcher *m, const arch_family *fam, ff_err *e)
{
    memset(m, 0, sizeof *m);
    m->fam = fam;
    m->re = calloc(fam->nrules, sizeof *m->re);
    if (!m->re)
        return ff_fail(e, FF_EIO, "out of memory");
    for (size_t i = 0; i < fam->nrules; i++) {
        if (regcomp(&m->re[i], fam->rules[i].regex, REG_EXTENDED | REG_NOSUB) != 0) {
            m->n = i;
            return ff_fail(e, FF_EIO, "%s: bad rule regex %s", fam->name, fam->rules[i].regex);
        }
        m->n = i + 1;
    }
    return FF_OK;
}

void arch_matcher_free(arch_matcher *m)
{
    for (size_t i = 0; i < m->n; i++)
        regfree(&m->re[i]);
    free(m->re);
    memset(m, 0, sizeof *m);
}

const arch_rule *arch_match(const arch_matcher *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (regexec(&m->re[i], name, 0, NULL, 0) == 0)
            return &m->fam->rules[i];
    return NULL;
}
