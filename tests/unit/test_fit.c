/* fit: KV bytes per token per layer kind and the context solver, against
 * bytes computed by hand for small configs of each layer mix. */
#include <jansson.h>
#include <stdlib.h>

#include "fit.h"
#include "unit.h"

/* 4 layers, sliding x3 then full; kv 2 x 8 on sliding layers, 1 x 16 on the
 * full one, given per layer (5.15+ schema) or by the global fields. */
static json_t *config(int k_eq_v, int legacy, int shared)
{
    json_t *t = json_pack("{si si si si si si sb si s[ssss]}", "num_hidden_layers", 4, "hidden_size", 64,
                          "num_attention_heads", 4, "num_key_value_heads", 2, "head_dim", 8, "sliding_window", 4,
                          "attention_k_eq_v", k_eq_v, "num_kv_shared_layers", shared, "layer_types",
                          "sliding_attention", "sliding_attention", "sliding_attention", "full_attention");
    if (legacy) {
        json_object_set_new(t, "global_head_dim", json_integer(16));
        json_object_set_new(t, "num_global_key_value_heads", json_integer(1));
    } else {
        json_object_set_new(t, "per_layer_config", json_pack("{s{sisi}}", "03", "head_dim", 16,
                                                             "num_key_value_heads", 1));
    }
    json_object_set_new(t, "model_type", json_string("gemma4_text"));
    return json_pack("{ss so}", "model_type", "gemma4", "text_config", t);
}

static int kinds_of(json_t *cfg, const fit_opts *o, fit_kv_kind *k)
{
    ff_err e = {0};
    const ff_family *fam = ff_family_detect(cfg);
    ff_geometry *g = fam ? ff_geometry_new(fam, cfg, &e) : NULL;
    int n = g ? fit_kv_kinds(g, o, k, FIT_MAX_KINDS, &e) : -1;
    free(g);
    json_decref(cfg);
    return n;
}

static const fit_kv_kind *find(const fit_kv_kind *k, int n, int full)
{
    for (int i = 0; i < n; i++)
        if (k[i].full == full)
            return &k[i];
    return NULL;
}

/* sliding: 2 tensors x 2 heads x 8 dim x 2 B = 64 B; full (k_eq_v, stored
 * as K and V like vLLM): 2 x 1 x 16 x 2 = 64 B. */
static void test_mix_per_layer_schema(void)
{
    fit_opts o;
    fit_opts_default(&o);
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(1, 0, 0), &o, k);
    CHECK_EQ_INT(n, 2);
    const fit_kv_kind *s = find(k, n, 0), *f = find(k, n, 1);
    CHECK(s && f);
    if (!s || !f)
        return;
    CHECK_EQ_INT(s->count, 3);
    CHECK_EQ_INT(s->bytes_per_token, 64);
    CHECK_EQ_INT(f->count, 1);
    CHECK_EQ_INT(f->kv_heads, 1);
    CHECK_EQ_INT(f->head_dim, 16);
    CHECK_EQ_INT(f->tensors, 2);
    CHECK(f->k_is_v);
    CHECK_EQ_INT(f->bytes_per_token, 64);
}

/* The legacy flat fields give the same full layer. */
static void test_mix_legacy_schema(void)
{
    fit_opts o;
    fit_opts_default(&o);
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(1, 1, 0), &o, k);
    const fit_kv_kind *f = find(k, n, 1);
    CHECK(f && f->bytes_per_token == 64 && f->kv_heads == 1 && f->head_dim == 16);
}

/* An engine that keeps one tensor where K == V halves the full layer: 32 B;
 * sliding layers keep both (they have a v_proj). */
static void test_k_eq_v_single(void)
{
    fit_opts o;
    fit_opts_default(&o);
    o.k_is_v_single = 1;
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(1, 0, 0), &o, k);
    CHECK(find(k, n, 1) && find(k, n, 1)->bytes_per_token == 32);
    CHECK(find(k, n, 0) && find(k, n, 0)->bytes_per_token == 64);
}

/* No k_eq_v: the full layer keeps its v_proj and (per-layer) 1 x 16. */
static void test_full_without_k_eq_v(void)
{
    fit_opts o;
    fit_opts_default(&o);
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(0, 0, 0), &o, k);
    const fit_kv_kind *f = find(k, n, 1);
    CHECK(f && !f->k_is_v && f->tensors == 2 && f->bytes_per_token == 64);
}

/* num_kv_shared_layers 2: layers 2 (sliding) and 3 (full) read earlier
 * layers' KV and add nothing. */
static void test_kv_shared(void)
{
    fit_opts o;
    fit_opts_default(&o);
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(1, 0, 2), &o, k);
    uint64_t total = 0;
    int shared = 0;
    for (int i = 0; i < n; i++) {
        total += k[i].bytes_per_token * (uint64_t)k[i].count;
        shared += k[i].tensors == 0 ? k[i].count : 0;
    }
    CHECK_EQ_INT(shared, 2);
    CHECK_EQ_INT(total, 2 * 64);   /* two sliding layers own KV */
}

/* fp8 KV: one byte per element, half of bf16. */
static void test_fp8(void)
{
    fit_opts o;
    fit_opts_default(&o);
    o.kv_dtype_bytes = 1;
    fit_kv_kind k[FIT_MAX_KINDS];
    int n = kinds_of(config(1, 0, 0), &o, k);
    CHECK(find(k, n, 0) && find(k, n, 0)->bytes_per_token == 32);
    CHECK(find(k, n, 1) && find(k, n, 1)->bytes_per_token == 32);
}

/* window 4, 8 tokens in flight: holds 4-1+8 = 11 tokens, fewer when the
 * sequence is shorter; in 16-token blocks round_up(11) + one block = 32. */
static void test_sliding_tokens(void)
{
    CHECK_EQ_INT(fit_sliding_tokens(100, 4, 8, 1), 11);
    CHECK_EQ_INT(fit_sliding_tokens(5, 4, 8, 1), 5);
    CHECK_EQ_INT(fit_sliding_tokens(100, 4, 8, 16), 32);
    CHECK_EQ_INT(fit_sliding_tokens(100, 0, 8, 1), 100);
}

/* 3 sliding x 64 B + 1 full x 64 B, 2 sequences of 100 tokens, exact blocks:
 * 2 x (64 x 100 + 192 x 11) = 17024 B. */
static void test_kv_bytes(void)
{
    fit_report r = {0};
    fit_opts_default(&r.o);
    r.o.max_seqs = 2;
    r.o.batched_tokens = 8;
    r.o.block_size = 1;
    r.window = 4;
    r.nkinds = 2;
    r.kinds[0] = (fit_kv_kind){.full = 0, .count = 3, .bytes_per_token = 64, .block = 1};
    r.kinds[1] = (fit_kv_kind){.full = 1, .count = 1, .bytes_per_token = 64, .block = 1};
    CHECK_EQ_INT(fit_kv_bytes(&r, 100), 17024);
    /* 16-token blocks on the sliding kind, 32 on the full one:
     * 2 x (64 x 128 + 192 x 32) = 28672 */
    r.kinds[0].block = 16;
    r.kinds[1].block = 32;
    CHECK_EQ_INT(fit_kv_bytes(&r, 100), 28672);
}

static void test_weights_kinds(void)
{
    fit_weights w = {0};
    ff_matcher m;
    CHECK(ff_matcher_init(&m, ff_family_by_name("gemma4"), NULL, NULL) == FF_OK);
    fit_weights_add(&w, &m, "model.language_model.layers.0.mlp.down_proj.weight_packed", FF_DT_U8, 100);
    fit_weights_add(&w, &m, "model.language_model.layers.0.mlp.down_proj.weight_scale", FF_DT_F8_E4M3, 10);
    fit_weights_add(&w, &m, "model.language_model.layers.0.mlp.down_proj.weight_global_scale", FF_DT_F32, 4);
    fit_weights_add(&w, &m, "model.language_model.embed_tokens.weight", FF_DT_BF16, 1000);
    fit_weights_add(&w, &m, "model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight", FF_DT_BF16, 50);
    fit_weights_add(&w, &m, "model.embed_vision.embedding_projection.weight", FF_DT_BF16, 5);
    /* an FP8 weight-only Linear: F8_E4M3 weight, its channel scale in bf16 */
    fit_weights_add(&w, &m, "model.language_model.layers.0.self_attn.q_proj.weight", FF_DT_F8_E4M3, 64);
    fit_weights_add(&w, &m, "model.language_model.layers.0.self_attn.q_proj.weight_scale", FF_DT_BF16, 8);
    CHECK_EQ_INT(w.packed, 100);
    CHECK_EQ_INT(w.fp8, 64);
    CHECK_EQ_INT(w.scales, 22);
    CHECK_EQ_INT(w.other, 1000);
    CHECK_EQ_INT(w.vision, 55);
    CHECK_EQ_INT(w.total, 1241);
    ff_matcher_free(&m);
}

/* The encoder reserve is the family's hook: Gemma-4's pooled estimate (text
 * hidden 64; a vision tower 32 wide, MLP 48; 10 soft tokens an image, each of
 * 2 x 2 patches): 8192 batched tokens hold 820 images of 10 = 32800 patches,
 * x (4 x 32 + 3 x 48) x 2 B = 17843200, plus the cache 8192 x 64 x 2 B =
 * 1048576. Llama-4's (the default hook) reads the same; a family without a
 * tower and --text-only reserve nothing. */
static void test_encoder_estimate(void)
{
    json_t *cfg = config(1, 0, 0);
    json_object_set_new(cfg, "vision_config", json_pack("{si si si si}", "hidden_size", 32, "intermediate_size", 48,
                                                        "default_output_length", 10, "pooling_kernel_size", 2));
    ff_err e = {0};
    const ff_family *gemma = ff_family_detect(cfg);
    ff_geometry *g = gemma ? ff_geometry_new(gemma, cfg, &e) : NULL;
    CHECK(g != NULL);
    if (g) {
        fit_opts o;
        fit_opts_default(&o);
        CHECK_EQ_INT(fit_encoder_estimate(gemma, cfg, g, &o), 18891776);
        CHECK_EQ_INT(fit_encoder_estimate(ff_family_by_name("llama4"), cfg, g, &o), 18891776);
        CHECK_EQ_INT(fit_encoder_estimate(ff_family_by_name("mixtral"), cfg, g, &o), 0);
        o.text_only = 1;
        CHECK_EQ_INT(fit_encoder_estimate(gemma, cfg, g, &o), 0);
    }
    free(g);
    json_decref(cfg);
}

int main(void)
{
    RUN(test_mix_per_layer_schema);
    RUN(test_mix_legacy_schema);
    RUN(test_k_eq_v_single);
    RUN(test_full_without_k_eq_v);
    RUN(test_kv_shared);
    RUN(test_fp8);
    RUN(test_sliding_tokens);
    RUN(test_kv_bytes);
    RUN(test_weights_kinds);
    RUN(test_encoder_estimate);
    return UNIT_END();
}
