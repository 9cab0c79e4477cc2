#include "qconfig.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer);

/* The compressed-tensors release whose format this mirrors (and the oracle). */
#define CT_FORMAT_VERSION "0.19.0"

/* Built with json_pack, which returns NULL when any allocation fails: a
 * tree built key by key drops a key whose value could not be made, and the
 * config would be written without it. */
static json_t *weights_args(const char *observer)
{
    return json_pack("{s:n, s:n, s:b, s:i, s:i, s:s, s:{}, s:s, s:s, s:b, s:s, s:n}", "actorder", "block_structure",
                     "dynamic", 0, "group_size", 16, "num_bits", 4, "observer",
                     observer ? observer : "memoryless_minmax", "observer_kwargs", "scale_dtype",
                     "torch.float8_e4m3fn", "strategy", "tensor_group", "symmetric", 1, "type", "float", "zp_dtype");
}

/* FP8 weight-only channel-wise as llm-compressor 0.14 saves
 * QuantizationArgs(num_bits=8, type="float", strategy="channel",
 * symmetric=True, dynamic=False): the observer is always memoryless_minmax
 * for weights, scales in the weight's dtype (scale_dtype null). */
static json_t *fp8_weights_args(void)
{
    return json_pack("{s:n, s:n, s:b, s:n, s:i, s:s, s:{}, s:n, s:s, s:b, s:s, s:n}", "actorder", "block_structure",
                     "dynamic", 0, "group_size", "num_bits", 8, "observer", "memoryless_minmax", "observer_kwargs",
                     "scale_dtype", "strategy", "channel", "symmetric", 1, "type", "float", "zp_dtype");
}

static json_t *ignore_list(const plan *p)
{
    json_t *ign = json_array();
    for (size_t i = 0; ign && i < p->nignore; i++)
        if (json_array_append_new(ign, json_string(p->ignore[i]))) {
            json_decref(ign);
            return NULL;
        }
    return ign;
}

/* observer: llm-compressor's registry name of the weight observer, as it
 * records it in weights.observer (NULL: memoryless_minmax). */
static json_t *build(const plan *p, const char *observer)
{
    return json_pack("{s:{s:{s:s, s:n, s:n, s:[s], s:o}}, s:s, s:n, s:o, s:n, s:s, s:s, s:{}, s:{}, s:s}",
                     "config_groups", "group_0", "format", "nvfp4-pack-quantized", "input_activations",
                     "output_activations", "targets", "Linear", "weights", weights_args(observer), "format",
                     "nvfp4-pack-quantized", "global_compression_ratio", "ignore", ignore_list(p), "kv_cache_scheme",
                     "quant_method", "compressed-tensors", "quantization_status", "compressed", "sparsity_config",
                     "transform_config", "version", CT_FORMAT_VERSION);
}

/* A module's place in named_modules() order, approximated from its name:
 * decoder layers by number, a layer's attention before its MLP (every
 * family's __init__ order), then the projections as their __init__s create
 * them; anything else after, in file order. Which group comes first
 * (compressed-tensors names groups in that order) and the order of the FP8
 * targets depend on it, not the bytes. */
static int proj_rank(const char *last)
{
    static const char *const order[] = {"q_proj", "q_a_proj", "q_b_proj", "k_proj", "kv_a_proj_with_mqa",
                                        "kv_b_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", NULL};
    for (int i = 0; order[i]; i++)
        if (strcmp(last, order[i]) == 0)
            return i;
    return 64;
}

static void module_rank(const char *m, long key[3])
{
    key[0] = 1L << 30;   /* no layer number: after the layers */
    for (const char *s = m; *s; s++)
        if (*s == '.' && isdigit((unsigned char)s[1])) {
            key[0] = strtol(s + 1, NULL, 10);
            break;
        }
    key[1] = strstr(m, "attn") || strstr(m, "attention") ? 0 : 1;
    const char *dot = strrchr(m, '.');
    key[2] = proj_rank(dot ? dot + 1 : m);
}

static int rank_less(const long a[3], const long b[3])
{
    for (int d = 0; d < 3; d++)
        if (a[d] != b[d])
            return a[d] < b[d];
    return 0;
}

/* Whether the FP8 group comes first: its earliest module precedes the
 * earliest NVFP4 one (ties: file order). */
static int fp8_first(const plan *p)
{
    long best[3] = {0}, k[3];
    int fp8 = 0;
    for (size_t i = 0; i < p->nmembers; i++) {
        module_rank(p->members[i].module, k);
        if (i == 0 || rank_less(k, best)) {
            memcpy(best, k, sizeof k);
            fp8 = p->members[i].fp8;
        }
    }
    return fp8;
}

/* The FP8 group's targets, in named_modules() order as far as module_rank
 * tells it (llm-compressor keeps a recipe's targets as given; a recipe built
 * from the model lists them so): the exact module names. A name cannot hit
 * vLLM's fused layer names (qkv_proj, gate_up_proj), which a short regex such
 * as re:.*v_proj does (re.match on "...qkv_proj"), vLLM maps it through the
 * model's hf_to_vllm_mapper, and compressed-tensors ranks an exact name above
 * the NVFP4 group's "Linear" class target, as vLLM does (names first, then
 * fused shards by name, then class). */
static int cmp_rank(const void *a, const void *b, void *plan_)
{
    const plan *p = plan_;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    long kx[3], ky[3];
    module_rank(p->members[x].module, kx);
    module_rank(p->members[y].module, ky);
    return rank_less(kx, ky) ? -1 : rank_less(ky, kx) ? 1 : (x > y) - (x < y);
}

static int last_is(const char *module, const char *last)
{
    const char *dot = strrchr(module, '.');
    return strcmp(dot ? dot + 1 : module, last) == 0;
}

/* A q/k unit without v_proj (Gemma-4's attention_k_eq_v layers): vLLM still
 * stacks it as qkv_proj and asks for a target of each of q_proj, k_proj and
 * v_proj, and an exact name of the missing v_proj makes compressed-tensors
 * warn that it matches nothing. */
static int qk_without_v(const plan *p, const plan_unit *u)
{
    if (u->count != 2)
        return 0;
    const char *a = p->members[u->first].module, *b = p->members[u->first + 1].module;
    return (last_is(a, "q_proj") && last_is(b, "k_proj")) || (last_is(a, "k_proj") && last_is(b, "q_proj"));
}

/* Such a unit's one target: its parent with the components before the
 * first "<name>.<number>" as a repeatable group (the HF names and the names
 * vLLM's mappers give differ there: model.language_model.layers.5 against
 * language_model.model.layers.5), the rest escaped, then (q|k|v)_proj$; a
 * tower's layers (model.vision_tower.encoder.layers.5) do not match. */
/* n bytes of s at r + *len, every character but [A-Za-z0-9_] escaped (the
 * names are Python regex text to both readers). */
static void put_escaped(char *r, size_t *len, size_t cap, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int plain = isalnum((unsigned char)s[i]) || s[i] == '_';
        *len += (size_t)snprintf(r + *len, cap - *len, "%s%c", plain ? "" : "\\", s[i]);
    }
}

static char *qkv_regex(const char *module)
{
    const char *end = strrchr(module, '.'), *rest = module;
    for (const char *s = module; end && s < end; s++)
        if (*s == '.' && isdigit((unsigned char)s[1])) {
            for (rest = s; rest > module && rest[-1] != '.'; rest--)
                ;
            break;
        }
    size_t cap = 3 * strlen(module) + 64, len = 0;
    char *r = end ? malloc(cap) : NULL;
    if (!r)
        return NULL;
    len += (size_t)snprintf(r, cap, "re:%s", rest > module ? "(?:" : "");
    for (const char *c = module; c < rest; c = strchr(c, '.') + 1) {   /* each prefix component, an alternative */
        len += (size_t)snprintf(r + len, cap - len, "%s", c == module ? "" : "|");
        put_escaped(r, &len, cap, c, (size_t)(strchr(c, '.') - c) + 1);
    }
    len += (size_t)snprintf(r + len, cap - len, "%s", rest > module ? ")*" : "");
    put_escaped(r, &len, cap, rest, (size_t)(end - rest));
    snprintf(r + len, cap - len, "\\.(?:q|k|v)_proj$");
    return r;
}

/* One target: member (its place in the order) and its text. */
typedef struct target {
    size_t member;
    char *text;
} target;

static int cmp_target(const void *a, const void *b, void *plan_)
{
    return cmp_rank(&((const target *)a)->member, &((const target *)b)->member, plan_);
}

/* The FP8 units' targets, -1 when out of memory. */
static int collect_targets(const plan *p, target *t, size_t *n)
{
    *n = 0;
    for (size_t u = 0; u < p->nunits; u++) {
        const plan_unit *un = &p->units[u];
        if (!un->fp8)
            continue;
        if (qk_without_v(p, un)) {
            t[*n] = (target){un->first, qkv_regex(p->members[un->first].module)};
            if (!t[(*n)++].text)
                return -1;
            continue;
        }
        for (size_t k = 0; k < un->count; k++) {
            t[*n] = (target){un->first + k, strdup(p->members[un->first + k].module)};
            if (!t[(*n)++].text)
                return -1;
        }
    }
    return 0;
}

static json_t *fp8_targets(const plan *p)
{
    target *t = calloc(p->nmembers ? p->nmembers : 1, sizeof *t);
    size_t n = 0;
    json_t *arr = t && collect_targets(p, t, &n) == 0 ? json_array() : NULL;
    if (arr)
        qsort_r(t, n, sizeof *t, cmp_target, (void *)p);
    for (size_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_string(t[i].text))) {
            json_decref(arr);
            arr = NULL;
        }
    for (size_t i = 0; t && i < n; i++)
        free(t[i].text);
    free(t);
    return arr;
}

static json_t *nvfp4_group(const char *observer)
{
    return json_pack("{s:s, s:n, s:n, s:[s], s:o}", "format", "nvfp4-pack-quantized", "input_activations",
                     "output_activations", "targets", "Linear", "weights", weights_args(observer));
}

static json_t *fp8_group(const plan *p)
{
    return json_pack("{s:s, s:n, s:n, s:o, s:o}", "format", "naive-quantized", "input_activations",
                     "output_activations", "targets", fp8_targets(p), "weights", fp8_weights_args());
}

/* A recipe with FP8 modules: one config group per scheme present, named in
 * the order their first module appears (as compressed-tensors rebuilds them
 * from the model), each with its own format; the global format is
 * mixed-precision when the groups differ (compressed-tensors'
 * infer_model_format), else the one group's. */
static json_t *build_mixed(const plan *p, const char *observer)
{
    int nv = p->q_fp8 < (int64_t)p->nmembers, first8 = !nv || fp8_first(p);
    json_t *groups = json_object();
    /* json_object_set_new takes the value, NULL or not, and fails on NULL */
    if (!groups || json_object_set_new(groups, "group_0", first8 ? fp8_group(p) : nvfp4_group(observer)) ||
        (nv && json_object_set_new(groups, "group_1", first8 ? nvfp4_group(observer) : fp8_group(p)))) {
        json_decref(groups);
        return NULL;
    }
    return json_pack("{s:o, s:s, s:n, s:o, s:n, s:s, s:s, s:{}, s:{}, s:s}", "config_groups", groups, "format",
                     nv ? "mixed-precision" : "naive-quantized", "global_compression_ratio", "ignore",
                     ignore_list(p), "kv_cache_scheme", "quant_method", "compressed-tensors", "quantization_status",
                     "compressed", "sparsity_config", "transform_config", "version", CT_FORMAT_VERSION);
}

json_t *qconfig_build(const plan *p)
{
    return p->q_fp8 ? build_mixed(p, NULL) : build(p, NULL);
}

json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer)
{
    json_t *c = json_deep_copy(config);
    /* a source's own (Kimi-K2.5 keeps its INT4 one in text_config) would be
     * read by the loaders that fall back to text_config: it goes */
    json_t *text = json_object_get(c, "text_config");
    if (json_is_object(text))
        json_object_del(text, "quantization_config");
    if (c && json_object_set_new(c, "quantization_config", p->q_fp8 ? build_mixed(p, observer) : build(p, observer)) == 0)
        return c;
    json_decref(c);
    return NULL;
}

json_t *qconfig_apply(const json_t *config, const plan *p)
{
    return qconfig_apply_observer(config, p, NULL);
}
