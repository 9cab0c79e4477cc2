#include "mla.h"

#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "jsonio.h"

int mla_is_moe_layer(const json_t *config, int i)
{
    int first = (int)jsonio_int(config, "first_k_dense_replace", 0);
    int freq = (int)jsonio_int(config, "moe_layer_freq", 1);
    return jsonio_int(config, "n_routed_experts", 0) > 0 && i >= first && (freq <= 1 || i % freq == 0);
}

int mla_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    int rc = ff_decoder_geometry(config, g, e);
    if (rc)
        return rc;
    int first_dense = (int)jsonio_int(config, "first_k_dense_replace", 0);
    int64_t kv_lora = jsonio_int(config, "kv_lora_rank", 0), rope = jsonio_int(config, "qk_rope_head_dim", 0);
    g->experts = (int)jsonio_int(config, "n_routed_experts", 0);
    g->top_k = (int)jsonio_int(config, "num_experts_per_tok", 0);
    g->moe_intermediate = jsonio_int(config, "moe_intermediate_size", 0);
    if (g->experts <= 0 || g->top_k <= 0 || g->moe_intermediate <= 0 || first_dense < 0 || first_dense > g->layers)
        return ff_fail(e, FF_EIO, "config.json: lacks n_routed_experts, num_experts_per_tok or moe_intermediate_size, "
                                  "or first_k_dense_replace is out of range");
    if (kv_lora <= 0 || rope <= 0 || (kv_lora + rope) % 2)
        return ff_fail(e, FF_EIO, "config.json: lacks kv_lora_rank or qk_rope_head_dim (MLA)");
    g->moe_layers = 0;
    for (int i = 0; i < g->layers; i++) {
        g->layer[i].kv_heads = 1;
        g->layer[i].head_dim = (int)((kv_lora + rope) / 2);
        g->layer[i].full = 1;
        if (mla_is_moe_layer(config, i)) {
            g->layer[i].intermediate = 0;
            g->moe_layers++;
        }
    }
    g->moe = g->moe_layers > 0;
    return FF_OK;
}

int mla_expect(const json_t *config, int64_t extra_dense, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = mla_geometry(config, g, e);
    if (rc) {
        free(g);
        return rc;
    }
    int shared = jsonio_int(config, "n_shared_experts", 0) > 0;
    const json_t *ql = json_object_get(config, "q_lora_rank");
    int attn = ql && json_is_integer(ql) && json_integer_value(ql) > 0 ? 5 : 4;
    int64_t dense = (int64_t)attn * g->layers + 3ll * (g->layers - g->moe_layers) + (shared ? 3ll * g->moe_layers : 0) +
                    extra_dense;
    ff_decoder_moe_expect(g, dense, g->experts, g->moe_layers, x);
    free(g);
    return FF_OK;
}

/* ---- synth ------------------------------------------------------------------ */

mla_widths mla_widths_of(const synth_geom *g)
{
    return (mla_widths){.q_lora = 12ll * g->head_dim, .kv_lora = 4ll * g->head_dim, .rope = g->head_dim / 2,
                        .nope = g->head_dim, .v = g->head_dim};
}

#define P "model.layers."

void mla_synth_attention(const synth_geom *g, synth_list *l, int i)
{
    mla_widths m = mla_widths_of(g);
    int64_t H = g->hidden;
    synth_add(l, SYNTH_NORMAL, 2, m.q_lora, H, 0, P "%d.self_attn.q_a_proj.weight", i);
    synth_add(l, SYNTH_ONES, 1, m.q_lora, 0, 0, P "%d.self_attn.q_a_layernorm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->heads * (m.nope + m.rope), m.q_lora, 0, P "%d.self_attn.q_b_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, m.kv_lora + m.rope, H, 0, P "%d.self_attn.kv_a_proj_with_mqa.weight", i);
    synth_add(l, SYNTH_ONES, 1, m.kv_lora, 0, 0, P "%d.self_attn.kv_a_layernorm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->heads * (m.nope + m.v), m.kv_lora, 0, P "%d.self_attn.kv_b_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, H, g->heads * m.v, 0, P "%d.self_attn.o_proj.weight", i);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.input_layernorm.weight", i);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.post_attention_layernorm.weight", i);
}

void mla_synth_mlp(const synth_geom *g, synth_list *l, int i)
{
    if (i < g->dense_layers) {
        ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
        return;
    }
    synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.mlp.gate.weight", i);
    synth_add(l, SYNTH_ONES, 1, g->experts, 0, 0, P "%d.mlp.gate.e_score_correction_bias", i);
    for (int x = 0; x < g->experts; x++) {
        synth_add(l, SYNTH_NORMAL, 2, g->moe_intermediate, g->hidden, 0, P "%d.mlp.experts.%d.gate_proj.weight", i, x);
        synth_add(l, SYNTH_NORMAL, 2, g->moe_intermediate, g->hidden, 0, P "%d.mlp.experts.%d.up_proj.weight", i, x);
        synth_add(l, SYNTH_NORMAL, 2, g->hidden, g->moe_intermediate, 0, P "%d.mlp.experts.%d.down_proj.weight", i, x);
    }
    if (g->shared_intermediate)
        ff_decoder_synth_mlp(l, g, P, i, "mlp.shared_experts", g->shared_intermediate);
}

static void mtp_head(const synth_geom *g, synth_list *l, int i)
{
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, P "%d.embed_tokens.weight", i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.enorm.weight", i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.hnorm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, 2 * g->hidden, 0, P "%d.eh_proj.weight", i);
}

static void mtp_tail(const synth_geom *g, synth_list *l, int i)
{
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.shared_head.norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, P "%d.shared_head.head.weight", i);
}

void mla_synth_layers(const synth_geom *g, synth_list *l, void (*extra)(const synth_geom *, synth_list *, int))
{
    for (int i = 0; i < g->layers + g->mtp_layers; i++) {
        if (i >= g->layers)
            mtp_head(g, l, i);
        mla_synth_attention(g, l, i);
        if (extra)
            extra(g, l, i);
        mla_synth_mlp(g, l, i);
        if (i >= g->layers)
            mtp_tail(g, l, i);
    }
}

json_t *mla_synth_config(const synth_geom *g, const char *model_type, const char *architecture)
{
    mla_widths m = mla_widths_of(g);
    int grouped = g->experts >= 64 && g->experts % 8 == 0;
    json_t *c = ff_decoder_synth_config(g, model_type, architecture);
    json_object_del(c, "head_dim");   /* the published configs have none */
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "first_k_dense_replace", json_integer(g->dense_layers));
    json_object_set_new(c, "kv_lora_rank", json_integer(m.kv_lora));
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "moe_layer_freq", json_integer(1));
    json_object_set_new(c, "n_group", json_integer(grouped ? 8 : 1));
    json_object_set_new(c, "n_routed_experts", json_integer(g->experts));
    json_object_set_new(c, "n_shared_experts", json_integer(g->shared_intermediate ? 1 : 0));
    json_object_set_new(c, "norm_topk_prob", json_true());
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    json_object_set_new(c, "num_nextn_predict_layers", json_integer(g->mtp_layers));
    json_object_set_new(c, "q_lora_rank", json_integer(m.q_lora));
    json_object_set_new(c, "qk_nope_head_dim", json_integer(m.nope));
    json_object_set_new(c, "qk_rope_head_dim", json_integer(m.rope));
    json_object_set_new(c, "rope_theta", json_real(10000.0));
    json_object_set_new(c, "routed_scaling_factor", json_real(2.5));
    json_object_set_new(c, "scoring_func", json_string("sigmoid"));
    json_object_set_new(c, "topk_group", json_integer(grouped ? 4 : 1));
    json_object_set_new(c, "topk_method", json_string("noaux_tc"));
    json_object_set_new(c, "v_head_dim", json_integer(m.v));
    return c;
}

int mla_synth_check(const synth_geom *g, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    if (g->head_dim % 32)
        return ff_fail(e, FF_EUSAGE, "MLA head dim must be a multiple of 32 (rope = head dim / 2)");
    return FF_OK;
}
