/* doctor on checkpoints built here: 3 layers (sliding, full, full), k_eq_v,
 * sliding head_dim 8 x 1 KV head, full head_dim 16 x 1 KV head, zero data. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor.h"
#include "fsutil.h"
#include "jsonio.h"
#include "safetensors.h"
#include "unit.h"

#define H 16

static int full_hd(int layer, int hetero) { return layer == 0 ? 8 : (hetero && layer == 2 ? 32 : 16); }

static void write_tensors(const char *dir, int hetero)
{
    static char names[64][96];
    st_out ts[64];
    size_t n = 0;
    uint64_t total = 0;
#define ADD(nm, nd, a, b)                                                            \
    do {                                                                             \
        snprintf(names[n], sizeof names[n], "%s", nm);                               \
        ts[n] = (st_out){.name = names[n], .dtype = FF_DT_BF16, .ndim = nd};         \
        ts[n].shape[0] = a; ts[n].shape[1] = b;                                      \
        ts[n].nbytes = 2u * (uint64_t)a * (uint64_t)(nd == 2 ? b : 1);               \
        total += ts[n++].nbytes;                                                     \
    } while (0)
    ADD("model.language_model.embed_tokens.weight", 2, 32, H);
    for (int l = 0; l < 3; l++) {
        char p[96];
        int hd = full_hd(l, hetero);
#define L(s) (snprintf(p, sizeof p, "model.language_model.layers.%d.%s", l, s), p)
        ADD(L("self_attn.q_proj.weight"), 2, 2 * hd, H);
        ADD(L("self_attn.q_norm.weight"), 1, hd, 0);
        ADD(L("self_attn.k_proj.weight"), 2, hd, H);
        ADD(L("self_attn.k_norm.weight"), 1, hd, 0);
        if (l == 0)
            ADD(L("self_attn.v_proj.weight"), 2, hd, H);
        ADD(L("self_attn.o_proj.weight"), 2, H, 2 * hd);
        ADD(L("mlp.gate_proj.weight"), 2, 32, H);
        ADD(L("mlp.up_proj.weight"), 2, 32, H);
        ADD(L("mlp.down_proj.weight"), 2, H, 32);
        ADD(L("input_layernorm.weight"), 1, H, 0);
    }
    char *path = fs_join(dir, "model.safetensors");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    uint64_t off = 0;
    ff_err e = {0};
    CHECK(fd >= 0 && st_write_header(fd, path, ts, n, &off, &e) == FF_OK);
    CHECK(ftruncate(fd, (off_t)(off + total)) == 0);
    close(fd);
    free(path);
}

/* per_layer: 1 = transformers 5.17 map, 0 = legacy with no globals at all */
static char *make_ckpt(const char *tag, int per_layer, int hetero)
{
    char *dir = malloc(256);
    snprintf(dir, 256, "/tmp/ff-unit-doctor-%d-%s", (int)getpid(), tag);
    fs_rm_rf(dir);
    ff_err e = {0};
    CHECK(fs_mkdir_p(dir, &e) == FF_OK);
    json_t *t = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:[sss]}", "model_type", "gemma4_text",
                          "num_hidden_layers", 3, "hidden_size", H, "vocab_size", 32, "num_attention_heads", 2,
                          "num_key_value_heads", 1, "head_dim", 8, "attention_k_eq_v", 1, "intermediate_size",
                          32, "layer_types", "sliding_attention", "full_attention", "full_attention");
    json_object_set_new(t, "max_position_embeddings", json_integer(4096));
    if (per_layer)
        json_object_set_new(t, "per_layer_config",
                            json_pack("{s:{s:i,s:i}, s:{s:i,s:i}}", "1", "head_dim", 16, "num_key_value_heads", 1,
                                      "2", "head_dim", full_hd(2, hetero), "num_key_value_heads", 1));
    char *cp = fs_join(dir, "config.json");
    CHECK(jsonio_save(cp, t, &e) == FF_OK);
    free(cp);
    json_decref(t);
    write_tensors(dir, hetero);
    return dir;
}

static int has_code(const doctor_report *r, const char *code)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->f[i].code, code))
            return 1;
    return 0;
}

static void test_clean_per_layer(void)
{
    char *d = make_ckpt("clean", 1, 0);
    doctor_opts o = {0};
    doctor_report r;
    ff_err e = {0};
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(r.n, 0);
    doctor_report_free(&r);
    fs_rm_rf(d);
    free(d);
}

static void test_keqv_globals_derived(void)
{
    char *d = make_ckpt("keqv", 0, 0);
    doctor_opts o = {.stamp = "20260101-000000"};
    doctor_report r;
    ff_err e = {0};
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK(has_code(&r, "G4_KEQV_GLOBALS_MISSING"));
    CHECK(!has_code(&r, "SHAPE_MISMATCH"));  /* deferred, not noise */
    CHECK_EQ_INT(doctor_fix(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(doctor_remaining(&r), 0);
    CHECK_EQ_INT(r.nbackups, 1);
    CHECK(r.nbackups && strstr(r.backups[0], "config.json.bak-fp4forge-20260101-000000"));
    doctor_report_free(&r);
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(r.n, 0);
    doctor_report_free(&r);
    json_t *c = NULL;
    char *cp = fs_join(d, "config.json");
    CHECK(jsonio_load(cp, &c, &e) == FF_OK);
    CHECK_EQ_INT(jsonio_int(c, "global_head_dim", 0), 16);
    CHECK_EQ_INT(jsonio_int(c, "num_global_key_value_heads", 0), 1);
    json_decref(c);
    free(cp);
    fs_rm_rf(d);
    free(d);
}

static void test_legacy_refused_names_layer(void)
{
    char *d = make_ckpt("hetero", 1, 1);
    doctor_opts o = {.schema = DOCTOR_SCHEMA_LEGACY};
    doctor_report r;
    ff_err e = {0};
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(r.n, 1);
    CHECK(has_code(&r, "SCHEMA_PER_LAYER_DRIFT"));
    CHECK_EQ_INT(doctor_fix(d, &o, &r, &e), FF_OK);
    CHECK(r.n && r.f[0].refused && r.f[0].layer == 2 && strstr(r.f[0].note, "layer 2 differs"));
    CHECK_EQ_INT(r.nbackups, 0);
    doctor_report_free(&r);
    fs_rm_rf(d);
    free(d);
}

static void test_legacy_proved_redundant(void)
{
    char *d = make_ckpt("redundant", 1, 0);
    doctor_opts o = {.schema = DOCTOR_SCHEMA_LEGACY, .stamp = "20260101-000000"};
    doctor_report r;
    ff_err e = {0};
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(doctor_fix(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(doctor_remaining(&r), 0);
    doctor_report_free(&r);
    CHECK_EQ_INT(doctor_check(d, &o, &r, &e), FF_OK);
    CHECK_EQ_INT(r.n, 0);
    doctor_report_free(&r);
    fs_rm_rf(d);
    free(d);
}

static void test_tokenizer_and_gate(void)
{
    char *d = make_ckpt("tok", 1, 0);
    char *tp = fs_join(d, "tokenizer.json");
    json_t *tok = json_pack("{s:{s:i,s:s}, s:n}", "truncation", "max_length", 512, "strategy", "LongestFirst",
                            "padding");
    ff_err e = {0};
    CHECK(jsonio_save(tp, tok, &e) == FF_OK);
    json_decref(tok);
    CHECK_EQ_INT(doctor_gate(d, 0, NULL, NULL, &e), FF_EDOCTOR);
    CHECK(strstr(e.msg, "TOKENIZER_TRUNCATION") != NULL);
    ff_err e2 = {0};
    CHECK_EQ_INT(doctor_gate(d, 1, NULL, NULL, &e2), FF_OK);
    CHECK_EQ_INT(doctor_gate(d, 0, NULL, NULL, &e2), FF_OK);
    free(tp);
    fs_rm_rf(d);
    free(d);
}

static void test_bad_input(void)
{
    doctor_report r;
    ff_err e = {0};
    CHECK_EQ_INT(doctor_check("/nonexistent/doctor", NULL, &r, &e), FF_EIO);
    doctor_report_free(&r);
}

int main(void)
{
    RUN(test_clean_per_layer);
    RUN(test_keqv_globals_derived);
    RUN(test_legacy_refused_names_layer);
    RUN(test_legacy_proved_redundant);
    RUN(test_tokenizer_and_gate);
    RUN(test_bad_input);
    return UNIT_END();
}
