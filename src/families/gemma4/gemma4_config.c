#include "gemma4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonio.h"

int g4_is_gemma4(const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    return strcmp(mt, "gemma4") == 0 || strcmp(mt, "gemma4_text") == 0;
}

/* per_layer_config keys are zero-padded ("05") in transformers 5.17; accept
 * any decimal spelling. */
static json_t *per_layer_entry(const json_t *plc, int layer)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)plc, k, v) {
        char *end;
        long idx = strtol(k, &end, 10);
        if (*k && *end == 0 && idx == layer)
            return v;
    }
    return NULL;
}

int g4_read(const json_t *config, g4_geometry *g, int strict, ff_err *e)
{
    memset(g, 0, sizeof *g);
    const json_t *t = json_object_get(config, "text_config");
    if (!json_is_object(t))
        t = config;
    g->has_vision = json_is_object(json_object_get(config, "vision_config"));
    g->has_audio = json_is_object(json_object_get(config, "audio_config"));
    g->layers = (int)jsonio_int(t, "num_hidden_layers", 0);
    g->hidden = jsonio_int(t, "hidden_size", 0);
    g->vocab = jsonio_int(t, "vocab_size", 0);
    g->heads = (int)jsonio_int(t, "num_attention_heads", 0);
    g->kv_heads = (int)jsonio_int(t, "num_key_value_heads", 0);
    g->head_dim = (int)jsonio_int(t, "head_dim", 0);
    if (g->layers <= 0 || g->layers > G4_MAX_LAYERS || g->hidden <= 0 || g->heads <= 0 ||
        g->kv_heads <= 0 || g->head_dim <= 0)
        return ff_fail(e, FF_EIO, "config.json: text config lacks num_hidden_layers, hidden_size, "
                                  "num_attention_heads, num_key_value_heads or head_dim");
    g->k_eq_v = jsonio_bool(t, "attention_k_eq_v", 0);
    g->kv_shared = (int)jsonio_int(t, "num_kv_shared_layers", 0);
    g->sliding_window = (int)jsonio_int(t, "sliding_window", 0);
    g->moe = jsonio_bool(t, "enable_moe_block", 0);
    g->experts = (int)jsonio_int(t, "num_experts", 0);
    g->top_k = (int)jsonio_int(t, "top_k_experts", 0);
    g->moe_intermediate = jsonio_int(t, "moe_intermediate_size", 0);
    g->ple = (int)jsonio_int(t, "hidden_size_per_layer_input", 0);
    g->tie_embeddings = jsonio_bool(t, "tie_word_embeddings", jsonio_bool(config, "tie_word_embeddings", 1));
    int64_t inter = jsonio_int(t, "intermediate_size", 0);
    int double_wide = jsonio_bool(t, "use_double_wide_mlp", 0);
    if (g->moe && (g->experts <= 0 || g->moe_intermediate <= 0))
        return ff_fail(e, FF_EIO, "config.json: enable_moe_block is set but num_experts or "
                                  "moe_intermediate_size is missing");
    json_t *gh = json_object_get(t, "global_head_dim");
    json_t *gk = json_object_get(t, "num_global_key_value_heads");
    g->legacy_schema = json_is_integer(gh) || json_is_integer(gk);
    g->global_head_dim = json_is_integer(gh) ? (int)json_integer_value(gh) : 0;
    g->global_kv_heads = json_is_integer(gk) ? (int)json_integer_value(gk) : 0;
    json_t *plc = json_object_get(t, "per_layer_config");
    g->per_layer_schema = json_is_object(plc);
    json_t *types = json_object_get(t, "layer_types");
    if (types && (!json_is_array(types) || (int)json_array_size(types) != g->layers))
        return ff_fail(e, FF_EIO, "config.json: layer_types has %zu entries for %d layers",
                       json_array_size(types), g->layers);
    for (int i = 0; i < g->layers; i++) {
        g4_layer *l = &g->layer[i];
        if (types) {
            const char *s = json_string_value(json_array_get(types, (size_t)i));
            if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention")))
                return ff_fail(e, FF_EIO, "config.json: layer_types[%d] is not full_attention or sliding_attention", i);
            l->full = strcmp(s, "full_attention") == 0;
        } else {
            /* transformers' default: every 6th layer is full, the last forced full */
            l->full = (i + 1) % 6 == 0 || i == g->layers - 1;
        }
        l->head_dim = g->head_dim;
        l->kv_heads = g->kv_heads;
        if (l->full) {
            if (g->global_head_dim)
                l->head_dim = g->global_head_dim;
            if (g->k_eq_v && g->global_kv_heads)
                l->kv_heads = g->global_kv_heads;
            json_t *pl = plc ? per_layer_entry(plc, i) : NULL;
            if (pl) {
                l->head_dim = (int)jsonio_int(pl, "head_dim", l->head_dim);
                l->kv_heads = (int)jsonio_int(pl, "num_key_value_heads", l->kv_heads);
            }
        }
        l->has_kv = i < g->layers - g->kv_shared;
        l->has_v = l->has_kv && !(g->k_eq_v && l->full);
        l->intermediate = inter * ((double_wide && !l->has_kv) ? 2 : 1);
    }
    if (strict && g->k_eq_v && !g->per_layer_schema && (!g->global_head_dim || !g->global_kv_heads))
        return ff_fail(e, FF_EIO, "config.json: attention_k_eq_v is true but %s is missing (and there is no per_layer_config)",
                       !g->global_head_dim ? "global_head_dim" : "num_global_key_value_heads");
    return FF_OK;
}
