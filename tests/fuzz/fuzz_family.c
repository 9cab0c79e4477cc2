/* The family description loader (docs/family-files.md): any text is read
 * into a family or refused with one FILE:LINE message, never a crash, a
 * leak or a regex that fails later; a family it accepts then answers the
 * questions a plan asks (claims, counts, geometry, a rule per name) on a
 * fixed MoE config without fault. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "fuzz_util.h"

static const char config_text[] =
    "{\"model_type\":\"x\",\"num_hidden_layers\":4,\"hidden_size\":64,\"num_attention_heads\":4,"
    "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"first_k_dense_replace\":1,"
    "\"decoder_sparse_step\":1,\"mlp_only_layers\":[2],\"n_shared_experts\":1,\"text_config\":{\"num_hidden_layers\":2}}";

static const char *const names[] = {
    "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.experts.3.gate_proj.weight",
    "model.layers.2.mlp.gate.weight", "model.layers.7.eh_proj.weight", "lm_head.weight", "model.norm.weight", "",
};

static void ask(const ff_family *f, const json_t *config)
{
    ff_err e = {0};
    ff_expect x;
    (void)ff_family_claims(f, config);
    (void)ff_family_expect(f, config, &x, &e);
    free(ff_geometry_new(f, config, &e));
    ff_matcher m;
    if (ff_matcher_init(&m, f, config, &e) != FF_OK)
        return;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        (void)ff_match(&m, names[i]);
    ff_matcher_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *config;
    if (!config && !(config = json_loads(config_text, 0, NULL)))
        abort();
    ff_family *f = NULL;
    ff_err e = {0};
    if (ff_family_parse((const char *)data, size, "fuzz.fam", &f, &e) == FF_OK) {
        ask(f, config);
        ff_family_close(f);
    } else if (f || !e.msg[0] || strncmp(e.msg, "fuzz.fam", 8) != 0) {
        abort();   /* a refusal names the file, and leaves nothing */
    }
    return 0;
}
