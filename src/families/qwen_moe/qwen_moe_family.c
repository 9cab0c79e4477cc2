/* Qwen MoE: Qwen3MoeForCausalLM (qwen3_moe) and Qwen2MoeForCausalLM
 * (qwen2_moe, which adds one shared expert and its sigmoid gate per layer).
 * Experts come in either layout: one Linear per expert as the published
 * checkpoints store them (model.layers.N.mlp.experts.E.{gate,up,down}_proj),
 * or fused 3-D as transformers 5.x holds them (mlp.experts.gate_up_proj
 * [E, 2I, H], mlp.experts.down_proj [E, H, I]), split into the per-expert
 * names vLLM's Qwen MoE loaders map to w13/w2. The router mlp.gate and the
 * shared-expert gate never quantize: a quantized router serves NaN. Each
 * expert's gate/up share one global scale (vLLM fuses them into w13). */
#include <stdio.h>
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

#define LM "^model\\.layers\\.[0-9]+\\."

static const ff_rule qwen_moe_rules[] = {
    FF_DENSE_ATTENTION_ROWS(LM),
    FF_EXPERT(LM "mlp\\.experts\\.[0-9]+\\.(gate|up)_proj\\.weight$", "gate_up"),
    FF_EXPERT(LM "mlp\\.experts\\.[0-9]+\\.down_proj\\.weight$", NULL),
    FF_EXPERTS_FUSED(LM "mlp\\.experts\\.gate_up_proj$", ROLE_EXPERTS_FUSED2, "gate_proj", "up_proj"),
    FF_EXPERTS_FUSED(LM "mlp\\.experts\\.down_proj$", ROLE_EXPERTS_ONE, "down_proj", NULL),
    FF_ROUTER(LM "mlp\\.gate\\.weight$", 0),
    FF_ROUTER(LM "mlp\\.shared_expert_gate\\.weight$", 0),
    /* the shared expert is an ordinary MLP vLLM runs beside the experts */
    FF_QUANT(LM "mlp\\.shared_expert\\.(gate|up)_proj\\.weight$", "shared_expert", "gate_up"),
    FF_QUANT(LM "mlp\\.shared_expert\\.down_proj\\.weight$", "shared_expert", NULL),
    /* dense layers (mlp_only_layers, decoder_sparse_step) */
    FF_DENSE_MLP_ROWS(LM, "mlp"),
    FF_KEEP(LM "self_attn\\.[qkv]_proj\\.bias$", "bias", GUARD_NONE),
    FF_KEEP("^model\\.embed_tokens\\.weight$", "embedding", GUARD_FIXED),
    FF_KEEP("(norm|layernorm)\\.weight$", "norm", GUARD_FIXED),
    FF_KEEP_LINEAR("^lm_head\\.weight$", "lm_head", GUARD_FIXED),
};

static int qwen_moe_matches(const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    return strcmp(mt, "qwen3_moe") == 0 || strcmp(mt, "qwen2_moe") == 0;
}

/* The published configs say num_experts; transformers 5.17 writes
 * Qwen3-MoE's as num_local_experts. */
static int64_t expert_count(const json_t *config)
{
    return jsonio_int(config, "num_experts", jsonio_int(config, "num_local_experts", 0));
}

/* transformers' rule (Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer): a layer is
 * sparse unless listed in mlp_only_layers, when experts exist and
 * (layer + 1) % decoder_sparse_step == 0. */
static int is_moe_layer(const json_t *config, int layer)
{
    const json_t *only = json_object_get(config, "mlp_only_layers");
    for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++)
        if (json_integer_value(json_array_get(only, i)) == layer)
            return 0;
    int64_t step = jsonio_int(config, "decoder_sparse_step", 1);
    return expert_count(config) > 0 && step > 0 && (layer + 1) % step == 0;
}

static int has_shared_expert(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "qwen2_moe") == 0 &&
           jsonio_int(config, "shared_expert_intermediate_size", 0) > 0;
}

static int qwen_moe_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    int rc = ff_decoder_geometry(config, g, e);
    if (rc)
        return rc;
    g->experts = (int)expert_count(config);
    g->top_k = (int)jsonio_int(config, "num_experts_per_tok", 0);
    g->moe_intermediate = jsonio_int(config, "moe_intermediate_size", 0);
    for (int i = 0; i < g->layers; i++)
        if (is_moe_layer(config, i)) {
            g->moe_layers++;
            g->layer[i].intermediate = 0;
        }
    g->moe = g->moe_layers > 0;
    if (g->moe && (g->moe_intermediate <= 0 || g->top_k <= 0))
        return ff_fail(e, FF_EIO, "config.json: num_experts is set but moe_intermediate_size or num_experts_per_tok is missing");
    return FF_OK;
}

static int qwen_moe_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    ff_geometry g;
    int rc = qwen_moe_geometry(config, &g, e);
    if (rc)
        return rc;
    int shared = has_shared_expert(config);
    int64_t dense = 4ll * g.layers + 3ll * (g.layers - g.moe_layers) + (shared ? 3ll * g.moe_layers : 0);
    /* a shared expert has its own gate (shared_expert_gate), kept like the router */
    ff_decoder_moe_expect(&g, dense, g.moe ? g.experts : 0, (int64_t)g.moe_layers * (shared ? 2 : 1), x);
    return FF_OK;
}

/* ---- synth: the published layout (one Linear per expert) ---------------- */

static const ff_synth_preset qwen_moe_presets[] = {
    {"qwen3-moe", "Qwen3-MoE (real: Qwen3-30B-A3B, 48 layers x 128 experts)"},
    {"qwen2-moe", "Qwen2-MoE with a shared expert (real: Qwen1.5-MoE-A2.7B, 24 layers x 60 experts)"},
    {NULL, NULL},
};

static const synth_geom qwen3_moe_real = {   /* Qwen3-30B-A3B */
    .moe = 1, .layers = 48, .hidden = 2048, .intermediate = 6144, .vocab = 151936, .heads = 32, .kv_heads = 4,
    .head_dim = 128, .experts = 128, .top_k = 8, .moe_intermediate = 768,
};
static const synth_geom qwen2_moe_real = {   /* Qwen1.5-MoE-A2.7B */
    .moe = 1, .layers = 24, .hidden = 2048, .intermediate = 5632, .vocab = 151936, .heads = 16, .kv_heads = 16,
    .head_dim = 128, .experts = 60, .top_k = 4, .moe_intermediate = 1408, .shared_intermediate = 5632,
};
static const synth_geom qwen3_moe_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2,
    .head_dim = 64, .experts = 8, .top_k = 2, .moe_intermediate = 128,
};
static const synth_geom qwen2_moe_tiny = {
    .moe = 1, .layers = 4, .hidden = 256, .intermediate = 512, .vocab = 2048, .heads = 4, .kv_heads = 2,
    .head_dim = 64, .experts = 8, .top_k = 2, .moe_intermediate = 128, .shared_intermediate = 256,
};

static int qwen_moe_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int q2 = strcmp(preset, "qwen2-moe") == 0;
    return q2 ? ff_decoder_synth_sized(size, &qwen2_moe_tiny, &qwen2_moe_real, g, e)
              : ff_decoder_synth_sized(size, &qwen3_moe_tiny, &qwen3_moe_real, g, e);
}

#define P "model.layers."

static const char *const qwen_moe_experts[3] = {"gate_proj", "up_proj", "down_proj"};

static int qwen_moe_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    int q2 = strcmp(g->preset, "qwen2-moe") == 0;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        ff_decoder_synth_attention(l, g, P, i, !q2, q2);
        if (i < g->dense_layers) {
            ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
            continue;
        }
        synth_add(l, SYNTH_NORMAL, 2, g->experts, g->hidden, 0, P "%d.mlp.gate.weight", i);
        ff_decoder_synth_experts(l, g, P, i, "mlp.experts", qwen_moe_experts, 2);
        if (g->shared_intermediate) {
            ff_decoder_synth_mlp(l, g, P, i, "mlp.shared_expert", g->shared_intermediate);
            synth_add(l, SYNTH_NORMAL, 2, 1, g->hidden, 0, P "%d.mlp.shared_expert_gate.weight", i);
        }
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *qwen_moe_synth_config(const synth_geom *g)
{
    int q2 = strcmp(g->preset, "qwen2-moe") == 0;
    json_t *c = ff_decoder_synth_config(g, q2 ? "qwen2_moe" : "qwen3_moe", q2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM");
    json_t *only = json_array();
    for (int i = 0; i < g->dense_layers; i++)
        json_array_append_new(only, json_integer(i));
    json_object_set_new(c, "decoder_sparse_step", json_integer(1));
    json_object_set_new(c, "mlp_only_layers", only);
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "norm_topk_prob", json_boolean(!q2));
    json_object_set_new(c, "num_experts", json_integer(g->experts));
    json_object_set_new(c, "num_experts_per_tok", json_integer(g->top_k));
    if (q2)
        json_object_set_new(c, "shared_expert_intermediate_size", json_integer(g->shared_intermediate));
    return c;
}

static const char *const qwen_moe_implicit_ignore[] = {"lm_head", NULL};

static const ff_synth_knob qwen_moe_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_qwen_moe = {
    .name = "qwen_moe",
    .model_types = "qwen3_moe, qwen2_moe",
    .matches = qwen_moe_matches,
    .rules = qwen_moe_rules,
    .nrules = sizeof qwen_moe_rules / sizeof *qwen_moe_rules,
    .expect = qwen_moe_expect,
    .dense_rule = "q/k/v/o in every layer, gate/up/down in dense layers and shared experts",
    .geometry = qwen_moe_geometry,
    .implicit_ignore = qwen_moe_implicit_ignore,
    .synth_presets = qwen_moe_presets,
    .synth_knobs = qwen_moe_knobs,
    .synth_preset = qwen_moe_synth_preset,
    .synth_tensors = qwen_moe_synth_tensors,
    .synth_config = qwen_moe_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};
