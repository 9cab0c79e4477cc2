/* Gemma-4 (Gemma4ForConditionalGeneration and the text-only causal LM),
 * dense and MoE. Names as transformers 5.x saves them; expert output names as
 * llm-compressor's linearized MoE writes them and vLLM's gemma4 loader reads
 * them (".experts.N.gate_proj." -> w13 shard w1, up_proj -> w3, down -> w2). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "encoder.h"
#include "family.h"
#include "gemma4.h"
#include "jsonio.h"

#define LM "^(model\\.language_model\\.|model\\.)layers\\.[0-9]+\\."

/* The rule table as data (docs/family-files.md); "[.]" is a literal dot. */
static const char gemma4_description[] =
    "format 1\n"
    "family gemma4\n"
    "model-type gemma4 gemma4_text\n"
    /* Vision tower and projectors: vLLM's multimodal wrapper loads them
     * unquantized; their Linears go in the ignore list. */
    "tower ^model[.]vision_tower[.].*[.]linear[.]weight$ group=vision linear\n"
    "tower ^model[.]vision_tower[.]patch_embedder[.]input_proj[.]weight$ group=vision linear\n"
    "tower ^model[.]vision_tower[.] group=vision\n"
    "tower ^model[.]audio_tower[.].*[.]linear[.]weight$ group=audio linear\n"
    "tower ^model[.]audio_tower[.] group=audio\n"
    "tower ^model[.]embed_(vision|audio)[.]embedding_projection[.]weight$ group=projector linear\n"
    "tower ^model[.]embed_(vision|audio)[.] group=projector\n"
    /* Attention and dense MLP: the quantized set. */
    "quant ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]self_attn[.](q|k|v)_proj[.]weight$ group=attention fuse=qkv\n"
    "quant ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]self_attn[.]o_proj[.]weight$ group=attention\n"
    "quant ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]mlp[.](gate|up)_proj[.]weight$ group=mlp fuse=gate_up\n"
    "quant ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]mlp[.]down_proj[.]weight$ group=mlp\n"
    /* MoE: fused 3-D experts are the bulk of the model; a Linear-only recipe
     * misses them. Routers stay bf16: quantized, the seat serves NaN. */
    "experts ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]experts[.]gate_up_proj$ layout=fused2 out=gate_proj,up_proj\n"
    "experts ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]experts[.]down_proj$ layout=one out=down_proj\n"
    "router ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]router[.]proj[.]weight$ parent\n"
    "keep ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]router[.] group=router guard=router\n"
    /* Per-layer embeddings (PLE): small Linears kept in bf16. */
    "keep ^(model[.]language_model[.]|model[.])layers[.][0-9]+[.]per_layer_(input_gate|projection)[.]weight$ group=per_layer linear\n"
    "keep ^(model[.]language_model[.]|model[.])per_layer_model_projection[.]weight$ group=per_layer linear\n"
    "keep ^(model[.]language_model[.]|model[.])per_layer_projection_norm[.] group=norm guard=fixed\n"
    "keep ^(model[.]language_model[.]|model[.])embed_tokens(_per_layer)?[.] group=embedding guard=fixed\n"
    "keep (norm|layernorm(_[0-9]+)?)[.]weight$ group=norm guard=fixed\n"
    "keep layer_scalar$ group=norm guard=fixed\n"
    "keep ^lm_head[.]weight$ group=lm_head guard=fixed linear\n"
    "implicit-ignore lm_head\n";

static int gemma4_matches(const json_t *config) { return g4_is_gemma4(config); }

static int gemma4_expect(const json_t *config, ff_expect *x, ff_err *e)
{
    g4_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = g4_read(config, g, 0, e);
    if (rc == FF_OK) {
        memset(x, 0, sizeof *x);
        for (int i = 0; i < g->layers; i++) {
            const g4_layer *l = &g->layer[i];
            x->dense_linears += 2 + (l->has_kv ? 1 : 0) + (l->has_v ? 1 : 0) + 3;
        }
        if (g->moe) {
            x->moe_layers = g->layers;
            x->experts = g->experts;
            x->expert_linears = (int64_t)g->layers * g->experts * 3;
            x->routers = g->layers;
            x->expert_inter = g->moe_intermediate;
        }
        x->hidden = g->hidden;
    }
    free(g);
    return rc;
}

static int gemma4_geometry(const json_t *config, ff_geometry *out, ff_err *e)
{
    g4_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_oom(e, "out of memory");
    int rc = g4_read(config, g, 0, e);
    if (rc == FF_OK) {
        memset(out, 0, sizeof *out);
        out->layers = g->layers;
        out->hidden = g->hidden;
        out->vocab = g->vocab;
        out->heads = g->heads;
        out->sliding_window = g->sliding_window;
        out->moe = g->moe;
        out->experts = g->experts;
        out->top_k = g->top_k;
        out->moe_layers = g->moe ? g->layers : 0;
        out->moe_intermediate = g->moe_intermediate;
        out->tie_embeddings = g->tie_embeddings;
        out->has_vision = g->has_vision;
        out->has_audio = g->has_audio;
        for (int i = 0; i < g->layers; i++) {
            const g4_layer *l = &g->layer[i];
            out->layer[i] = (ff_layer){.full = l->full, .head_dim = l->head_dim, .kv_heads = l->kv_heads,
                                       .has_kv = l->has_kv, .k_is_v = l->has_kv && !l->has_v,
                                       .intermediate = l->intermediate};
        }
    }
    free(g);
    return rc;
}

/* fit: Gemma-4's vision tower turns an image into default_output_length
 * soft tokens, each pooled from pooling_kernel_size^2 patches. */
static uint64_t gemma4_encoder_bytes(const json_t *config, const ff_geometry *g, int64_t batched_tokens)
{
    const json_t *v = json_object_get(config, "vision_config");
    if (!json_is_object(v))
        return 0;
    return ff_encoder_pooled_bytes(v, g->hidden, batched_tokens, jsonio_int(v, "default_output_length", 280),
                                   jsonio_int(v, "pooling_kernel_size", 3));
}

/* synth flags: the decoder's, and Gemma-4's own (the full-attention layers'
 * KV geometry, per-layer embeddings, the config schema), in --help order */
static const ff_synth_knob gemma4_knobs[] = {
    FF_KNOBS_DECODER,
    FF_KNOB_NUM("--global-head-dim", "D", own[G4_GLOBAL_HEAD_DIM], "head dim on full-attention layers"),
    FF_KNOB_NUM("--global-kv-heads", "N", own[G4_GLOBAL_KV_HEADS], "KV heads on full-attention layers whose V is K"),
    FF_KNOB_FULL_EVERY,
    {"--no-k-eq-v", NULL, "full-attention layers get their own v_proj", FF_KNOB_CLEAR,
     offsetof(synth_geom, own[G4_K_IS_V])},
    FF_KNOB_VOCAB,
    FF_KNOBS_MOE,
    FF_KNOB_NUM("--ple", "N", own[G4_PLE], "per-layer embedding width (0 = none, the default)"),
    FF_KNOBS_VISION,
    {"--schema", "per-layer|legacy", "per-layer (default, transformers >= 5.15) or legacy (the older config schema)",
     FF_KNOB_CHOICE, offsetof(synth_geom, own[G4_LEGACY_SCHEMA])},
    FF_KNOBS_END,
};

static const ff_synth_preset gemma4_presets[] = {
    {"gemma4-dense", "Gemma-4 dense (real: the 31B geometry)"},
    {"gemma4-moe", "Gemma-4 MoE (real: the 26B-A4B geometry)"},
    {NULL, NULL},
};

const ff_family ff_family_gemma4 = {
    .name = "gemma4",
    .model_types = "gemma4, gemma4_text",
    .matches = gemma4_matches,
    .desc_text = gemma4_description,
    .expect = gemma4_expect,
    .dense_rule = "attention q/k/v/o without v on k_eq_v layers, plus gate/up/down",
    .geometry = gemma4_geometry,
    .doctor_checks = gemma4_doctor_checks,
    .doctor_codes = gemma4_doctor_codes,
    .doctor_open = gemma4_doctor_open,
    .doctor_close = gemma4_doctor_close,
    .synth_presets = gemma4_presets,
    .synth_knobs = gemma4_knobs,
    .synth_preset = gemma4_synth_preset,
    .synth_tensors = gemma4_synth_tensors,
    .synth_config = gemma4_synth_config,
    .synth_aux = gemma4_synth_aux,
    .encoder_bytes = gemma4_encoder_bytes,
};
