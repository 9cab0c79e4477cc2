/* DeepSeek-V3 / R1 / V3.1 and Kimi-K2 (DeepseekV3ForCausalLM, deepseek_v3):
 * multi-head latent attention (MLA) and a routed MoE.
 *
 * Attention, per layer: q_a_proj [q_lora_rank, H] -> q_a_layernorm ->
 * q_b_proj [heads*(nope+rope), q_lora_rank] (or one q_proj when q_lora_rank
 * is null, DeepSeek-V2-Lite), kv_a_proj_with_mqa [kv_lora_rank+rope, H] ->
 * kv_a_layernorm -> kv_b_proj [heads*(nope+v), kv_lora_rank], o_proj. All
 * five are Linears vLLM quantizes (kv_b_proj too: vLLM's MLA dequantizes it
 * after loading to build W_UK/W_UV, whatever the scheme). vLLM 0.32's
 * deepseek_v2.py fuses q_a_proj and kv_a_proj_with_mqa into one
 * fused_qkv_a_proj (DeepSeekV2FusedQkvAProjLinear, a MergedColumnParallel-
 * Linear; stacked_params_mapping ("fused_qkv_a_proj", "q_a_proj", 0),
 * ("fused_qkv_a_proj", "kv_a_proj_with_mqa", 1)) when q_lora_rank is set, so
 * the two share one global scale here ("qkv_a"), as compressed-tensors'
 * fused observers and vLLM's one-GEMM weight require.
 *
 * MLP: the first first_k_dense_replace layers are dense (mlp.{gate,up,down}),
 * the rest (every moe_layer_freq-th) route over n_routed_experts
 * (mlp.experts.E.{gate,up,down}_proj, each expert's gate/up sharing a scale)
 * plus n_shared_experts folded into mlp.shared_experts. The router mlp.gate
 * and its e_score_correction_bias never quantize.
 *
 * MTP (num_nextn_predict_layers, at index num_hidden_layers: embed_tokens,
 * enorm, hnorm, eh_proj, shared_head.{norm,head} and a whole decoder layer):
 * vLLM's main loader skips them (get_spec_layer_idx_from_weight_name in
 * deepseek_v2.py's load_weights); deepseek_mtp.py reads them (eh_proj is a
 * plain nn.Linear, never quantized; the mtp_block builds with the quant
 * config). transformers does not load them, so llm-compressor's output has
 * none. As for glm4_moe, fp4forge keeps them byte for byte (an FP8 source's
 * decoded to bf16) with their Linears in ignore. */
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"

#define LM "^model\\.layers\\.[0-9]+\\."

static const ff_rule deepseek_v3_rules[] = {
    /* fused_qkv_a_proj in vLLM: one global scale */
    FF_QUANT(LM "self_attn\\.(q_a_proj|kv_a_proj_with_mqa)\\.weight$", "attention", "qkv_a"),
    FF_QUANT(LM "self_attn\\.(q_proj|q_b_proj|kv_b_proj|o_proj)\\.weight$", "attention", NULL),
    FF_EXPERT(LM "mlp\\.experts\\.[0-9]+\\.(gate|up)_proj\\.weight$", "gate_up"),
    FF_EXPERT(LM "mlp\\.experts\\.[0-9]+\\.down_proj\\.weight$", NULL),
    FF_ROUTER(LM "mlp\\.gate\\.weight$", 0),
    FF_KEEP(LM "mlp\\.gate\\.e_score_correction_bias$", "router", GUARD_ROUTER),
    FF_QUANT(LM "mlp\\.shared_experts\\.(gate|up)_proj\\.weight$", "shared_expert", "gate_up"),
    FF_QUANT(LM "mlp\\.shared_experts\\.down_proj\\.weight$", "shared_expert", NULL),
    FF_DENSE_MLP_ROWS(LM, "mlp"),
    FF_KEEP("^model\\.embed_tokens\\.weight$", "embedding", GUARD_FIXED),
    FF_KEEP("(norm|layernorm)\\.weight$", "norm", GUARD_FIXED),
    FF_KEEP_LINEAR("^lm_head\\.weight$", "lm_head", GUARD_FIXED),
};

static int deepseek_v3_matches(const json_t *config)
{
    return strcmp(jsonio_str(config, "model_type", ""), "deepseek_v3") == 0;
}

static int is_moe_layer(const json_t *config, int i)
{
    int first = (int)jsonio_int(config, "first_k_dense_replace", 0);
    int freq = (int)jsonio_int(config, "moe_layer_freq", 1);
    return jsonio_int(config, "n_routed_experts", 0) > 0 && i >= first && (freq <= 1 || i % freq == 0);
}

/* MLA: vLLM caches one latent per token and layer, kv_lora_rank +
 * qk_rope_head_dim wide (the compressed KV and the shared rope key), not K
 * and V per head. fit counts K and V (two tensors of kv_heads x head_dim),
 * so a layer is described as one KV head of half that width: the bytes per
 * token are the latent's exactly. */
static int deepseek_v3_geometry(const json_t *config, ff_geometry *g, ff_err *e)
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
        if (is_moe_layer(config, i)) {
            g->layer[i].intermediate = 0;
            g->moe_layers++;
        }
    }
    g->moe = g->moe_layers > 0;
    return FF_OK;
}

static int deepseek_v3_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    ff_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_fail(e, FF_EIO, "out of memory");
    int rc = deepseek_v3_geometry(config, g, e);
    if (rc) {
        free(g);
        return rc;
    }
    int shared = jsonio_int(config, "n_shared_experts", 0) > 0;
    const json_t *ql = json_object_get(config, "q_lora_rank");
    int attn = ql && json_is_integer(ql) && json_integer_value(ql) > 0 ? 5 : 4;
    memset(x, 0, sizeof *x);
    x->dense_linears = (int64_t)attn * g->layers + 3ll * (g->layers - g->moe_layers) + (shared ? 3ll * g->moe_layers : 0);
    x->moe_layers = g->moe_layers;
    x->experts = g->experts;
    x->expert_linears = (int64_t)g->moe_layers * g->experts * 3;
    x->routers = g->moe_layers;
    x->expert_inter = g->moe_intermediate;
    x->hidden = g->hidden;
    free(g);
    return FF_OK;
}

/* ---- synth: the published layouts (FP8-block with synth --source fp8-block) */

static const ff_synth_preset deepseek_v3_presets[] = {
    {"deepseek-v3", "DeepSeek-V3/R1 (real: 671B, 61 layers, first 3 dense, 256 experts + 1 shared, 1 MTP layer)"},
    {"kimi-k2", "Kimi-K2 (real: 1T, deepseek_v3 with 61 layers, first 1 dense, 384 experts + 1 shared, no MTP)"},
    {NULL, NULL},
};

static int deepseek_v3_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real = strcmp(size, "real") == 0, kimi = strcmp(preset, "kimi-k2") == 0;
    if (!real && strcmp(size, "tiny") != 0)
        return ff_fail(e, FF_EUSAGE, "unknown --size %s (tiny|real)", size);
    memset(g, 0, sizeof *g);
    g->moe = 1;
    g->seed = 1;
    g->dense_layers = kimi ? 1 : 3;
    g->mtp_layers = kimi ? 0 : 1;
    if (real) {
        g->layers = 61; g->hidden = 7168; g->intermediate = 18432; g->vocab = kimi ? 163840 : 129280;
        g->heads = kimi ? 64 : 128; g->kv_heads = g->heads; g->head_dim = 128;
        g->experts = kimi ? 384 : 256; g->top_k = 8; g->moe_intermediate = 2048; g->shared_intermediate = 2048;
    } else {
        g->layers = 4; g->dense_layers = kimi ? 1 : 2; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 4; g->head_dim = 32;
        g->experts = kimi ? 12 : 8; g->top_k = 2; g->moe_intermediate = 128; g->shared_intermediate = 128;
    }
    return FF_OK;
}

/* MLA widths from the head width (the published 128: rope 64, kv_lora 512,
 * q_lora 1536); nope and v heads are head_dim wide. */
typedef struct mla { int64_t q_lora, kv_lora, rope, nope, v; } mla;
static mla mla_of(const synth_geom *g)
{
    return (mla){.q_lora = 12ll * g->head_dim, .kv_lora = 4ll * g->head_dim, .rope = g->head_dim / 2,
                 .nope = g->head_dim, .v = g->head_dim};
}

#define P "model.layers."

static void mla_attention(const synth_geom *g, synth_list *l, int i)
{
    mla m = mla_of(g);
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

static void moe_layer(const synth_geom *g, synth_list *l, int i)
{
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

static int deepseek_v3_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = ff_decoder_synth_check(g, e);
    if (rc)
        return rc;
    if (g->head_dim % 32)
        return ff_fail(e, FF_EUSAGE, "synth: deepseek head dim must be a multiple of 32 (rope = head dim / 2)");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers + g->mtp_layers; i++) {
        if (i >= g->layers) {
            /* the MTP drafter's own tensors (as in the published checkpoint) */
            synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, P "%d.embed_tokens.weight", i);
            synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.enorm.weight", i);
            synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.hnorm.weight", i);
            synth_add(l, SYNTH_NORMAL, 2, g->hidden, 2 * g->hidden, 0, P "%d.eh_proj.weight", i);
        }
        mla_attention(g, l, i);
        if (i < g->dense_layers)
            ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
        else
            moe_layer(g, l, i);
        if (i >= g->layers) {
            synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.shared_head.norm.weight", i);
            synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, P "%d.shared_head.head.weight", i);
        }
    }
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    return l->oom ? ff_fail(e, FF_EIO, "out of memory") : FF_OK;
}

static json_t *deepseek_v3_synth_config(const synth_geom *g)
{
    mla m = mla_of(g);
    json_t *c = ff_decoder_synth_config(g, "deepseek_v3", "DeepseekV3ForCausalLM");
    json_object_del(c, "head_dim");   /* the published configs have none */
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "first_k_dense_replace", json_integer(g->dense_layers));
    json_object_set_new(c, "kv_lora_rank", json_integer(m.kv_lora));
    json_object_set_new(c, "moe_intermediate_size", json_integer(g->moe_intermediate));
    json_object_set_new(c, "moe_layer_freq", json_integer(1));
    json_object_set_new(c, "n_group", json_integer(g->experts >= 64 && g->experts % 8 == 0 ? 8 : 1));
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
    json_object_set_new(c, "topk_group", json_integer(g->experts >= 64 && g->experts % 8 == 0 ? 4 : 1));
    json_object_set_new(c, "topk_method", json_string("noaux_tc"));
    json_object_set_new(c, "v_head_dim", json_integer(m.v));
    return c;
}

static const char *const deepseek_v3_implicit_ignore[] = {"lm_head", NULL};

const ff_family ff_family_deepseek_v3 = {
    .name = "deepseek_v3",
    .model_types = "deepseek_v3",
    .matches = deepseek_v3_matches,
    .rules = deepseek_v3_rules,
    .nrules = sizeof deepseek_v3_rules / sizeof *deepseek_v3_rules,
    .override_rule = ff_decoder_mtp_rule,
    .expect = deepseek_v3_expect,
    .dense_rule = "q_a/q_b (or q)/kv_a/kv_b/o in every layer, gate/up/down in the first_k_dense_replace layers and shared experts",
    .geometry = deepseek_v3_geometry,
    .implicit_ignore = deepseek_v3_implicit_ignore,
    .synth_presets = deepseek_v3_presets,
    .synth_preset = deepseek_v3_synth_preset,
    .synth_tensors = deepseek_v3_synth_tensors,
    .synth_config = deepseek_v3_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};
