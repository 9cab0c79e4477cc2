/* Qwen3-Next (Qwen3NextForCausalLM, qwen3_next): the hybrid text model
 * Qwen3.5 grew from. Three layers in four are Gated-DeltaNet linear
 * attention whose projections are stored already fused, per key head
 * interleaved (linear_attn.in_proj_qkvz [2k + 2v, H], in_proj_ba [2 v heads,
 * H], out_proj), every fourth full attention with the gated q_proj; experts
 * one Linear each (model.layers.N.mlp.experts.E.*), a shared expert and its
 * sigmoid gate; mlp_only_layers / decoder_sparse_step as in Qwen2-MoE.
 *
 * Quantized: full attention q/k/v/o (one qkv_proj in vLLM), each expert
 * (gate/up sharing a scale), the shared expert, dense MLPs. Kept, as
 * llm-compressor's Qwen3-Next example keeps them: the linear-attention
 * projections, the router and the shared-expert gate (quantized, they serve
 * NaN), embeddings, norms, lm_head, and the MTP head mtp.* (vLLM's
 * qwen3_next_mtp drafter reads it; transformers drops it) with its Linears in
 * ignore. */
#include <string.h>

#include "decoder.h"
#include "encoder.h"
#include "family.h"
#include "jsonio.h"
#include "qwen_hybrid.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char qwen3_next_description[] =
    "format 1\n"
    "family qwen3_next\n"
    "model-type qwen3_next\n"
    FF_QWEN_MTP_DESCRIPTION_ROWS
    "quant ^model[.]layers[.][0-9]+[.]self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant ^model[.]layers[.][0-9]+[.]self_attn[.]o_proj[.]weight$ group=attention\n"
    "keep ^model[.]layers[.][0-9]+[.]linear_attn[.](in_proj_qkvz|in_proj_ba|out_proj)[.]weight$ group=linear_attn linear\n"
    "keep ^model[.]layers[.][0-9]+[.]linear_attn[.] group=linear_attn\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    FF_QWEN_SPARSE_DESCRIPTION_ROWS
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int qwen3_next_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "qwen3_next") == 0;
}

/* ---- synth: the published layout ------------------------------------------ */

static const ff_synth_preset qwen3_next_presets[] = {
    {"qwen3-next", "Qwen3-Next with MTP (real: Qwen3-Next-80B-A3B, 48 layers x 512 experts)"},
    {NULL, NULL},
};

static int qwen3_next_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    (void)preset;
    int real, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    g->full_every = 4;
    g->conv_kernel = 4;
    g->mtp_layers = 1;
    if (real) {   /* Qwen3-Next-80B-A3B */
        g->layers = 48; g->hidden = 2048; g->intermediate = 5120; g->vocab = 151936;
        g->heads = 16; g->kv_heads = 2; g->head_dim = 256;
        g->experts = 512; g->top_k = 10; g->moe_intermediate = 512; g->shared_intermediate = 512;
        g->linear_k_heads = 16; g->linear_v_heads = 32; g->linear_k_dim = 128; g->linear_v_dim = 128;
    } else {
        g->layers = 4; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 2; g->head_dim = 64;
        g->experts = 8; g->top_k = 2; g->moe_intermediate = 128; g->shared_intermediate = 128;
        g->linear_k_heads = 2; g->linear_v_heads = 4; g->linear_k_dim = 32; g->linear_v_dim = 32;
    }
    return FF_OK;
}

static void decoder_layer(const synth_geom *g, synth_list *l, const char *prefix, int i, int full, int dense)
{
    int64_t H = g->hidden, v = qh_linear_v_width(g);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.input_layernorm.weight", prefix, i);
    if (full) {
        qh_synth_gated_attention(l, g, prefix, i);
    } else {
        qh_synth_linear_state(l, g, prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, 2ll * g->linear_v_heads, H, 0, "%s%d.linear_attn.in_proj_ba.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, qh_linear_qkv_width(g) + v, H, 0, "%s%d.linear_attn.in_proj_qkvz.weight", prefix, i);
        synth_add(l, SYNTH_NORMAL, 2, H, v, 0, "%s%d.linear_attn.out_proj.weight", prefix, i);
    }
    if (dense)
        ff_decoder_synth_mlp(l, g, prefix, i, "mlp", g->intermediate);
    else
        qh_synth_moe(l, g, prefix, i, 0);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "%s%d.post_attention_layernorm.weight", prefix, i);
}

static int qwen3_next_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = qh_synth_check(g, e);
    if (rc)
        return rc;
    int64_t H = g->hidden;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, H, 0, "lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, H, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++)
        decoder_layer(g, l, "model.layers.", i, qh_synth_full(g, i), i < g->dense_layers);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, "model.norm.weight");
    if (g->mtp_layers) {
        synth_add(l, SYNTH_NORMAL, 2, H, 2 * H, 0, "mtp.fc.weight");
        for (int i = 0; i < g->mtp_layers; i++)
            decoder_layer(g, l, "mtp.layers.", i, 1, 0);
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.norm.weight");
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.pre_fc_norm_embedding.weight");
        synth_add(l, SYNTH_ONES, 1, H, 0, 0, "mtp.pre_fc_norm_hidden.weight");
    }
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *qwen3_next_synth_config(const synth_geom *g)
{
    json_t *c = ff_decoder_synth_config(g, "qwen3_next", "Qwen3NextForCausalLM"), *only = json_array();
    for (int i = 0; i < g->dense_layers; i++)
        json_array_append_new(only, json_integer(i));
    qh_synth_config_keys(c, g);
    json_object_set_new(c, "decoder_sparse_step", json_integer(1));
    json_object_set_new(c, "mlp_only_layers", only);
    json_object_set_new(c, "norm_topk_prob", json_true());
    return c;
}

static const ff_synth_knob qwen3_next_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_FULL_EVERY, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_qwen3_next = {
    .name = "qwen3_next",
    .model_types = "qwen3_next",
    .matches = qwen3_next_matches,
    .desc_text = qwen3_next_description,
    .expect = qh_expect,
    .dense_rule = "q/k/v/o in full-attention layers, gate/up/down in dense layers and shared experts "
                  "(linear-attention projections kept)",
    .geometry = qh_geometry,
    .synth_presets = qwen3_next_presets,
    .synth_knobs = qwen3_next_knobs,
    .synth_preset = qwen3_next_synth_preset,
    .synth_tensors = qwen3_next_synth_tensors,
    .synth_config = qwen3_next_synth_config,
    .synth_aux = ff_decoder_synth_aux,
    /* qh_geometry reads a vision_config, as Qwen3.5 has */
    .encoder_bytes = ff_encoder_default_bytes,
};
