/* Gemma-4 (Gemma4ForConditionalGeneration and the text-only causal LM),
 * dense and MoE. Names as transformers 5.x saves them; expert output names as
 * llm-compressor's linearized MoE writes them and vLLM's gemma4 loader reads
 * them (".experts.N.gate_proj." -> w13 shard w1, up_proj -> w3, down -> w2). */
#include "arch.h"
#include <stdlib.h>
#include <string.h>

#include "gemma4_config.h"

#define LM "^(model\\.language_model\\.|model\\.)layers\\.[0-9]+\\."
#define VT "^model\\.vision_tower\\."

static const arch_rule gemma4_rules[] = {
    /* Vision tower and projectors: vLLM's multimodal wrapper loads them
     * unquantized; their Linears go in the ignore list. */
    {VT ".*\\.linear\\.weight$", ROLE_KEEP, "vision", 1, NULL, GUARD_FIXED, 0, {0}},
    {VT "patch_embedder\\.input_proj\\.weight$", ROLE_KEEP, "vision", 1, NULL, GUARD_FIXED, 0, {0}},
    {VT, ROLE_KEEP, "vision", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^model\\.audio_tower\\..*\\.linear\\.weight$", ROLE_KEEP, "audio", 1, NULL, GUARD_FIXED, 0, {0}},
    {"^model\\.audio_tower\\.", ROLE_KEEP, "audio", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^model\\.embed_(vision|audio)\\.embedding_projection\\.weight$", ROLE_KEEP, "projector", 1, NULL, GUARD_FIXED, 0, {0}},
    {"^model\\.embed_(vision|audio)\\.", ROLE_KEEP, "projector", 0, NULL, GUARD_FIXED, 0, {0}},
    /* Attention and dense MLP: the quantized set. vLLM fuses q/k/v and
     * gate/up into one GEMM with one global scale, so they are tied. */
    {LM "self_attn\\.(q|k|v)_proj\\.weight$", ROLE_LINEAR, "attention", 1, "qkv", GUARD_NONE, 0, {0}},
    {LM "self_attn\\.o_proj\\.weight$", ROLE_LINEAR, "attention", 1, NULL, GUARD_NONE, 0, {0}},
    {LM "mlp\\.(gate|up)_proj\\.weight$", ROLE_LINEAR, "mlp", 1, "gate_up", GUARD_NONE, 0, {0}},
    {LM "mlp\\.down_proj\\.weight$", ROLE_LINEAR, "mlp", 1, NULL, GUARD_NONE, 0, {0}},
    /* MoE: fused 3-D experts are the bulk of the model; a Linear-only recipe
     * misses them. Routers stay bf16: quantized, the seat serves NaN. */
    {LM "experts\\.gate_up_proj$", ROLE_EXPERTS_FUSED2, "experts", 1, NULL, GUARD_NONE, 0, {"gate_proj", "up_proj"}},
    {LM "experts\\.down_proj$", ROLE_EXPERTS_ONE, "experts", 1, NULL, GUARD_NONE, 0, {"down_proj", NULL}},
    {LM "router\\.proj\\.weight$", ROLE_KEEP, "router", 1, NULL, GUARD_ROUTER, 1, {0}},
    {LM "router\\.", ROLE_KEEP, "router", 0, NULL, GUARD_ROUTER, 0, {0}},
    /* Per-layer embeddings (PLE): small Linears kept in bf16. */
    {LM "per_layer_(input_gate|projection)\\.weight$", ROLE_KEEP, "per_layer", 1, NULL, GUARD_NONE, 0, {0}},
    {"^(model\\.language_model\\.|model\\.)per_layer_model_projection\\.weight$", ROLE_KEEP, "per_layer", 1, NULL, GUARD_NONE, 0, {0}},
    {"^(model\\.language_model\\.|model\\.)per_layer_projection_norm\\.", ROLE_KEEP, "norm", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^(model\\.language_model\\.|model\\.)embed_tokens(_per_layer)?\\.", ROLE_KEEP, "embedding", 0, NULL, GUARD_FIXED, 0, {0}},
    {"(norm|layernorm(_[0-9]+)?)\\.weight$", ROLE_KEEP, "norm", 0, NULL, GUARD_FIXED, 0, {0}},
    {"layer_scalar$", ROLE_KEEP, "norm", 0, NULL, GUARD_FIXED, 0, {0}},
    {"^lm_head\\.weight$", ROLE_KEEP, "lm_head", 1, NULL, GUARD_FIXED, 0, {0}},
};

static int gemma4_matches(const json_t *config) { return g4_is_gemma4(config); }

static int gemma4_expect(const json_t *config, arch_expect *x, ff_err *e)
{
    g4_geometry *g = malloc(sizeof *g);
    if (!g)
        return ff_fail(e, FF_EIO, "out of memory");
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

static void gemma4_describe(const json_t *config, arch_shape *s)
{
    memset(s, 0, sizeof *s);
    g4_geometry *g = malloc(sizeof *g);
    if (g && g4_read(config, g, 0, NULL) == FF_OK) {
        s->layers = g->layers;
        s->has_vision = g->has_vision;
        s->moe = g->moe;
        s->experts = g->moe ? g->experts : 0;
        s->tie_embeddings = g->tie_embeddings;
    }
    free(g);
}

const arch_family arch_gemma4 = {
    .name = "gemma4",
    .matches = gemma4_matches,
    .rules = gemma4_rules,
    .nrules = sizeof gemma4_rules / sizeof *gemma4_rules,
    .expect = gemma4_expect,
    .describe = gemma4_describe,
};
