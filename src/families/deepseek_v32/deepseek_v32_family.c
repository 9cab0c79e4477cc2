/* DeepSeek-V3.2 (DeepseekV32ForCausalLM, deepseek_v32) and GLM-5
 * (GlmMoeDsaForCausalLM, glm_moe_dsa): the DeepSeek-V3 lineage (src/families/
 * mla.h) with DeepSeek sparse attention, whose lightning indexer adds to
 * each layer that runs it self_attn.indexer.wq_b [heads x index_head_dim,
 * q_lora_rank], wk [index_head_dim, H], weights_proj [index heads, H] and a
 * LayerNorm k_norm (weight and bias). GLM-5's indexer_types mark layers
 * "shared" that reuse the previous layer's top-k and hold no indexer.
 *
 * What vLLM 0.32 loads decides quantize vs keep (model_executor/models/
 * deepseek_v2.py, class Indexer): wq_b is a ReplicatedLinear built with the
 * quant config, so it is quantized (an NVFP4 wq_b loads and serves); wk and
 * weights_proj are fused into one wk_weights_proj MergedColumnParallelLinear
 * built with quant_config=None (an FP8 wk is upcast to bf16 on load, an
 * NVFP4 one has no way in), so both are kept, in ignore, tied as vLLM fuses
 * them. vLLM's CPU build refuses the model ("Sparse Attention is not
 * supported on CPU.", platforms/cpu.py); the CUDA build serves it. */
#include <string.h>

#include "decoder.h"
#include "family.h"
#include "jsonio.h"
#include "mla.h"


/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char deepseek_v32_description[] =
    "format 1\n"
    "family deepseek_v32\n"
    "model-type deepseek_v32 glm_moe_dsa\n"
    "quant ^model[.]layers[.][0-9]+[.]self_attn[.]indexer[.]wq_b[.]weight$ group=indexer\n"
    "keep ^model[.]layers[.][0-9]+[.]self_attn[.]indexer[.](wk|weights_proj)[.]weight$ group=indexer fuse=wk_weights_proj linear\n"
    "keep ^model[.]layers[.][0-9]+[.]self_attn[.]indexer[.] group=indexer\n"
    "define L ^model[.]layers[.][0-9]+[.]\n"
    FF_MLA_DESCRIPTION_ROWS
    "keep ^model[.]embed_tokens[.]weight$ group=embedding guard=fixed\n"
    "keep (norm|layernorm)[.]weight$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int deepseek_v32_matches(const json_t *config)
{
    const char *mt = jsonio_str(config, "model_type", "");
    return strcmp(mt, "deepseek_v32") == 0 || strcmp(mt, "glm_moe_dsa") == 0;
}

/* transformers' GlmMoeDsaConfig: indexer_types, else index_topk_pattern
 * ("F" full, "S" shared), else "full" where max(i - offset + 1, 0) % freq
 * == 0; DeepSeek-V3.2 configs give none of them: every layer has one. */
static int has_indexer(const json_t *config, int i)
{
    const json_t *types = json_object_get(config, "indexer_types");
    if (json_is_array(types)) {
        const char *t = json_string_value(json_array_get(types, (size_t)i));
        return !t || strcmp(t, "shared") != 0;
    }
    const char *pattern = jsonio_str(config, "index_topk_pattern", NULL);
    if (pattern && (size_t)i < strlen(pattern))
        return pattern[i] != 'S';
    if (!json_object_get(config, "index_topk_freq"))
        return 1;
    int64_t freq = jsonio_int(config, "index_topk_freq", 1), offset = jsonio_int(config, "index_skip_topk_offset", 2);
    int64_t k = i - offset + 1 > 0 ? i - offset + 1 : 0;
    return freq <= 1 || k % freq == 0;
}

/* The indexer's key cache: FP8 keys of index_head_dim plus a float32 scale a
 * token, on each layer that runs an indexer (vLLM's indexer cache spec). */
static int deepseek_v32_geometry(const json_t *config, ff_geometry *g, ff_err *e)
{
    int rc = mla_geometry(config, g, e);
    int64_t dim = jsonio_int(config, "index_head_dim", 128);
    for (int i = 0; !rc && i < g->layers; i++)
        g->layer[i].extra_per_token = has_indexer(config, i) ? dim + 4 : 0;
    return rc;
}

static int deepseek_v32_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    int64_t indexers = 0, layers = jsonio_int(config, "num_hidden_layers", 0);
    for (int i = 0; i < layers && i < FF_MAX_LAYERS; i++)
        indexers += has_indexer(config, i);
    return mla_expect(config, indexers, x, e);
}

/* ---- synth ------------------------------------------------------------------ */

static const ff_synth_preset deepseek_v32_presets[] = {
    {"deepseek-v3.2", "DeepSeek-V3.2 (real: 671B, 61 layers, first 3 dense, 256 experts + 1 shared, indexer, 1 MTP layer)"},
    {"glm5", "GLM-5 (glm_moe_dsa, real: 78 layers, first 3 dense, 256 experts + 1 shared, indexer, 1 MTP layer)"},
    {NULL, NULL},
};

static int deepseek_v32_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real, glm = strcmp(preset, "glm5") == 0, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    g->dense_layers = 3;
    g->mtp_layers = 1;
    if (real && !glm) {   /* DeepSeek-V3.2 */
        g->layers = 61; g->hidden = 7168; g->intermediate = 18432; g->vocab = 129280;
        g->heads = 128; g->kv_heads = 128; g->head_dim = 128;
        g->experts = 256; g->top_k = 8; g->moe_intermediate = 2048; g->shared_intermediate = 2048;
    } else if (real) {    /* GLM-5 */
        g->layers = 78; g->hidden = 6144; g->intermediate = 12288; g->vocab = 154880;
        g->heads = 64; g->kv_heads = 64; g->head_dim = 128;
        g->experts = 256; g->top_k = 8; g->moe_intermediate = 2048; g->shared_intermediate = 2048;
    } else {
        g->layers = 4; g->dense_layers = 1; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 4; g->head_dim = 32;
        g->experts = 8; g->top_k = 2; g->moe_intermediate = 128; g->shared_intermediate = 128;
    }
    return FF_OK;
}

/* index heads: DeepSeek-V3.2's 64, GLM-5's 32; index_head_dim 128 */
static int index_heads(const synth_geom *g)
{
    return strcmp(g->preset, "glm5") == 0 ? 32 : 64;
}

static void indexer(const synth_geom *g, synth_list *l, int i)
{
    int64_t H = g->hidden, q_lora = mla_widths_of(g).q_lora, n = index_heads(g);
    synth_add(l, SYNTH_NORMAL, 1, 128, 0, 0, "model.layers.%d.self_attn.indexer.k_norm.bias", i);
    synth_add(l, SYNTH_ONES, 1, 128, 0, 0, "model.layers.%d.self_attn.indexer.k_norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, n, H, 0, "model.layers.%d.self_attn.indexer.weights_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, 128, H, 0, "model.layers.%d.self_attn.indexer.wk.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, n * 128, q_lora, 0, "model.layers.%d.self_attn.indexer.wq_b.weight", i);
}

static int deepseek_v32_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = mla_synth_check(g, e);
    if (rc)
        return rc;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    mla_synth_layers(g, l, indexer);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

static json_t *deepseek_v32_synth_config(const synth_geom *g)
{
    int glm = strcmp(g->preset, "glm5") == 0;
    json_t *c = glm ? mla_synth_config(g, "glm_moe_dsa", "GlmMoeDsaForCausalLM")
                    : mla_synth_config(g, "deepseek_v32", "DeepseekV32ForCausalLM");
    json_object_set_new(c, "index_head_dim", json_integer(128));
    json_object_set_new(c, "index_n_heads", json_integer(index_heads(g)));
    json_object_set_new(c, "index_topk", json_integer(2048));
    return c;
}

static const ff_synth_knob deepseek_v32_knobs[] = {
    FF_KNOBS_DECODER, FF_KNOB_VOCAB, FF_KNOBS_MOE,
    FF_KNOBS_END,
};

const ff_family ff_family_deepseek_v32 = {
    .name = "deepseek_v32",
    .model_types = "deepseek_v32, glm_moe_dsa",
    .matches = deepseek_v32_matches,
    .desc_text = deepseek_v32_description,
    .override_rule = ff_decoder_mtp_rule,
    .expect = deepseek_v32_expect,
    .dense_rule = "q_a/q_b/kv_a/kv_b/o and the indexer's wq_b in every layer, gate/up/down in the "
                  "first_k_dense_replace layers and shared experts",
    .geometry = deepseek_v32_geometry,
    .synth_presets = deepseek_v32_presets,
    .synth_knobs = deepseek_v32_knobs,
    .synth_preset = deepseek_v32_synth_preset,
    .synth_tensors = deepseek_v32_synth_tensors,
    .synth_config = deepseek_v32_synth_config,
    .synth_aux = ff_decoder_synth_aux,
};
