#include "qwen_hybrid.h"

#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "jsonio.h"

const json_t *qh_text_config(const json_t *config)
{
    const json_t *t = json_object_get(config, "text_config");
    return json_is_object(t) ? t : config;
}

static int64_t expert_count(const json_t *t)
{
    return jsonio_int(t, "num_experts", jsonio_int(t, "num_local_experts", 0));
}

int qh_is_moe_layer(const json_t *t, int layer)
{
    const json_t *only = json_object_get(t, "mlp_only_layers");
    for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++)
        if (json_integer_value(json_array_get(only, i)) == layer)
            return 0;
    int64_t step = jsonio_int(t, "decoder_sparse_step", 1);
    return expert_count(t) > 0 && step > 0 && (layer + 1) % step == 0;
}

int qh_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    const json_t *t = qh_text_config(config);
    int rc = ff_decoder_geometry(t, g, e);
    if (rc)
        return rc;
    g->experts = (int)expert_count(t);
    g->top_k = (int)jsonio_int(t, "num_experts_per_tok", 0);
    g->moe_intermediate = jsonio_int(t, "moe_intermediate_size", 0);
    g->has_vision = json_is_object(json_object_get(config, "vision_config"));
    g->tie_embeddings = jsonio_bool(t, "tie_word_embeddings", jsonio_bool(config, "tie_word_embeddings", 0));
    for (int i = 0; i < g->layers; i++)
        if (qh_is_moe_layer(t, i)) {
            g->moe_layers++;
            g->layer[i].intermediate = 0;
        }
    g->moe = g->moe_layers > 0;
    if (g->moe && (g->moe_intermediate <= 0 || g->top_k <= 0))
        return ff_fail(e, FF_EIO, "config.json: num_experts is set but moe_intermediate_size or num_experts_per_tok is missing");
    return FF_OK;
}

int qh_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int full = 0, rc = qh_geometry(config, g, e);
    for (int i = 0; !rc && i < g->layers; i++)
        full += g->layer[i].state_bytes == 0;
    if (!rc) {
        const json_t *t = qh_text_config(config);
        int shared = g->moe && jsonio_int(t, "shared_expert_intermediate_size", 0) > 0;
        memset(x, 0, sizeof *x);
        x->dense_linears = 4ll * full + 3ll * (g->layers - g->moe_layers) + (shared ? 3ll * g->moe_layers : 0);
        x->moe_layers = g->moe_layers;
        x->experts = g->moe ? g->experts : 0;
        x->expert_linears = (int64_t)g->moe_layers * x->experts * 3;
        x->routers = (int64_t)g->moe_layers * (shared ? 2 : 1);
        x->expert_inter = g->moe_intermediate;
        x->hidden = g->hidden;
    }
    free(g);
    return rc;
}

/* ---- synth ----------------------------------------------------------------- */

void qh_synth_moe(synth_list *l, const synth_geom *g, const char *prefix, int layer, int fused)
{
    int64_t H = g->hidden, I = g->moe_intermediate;
    if (fused) {
        synth_add(l, SYNTH_NORMAL, 3, g->experts, H, I, "%s%d.mlp.experts.down_proj", prefix, layer);
        synth_add(l, SYNTH_NORMAL, 3, g->experts, 2 * I, H, "%s%d.mlp.experts.gate_up_proj", prefix, layer);
    }
    for (int x = 0; !fused && x < g->experts; x++) {
        synth_add(l, SYNTH_NORMAL, 2, H, I, 0, "%s%d.mlp.experts.%d.down_proj.weight", prefix, layer, x);
        synth_add(l, SYNTH_NORMAL, 2, I, H, 0, "%s%d.mlp.experts.%d.gate_proj.weight", prefix, layer, x);
        synth_add(l, SYNTH_NORMAL, 2, I, H, 0, "%s%d.mlp.experts.%d.up_proj.weight", prefix, layer, x);
    }
    synth_add(l, SYNTH_NORMAL, 2, g->experts, H, 0, "%s%d.mlp.gate.weight", prefix, layer);
    if (g->shared_intermediate) {
        ff_decoder_synth_mlp(l, g, prefix, layer, "mlp.shared_expert", g->shared_intermediate);
        synth_add(l, SYNTH_NORMAL, 2, 1, H, 0, "%s%d.mlp.shared_expert_gate.weight", prefix, layer);
    }
}

void qh_synth_gated_attention(synth_list *l, const synth_geom *g, const char *prefix, int layer)
{
    int64_t H = g->hidden, q = (int64_t)g->heads * g->head_dim, kv = (int64_t)g->kv_heads * g->head_dim;
    synth_add(l, SYNTH_ONES, 1, g->head_dim, 0, 0, "%s%d.self_attn.k_norm.weight", prefix, layer);
    synth_add(l, SYNTH_NORMAL, 2, kv, H, 0, "%s%d.self_attn.k_proj.weight", prefix, layer);
    synth_add(l, SYNTH_NORMAL, 2, H, q, 0, "%s%d.self_attn.o_proj.weight", prefix, layer);
    synth_add(l, SYNTH_ONES, 1, g->head_dim, 0, 0, "%s%d.self_attn.q_norm.weight", prefix, layer);
    synth_add(l, SYNTH_NORMAL, 2, 2 * q, H, 0, "%s%d.self_attn.q_proj.weight", prefix, layer);
    synth_add(l, SYNTH_NORMAL, 2, kv, H, 0, "%s%d.self_attn.v_proj.weight", prefix, layer);
}

int64_t qh_linear_qkv_width(const synth_geom *g)
{
    return 2ll * g->linear_k_heads * g->linear_k_dim + (int64_t)g->linear_v_heads * g->linear_v_dim;
}

int64_t qh_linear_v_width(const synth_geom *g)
{
    return (int64_t)g->linear_v_heads * g->linear_v_dim;
}

void qh_synth_linear_state(synth_list *l, const synth_geom *g, const char *prefix, int layer)
{
    synth_add(l, SYNTH_NORMAL, 1, g->linear_v_heads, 0, 0, "%s%d.linear_attn.A_log", prefix, layer);
    synth_add(l, SYNTH_NORMAL, 3, qh_linear_qkv_width(g), 1, g->conv_kernel, "%s%d.linear_attn.conv1d.weight", prefix,
              layer);
    synth_add(l, SYNTH_ONES, 1, g->linear_v_heads, 0, 0, "%s%d.linear_attn.dt_bias", prefix, layer);
    synth_add(l, SYNTH_ONES, 1, g->linear_v_dim, 0, 0, "%s%d.linear_attn.norm.weight", prefix, layer);
}

int qh_synth_full(const synth_geom *g, int layer)
{
    return (g->full_every > 0 && (layer + 1) % g->full_every == 0) || layer == g->layers - 1;
}

void qh_synth_config_keys(json_t *c, const synth_geom *g)
{
    json_t *types = json_array();
    for (int i = 0; i < g->layers; i++)
        json_array_append_new(types, json_string(qh_synth_full(g, i) ? "full_attention" : "linear_attention"));
    json_object_set_new(c, "layer_types", types);
    json_object_set_new(c, "full_attention_interval", json_integer(g->full_every));
    json_object_set_new(c, "linear_conv_kernel_dim", json_integer(g->conv_kernel));
    json_object_set_new(c, "linear_key_head_dim", json_integer(g->linear_k_dim));
    json_object_set_new(c, "linear_num_key_heads", json_integer(g->linear_k_heads));
    json_object_set_new(c, "linear_num_value_heads", json_integer(g->linear_v_heads));
    json_object_set_new(c, "linear_value_head_dim", json_integer(g->linear_v_dim));
    json_object_set_new(c, "partial_rotary_factor", json_real(0.25));
    json_object_set_new(c, "mamba_ssm_dtype", json_string(g->ssm_fp32 ? "float32" : "bfloat16"));
    if (!g->moe)
        return;
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "num_experts", json_integer(g->experts));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "shared_expert_intermediate_size", json_integer(g->shared_intermediate));
}

int qh_synth_check(const synth_geom *g, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    if (g->linear_k_heads <= 0 || g->linear_v_heads <= 0 || g->linear_k_dim <= 0 || g->linear_v_dim <= 0 ||
        g->conv_kernel <= 0 || g->full_every <= 0)
        return ff_fail(e, FF_EUSAGE, "linear-attention heads, head dims, conv kernel and --full-every must be positive");
    if (qh_linear_qkv_width(g) % 16 || qh_linear_v_width(g) % 16)
        return ff_fail(e, FF_EUSAGE, "Linear input widths must be multiples of 16");
    return FF_OK;
}
