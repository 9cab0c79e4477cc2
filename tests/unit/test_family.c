/* A family as data: every built-in description parses, names itself as
 * the table does and claims exactly the model types its messages list;
 * descriptions' config keys give the counts the C families gave. */
#include <jansson.h>
#include <string.h>

#include "family.h"
#include "unit.h"

static json_t *config_of(const char *text)
{
    json_error_t err;
    json_t *c = json_loads(text, 0, &err);
    if (!c)
        fprintf(stderr, "  bad test JSON: %s\n", err.text);
    return c;
}

/* "a, b, c" against what the family claims, both ways. */
static void check_types(const ff_family *f, const ff_family *inst)
{
    char types[256];
    snprintf(types, sizeof types, "%s", f->model_types);
    int listed = 0;
    for (char *save, *t = strtok_r(types, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        json_t *c = json_pack("{s:s}", "model_type", t);
        CHECK(ff_family_claims(f, c));
        CHECK(ff_family_claims(inst, c));
        json_decref(c);
        listed++;
    }
    /* the instance's list ("a, b") has as many as the table's */
    int inst_types = 1;
    for (const char *s = inst->model_types; *s; s++)
        inst_types += *s == ',';
    CHECK_EQ_INT(inst_types, listed);
}

static void test_builtin_descriptions_parse(void)
{
    int described = 0;
    for (size_t i = 0; ff_families[i]; i++) {
        const ff_family *f = ff_families[i], *inst;
        if (!f->desc_text)
            continue;
        ff_family *own = NULL;
        ff_err e = {0};
        CHECK_EQ_INT(ff_family_open(f, &inst, &own, &e), FF_OK);
        if (!own) {
            fprintf(stderr, "  %s: %s\n", f->name, e.msg);
            continue;
        }
        CHECK(strcmp(inst->name, f->name) == 0);
        CHECK(inst->nrules > 0 && inst->desc != NULL);
        CHECK(inst->synth_tensors == f->synth_tensors);   /* the C hooks ride along */
        check_types(f, inst);
        json_t *other = json_pack("{s:s}", "model_type", "no_such_model");
        CHECK(!ff_family_claims(f, other));
        json_decref(other);
        ff_family_close(own);
        described++;
    }
    CHECK(described >= 3);   /* llama, qwen_moe, mixtral */
}

/* Qwen's rule: sparse unless in mlp_only_layers, every decoder_sparse_step-th;
 * Qwen2-MoE's shared expert adds 3 Linears and a kept gate per MoE layer. */
static void test_qwen_moe_counts(void)
{
    const ff_family *f = ff_family_by_name("qwen_moe");
    json_t *c = config_of("{\"model_type\":\"qwen2_moe\",\"num_hidden_layers\":6,\"hidden_size\":64,"
                          "\"num_attention_heads\":4,\"num_experts\":8,\"num_experts_per_tok\":2,"
                          "\"moe_intermediate_size\":32,\"decoder_sparse_step\":2,\"mlp_only_layers\":[3],"
                          "\"shared_expert_intermediate_size\":64}");
    ff_expect x;
    ff_err e = {0};
    CHECK(f && c);
    if (!f || !c)
        return;
    CHECK_EQ_INT(ff_family_expect(f, c, &x, &e), FF_OK);
    /* sparse layers 1 and 5 (3 is listed dense): 2 MoE layers, 4 dense */
    CHECK_EQ_INT(x.moe_layers, 2);
    CHECK_EQ_INT(x.dense_linears, 4 * 7 + 2 * (4 + 3));
    CHECK_EQ_INT(x.expert_linears, 2 * 8 * 3);
    CHECK_EQ_INT(x.routers, 2 * 2);
    json_decref(c);
}

/* ERNIE's rule: sparse in [start, end] every interval-th; end < 0 is no end. */
static void test_start_end_interval(void)
{
    static const char text[] = "format 1\nfamily e\nmodel-type e\nquant ^x$\nexpert ^y[.][0-9]+$\n"
                               "experts-key moe_num_experts\ntop-k-key moe_k\n"
                               "moe-layers start=moe_layer_start_index end=moe_layer_end_index interval=moe_layer_interval\n"
                               "dense-per-layer 7\ndense-per-moe-layer 7\n";
    ff_family *f = NULL;
    ff_err e = {0};
    CHECK_EQ_INT(ff_family_parse(text, strlen(text), "test", &f, &e), FF_OK);
    json_t *c = config_of("{\"model_type\":\"e\",\"num_hidden_layers\":6,\"hidden_size\":64,\"num_attention_heads\":4,"
                          "\"moe_num_experts\":4,\"moe_k\":2,\"moe_intermediate_size\":32,\"moe_layer_start_index\":1,"
                          "\"moe_layer_end_index\":-1,\"moe_layer_interval\":2}");
    ff_expect x;
    if (f && c) {
        CHECK_EQ_INT(ff_family_expect(f, c, &x, &e), FF_OK);
        CHECK_EQ_INT(x.moe_layers, 3);   /* layers 1, 3, 5 */
        CHECK_EQ_INT(x.routers, 3);      /* one a MoE layer unless said */
    }
    json_decref(c);
    ff_family_close(f);
}

int main(void)
{
    RUN(test_builtin_descriptions_parse);
    RUN(test_qwen_moe_counts);
    RUN(test_start_end_interval);
    return UNIT_END();
}
