/* fp4forge synth: a synthetic bf16 checkpoint of one family, with its real
 * names and geometry. The presets come from the family table. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "commands.h"
#include "synth.h"

static const cli_opt options[] = {
    {"--arch", "ARCH", "a preset (listed below; default: the first)"},
    {"--size", "tiny|real", "tiny (default, 5-50 MB by preset) or real (the published model's geometry)"},
    {"--layers", "N", "decoder layers"},
    {"--hidden", "H", "hidden size"},
    {"--intermediate", "I", "dense MLP width"},
    {"--heads", "N", "attention heads"},
    {"--kv-heads", "N", "KV heads on sliding layers"},
    {"--head-dim", "D", "head dim on sliding layers"},
    {"--global-head-dim", "D", "head dim on full-attention layers"},
    {"--global-kv-heads", "N", "KV heads on full-attention layers whose V is K"},
    {"--full-every", "N", "every Nth layer is full attention (default 6)"},
    {"--no-k-eq-v", NULL, "full-attention layers get their own v_proj"},
    {"--vocab", "V", "vocabulary size"},
    {"--experts", "E", "experts per layer (MoE presets)"},
    {"--moe-intermediate", "I", "expert MLP width (MoE presets)"},
    {"--top-k", "K", "experts per token (MoE presets)"},
    {"--ple", "N", "per-layer embedding width (0 = none, the default)"},
    {"--vision-layers", "N", "vision tower layers (0 = no vision tower)"},
    {"--vision-hidden", "H", "vision hidden size"},
    {"--vision-intermediate", "I", "vision MLP width"},
    {"--schema", "per-layer|legacy", "per-layer (default, transformers >= 5.15) or legacy (the older config schema)"},
    {"--seed", "S", "weight seed (default 1)"},
    {"--shard-size", "SIZE", "target shard size (default 5GB)"},
    {"--threads", "N", "threads filling weights (the bytes do not depend on it)"},
    {"--sparse", NULL, "headers and file sizes only (zeros, no disk used): plan/fit at real size"},
    {"--source", "bf16|fp8-block|int4|mxfp4", "bf16 (default); fp8-block: decoder Linears as F8_E4M3 + weight_scale_inv per 128x128 block (DeepSeek-V3); int4: routed experts as compressed-tensors pack-quantized, group 32 (Kimi-K2.5); mxfp4: routed experts as compressed-tensors mxfp4-pack-quantized (Kimi-K3)"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {NULL, NULL, NULL},
};

/* The presets, from the family table: adding a family adds its lines here. */
static void presets_help(FILE *out)
{
    fprintf(out, "\npresets (--arch):\n");
    for (size_t i = 0; ff_families[i]; i++)
        for (const ff_synth_preset *p = ff_families[i]->synth_presets; p && p->name; p++)
            fprintf(out, "  %-28s %s\n", p->name, p->what);
}

const cli_spec synth_spec = {
    "synth", "OUT_DIR",
    "Writes a synthetic bf16 checkpoint of one family (its tensor names and config schema as\n"
    "transformers 5.17 saves them) with deterministic pseudo-random weights. --size real gives\n"
    "the published model's geometry; the flags scale any of it.",
    options, 1, 1, presets_help,
};

/* Flag -> field table, so every geometry flag is parsed the same way. */
#define INT_FIELD(flag, field) {flag, offsetof(synth_geom, field), sizeof(((synth_geom *)0)->field)}
static const struct { const char *flag; size_t off, size; } k_fields[] = {
    INT_FIELD("--layers", layers), INT_FIELD("--hidden", hidden), INT_FIELD("--intermediate", intermediate),
    INT_FIELD("--heads", heads), INT_FIELD("--kv-heads", kv_heads), INT_FIELD("--head-dim", head_dim),
    INT_FIELD("--global-head-dim", global_head_dim), INT_FIELD("--global-kv-heads", global_kv_heads),
    INT_FIELD("--full-every", full_every), INT_FIELD("--vocab", vocab), INT_FIELD("--experts", experts),
    INT_FIELD("--moe-intermediate", moe_intermediate), INT_FIELD("--top-k", top_k), INT_FIELD("--ple", ple),
    INT_FIELD("--vision-layers", vision_layers), INT_FIELD("--vision-hidden", vision_hidden),
    INT_FIELD("--vision-intermediate", vision_intermediate), INT_FIELD("--seed", seed),
};

static int apply_flags(const cli_args *a, synth_geom *g, ff_err *e)
{
    for (size_t i = 0; i < sizeof k_fields / sizeof *k_fields; i++) {
        long long v = -1;
        /* geometry fits an int (or int64 for widths); the family checks sense */
        long long hi = k_fields[i].size == sizeof(int) ? (1ll << 30) : (1ll << 40);
        int rc = cli_int(a, k_fields[i].flag, 0, hi, &v, e);
        if (rc)
            return rc;
        if (v < 0)
            continue;
        char *p = (char *)g + k_fields[i].off;
        if (k_fields[i].size == sizeof(int))
            *(int *)p = (int)v;
        else
            *(int64_t *)p = v;
    }
    if (cli_flag(a, "--no-k-eq-v"))
        g->k_is_v = 0;
    const char *schema = cli_get(a, "--schema");
    if (schema && strcmp(schema, "legacy") && strcmp(schema, "per-layer"))
        return ff_fail(e, FF_EUSAGE, "--schema is per-layer or legacy, not %s", schema);
    g->legacy_schema = schema && strcmp(schema, "legacy") == 0;
    return FF_OK;
}

int cmd_synth(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    const char *arch = cli_get(&a, "--arch") ? cli_get(&a, "--arch") : ff_families[0]->synth_presets[0].name;
    const char *size = cli_get(&a, "--size") ? cli_get(&a, "--size") : "tiny";
    synth_geom g;
    const ff_family *fam;
    if (synth_preset(arch, size, &g, &fam, &e))
        return cmd_report("synth", &e);
    if (apply_flags(&a, &g, &e))
        return cmd_report("synth", &e);
    synth_opts so = {.force = cli_flag(&a, "--force"), .sparse = cli_flag(&a, "--sparse")};
    const char *source = cli_get(&a, "--source") ? cli_get(&a, "--source") : "bf16";
    static const char *const sources[] = {"bf16", "fp8-block", "int4", "mxfp4"};
    so.source = (synth_source)-1;
    for (int i = 0; i < 4; i++)
        if (strcmp(source, sources[i]) == 0)
            so.source = (synth_source)i;
    if ((int)so.source < 0) {
        ff_fail(&e, FF_EUSAGE, "unknown --source %s (bf16|fp8-block|int4|mxfp4)", source);
        return cmd_report("synth", &e);
    }
    if (cli_shard_size(&a, &so.shard_size, &e) || cli_threads(&a, &so.threads, &e))
        return cmd_report("synth", &e);
    if (synth_write(fam, &g, a.pos[0], &so, &e))
        return cmd_report("synth", &e);
    printf("fp4forge synth: %s (%s, %d layers, hidden %lld%s, %.3f GB bf16)\n", a.pos[0], arch, g.layers,
           (long long)g.hidden, g.moe ? ", MoE" : "", (double)synth_bytes(fam, &g) / 1e9);
    return 0;
}
