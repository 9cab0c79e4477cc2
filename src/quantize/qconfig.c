#include "qconfig.h"

json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer);

/* The compressed-tensors release whose format this mirrors (and the oracle). */
#define CT_FORMAT_VERSION "0.19.0"

static json_t *weights_args(const char *observer)
{
    json_t *w = json_object();
    json_object_set_new(w, "actorder", json_null());
    json_object_set_new(w, "block_structure", json_null());
    json_object_set_new(w, "dynamic", json_false());
    json_object_set_new(w, "group_size", json_integer(16));
    json_object_set_new(w, "num_bits", json_integer(4));
    json_object_set_new(w, "observer", json_string(observer ? observer : "memoryless_minmax"));
    json_object_set_new(w, "observer_kwargs", json_object());
    json_object_set_new(w, "scale_dtype", json_string("torch.float8_e4m3fn"));
    json_object_set_new(w, "strategy", json_string("tensor_group"));
    json_object_set_new(w, "symmetric", json_true());
    json_object_set_new(w, "type", json_string("float"));
    json_object_set_new(w, "zp_dtype", json_null());
    return w;
}

/* observer: llm-compressor's registry name of the weight observer, as it
 * records it in weights.observer (NULL: memoryless_minmax). */
static json_t *build(const plan *p, const char *observer)
{
    json_t *group = json_object(), *groups = json_object(), *targets = json_array();
    json_object_set_new(group, "format", json_string("nvfp4-pack-quantized"));
    json_object_set_new(group, "input_activations", json_null());
    json_object_set_new(group, "output_activations", json_null());
    json_array_append_new(targets, json_string("Linear"));
    json_object_set_new(group, "targets", targets);
    json_object_set_new(group, "weights", weights_args(observer));
    json_object_set_new(groups, "group_0", group);

    json_t *q = json_object(), *ign = json_array();
    json_object_set_new(q, "config_groups", groups);
    json_object_set_new(q, "format", json_string("nvfp4-pack-quantized"));
    json_object_set_new(q, "global_compression_ratio", json_null());
    for (size_t i = 0; i < p->nignore; i++)
        json_array_append_new(ign, json_string(p->ignore[i]));
    json_object_set_new(q, "ignore", ign);
    json_object_set_new(q, "kv_cache_scheme", json_null());
    json_object_set_new(q, "quant_method", json_string("compressed-tensors"));
    json_object_set_new(q, "quantization_status", json_string("compressed"));
    json_object_set_new(q, "sparsity_config", json_object());
    json_object_set_new(q, "transform_config", json_object());
    json_object_set_new(q, "version", json_string(CT_FORMAT_VERSION));
    return q;
}

json_t *qconfig_build(const plan *p)
{
    return build(p, NULL);
}

json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer)
{
    json_t *c = json_deep_copy(config);
    json_object_set_new(c, "quantization_config", build(p, observer));
    return c;
}

json_t *qconfig_apply(const json_t *config, const plan *p)
{
    return qconfig_apply_observer(config, p, NULL);
}
