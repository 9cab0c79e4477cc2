/* plan_build on checkpoints held in memory (ckpt_open_memory): what a Llama
 * layer quantizes and keeps, the fused q/k/v and gate/up units, the
 * refusals (a missing projection, a router asked to be quantized),
 * --ignore / --only, and --fp8 (FP8 members and their outputs, a fused unit
 * split by --fp8 or --ignore refused). The golden tier plans whole synthetic checkpoints;
 * these pin the rules one tensor at a time. */
#include <jansson.h>
#include <stdint.h>

#include "checkpoint.h"
#include "plan.h"
#include "unit.h"

#define H 32   /* hidden and MLP width: two groups of 16 */

/* A safetensors image of one Llama layer (BF16, zeros), without the names
 * in skip; malloc'd, its size in *n. */
static uint8_t *llama_layer(const char *skip, size_t *n)
{
    static const char *const names[] = {
        "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight",
        "lm_head.weight", NULL};
    json_t *hdr = json_object();
    uint64_t off = 0;
    for (int i = 0; names[i]; i++) {
        if (skip && strcmp(names[i], skip) == 0)
            continue;
        int vec = strstr(names[i], "norm") != NULL;
        uint64_t bytes = vec ? H * 2 : (uint64_t)H * H * 2;
        json_object_set_new(hdr, names[i], vec ? json_pack("{s:s, s:[i], s:[I, I]}", "dtype", "BF16", "shape", H,
                                                           "data_offsets", (json_int_t)off, (json_int_t)(off + bytes))
                                               : json_pack("{s:s, s:[i, i], s:[I, I]}", "dtype", "BF16", "shape", H, H,
                                                           "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    *n = 8 + padded + off;
    uint8_t *buf = calloc(1, *n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, text, len);
    memset(buf + 8 + len, ' ', padded - len);
    free(text);
    json_decref(hdr);
    return buf;
}

static const char config[] = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                             "\"hidden_size\": 32, \"intermediate_size\": 32, \"num_hidden_layers\": 1, "
                             "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 32, "
                             "\"tie_word_embeddings\": false}";

static int plan_of(const char *skip, const plan_opts *o, plan *p, ff_err *e)
{
    size_t n;
    uint8_t *shard = llama_layer(skip, &n);
    ckpt c;
    int rc = ckpt_open_memory(&c, "mem", config, strlen(config), shard, n, e);
    if (rc == FF_OK) {
        rc = plan_build(p, &c, o, e);
        ckpt_close(&c);
    }
    free(shard);
    return rc;
}

static int ignored(const plan *p, const char *module)
{
    for (size_t i = 0; i < p->nignore; i++)
        if (strcmp(p->ignore[i], module) == 0)
            return 1;
    return 0;
}

static void llama_layer_quantized_and_kept(void)
{
    plan p;
    ff_err e = {0};
    plan_opts o = {0};
    CHECK_EQ_INT(plan_of(NULL, &o, &p, &e), FF_OK);
    CHECK_EQ_INT(p.q_dense, 7);
    CHECK_EQ_INT(p.q_experts, 0);
    CHECK_EQ_INT(p.nmembers, 7);
    /* q/k/v one unit (one global scale), gate/up one, o and down alone */
    CHECK_EQ_INT(p.nunits, 4);
    CHECK(ignored(&p, "lm_head"));
    CHECK(!ignored(&p, "model.layers.0.self_attn.q_proj"));
    plan_free(&p);
}

static void missing_projection_refused(void)
{
    plan p;
    ff_err e = {0};
    plan_opts o = {0};
    CHECK_EQ_INT(plan_of("model.layers.0.mlp.down_proj.weight", &o, &p, &e), FF_EPLAN);
    CHECK(strstr(e.msg, "dense Linears quantized: 6") != NULL);
    plan_free(&p);
}

static void ignore_and_only(void)
{
    plan p;
    ff_err e = {0};
    const char *const ig[] = {"mlp\\.down_proj$"};
    plan_opts o = {.ignore_re = ig, .nignore = 1, .allow_partial = 1};
    CHECK_EQ_INT(plan_of(NULL, &o, &p, &e), FF_OK);
    CHECK_EQ_INT(p.q_dense, 6);
    CHECK(ignored(&p, "model.layers.0.mlp.down_proj"));
    plan_free(&p);
    const char *const only[] = {"self_attn\\.o_proj$"};
    plan_opts o2 = {.only_re = only, .nonly = 1, .allow_partial = 1};
    CHECK_EQ_INT(plan_of(NULL, &o2, &p, &e), FF_OK);
    CHECK_EQ_INT(p.q_dense, 1);
    CHECK(ignored(&p, "model.layers.0.mlp.gate_proj"));
    plan_free(&p);
}

static const st_out *out_named(const plan *p, const char *name)
{
    for (size_t i = 0; i < p->nouts; i++)
        if (strcmp(p->outs[i].name, name) == 0)
            return &p->outs[i];
    return NULL;
}

/* --fp8 self_attn: q/k/v stay one unit, FP8 as a whole; each FP8 module is
 * weight F8_E4M3 [out, in] + weight_scale [out, 1] in the source dtype (no
 * weight_packed, no global scale); the MLP stays NVFP4. */
static void fp8_members(void)
{
    plan p;
    ff_err e = {0};
    const char *const f8[] = {"self_attn"};
    plan_opts o = {.fp8_re = f8, .nfp8 = 1};
    CHECK_EQ_INT(plan_of(NULL, &o, &p, &e), FF_OK);
    CHECK_EQ_INT(p.q_dense, 7);
    CHECK_EQ_INT(p.q_fp8, 4);
    CHECK_EQ_INT(p.nunits, 4);
    for (size_t u = 0; u < p.nunits; u++)
        for (size_t k = 0; k < p.units[u].count; k++)
            CHECK_EQ_INT(p.members[p.units[u].first + k].fp8, p.units[u].fp8);
    const st_out *w = out_named(&p, "model.layers.0.self_attn.k_proj.weight");
    const st_out *s = out_named(&p, "model.layers.0.self_attn.k_proj.weight_scale");
    CHECK(w && w->dtype == FF_DT_F8_E4M3 && w->shape[0] == H && w->shape[1] == H && w->nbytes == H * H);
    CHECK(s && s->dtype == FF_DT_BF16 && s->shape[0] == H && s->shape[1] == 1 && s->nbytes == H * 2);
    CHECK(!out_named(&p, "model.layers.0.self_attn.k_proj.weight_packed"));
    CHECK(!out_named(&p, "model.layers.0.self_attn.k_proj.weight_global_scale"));
    CHECK(out_named(&p, "model.layers.0.mlp.up_proj.weight_packed") != NULL);
    plan_free(&p);
}

/* A fused unit split by --fp8 or by --ignore: refused as usage, naming the
 * unit and its members' schemes; and --fp8 beside --ignore of the whole unit
 * leaves it kept. */
static void fp8_split_refused(void)
{
    plan p;
    ff_err e = {0};
    const char *const f8[] = {"q_proj"};
    plan_opts o = {.fp8_re = f8, .nfp8 = 1};
    CHECK_EQ_INT(plan_of(NULL, &o, &p, &e), FF_EUSAGE);
    CHECK(strstr(e.msg, "split the fused unit model.layers.0.self_attn (qkv)") != NULL);
    CHECK(strstr(e.msg, "q_proj FP8") && strstr(e.msg, "k_proj NVFP4"));
    plan_free(&p);
    const char *const ig[] = {"mlp\\.up_proj$"};
    plan_opts o2 = {.ignore_re = ig, .nignore = 1, .allow_partial = 1};
    CHECK_EQ_INT(plan_of(NULL, &o2, &p, &e), FF_EUSAGE);
    CHECK(strstr(e.msg, "(gate_up): ") && strstr(e.msg, "up_proj kept"));
    plan_free(&p);
    const char *const f8b[] = {"self_attn"}, *const igb[] = {"self_attn\\.(q|k|v)_proj"};
    plan_opts o3 = {.fp8_re = f8b, .nfp8 = 1, .ignore_re = igb, .nignore = 1, .allow_partial = 1};
    CHECK_EQ_INT(plan_of(NULL, &o3, &p, &e), FF_OK);
    CHECK_EQ_INT(p.q_fp8, 1);   /* o_proj */
    CHECK(ignored(&p, "model.layers.0.self_attn.v_proj"));
    plan_free(&p);
}

int main(void)
{
    RUN(llama_layer_quantized_and_kept);
    RUN(missing_projection_refused);
    RUN(ignore_and_only);
    RUN(fp8_members);
    RUN(fp8_split_refused);
    return UNIT_END();
}
