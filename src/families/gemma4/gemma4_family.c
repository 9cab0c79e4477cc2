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
#define TOP "^(model\\.language_model\\.|model\\.)"
#define VT "^model\\.vision_tower\\."

static const ff_rule gemma4_rules[] = {
    /* Vision tower and projectors: vLLM's multimodal wrapper loads them
     * unquantized; their Linears go in the ignore list. */
    FF_TOWER(VT ".*\\.linear\\.weight$", "vision", 1),
    FF_TOWER(VT "patch_embedder\\.input_proj\\.weight$", "vision", 1),
    FF_TOWER(VT, "vision", 0),
    FF_TOWER("^model\\.audio_tower\\..*\\.linear\\.weight$", "audio", 1),
    FF_TOWER("^model\\.audio_tower\\.", "audio", 0),
    FF_TOWER("^model\\.embed_(vision|audio)\\.embedding_projection\\.weight$", "projector", 1),
    FF_TOWER("^model\\.embed_(vision|audio)\\.", "projector", 0),
    /* Attention and dense MLP: the quantized set. */
    FF_DENSE_ATTENTION_ROWS(LM),
    FF_DENSE_MLP_ROWS(LM, "mlp"),
    /* MoE: fused 3-D experts are the bulk of the model; a Linear-only recipe
     * misses them. Routers stay bf16: quantized, the seat serves NaN. */
    {.regex = LM "experts\\.gate_up_proj$", .role = ROLE_EXPERTS_FUSED2, .group = "experts", .linear = 1,
     .expert_out = {"gate_proj", "up_proj"}},
    {.regex = LM "experts\\.down_proj$", .role = ROLE_EXPERTS_ONE, .group = "experts", .linear = 1,
     .expert_out = {"down_proj", NULL}},
    {.regex = LM "router\\.proj\\.weight$", .role = ROLE_KEEP, .group = "router", .linear = 1,
     .guard = GUARD_ROUTER, .ignore_parent = 1},
    FF_KEEP(LM "router\\.", "router", GUARD_ROUTER),
    /* Per-layer embeddings (PLE): small Linears kept in bf16. */
    FF_KEEP_LINEAR(LM "per_layer_(input_gate|projection)\\.weight$", "per_layer", GUARD_NONE),
    FF_KEEP_LINEAR(TOP "per_layer_model_projection\\.weight$", "per_layer", GUARD_NONE),
    FF_KEEP(TOP "per_layer_projection_norm\\.", "norm", GUARD_FIXED),
    FF_KEEP(TOP "embed_tokens(_per_layer)?\\.", "embedding", GUARD_FIXED),
    FF_KEEP("(norm|layernorm(_[0-9]+)?)\\.weight$", "norm", GUARD_FIXED),
    FF_KEEP("layer_scalar$", "norm", GUARD_FIXED),
    FF_KEEP_LINEAR("^lm_head\\.weight$", "lm_head", GUARD_FIXED),
};

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

static const char *const gemma4_implicit_ignore[] = {"lm_head", NULL};

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
    .rules = gemma4_rules,
    .nrules = sizeof gemma4_rules / sizeof *gemma4_rules,
    .expect = gemma4_expect,
    .dense_rule = "attention q/k/v/o without v on k_eq_v layers, plus gate/up/down",
    .geometry = gemma4_geometry,
    .implicit_ignore = gemma4_implicit_ignore,
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
