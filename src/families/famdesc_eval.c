/* A description's config keys read against one config.json: which family
 * claims it, the model's geometry and the counts the invariants hold the
 * plan to. The same arithmetic the C families do, driven by named keys. */
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "famdesc.h"
#include "jsonio.h"

const json_t *famdesc_config(const ff_famdesc *d, const json_t *config)
{
    const json_t *s = d->section ? json_object_get(config, d->section) : NULL;
    return json_is_object(s) ? s : config;
}

int famdesc_claims(const ff_famdesc *d, const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    for (int i = 0; d->types[i]; i++)
        if (strcmp(mt, d->types[i]) == 0)
            return 1;
    return 0;
}

/* The first of keys the config holds, else dflt. */
static int64_t first_int(const json_t *c, const char *const *keys, int64_t dflt)
{
    for (int i = 0; keys[i]; i++)
        if (json_is_integer(json_object_get(c, keys[i])))
            return jsonio_int(c, keys[i], dflt);
    return dflt;
}

static int64_t key_or(const json_t *c, const char *key, int64_t dflt)
{
    return key ? jsonio_int(c, key, dflt) : dflt;
}

static int listed(const json_t *c, const char *key, int layer)
{
    const json_t *a = key ? json_object_get(c, key) : NULL;
    for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++)
        if (json_integer_value(json_array_get(a, i)) == layer)
            return 1;
    return 0;
}

int famdesc_is_moe_layer(const famdesc_moe_layers *m, const json_t *c, int layer)
{
    if (m->all)
        return 1;
    int64_t step = key_or(c, m->step, 1), freq = key_or(c, m->freq, 1), every = key_or(c, m->interval, 1);
    if (step <= 0 || freq <= 0 || every <= 0)
        return 0;
    int64_t end = key_or(c, m->end, -1);
    return (layer + 1) % step == 0 && layer % freq == 0 && (layer + 1) % every == 0 &&
           layer >= key_or(c, m->first_dense, 0) && layer >= key_or(c, m->start, 0) && (end < 0 || layer <= end) &&
           !listed(c, m->except, layer);
}

int famdesc_geometry(const ff_famdesc *d, const json_t *config, ff_geometry *g, ff_err *e)
{
    const json_t *c = famdesc_config(d, config);
    int rc = ff_decoder_geometry(c, g, e);
    if (rc)
        return rc;
    for (size_t i = 0; i < d->nrules; i++)
        g->has_vision |= d->rules[i].tower && json_is_object(json_object_get(config, "vision_config"));
    if (!d->experts_keys[0])
        return FF_OK;
    g->experts = (int)first_int(c, d->experts_keys, 0);
    g->top_k = (int)first_int(c, d->top_k_keys, 0);
    g->moe_intermediate = first_int(c, d->width_keys, 0);
    for (int i = 0; g->experts > 0 && i < g->layers; i++)
        if (famdesc_is_moe_layer(&d->moe, c, i)) {
            g->moe_layers++;
            g->layer[i].intermediate = 0;
        }
    g->moe = g->moe_layers > 0;
    if (g->moe && (g->top_k <= 0 || g->moe_intermediate <= 0))
        return ff_fail(e, FF_EIO, "config.json: %s is set but %s or %s is missing", d->experts_keys[0],
                       d->top_k_keys[0], d->width_keys[0]);
    return FF_OK;
}

/* One layer's dense Linears: its kind's own count, else its class's. */
static int64_t dense_of_layer(const ff_famdesc *d, const char *kind, int moe)
{
    for (int i = 0; kind && i < d->nkind_dense[moe]; i++)
        if (strcmp(d->kind_dense[moe][i].kind, kind) == 0)
            return d->kind_dense[moe][i].dense;
    return moe ? d->dense_per_moe_layer : d->dense_per_layer;
}

int64_t famdesc_first_bad_number(const json_t *list, int64_t layers, int64_t base)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *v = json_array_get(list, i);
        if (!json_is_integer(v) || json_integer_value(v) < base || json_integer_value(v) >= layers + base)
            return (int64_t)i;
    }
    return -1;
}

int famdesc_number_listed(const json_t *list, int64_t l, int64_t base)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (json_integer_value(json_array_get(list, i)) == l + base)
            return 1;
    return 0;
}

/* The config's list of kinds, or of one kind's layer numbers, checked once:
 * every entry must name a layer, so a list counted from the other base is
 * refused, not read one layer off. */
static int check_kinds_list(const ff_famdesc *d, const json_t *list, int64_t layers, ff_err *e)
{
    if (!d->kinds_numbered) {
        if (!json_is_array(list) || (int64_t)json_array_size(list) < layers)
            return ff_fail(e, FF_EIO, "config.json: %s (layer-kinds) is not a list of the %lld layers' kinds",
                           d->kinds_key, (long long)layers);
        return FF_OK;
    }
    if (!json_is_array(list))
        return ff_fail(e, FF_EIO, "config.json: %s (layer-kind-numbers) is not a list of layer numbers", d->kinds_key);
    int64_t bad = famdesc_first_bad_number(list, layers, d->kinds_base);
    if (bad >= 0)
        return ff_fail(e, FF_EIO, "config.json: %s%s%s[%lld] is not a layer number from %lld to %lld "
                                  "(layer-kind-numbers counts from %lld)",
                       d->section ? d->section : "", d->section ? "." : "", d->kinds_key, (long long)bad,
                       (long long)d->kinds_base, (long long)(layers - 1 + d->kinds_base), (long long)d->kinds_base);
    return FF_OK;
}

/* Layer l's kind, from a list check_kinds_list accepted. */
static const char *layer_kind(const ff_famdesc *d, const json_t *list, int64_t l)
{
    if (d->kinds_numbered)
        return famdesc_number_listed(list, l, d->kinds_base) ? d->kinds_named : d->kinds_other;
    return json_string_value(json_array_get(list, (size_t)l));
}

/* Dense Linears summed layer by layer, when the counts depend on a layer's
 * kind; a kinds list that does not name every layer is refused, not guessed. */
static int dense_by_kind(const ff_famdesc *d, const json_t *c, const ff_geometry *g, int64_t layers, int64_t *dense,
                         ff_err *e)
{
    const json_t *list = jsonio_path(c, d->kinds_key);
    int rc = check_kinds_list(d, list, layers, e);
    *dense = 0;
    for (int64_t l = 0; l < layers && rc == FF_OK; l++) {
        const char *kind = layer_kind(d, list, l);
        if (!kind)
            return ff_fail(e, FF_EIO, "config.json: %s[%lld] is not a string", d->kinds_key, (long long)l);
        int moe = g->experts > 0 && famdesc_is_moe_layer(&d->moe, c, (int)l);
        *dense += dense_of_layer(d, kind, moe);
    }
    return rc;
}

int famdesc_expect(const ff_famdesc *d, const json_t *config, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = famdesc_geometry(d, config, g, e);
    if (!rc) {
        const json_t *c = famdesc_config(d, config);
        int64_t layers = key_or(c, d->layers_key, 0), moe = g->moe_layers;
        int shared = d->shared_key && jsonio_int(c, d->shared_key, 0) > 0;
        int64_t dense = (layers - moe) * d->dense_per_layer + moe * d->dense_per_moe_layer;
        if (d->kinds_key)
            rc = dense_by_kind(d, c, g, layers, &dense, e);
        dense += shared ? moe * d->shared_dense : 0;
        int64_t routers = moe * (d->routers_per_moe_layer + (shared ? d->shared_routers : 0));
        if (!rc)
            ff_decoder_moe_expect(g, dense, g->moe ? g->experts : 0, routers, x);
    }
    free(g);
    return rc;
}
