#include "synth.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "dtype.h"
#include "fsutil.h"
#include "jsonio.h"
#include "shards.h"
#include "threadpool.h"

typedef enum { INIT_NORMAL, INIT_ONES } init_kind;

typedef struct synth_tensor {
    char name[160];
    int ndim;
    int64_t shape[3];
    init_kind init;
} synth_tensor;

typedef struct tensor_list {
    synth_tensor *t;
    size_t n, cap;
} tensor_list;

static void add(tensor_list *l, init_kind k, int ndim, int64_t a, int64_t b, int64_t c,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(tensor_list *l, init_kind k, int ndim, int64_t a, int64_t b, int64_t c,
                const char *fmt, ...)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->t = realloc(l->t, l->cap * sizeof *l->t);
    }
    synth_tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = a; t->shape[1] = b; t->shape[2] = c;
    t->init = k;
}

#define VT "model.vision_tower."
#define LM "model.language_model."

static int is_full(const synth_geom *g, int i)
{
    return (i + 1) % g->full_every == 0 || i == g->layers - 1;
}

static void vision_tensors(const synth_geom *g, tensor_list *l)
{
    int64_t h = g->vision_hidden, in = g->vision_intermediate, hd = h / g->vision_heads;
    add(l, INIT_NORMAL, 3, 2, 10240, h, VT "patch_embedder.position_embedding_table");
    add(l, INIT_NORMAL, 2, h, 768, 0, VT "patch_embedder.input_proj.weight");
    for (int i = 0; i < g->vision_layers; i++) {
        static const char *const proj[] = {"q", "k", "v", "o"};
        for (int p = 0; p < 4; p++)
            add(l, INIT_NORMAL, 2, h, h, 0, VT "encoder.layers.%d.self_attn.%s_proj.linear.weight", i, proj[p]);
        add(l, INIT_ONES, 1, hd, 0, 0, VT "encoder.layers.%d.self_attn.q_norm.weight", i);
        add(l, INIT_ONES, 1, hd, 0, 0, VT "encoder.layers.%d.self_attn.k_norm.weight", i);
        add(l, INIT_NORMAL, 2, in, h, 0, VT "encoder.layers.%d.mlp.gate_proj.linear.weight", i);
        add(l, INIT_NORMAL, 2, in, h, 0, VT "encoder.layers.%d.mlp.up_proj.linear.weight", i);
        add(l, INIT_NORMAL, 2, h, in, 0, VT "encoder.layers.%d.mlp.down_proj.linear.weight", i);
        static const char *const norms[] = {"input_layernorm", "post_attention_layernorm",
                                            "pre_feedforward_layernorm", "post_feedforward_layernorm"};
        for (int n = 0; n < 4; n++)
            add(l, INIT_ONES, 1, h, 0, 0, VT "encoder.layers.%d.%s.weight", i, norms[n]);
    }
}

static void layer_tensors(const synth_geom *g, tensor_list *l, int i)
{
    int full = is_full(g, i);
    int hd = full ? g->global_head_dim : g->head_dim;
    int kvh = full && g->k_eq_v ? g->global_kv_heads : g->kv_heads;
    int64_t H = g->hidden;
    add(l, INIT_ONES, 1, 1, 0, 0, LM "layers.%d.layer_scalar", i);
    add(l, INIT_NORMAL, 2, (int64_t)g->heads * hd, H, 0, LM "layers.%d.self_attn.q_proj.weight", i);
    add(l, INIT_ONES, 1, hd, 0, 0, LM "layers.%d.self_attn.q_norm.weight", i);
    add(l, INIT_ONES, 1, hd, 0, 0, LM "layers.%d.self_attn.k_norm.weight", i);
    add(l, INIT_NORMAL, 2, (int64_t)kvh * hd, H, 0, LM "layers.%d.self_attn.k_proj.weight", i);
    if (!(full && g->k_eq_v))
        add(l, INIT_NORMAL, 2, (int64_t)kvh * hd, H, 0, LM "layers.%d.self_attn.v_proj.weight", i);
    add(l, INIT_NORMAL, 2, H, (int64_t)g->heads * hd, 0, LM "layers.%d.self_attn.o_proj.weight", i);
    add(l, INIT_NORMAL, 2, g->intermediate, H, 0, LM "layers.%d.mlp.gate_proj.weight", i);
    add(l, INIT_NORMAL, 2, g->intermediate, H, 0, LM "layers.%d.mlp.up_proj.weight", i);
    add(l, INIT_NORMAL, 2, H, g->intermediate, 0, LM "layers.%d.mlp.down_proj.weight", i);
    static const char *const norms[] = {"input_layernorm", "post_attention_layernorm",
                                        "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    for (int n = 0; n < 4; n++)
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.%s.weight", i, norms[n]);
    if (g->ple) {
        add(l, INIT_NORMAL, 2, g->ple, H, 0, LM "layers.%d.per_layer_input_gate.weight", i);
        add(l, INIT_NORMAL, 2, H, g->ple, 0, LM "layers.%d.per_layer_projection.weight", i);
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.post_per_layer_input_norm.weight", i);
    }
    if (g->moe) {
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.router.scale", i);
        add(l, INIT_ONES, 1, g->experts, 0, 0, LM "layers.%d.router.per_expert_scale", i);
        add(l, INIT_NORMAL, 2, g->experts, H, 0, LM "layers.%d.router.proj.weight", i);
        add(l, INIT_NORMAL, 3, g->experts, 2 * g->moe_intermediate, H, LM "layers.%d.experts.gate_up_proj", i);
        add(l, INIT_NORMAL, 3, g->experts, H, g->moe_intermediate, LM "layers.%d.experts.down_proj", i);
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.post_feedforward_layernorm_1.weight", i);
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.post_feedforward_layernorm_2.weight", i);
        add(l, INIT_ONES, 1, H, 0, 0, LM "layers.%d.pre_feedforward_layernorm_2.weight", i);
    }
}

/* Names and order as transformers 5.17 saves Gemma4ForConditionalGeneration. */
static void all_tensors(const synth_geom *g, tensor_list *l)
{
    if (g->vision_layers)
        vision_tensors(g, l);
    add(l, INIT_NORMAL, 2, g->vocab, g->hidden, 0, LM "embed_tokens.weight");
    for (int i = 0; i < g->layers; i++)
        layer_tensors(g, l, i);
    add(l, INIT_ONES, 1, g->hidden, 0, 0, LM "norm.weight");
    if (g->ple) {
        add(l, INIT_NORMAL, 2, g->vocab, (int64_t)g->layers * g->ple, 0, LM "embed_tokens_per_layer.weight");
        add(l, INIT_NORMAL, 2, (int64_t)g->layers * g->ple, g->hidden, 0, LM "per_layer_model_projection.weight");
        add(l, INIT_ONES, 1, g->ple, 0, 0, LM "per_layer_projection_norm.weight");
    }
    if (g->vision_layers)
        add(l, INIT_NORMAL, 2, g->hidden, g->vision_hidden, 0, "model.embed_vision.embedding_projection.weight");
}

static uint64_t numel(const synth_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

uint64_t synth_bytes(const synth_geom *g)
{
    tensor_list l = {0};
    all_tensors(g, &l);
    uint64_t b = 0;
    for (size_t i = 0; i < l.n; i++)
        b += numel(&l.t[i]) * 2;
    free(l.t);
    return b;
}

int synth_preset(const char *arch, const char *size, synth_geom *g)
{
    memset(g, 0, sizeof *g);
    int moe = strcmp(arch, "gemma4-moe") == 0;
    if (!moe && strcmp(arch, "gemma4-dense") != 0)
        return 0;
    int real = strcmp(size, "real") == 0;
    if (!real && strcmp(size, "tiny") != 0)
        return 0;
    g->moe = moe;
    g->full_every = 6;
    g->k_eq_v = 1;
    g->sliding_window = 1024;
    g->seed = 1;
    if (real && !moe) {        /* Gemma-4 31B */
        g->layers = 60; g->hidden = 5376; g->intermediate = 21504; g->vocab = 262144;
        g->heads = 32; g->kv_heads = 16; g->head_dim = 256;
        g->global_head_dim = 512; g->global_kv_heads = 4;
    } else if (real) {         /* Gemma-4 26B-A4B */
        g->layers = 30; g->hidden = 2816; g->intermediate = 2112; g->vocab = 262144;
        g->heads = 16; g->kv_heads = 8; g->head_dim = 256;
        g->global_head_dim = 512; g->global_kv_heads = 2;
        g->experts = 128; g->top_k = 8; g->moe_intermediate = 704;
    } else {                   /* same shape of model, small enough for a demo */
        g->layers = 12; g->hidden = 256; g->intermediate = 512; g->vocab = 2048;
        g->heads = 4; g->kv_heads = 2; g->head_dim = 64;
        g->global_head_dim = 128; g->global_kv_heads = 1;
        if (moe) { g->experts = 8; g->top_k = 2; g->moe_intermediate = 128; }
    }
    g->vision_layers = real ? 27 : 2;
    g->vision_hidden = real ? 1152 : 64;
    g->vision_intermediate = real ? 4304 : 128;
    g->vision_heads = real ? 16 : 2;
    return 1;
}

/* splitmix64: cheap, seedable per chunk, so the bytes do not depend on the
 * thread count. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

#define CHUNK (1u << 20)   /* elements per independently seeded chunk */
#define BLOCK (32u * CHUNK)

typedef struct fill_job {
    const synth_tensor *t;
    uint64_t seed, first, n;   /* element range of this block */
    uint16_t *buf;
} fill_job;

static void fill_chunk(void *ctx, size_t c)
{
    fill_job *j = ctx;
    uint64_t begin = (uint64_t)c * CHUNK, end = begin + CHUNK < j->n ? begin + CHUNK : j->n;
    uint64_t s = j->seed ^ ((j->first + begin) / CHUNK) * 0x2545f4914f6cdd1dull;
    for (uint64_t i = begin; i < end; i++) {
        uint64_t r = mix(&s);
        /* sum of three 21-bit uniforms: mean 1.5, sd 0.5 -> roughly normal */
        float u = (float)(r & 0x1fffff) + (float)((r >> 21) & 0x1fffff) + (float)((r >> 42) & 0x1fffff);
        float z = (u * (1.0f / 2097152.0f) - 1.5f) * 2.0f;
        float v = j->t->init == INIT_ONES ? 1.0f + 0.05f * z : 0.02f * z;
        j->buf[i] = ff_f32_to_bf16(v);
    }
}

static int write_tensors(const tensor_list *l, shard_set *ss, ff_pool *pool, uint64_t seed, ff_err *e)
{
    uint16_t *buf = malloc((size_t)BLOCK * 2);
    if (!buf)
        return ff_fail(e, FF_EIO, "out of memory");
    int rc = FF_OK;
    for (size_t i = 0; i < l->n && rc == FF_OK; i++) {
        uint64_t total = numel(&l->t[i]);
        for (uint64_t first = 0; first < total && rc == FF_OK; first += BLOCK) {
            fill_job j = {.t = &l->t[i], .seed = hash_name(l->t[i].name, seed), .first = first,
                          .n = total - first < BLOCK ? total - first : BLOCK, .buf = buf};
            pool_run(pool, (j.n + CHUNK - 1) / CHUNK, fill_chunk, &j);
            uint64_t off = first * 2;
            size_t k = ss->out_shard[i];
            rc = st_pwrite_all(ss->fds[k], ss->paths[k], buf, j.n * 2, ss->out_abs[i] + off, e);
            ss->bytes_written += j.n * 2;
        }
    }
    free(buf);
    return rc;
}

static json_t *rope_params(void)
{
    json_t *r = json_object(), *full = json_object(), *sl = json_object();
    json_object_set_new(full, "partial_rotary_factor", json_real(0.25));
    json_object_set_new(full, "rope_theta", json_real(1000000.0));
    json_object_set_new(full, "rope_type", json_string("proportional"));
    json_object_set_new(sl, "rope_theta", json_real(10000.0));
    json_object_set_new(sl, "rope_type", json_string("default"));
    json_object_set_new(r, "full_attention", full);
    json_object_set_new(r, "sliding_attention", sl);
    return r;
}

/* The attention schema: transformers >= 5.15 writes per_layer_config (keys
 * zero-padded layer indices); older releases the flat global fields. */
static void attention_schema(const synth_geom *g, json_t *t)
{
    if (g->legacy_schema) {
        json_object_set_new(t, "global_head_dim", json_integer(g->global_head_dim));
        if (g->k_eq_v)
            json_object_set_new(t, "num_global_key_value_heads", json_integer(g->global_kv_heads));
        return;
    }
    json_t *plc = json_object();
    for (int i = 0; i < g->layers; i++) {
        if (!is_full(g, i))
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "head_dim", json_integer(g->global_head_dim));
        if (g->k_eq_v)
            json_object_set_new(e, "num_key_value_heads", json_integer(g->global_kv_heads));
        char key[16];
        snprintf(key, sizeof key, "%02d", i);
        json_object_set_new(plc, key, e);
    }
    json_object_set_new(t, "per_layer_config", plc);
}

static json_t *text_config(const synth_geom *g)
{
    json_t *t = json_object(), *types = json_array();
    json_object_set_new(t, "attention_bias", json_false());
    json_object_set_new(t, "attention_dropout", json_real(0.0));
    json_object_set_new(t, "attention_k_eq_v", json_boolean(g->k_eq_v));
    json_object_set_new(t, "bos_token_id", json_integer(2));
    json_object_set_new(t, "enable_moe_block", json_boolean(g->moe));
    json_object_set_new(t, "eos_token_id", json_integer(1));
    json_object_set_new(t, "final_logit_softcapping", json_null());
    json_object_set_new(t, "head_dim", json_integer(g->head_dim));
    json_object_set_new(t, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(t, "hidden_size", json_integer(g->hidden));
    json_object_set_new(t, "hidden_size_per_layer_input", json_integer(g->ple));
    json_object_set_new(t, "initializer_range", json_real(0.02));
    json_object_set_new(t, "intermediate_size", json_integer(g->intermediate));
    for (int i = 0; i < g->layers; i++)
        json_array_append_new(types, json_string(is_full(g, i) ? "full_attention" : "sliding_attention"));
    json_object_set_new(t, "layer_types", types);
    json_object_set_new(t, "max_position_embeddings", json_integer(262144));
    json_object_set_new(t, "model_type", json_string("gemma4_text"));
    json_object_set_new(t, "moe_intermediate_size", g->moe ? json_integer(g->moe_intermediate) : json_null());
    json_object_set_new(t, "num_attention_heads", json_integer(g->heads));
    json_object_set_new(t, "num_experts", g->moe ? json_integer(g->experts) : json_null());
    json_object_set_new(t, "num_hidden_layers", json_integer(g->layers));
    json_object_set_new(t, "num_key_value_heads", json_integer(g->kv_heads));
    json_object_set_new(t, "num_kv_shared_layers", json_integer(0));
    json_object_set_new(t, "pad_token_id", json_integer(0));
    attention_schema(g, t);
    json_object_set_new(t, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(t, "rope_parameters", rope_params());
    json_object_set_new(t, "sliding_window", json_integer(g->sliding_window));
    json_object_set_new(t, "tie_word_embeddings", json_true());
    json_object_set_new(t, "top_k_experts", g->moe ? json_integer(g->top_k) : json_null());
    json_object_set_new(t, "use_bidirectional_attention", json_null());
    json_object_set_new(t, "use_cache", json_true());
    json_object_set_new(t, "use_double_wide_mlp", json_false());
    json_object_set_new(t, "vocab_size", json_integer(g->vocab));
    json_object_set_new(t, "vocab_size_per_layer_input", json_integer(g->ple ? g->vocab : 0));
    return t;
}

static json_t *vision_config(const synth_geom *g)
{
    json_t *v = json_object(), *rope = json_object();
    json_object_set_new(v, "attention_bias", json_false());
    json_object_set_new(v, "head_dim", json_integer(g->vision_hidden / g->vision_heads));
    json_object_set_new(v, "hidden_activation", json_string("gelu_pytorch_tanh"));
    json_object_set_new(v, "hidden_size", json_integer(g->vision_hidden));
    json_object_set_new(v, "intermediate_size", json_integer(g->vision_intermediate));
    json_object_set_new(v, "model_type", json_string("gemma4_vision"));
    json_object_set_new(v, "num_attention_heads", json_integer(g->vision_heads));
    json_object_set_new(v, "num_hidden_layers", json_integer(g->vision_layers));
    json_object_set_new(v, "num_key_value_heads", json_integer(g->vision_heads));
    json_object_set_new(v, "patch_size", json_integer(16));
    json_object_set_new(v, "pooling_kernel_size", json_integer(3));
    json_object_set_new(v, "position_embedding_size", json_integer(10240));
    json_object_set_new(v, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(rope, "rope_theta", json_real(100.0));
    json_object_set_new(rope, "rope_type", json_string("axial"));
    json_object_set_new(v, "rope_parameters", rope);
    json_object_set_new(v, "standardize", json_false());
    json_object_set_new(v, "use_clipped_linears", json_false());
    return v;
}

static json_t *model_config(const synth_geom *g)
{
    json_t *c = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string("Gemma4ForConditionalGeneration"));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "audio_config", json_null());
    json_object_set_new(c, "audio_token_id", json_integer(258881));
    json_object_set_new(c, "boa_token_id", json_integer(256000));
    json_object_set_new(c, "boi_token_id", json_integer(255999));
    json_object_set_new(c, "dtype", json_string("bfloat16"));
    json_object_set_new(c, "eoa_token_index", json_integer(258883));
    json_object_set_new(c, "eoi_token_id", json_integer(258882));
    json_object_set_new(c, "image_token_id", json_integer(258880));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "model_type", json_string("gemma4"));
    json_object_set_new(c, "text_config", text_config(g));
    json_object_set_new(c, "tie_word_embeddings", json_true());
    json_object_set_new(c, "transformers_version", json_string("5.17.0"));
    json_object_set_new(c, "video_token_id", json_integer(258884));
    json_object_set_new(c, "vision_config", g->vision_layers ? vision_config(g) : json_null());
    return c;
}

/* Small but real auxiliary files, so the synthetic checkpoint passes the same
 * doctor checks a real multimodal upload must. */
static int write_aux(const synth_geom *g, const char *dir, ff_err *e)
{
    static const char *const files[][2] = {
        {"generation_config.json",
         "{\n  \"bos_token_id\": 2,\n  \"eos_token_id\": 1,\n  \"pad_token_id\": 0,\n  \"transformers_version\": \"5.17.0\"\n}\n"},
        {"chat_template.jinja",
         "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
         "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"},
        {"processor_config.json", "{\n  \"processor_class\": \"Gemma4Processor\",\n  \"image_seq_length\": 256\n}\n"},
        {"preprocessor_config.json",
         "{\n  \"image_processor_type\": \"Gemma4ImageProcessor\",\n  \"patch_size\": 16,\n  \"pooling_kernel_size\": 3\n}\n"},
        {"tokenizer_config.json",
         "{\n  \"model_max_length\": 262144,\n  \"padding_side\": \"left\",\n  \"tokenizer_class\": \"GemmaTokenizer\"\n}\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!g->vision_layers && strstr(files[i][0], "processor"))
            continue;
        char *p = fs_join(dir, files[i][0]);
        FILE *f = fopen(p, "w");
        int ok = f && fputs(files[i][1], f) >= 0;
        if (f && fclose(f) != 0)
            ok = 0;
        free(p);
        if (!ok)
            return ff_fail(e, FF_EIO, "%s/%s: cannot write", dir, files[i][0]);
    }
    return FF_OK;
}

static int check_geom(const synth_geom *g, ff_err *e)
{
    if (g->layers <= 0 || g->hidden <= 0 || g->heads <= 0 || g->kv_heads <= 0 || g->head_dim <= 0 ||
        g->intermediate <= 0 || g->vocab <= 0 || g->full_every <= 0)
        return ff_fail(e, FF_EUSAGE, "synth: layers, hidden, heads, kv heads, head dim, intermediate and vocab must be positive");
    if (g->hidden % 16 || g->intermediate % 16 || ((int64_t)g->heads * g->head_dim) % 16 ||
        (g->moe && g->moe_intermediate % 16))
        return ff_fail(e, FF_EUSAGE, "synth: Linear input widths must be multiples of 16");
    if (g->moe && (g->experts <= 0 || g->moe_intermediate <= 0 || g->top_k <= 0))
        return ff_fail(e, FF_EUSAGE, "synth: MoE needs experts, moe intermediate and top-k");
    if (g->vision_layers && (g->vision_heads <= 0 || g->vision_hidden % g->vision_heads))
        return ff_fail(e, FF_EUSAGE, "synth: vision hidden must divide into vision heads");
    return FF_OK;
}

/* Extends each shard to its full size without writing: a hole reads as zeros. */
static int size_sparse(shard_set *ss, ff_err *e)
{
    for (size_t k = 0; k < ss->nshards; k++) {
        uint64_t end = 0;
        for (size_t i = 0; i < ss->nouts; i++)
            if (ss->out_shard[i] == k && ss->out_abs[i] + ss->outs[i].nbytes > end)
                end = ss->out_abs[i] + ss->outs[i].nbytes;
        if (ftruncate(ss->fds[k], (off_t)end) != 0)
            return ff_fail(e, FF_EIO, "%s: cannot size: %s", ss->paths[k], strerror(errno));
    }
    return FF_OK;
}

int synth_write(const synth_geom *g, const char *out_dir, uint64_t shard_size, int threads,
                int force, int sparse, ff_err *e)
{
    int rc = check_geom(g, e);
    if (rc)
        return rc;
    tensor_list l = {0};
    all_tensors(g, &l);
    st_out *outs = calloc(l.n, sizeof *outs);
    for (size_t i = 0; i < l.n; i++) {
        outs[i].name = l.t[i].name;
        outs[i].dtype = FF_DT_BF16;
        outs[i].ndim = l.t[i].ndim;
        memcpy(outs[i].shape, l.t[i].shape, sizeof l.t[i].shape);
        outs[i].nbytes = numel(&l.t[i]) * 2;
    }
    fs_stage stage;
    shard_set ss = {0};
    ff_pool *pool = NULL;
    rc = fs_stage_begin(&stage, out_dir, force, e);
    if (!rc)
        rc = shards_open(&ss, outs, l.n, shard_size, stage.tmp_dir, e);
    if (!rc && sparse)
        rc = size_sparse(&ss, e);
    else if (!rc) {
        pool = pool_create(threads);
        rc = write_tensors(&l, &ss, pool, g->seed, e);
    }
    if (!rc)
        rc = shards_close(&ss, stage.tmp_dir, e);
    if (!rc) {
        json_t *cfg = model_config(g);
        char *cp = fs_join(stage.tmp_dir, "config.json");
        rc = jsonio_save(cp, cfg, e);
        free(cp);
        json_decref(cfg);
    }
    if (!rc)
        rc = write_aux(g, stage.tmp_dir, e);
    if (!rc)
        rc = fs_stage_commit(&stage, e);
    if (rc)
        fs_stage_abort(&stage);
    pool_destroy(pool);
    shards_free(&ss);
    fs_stage_free(&stage);
    free(outs);
    free(l.t);
    return rc;
}
