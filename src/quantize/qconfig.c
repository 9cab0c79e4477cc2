#include "qconfig.h"

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

json_t *qconfig_build(const plan *p)
{
    return build(p, NULL);
}

json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer)
{
    json_t *c = json_deep_copy(config);
    /* a source's own (Kimi-K2.5 keeps its INT4 one in text_config) would be
     * read by the loaders that fall back to text_config: it goes */
    json_t *text = json_object_get(c, "text_config");
    if (json_is_object(text))
        json_object_del(text, "quantization_config");
    if (c && json_object_set_new(c, "quantization_config", build(p, observer)) == 0)
        return c;
    json_decref(c);
    return NULL;
}

json_t *qconfig_apply(const json_t *config, const plan *p)
{
    return qconfig_apply_observer(config, p, NULL);
}
