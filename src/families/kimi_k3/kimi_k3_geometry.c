/* Kimi-K3's text config (KimiLinearConfig, model_type kimi_linear) read for
 * the plan's invariants and for fit. Its keys are its own, not DeepSeek's:
 * num_experts / num_experts_per_token / num_shared_experts, and the layer
 * kinds in linear_attn_config's 1-based lists. */
#include "kimi_k3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "jsonio.h"

static const json_t *linear_attn(const json_t *t)
{
    const json_t *la = json_object_get(t, "linear_attn_config");
    return json_is_object(la) ? la : NULL;
}

int k3_is_kda_layer(const json_t *t, int layer)
{
    const json_t *k = json_object_get(linear_attn(t), "kda_layers");
    for (size_t i = 0; json_is_array(k) && i < json_array_size(k); i++)
        if (json_integer_value(json_array_get(k, i)) == (json_int_t)layer + 1)
            return 1;
    return 0;
}

int k3_is_moe_layer(const json_t *t, int layer)
{
    int64_t first = jsonio_int(t, "first_k_dense_replace", 0), freq = jsonio_int(t, "moe_layer_freq", 1);
    return jsonio_int(t, "num_experts", 0) > 0 && layer >= first && (freq <= 1 || layer % freq == 0);
}

/* kind[i]: bit 0 when layer i is listed in kda_layers, bit 1 in
 * full_attn_layers. Both lists are 1-based (is_kda_layer tests i + 1): a
 * list written 0-based holds a 0 and makes every layer the other kind, so an
 * entry outside 1..layers, or a layer in both lists, is refused. */
static int layer_kinds(const json_t *t, int layers, unsigned char *kind, ff_err *e)
{
    static const char *const lists[] = {"kda_layers", "full_attn_layers"};
    memset(kind, 0, (size_t)layers);
    for (int w = 0; w < 2; w++) {
        const json_t *a = json_object_get(linear_attn(t), lists[w]);
        for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++) {
            const json_t *v = json_array_get(a, i);
            json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
            if (n < 1 || n > layers) {
                char got[32] = "not an integer";
                if (json_is_integer(v))
                    snprintf(got, sizeof got, "%lld", (long long)n);
                return ff_fail(e, FF_EIO, "config.json: text_config.linear_attn_config.%s[%zu] is %s, outside 1..%d "
                                          "(the list is 1-based: layer i is KDA when i + 1 is in kda_layers)",
                               lists[w], i, got, layers);
            }
            kind[n - 1] |= (unsigned char)(1u << w);
            if (kind[n - 1] == 3)
                return ff_fail(e, FF_EIO, "config.json: text_config.linear_attn_config lists layer %lld in both "
                                          "kda_layers and full_attn_layers", (long long)n);
        }
    }
    return FF_OK;
}

/* vLLM's KDA state for one sequence (mamba_utils.py kda_state_shape :304-327,
 * kda_state_dtype :133-148): the short conv's last kernel-1 inputs over q, k
 * and v (heads x head_dim each) in the model's dtype (bf16), and the
 * recurrent state, heads x head_dim x head_dim, in float32 (the "auto"
 * mamba_ssm_cache_dtype). */
static int64_t kda_state(const json_t *t)
{
    const json_t *la = linear_attn(t);
    int64_t heads = jsonio_int(la, "num_heads", 0), hd = jsonio_int(la, "head_dim", 0);
    int64_t kernel = jsonio_int(la, "short_conv_kernel_size", 4);
    if (heads <= 0 || hd <= 0 || kernel <= 0)
        return 0;
    return (kernel - 1) * 3 * heads * hd * 2 + heads * hd * hd * 4;
}

/* One layer's attention as vLLM allocates it: a KDA state, or MLA's latent
 * (described to fit as one KV head of half its width, as mla_geometry). */
static int attention_kind(const json_t *t, ff_layer *l, int kda, int layer, ff_err *e)
{
    int64_t kv_lora = jsonio_int(t, "kv_lora_rank", 0), rope = jsonio_int(t, "qk_rope_head_dim", 0);
    l->full = 1;
    if (kda) {
        l->has_kv = 0;
        l->state_bytes = kda_state(t);
        if (l->state_bytes <= 0)
            return ff_fail(e, FF_EIO, "config.json: layer %d is KDA but text_config.linear_attn_config lacks num_heads "
                                      "or head_dim", layer);
        return FF_OK;
    }
    if (kv_lora <= 0 || rope <= 0 || (kv_lora + rope) % 2)
        return ff_fail(e, FF_EIO, "config.json: layer %d is MLA but text_config lacks kv_lora_rank or qk_rope_head_dim",
                       layer);
    l->kv_heads = 1;
    l->head_dim = (int)((kv_lora + rope) / 2);
    return FF_OK;
}

int k3_geometry(const json_t *t, ff_geometry *g, ff_err *e)
{
    int rc = ff_decoder_geometry(t, g, e);
    unsigned char kind[FF_MAX_LAYERS];
    if (!rc)
        rc = layer_kinds(t, g->layers, kind, e);
    if (rc)
        return rc;
    g->experts = (int)jsonio_int(t, "num_experts", 0);
    g->top_k = (int)jsonio_int(t, "num_experts_per_token", 0);
    g->moe_intermediate = jsonio_int(t, "moe_intermediate_size", 0);
    g->moe_layers = 0;
    for (int i = 0; i < g->layers; i++) {
        if ((rc = attention_kind(t, &g->layer[i], kind[i] & 1, i, e)))
            return rc;
        if (k3_is_moe_layer(t, i)) {
            g->layer[i].intermediate = 0;
            g->moe_layers++;
        }
    }
    g->moe = g->moe_layers > 0;
    if (g->moe && (g->top_k <= 0 || g->moe_intermediate <= 0))
        return ff_fail(e, FF_EIO, "config.json: text_config sets num_experts but lacks num_experts_per_token or "
                                  "moe_intermediate_size");
    return FF_OK;
}

/* Quantized Linears of one attention layer: MLA q_a + q_b (or one q_proj
 * without q_lora_rank), kv_a, kv_b, o and the output gate g; KDA q, k, v,
 * f_a, f_b, b, o and g (or g_a + g_b without use_full_rank_gate). */
static int64_t attention_linears(const json_t *t, int kda)
{
    if (kda)
        return 7 + (jsonio_bool(linear_attn(t), "use_full_rank_gate", 0) ? 1 : 2);
    return (jsonio_int(t, "q_lora_rank", 0) > 0 ? 2 : 1) + 3 + jsonio_bool(t, "mla_use_output_gate", 0);
}

int k3_expect(const json_t *t, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = k3_geometry(t, g, e);
    if (!rc) {
        int shared = jsonio_int(t, "num_shared_experts", 0) > 0;
        memset(x, 0, sizeof *x);
        for (int i = 0; i < g->layers; i++) {
            int moe = k3_is_moe_layer(t, i);
            x->dense_linears += attention_linears(t, g->layer[i].state_bytes > 0) + (moe ? (shared ? 3 : 0) : 3);
        }
        x->moe_layers = g->moe_layers;
        x->experts = g->moe ? g->experts : 0;
        x->expert_linears = (int64_t)g->moe_layers * x->experts * 3;
        x->routers = g->moe_layers;
        x->expert_inter = g->moe_intermediate;
        /* the routed experts work in the latent width when there is one */
        x->hidden = jsonio_int(t, "routed_expert_hidden_size", g->hidden);
    }
    free(g);
    return rc;
}
