/* fp4forge synth --arch kimi-k3: Kimi-K3's tensor names, shapes and config
 * schema (KimiK3Config over KimiLinearConfig, as llm-compressor's
 * modeling/kimi_k3 writes them). At --size real it is the released layout
 * a header validator of the upload checks tensor by tensor (93 layers, 69
 * KDA + 24 MLA, 896 latent experts; with --source mxfp4 its 497,220 tensors),
 * but for dtypes: synth writes every tensor bf16, where the upload keeps
 * conv1d, A_log, dt_bias, o_norm and the router's bias in F32, and the patch
 * embedding [V, 3, 14, 14] is written [V, 588]. With --source mxfp4 the
 * routed experts w1/w2/w3 are stored MXFP4 and the quantization_config goes
 * in text_config, as Moonshot ships it (src/families/synth_source.c).
 *
 * Widths synth derives (its knobs are the shared synth_geom): the MLA ranks
 * from --head-dim as the DeepSeek lineage (mla_widths_of: 128 gives q_lora
 * 1536, kv_lora 512, rope 64, nope = v = 128), the experts' latent width
 * routed_expert_hidden_size = hidden / 2 (3584 of 7168), two shared experts
 * of the experts' width (6144), the vision attention 1.5 x the vision width
 * (qkv_hidden_size 1536 of 1024). KDA heads and head dim are
 * linear_v_heads / linear_v_dim; layer i is MLA when i + 1 is a multiple of
 * full_every (4) or i is the last, else KDA: the release's map. */
#include "kimi_k3.h"

#include <string.h>

#include "decoder.h"
#include "jsonio.h"
#include "mla.h"
#include "qwen_hybrid.h"

#define TEXT "language_model."
#define P "model.layers."
#define K3_SHARED 2         /* num_shared_experts */
#define K3_POS_GRID 64      /* init_pos_emb_height / _width */

const ff_synth_preset k3_synth_presets[] = {
    {"kimi-k3", "Kimi-K3 (real: 93 layers, 69 KDA + 24 MLA, first 1 dense, 896 latent experts + 2 shared, "
                "under language_model.; a 27-block MoonViT-3D tower and mm_projector)"},
    {NULL, NULL},
};

int k3_synth_preset(const char *preset, const char *size, synth_geom *g, ff_err *e)
{
    int real, rc = ff_decoder_synth_begin(size, 1, g, &real, e);
    if (rc)
        return rc;
    (void)preset;
    g->dense_layers = 1;
    g->full_every = 4;
    g->conv_kernel = 4;
    if (real) {
        g->layers = 93; g->hidden = 7168; g->intermediate = 33792; g->vocab = 163840;
        g->heads = 96; g->kv_heads = 96; g->head_dim = 128;
        g->experts = 896; g->top_k = 8; g->moe_intermediate = 3072;
        g->linear_v_heads = 96; g->linear_v_dim = 128;
        g->vision_layers = 27; g->vision_hidden = 1024; g->vision_intermediate = 4096; g->vision_heads = 12;
    } else {
        g->layers = 4; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 4; g->head_dim = 32;
        g->experts = 8; g->top_k = 2; g->moe_intermediate = 96;
        g->linear_v_heads = 2; g->linear_v_dim = 64;
        g->vision_layers = 2; g->vision_hidden = 64; g->vision_intermediate = 128; g->vision_heads = 2;
    }
    g->linear_k_heads = g->linear_v_heads;   /* KDA: keys as wide as values */
    g->linear_k_dim = g->linear_v_dim;
    g->shared_intermediate = K3_SHARED * g->moe_intermediate;
    return FF_OK;
}

static int64_t latent_width(const synth_geom *g) { return g->hidden / 2; }
static int is_mla(const synth_geom *g, int layer) { return qh_synth_full(g, layer); }

static int k3_synth_check(const synth_geom *g, ff_err *e)
{
    int rc = mla_synth_check(g, e);
    if (rc)
        return rc;
    if (g->linear_v_heads <= 0 || g->linear_v_dim <= 0 || g->linear_v_dim % 16 || g->conv_kernel <= 0 ||
        g->full_every <= 0)
        return ff_fail(e, FF_EUSAGE, "KDA heads, KDA head dim (a multiple of 16), conv kernel and --full-every "
                                     "must be positive");
    if (g->hidden % 32)
        return ff_fail(e, FF_EUSAGE, "--hidden must be a multiple of 32 (the experts' latent width is half of it)");
    if (g->vision_layers && (g->vision_hidden <= 0 || g->vision_hidden % 32 || g->vision_intermediate % 16))
        return ff_fail(e, FF_EUSAGE, "the vision width must be a multiple of 32 and its MLP's of 16");
    return FF_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

static void kda_attention(const synth_geom *g, synth_list *l, int i)
{
    static const char *const qkvg[] = {"q", "k", "v", "g"};
    int64_t H = g->hidden, hd = g->linear_v_dim, n = g->linear_v_heads, p = n * hd;
    for (int k = 0; k < 4; k++)
        synth_add(l, SYNTH_NORMAL, 2, p, H, 0, P "%d.self_attn.%s_proj.weight", i, qkvg[k]);
    synth_add(l, SYNTH_NORMAL, 2, H, p, 0, P "%d.self_attn.o_proj.weight", i);
    for (int k = 0; k < 3; k++)
        synth_add(l, SYNTH_NORMAL, 3, p, 1, g->conv_kernel, P "%d.self_attn.%s_conv1d.weight", i, qkvg[k]);
    synth_add(l, SYNTH_NORMAL, 2, hd, H, 0, P "%d.self_attn.f_a_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, p, hd, 0, P "%d.self_attn.f_b_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, n, H, 0, P "%d.self_attn.b_proj.weight", i);
    /* the upload pads A_log to head_dim entries (one a head is read) */
    synth_add(l, SYNTH_NORMAL, 1, hd, 0, 0, P "%d.self_attn.A_log", i);
    synth_add(l, SYNTH_ONES, 1, p, 0, 0, P "%d.self_attn.dt_bias", i);
    synth_add(l, SYNTH_ONES, 1, hd, 0, 0, P "%d.self_attn.o_norm.weight", i);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.input_layernorm.weight", i);
    synth_add(l, SYNTH_ONES, 1, H, 0, 0, P "%d.post_attention_layernorm.weight", i);
}

static void latent_moe(const synth_geom *g, synth_list *l, int i)
{
    int64_t H = g->hidden, L = latent_width(g), I = g->moe_intermediate;
    synth_add(l, SYNTH_NORMAL, 2, g->experts, H, 0, P "%d.block_sparse_moe.gate.weight", i);
    synth_add(l, SYNTH_NORMAL, 1, g->experts, 0, 0, P "%d.block_sparse_moe.gate.e_score_correction_bias", i);
    for (int x = 0; x < g->experts; x++) {
        synth_add(l, SYNTH_NORMAL, 2, I, L, 0, P "%d.block_sparse_moe.experts.%d.w1.weight", i, x);
        synth_add(l, SYNTH_NORMAL, 2, L, I, 0, P "%d.block_sparse_moe.experts.%d.w2.weight", i, x);
        synth_add(l, SYNTH_NORMAL, 2, I, L, 0, P "%d.block_sparse_moe.experts.%d.w3.weight", i, x);
    }
    ff_decoder_synth_mlp(l, g, P, i, "block_sparse_moe.shared_experts", K3_SHARED * I);
    synth_add(l, SYNTH_NORMAL, 2, L, H, 0, P "%d.block_sparse_moe.routed_expert_down_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, H, L, 0, P "%d.block_sparse_moe.routed_expert_up_proj.weight", i);
    synth_add(l, SYNTH_ONES, 1, L, 0, 0, P "%d.block_sparse_moe.routed_expert_norm.weight", i);
}

/* One decoder layer: its attention (MLA with the output gate, or KDA), its
 * MLP (dense or the latent MoE) and the attention-residual norms and [1, H]
 * projections every layer has. */
static void decoder_layer(const synth_geom *g, synth_list *l, int i)
{
    mla_widths m = mla_widths_of(g);
    if (is_mla(g, i)) {
        mla_synth_attention(g, l, i);
        synth_add(l, SYNTH_NORMAL, 2, g->heads * m.v, g->hidden, 0, P "%d.self_attn.g_proj.weight", i);
    } else {
        kda_attention(g, l, i);
    }
    if (i < g->dense_layers)
        ff_decoder_synth_mlp(l, g, P, i, "mlp", g->intermediate);
    else
        latent_moe(g, l, i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.self_attention_res_norm.weight", i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, P "%d.mlp_res_norm.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, 1, g->hidden, 0, P "%d.self_attention_res_proj.weight", i);
    synth_add(l, SYNTH_NORMAL, 2, 1, g->hidden, 0, P "%d.mlp_res_proj.weight", i);
}

/* MoonViT-3D with RMSNorms and no biases (norm_type rmsnorm, attn_bias,
 * linear_bias and patch_embed_proj_bias false) and the patchmergerv2
 * projector (2x2 merge: 4 patches wide in, post_norm out). */
static void vision(const synth_geom *g, synth_list *l)
{
    int64_t V = g->vision_hidden, I = g->vision_intermediate, Q = V * 3 / 2;
    synth_add(l, SYNTH_NORMAL, 2, V, 3 * 14 * 14, 0, "vision_tower.patch_embed.proj.weight");
    synth_add(l, SYNTH_NORMAL, 3, K3_POS_GRID, K3_POS_GRID, V, "vision_tower.patch_embed.pos_emb.weight");
    for (int b = 0; b < g->vision_layers; b++) {
        synth_add(l, SYNTH_ONES, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.norm0.weight", b);
        synth_add(l, SYNTH_ONES, 1, V, 0, 0, "vision_tower.encoder.blocks.%d.norm1.weight", b);
        synth_add(l, SYNTH_NORMAL, 2, I, V, 0, "vision_tower.encoder.blocks.%d.mlp.fc0.weight", b);
        synth_add(l, SYNTH_NORMAL, 2, V, I, 0, "vision_tower.encoder.blocks.%d.mlp.fc1.weight", b);
        synth_add(l, SYNTH_NORMAL, 2, 3 * Q, V, 0, "vision_tower.encoder.blocks.%d.wqkv.weight", b);
        synth_add(l, SYNTH_NORMAL, 2, V, Q, 0, "vision_tower.encoder.blocks.%d.wo.weight", b);
    }
    synth_add(l, SYNTH_ONES, 1, V, 0, 0, "vision_tower.encoder.final_layernorm.weight");
    synth_add(l, SYNTH_NORMAL, 2, 4 * V, 4 * V, 0, "mm_projector.proj.0.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->hidden, 4 * V, 0, "mm_projector.proj.2.weight");
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "mm_projector.post_norm.weight");
}

int k3_synth_tensors(const synth_geom *g, synth_list *l, ff_err *e)
{
    int rc = k3_synth_check(g, e);
    if (rc)
        return rc;
    if (g->vision_layers)
        vision(g, l);
    size_t text = l->n;
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "model.embed_tokens.weight");
    for (int i = 0; i < g->layers; i++)
        decoder_layer(g, l, i);
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.norm.weight");
    synth_add(l, SYNTH_ONES, 1, g->hidden, 0, 0, "model.output_attn_res_norm.weight");
    synth_add(l, SYNTH_NORMAL, 2, 1, g->hidden, 0, "model.output_attn_res_proj.weight");
    synth_add(l, SYNTH_NORMAL, 2, g->vocab, g->hidden, 0, "lm_head.weight");
    if (!l->oom)
        synth_prefix(l, text, TEXT);
    return l->oom ? ff_oom(e, "out of memory") : FF_OK;
}

/* ---- config.json -------------------------------------------------------------- */

static json_t *layer_list(const synth_geom *g, int mla)
{
    json_t *a = json_array();
    for (int i = 0; i < g->layers; i++)
        if (is_mla(g, i) == mla)
            json_array_append_new(a, json_integer(i + 1));   /* 1-based */
    return a;
}

/* KimiLinearConfig's own keys; the values fp4forge reads none of (the situ
 * betas, attn_res_block_size, routing constants) are placeholders, not the
 * release's. */
static void text_keys(json_t *c, const synth_geom *g)
{
    mla_widths m = mla_widths_of(g);
    static const char *const ints[] = {"moe_intermediate_size", "num_experts", "num_experts_per_token",
                                       "num_shared_experts", "first_k_dense_replace", "moe_layer_freq",
                                       "num_expert_group", "topk_group", "q_lora_rank", "kv_lora_rank",
                                       "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                       "num_nextn_predict_layers", "attn_res_block_size",
                                       "routed_expert_hidden_size", "pad_token_id"};
    const int64_t vals[] = {g->moe_intermediate, g->experts, g->top_k, K3_SHARED, g->dense_layers, 1, 1, 1,
                            m.q_lora, m.kv_lora, m.nope, m.rope, m.v, g->mtp_layers, 8, latent_width(g), 0};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        json_object_set_new(c, ints[i], json_integer(vals[i]));
    static const char *const yes[] = {"moe_renormalize", "use_grouped_topk", "mla_use_nope", "mla_use_output_gate",
                                      "latent_moe_use_norm"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        json_object_set_new(c, yes[i], json_true());
    json_object_set_new(c, "moe_router_activation_func", json_string("sigmoid"));
    json_object_set_new(c, "topk_method", json_string("noaux_tc"));
    json_object_set_new(c, "routed_scaling_factor", json_real(2.5));
    json_object_set_new(c, "hidden_act", json_string("situ"));
    json_object_set_new(c, "activation_situ_beta", json_real(1.0));
    json_object_set_new(c, "activation_situ_linear_beta", json_null());
    json_object_set_new(c, "rope_theta", json_real(10000.0));
    json_object_set_new(c, "linear_attn_config",
                        json_pack("{s:o, s:o, s:i, s:i, s:i, s:b}", "kda_layers", layer_list(g, 0), "full_attn_layers",
                                  layer_list(g, 1), "num_heads", g->linear_v_heads, "head_dim", g->linear_v_dim,
                                  "short_conv_kernel_size", g->conv_kernel, "use_full_rank_gate", 1));
}

static json_t *vision_config(const synth_geom *g)
{
    json_t *v = json_pack("{s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:I, s:I, s:[i, i], s:s, s:s, s:I}", "patch_size", 14,
                          "init_pos_emb_height", K3_POS_GRID, "init_pos_emb_width", K3_POS_GRID, "init_pos_emb_time",
                          4, "pos_emb_type", "divided_fixed", "vt_num_attention_heads", g->vision_heads,
                          "vt_num_hidden_layers", g->vision_layers, "vt_hidden_size", (json_int_t)g->vision_hidden,
                          "vt_intermediate_size", (json_int_t)g->vision_intermediate, "merge_kernel_size", 2, 2,
                          "merge_type", "sd2_tpool", "mm_projector_type", "patchmergerv2", "mm_hidden_size",
                          (json_int_t)g->vision_hidden);
    json_t *rest = json_pack("{s:s, s:f, s:I, s:s, s:b, s:b, s:s, s:b, s:s, s:s, s:I}", "projector_hidden_act", "gelu",
                             "projector_ln_eps", 1e-5, "qkv_hidden_size", (json_int_t)(g->vision_hidden * 3 / 2),
                             "norm_type", "rmsnorm", "attn_bias", 0, "patch_embed_proj_bias", 0, "mlp_type", "mlp2",
                             "linear_bias", 0, "activation_func", "gelu_pytorch_tanh", "pos_emb_interpolation_mode",
                             "bilinear", "text_hidden_size", (json_int_t)g->hidden);
    if (v && rest)
        json_object_update(v, rest);
    json_decref(rest);
    return v;
}

json_t *k3_synth_config(const synth_geom *g)
{
    json_t *text = ff_decoder_synth_config(g, "kimi_linear", "KimiLinearForCausalLM");
    json_object_set_new(text, "architectures", json_null());
    json_object_set_new(text, "head_dim", json_integer(g->hidden / g->heads));   /* KimiLinearConfig's default */
    text_keys(text, g);
    json_t *c = json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:o}", "architectures", "KimiK3ForConditionalGeneration",
                          "model_type", "kimi_k3", "dtype", "bfloat16", "ignore_index", -100,
                          "media_placeholder_token_id", 163605, "pad_token_id", 0, "text_config", text);
    if (c && g->vision_layers)
        json_object_set_new(c, "vision_config", vision_config(g));
    return c;
}

/* The processor files a multimodal upload carries (doctor checks them). */
int k3_synth_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    static const char *const files[][2] = {
        {"chat_template.jinja", "{% for m in messages %}<|im_{{ m['role'] }}|>{{ m['content'] }}<|im_end|>{% endfor %}"
                                "{% if add_generation_prompt %}<|im_assistant|>{% endif %}"},
        {"processor_config.json", "{\n  \"processor_class\": \"KimiK3Processor\"\n}\n"},
        {"preprocessor_config.json", "{\n  \"image_processor_type\": \"KimiK3VisionProcessor\",\n  \"patch_size\": 14,\n"
                                     "  \"merge_kernel_size\": [2, 2]\n}\n"},
    };
    int rc = ff_decoder_synth_aux(g, dir, e);
    for (size_t i = 0; !rc && g->vision_layers && i < sizeof files / sizeof *files; i++)
        rc = synth_write_text(dir, files[i][0], files[i][1], e);
    return rc;
}
