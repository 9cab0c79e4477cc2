/* Reading a PEFT LoRA adapter: the config fields that change the merge, the
 * refusals for what the merge does not do, and lora_A/lora_B pairing. */
#include "lora.h"

#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "jsonio.h"
#include "threadpool.h"

#define PEFT_PREFIX "base_model.model."
/* far above any adapter people train, far below an int64 cast's limit */
#define LORA_MAX_RANK 65536

/* Config keys that ask for something a plain W + s*B@A merge cannot give:
 * refused up front instead of merged wrong. `bad` says when a value asks. */
typedef struct unsupported_key {
    const char *key;
    const char *what;
} unsupported_key;

static const unsupported_key unsupported[] = {
    {"use_dora", "DoRA (use_dora: true): the magnitude vector is not merged"},
    {"modules_to_save", "modules_to_save: fully trained copies of modules are not merged"},
    {"lora_bias", "lora_bias: a trained lora_B bias is not merged"},
    {"target_parameters", "target_parameters: LoRA on raw parameters (MoE experts) is not merged"},
    {"trainable_token_indices", "trainable_token_indices: trained embedding rows are not merged"},
    {"layer_replication", "layer_replication: replicated layers are not merged"},
    {"alora_invocation_tokens", "aLoRA (alora_invocation_tokens): an activated adapter cannot be merged"},
    {"arrow_config", "Arrow routing between adapters is not merged"},
    {"use_qalora", "QA-LoRA (use_qalora) merges through pooling, not supported"},
    {"use_bdlora", "BD-LoRA (use_bdlora) is not supported"},
    {"kasa_config", "KaSA is not supported"},
    {"velora_config", "VeLoRA is not supported"},
    {"monteclora_config", "MonteCLoRA is not supported"},
};

/* A value "asks" unless it is absent, null, false, empty, or "none". */
static int asks(const json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v))
        return 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_string(v))
        return strcmp(json_string_value(v), "none") != 0 && json_string_length(v) > 0;
    return 1;
}

static int check_config(const lora_adapter *l, const char *path, ff_err *e)
{
    const char *type = jsonio_str(l->config, "peft_type", "LORA");
    if (strcmp(type, "LORA") != 0)
        return ff_fail(e, FF_EIO, "%s: peft_type is %s; only LORA adapters are supported", path, type);
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (asks(json_object_get(l->config, unsupported[i].key)))
            return ff_fail(e, FF_EIO, "%s: unsupported: %s", path, unsupported[i].what);
    const char *bias = jsonio_str(l->config, "bias", "none");
    if (strcmp(bias, "none") != 0)
        return ff_fail(e, FF_EIO, "%s: unsupported: bias \"%s\" (trained biases are not merged)", path, bias);
    json_t *r = json_object_get(l->config, "r"), *a = json_object_get(l->config, "lora_alpha");
    if (!json_is_integer(r) || json_integer_value(r) <= 0)
        return ff_fail(e, FF_EIO, "%s: r must be a positive integer", path);
    if (!json_is_number(a))
        return ff_fail(e, FF_EIO, "%s: lora_alpha must be a number", path);
    return FF_OK;
}

/* glibc's regcomp unrolls counted repetitions into automaton copies, so a
 * short pattern like ((a{1,99}){1,99}){1,99} takes gigabytes to compile.
 * Adapter configs are untrusted input: refuse patterns whose unrolled size
 * (length times every counted repetition's bound) is large, and long ones. */
#define PATTERN_MAX_LEN 1024
#define PATTERN_MAX_UNROLLED 100000.0

static int pattern_too_costly(const char *py)
{
    size_t n = strlen(py);
    if (n > PATTERN_MAX_LEN)
        return 1;
    double cost = (double)(n ? n : 1);
    for (const char *p = strchr(py, '{'); p; p = strchr(p + 1, '{')) {
        char *end;
        double lo = strtod(p + 1, &end), hi = lo;
        if (*end == ',')
            hi = end[1] == '}' ? lo : strtod(end + 1, &end);
        if (hi > lo)
            lo = hi;
        cost *= lo > 1 ? lo : 1;
        if (cost > PATTERN_MAX_UNROLLED)
            return 1;
    }
    return 0;
}

/* Python regex (what PEFT matches with) to POSIX ERE, for what adapter
 * configs use: \d \w \s classes and (?: groups. NULL when the pattern is
 * refused (too costly) or does not compile. */
static regex_t *compile_py(const char *fmt, const char *py, regex_t *rx)
{
    if (pattern_too_costly(py))
        return NULL;
    size_t n = strlen(py);
    char *t = malloc(n * 12 + 1), *o = t;
    if (!t)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        if (py[i] == '\\' && i + 1 < n)
            rep = py[i + 1] == 'd' ? "[0-9]" : py[i + 1] == 'w' ? "[[:alnum:]_]" : py[i + 1] == 's' ? "[[:space:]]" : NULL;
        if (rep) {
            o += sprintf(o, "%s", rep);
            i++;
        } else if (py[i] == '(' && i + 2 < n && py[i + 1] == '?' && py[i + 2] == ':') {
            *o++ = '(';
            i += 2;
        } else {
            *o++ = py[i];
            if (py[i] == '\\' && i + 1 < n)
                *o++ = py[++i];
        }
    }
    *o = 0;
    size_t m = strlen(fmt) + strlen(t) + 1;
    char *re = malloc(m);
    if (re)
        snprintf(re, m, fmt, t);
    int ok = re && regcomp(rx, re, REG_EXTENDED | REG_NOSUB) == 0;
    free(re);
    free(t);
    return ok ? rx : NULL;
}

/* 1 hit, 0 miss, -1 the pattern is refused or invalid. */
static int re_hit(const char *fmt, const char *py, const char *s)
{
    regex_t rx;
    if (!compile_py(fmt, py, &rx))
        return -1;
    int hit = regexec(&rx, s, 0, NULL, 0) == 0;
    regfree(&rx);
    return hit;
}

int lora_pattern_lookup(const json_t *patterns, const char *module, double *val)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)patterns, key, v) {
        int hit = re_hit("^(.*\\.)?(%s)$", key, module);
        if (hit < 0)
            return -1;
        if (hit && json_is_number(v)) {
            *val = json_number_value(v);
            return 1;
        }
    }
    return 0;
}

/* PEFT's target_modules: a string is a full-match regex ("all-linear" means
 * every Linear); a list names modules by their last dotted components.
 * 1 named, 0 not, -1 the regex is refused or invalid. */
static int targeted(const json_t *tm, const char *module)
{
    if (!tm || json_is_null(tm))
        return 1;
    if (json_is_string(tm)) {
        const char *s = json_string_value(tm);
        return strcmp(s, "all-linear") == 0 ? 1 : re_hit("^(%s)$", s, module);
    }
    size_t i;
    json_t *v;
    size_t ml = strlen(module);
    json_array_foreach(tm, i, v) {
        const char *t = json_string_value(v);
        size_t tl = t ? strlen(t) : 0;
        if (t && (strcmp(module, t) == 0 ||
                  (ml > tl && module[ml - tl - 1] == '.' && strcmp(module + ml - tl, t) == 0)))
            return 1;
    }
    return 0;
}

/* Splits "base_model.model.<module>.lora_X.weight"; returns 'A', 'B' or 0. */
static int split_name(const char *name, char **module)
{
    const char *s = strncmp(name, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0 ? name + strlen(PEFT_PREFIX) : name;
    static const char *const suf[2] = {".lora_A.weight", ".lora_B.weight"};
    size_t n = strlen(s);
    for (int k = 0; k < 2; k++) {
        size_t m = strlen(suf[k]);
        if (n > m && strcmp(s + n - m, suf[k]) == 0) {
            *module = strndup(s, n - m);
            return k ? 'B' : 'A';
        }
    }
    return 0;
}

/* Why a tensor that is not lora_A/lora_B is in the file. */
static const char *stray_why(const char *name)
{
    if (strstr(name, "lora_embedding_"))
        return "embedding LoRA (lora_embedding_A/B) is not supported";
    if (strstr(name, "lora_magnitude_vector"))
        return "DoRA magnitude vectors are not supported";
    if (strstr(name, "modules_to_save") || strstr(name, "original_module"))
        return "modules_to_save weights are not supported";
    if (strstr(name, ".lora_B.bias") || strstr(name, ".lora_A.bias"))
        return "LoRA biases (lora_bias) are not supported";
    return "not a lora_A/lora_B weight";
}

static int cmp_mod(const void *a, const void *b)
{
    return strcmp(((const lora_module *)a)->module, ((const lora_module *)b)->module);
}

static lora_module *find_or_add(lora_adapter *l, char *module, size_t *cap)
{
    for (size_t i = 0; i < l->nmods; i++)
        if (strcmp(l->mods[i].module, module) == 0) {
            free(module);
            return &l->mods[i];
        }
    if (l->nmods == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        lora_module *n = realloc(l->mods, nc * sizeof *n);
        if (!n) {
            free(module);
            return NULL;
        }
        l->mods = n;
        *cap = nc;
    }
    lora_module *m = &l->mods[l->nmods++];
    memset(m, 0, sizeof *m);
    m->module = module;
    return m;
}

static int pair_tensors(lora_adapter *l, const char *path, ff_err *e)
{
    size_t cap = 0;
    for (size_t i = 0; i < l->ck.ntensors; i++) {
        const ckpt_tensor *t = &l->ck.tensors[i];
        char *module = NULL;
        int which = split_name(t->st->name, &module);
        if (!which)
            return ff_fail(e, FF_EIO, "%s: tensor %s: %s", path, t->st->name, stray_why(t->st->name));
        if (!module)
            return ff_oom(e, "out of memory");
        if (t->st->ndim != 2 || !ff_dtype_is_quantizable(t->st->dtype)) {
            free(module);
            return ff_fail(e, FF_EIO, "%s: tensor %s: not a 2-D float matrix", path, t->st->name);
        }
        lora_module *m = find_or_add(l, module, &cap);
        if (!m)
            return ff_oom(e, "out of memory");
        const ckpt_tensor **slot = which == 'A' ? &m->a : &m->b;
        if (*slot)
            return ff_fail(e, FF_EIO, "%s: module %s: two lora_%c tensors", path, m->module, which);
        *slot = t;
        l->ntensors++;
    }
    if (l->nmods == 0)
        return ff_fail(e, FF_EIO, "%s: no lora_A/lora_B tensors", path);
    qsort(l->mods, l->nmods, sizeof *l->mods, cmp_mod);
    return FF_OK;
}

/* Rank, alpha and scale of one module, cross-checked against its shapes. */
static int resolve_module(lora_adapter *l, lora_module *m, const char *path, ff_err *e)
{
    if (!m->a || !m->b)
        return ff_fail(e, FF_EIO, "%s: module %s has lora_%c but no lora_%c", path, m->module,
                       m->a ? 'A' : 'B', m->a ? 'B' : 'A');
    const char *cfg = "adapter_config.json";
    int t = targeted(json_object_get(l->config, "target_modules"), m->module);
    if (t < 0)
        return ff_fail(e, FF_EIO, "%s/%s: target_modules is not a regular expression fp4forge can compile "
                       "(invalid, longer than %d characters, or counted repetitions too large)", l->dir, cfg,
                       PATTERN_MAX_LEN);
    if (!t)
        return ff_fail(e, FF_EIO, "%s: module %s is not named by target_modules", path, m->module);
    json_t *ex = json_object_get(l->config, "exclude_modules");
    t = ex && !json_is_null(ex) ? targeted(ex, m->module) : 0;
    if (t < 0)
        return ff_fail(e, FF_EIO, "%s/%s: exclude_modules is not a regular expression fp4forge can compile", l->dir, cfg);
    if (t)
        return ff_fail(e, FF_EIO, "%s: module %s is in exclude_modules", path, m->module);
    double r = (double)l->r, alpha = l->alpha;
    if (lora_pattern_lookup(json_object_get(l->config, "rank_pattern"), m->module, &r) < 0 ||
        lora_pattern_lookup(json_object_get(l->config, "alpha_pattern"), m->module, &alpha) < 0)
        return ff_fail(e, FF_EIO, "%s/%s: a rank_pattern or alpha_pattern key is not a regular expression "
                       "fp4forge can compile", l->dir, cfg);
    /* PEFT builds the layer with int(r): a fractional or absurd rank cannot load there */
    if (!(r >= 1 && r <= LORA_MAX_RANK && r == floor(r)))
        return ff_fail(e, FF_EIO, "%s/%s: module %s: rank %g is not an integer in [1, %d]", l->dir, cfg,
                       m->module, r, LORA_MAX_RANK);
    if (!isfinite(alpha))
        return ff_fail(e, FF_EIO, "%s/%s: module %s: lora_alpha is not finite", l->dir, cfg, m->module);
    m->r = (int64_t)r;
    m->alpha = alpha;
    if (m->a->st->shape[0] != m->r || m->b->st->shape[1] != m->r)
        return ff_fail(e, FF_EIO, "%s: module %s: lora_A is [%lld, %lld] and lora_B [%lld, %lld], config gives r = %lld",
                       path, m->module, (long long)m->a->st->shape[0], (long long)m->a->st->shape[1],
                       (long long)m->b->st->shape[0], (long long)m->b->st->shape[1], (long long)m->r);
    /* PEFT computes the scaling in Python (double); torch multiplies by it in f32. */
    m->scale = (float)(l->rslora ? alpha / sqrt(r) : alpha / r);
    return FF_OK;
}

int lora_open(lora_adapter *l, const char *dir, ff_err *e)
{
    memset(l, 0, sizeof *l);
    l->dir = strdup(dir);
    char *cp = fs_join(dir, "adapter_config.json");
    int rc = l->dir && cp ? jsonio_load(cp, &l->config, e) : ff_oom(e, "%s: out of memory", dir);
    if (!rc)
        rc = check_config(l, cp, e);
    if (!rc) {
        l->r = jsonio_int(l->config, "r", 0);
        l->alpha = json_number_value(json_object_get(l->config, "lora_alpha"));
        l->rslora = jsonio_bool(l->config, "use_rslora", 0);
        l->fan_in_fan_out = jsonio_bool(l->config, "fan_in_fan_out", 0);
        rc = ckpt_open(&l->ck, dir, 0, e);
        if (!rc && l->ck.nfiles == 0)
            rc = ff_fail(e, FF_EIO, "%s: no adapter_model.safetensors", dir);
    }
    char *sp = fs_join(dir, "adapter_model.safetensors");
    if (!rc && !sp)
        rc = ff_oom(e, "%s: out of memory", dir);
    if (!rc)
        rc = pair_tensors(l, sp, e);
    for (size_t i = 0; !rc && i < l->nmods; i++)
        rc = resolve_module(l, &l->mods[i], sp, e);
    free(sp);
    free(cp);
    if (rc) /* a refused adapter holds nothing: callers need not close it */
        lora_close(l);
    return rc;
}

void lora_close(lora_adapter *l)
{
    for (size_t i = 0; i < l->nmods; i++)
        free(l->mods[i].module);
    free(l->mods);
    if (l->ck.dir)
        ckpt_close(&l->ck);
    json_decref(l->config);
    free(l->dir);
    pool_destroy(l->pool);
    free(l->spare);
    memset(l, 0, sizeof *l);
}
