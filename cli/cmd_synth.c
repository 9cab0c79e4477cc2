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

/* The flags every preset takes; the geometry flags are the families' knobs
 * (synth_knob_opts), which the command table splices in after --size. */
static const cli_opt options[] = {
    {"--arch", "ARCH", "a preset (listed below; default: the first)"},
    {"--size", "tiny|real", "tiny (default, 5-50 MB by preset) or real (the published model's geometry)"},
    {"--seed", "S", "weight seed (default 1)"},
    {"--shard-size", "SIZE", "target shard size (default 5GB)"},
    {"--threads", "N", "threads filling weights (the bytes do not depend on it)"},
    {"--sparse", NULL, "headers and file sizes only (zeros, no disk used): plan/fit at real size"},
    {"--source", "bf16|fp8-block|int4|mxfp4", "bf16 (default); fp8-block: decoder Linears as F8_E4M3 + weight_scale_inv per 128x128 block (DeepSeek-V3); int4: routed experts as compressed-tensors pack-quantized, group 32 (Kimi-K2.5); mxfp4: routed experts as compressed-tensors mxfp4-pack-quantized (Kimi-K3)"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {NULL, NULL, NULL},
};

/* Every family's knobs, each flag once, in family-table order: the
 * command table splices them in after --size. */
size_t synth_knob_opts(cli_opt *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; ff_families[i]; i++)
        for (const ff_synth_knob *k = ff_families[i]->synth_knobs; k && k->flag; k++) {
            size_t j = 0;
            while (j < n && strcmp(buf[j].name, k->flag) != 0)
                j++;
            if (j == n && n < cap)
                buf[n++] = (cli_opt){k->flag, k->arg, k->help};
        }
    return n;
}

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

/* A choice knob's value: its index in arg ("a|b|c"), or -1. */
static long long choice_index(const char *arg, const char *v)
{
    size_t n = strlen(v);
    const char *p = arg;
    for (long long i = 0;; i++) {
        if (strncmp(p, v, n) == 0 && (p[n] == '|' || p[n] == 0))
            return i;
        if (!(p = strchr(p, '|')))
            return -1;
        p++;
    }
}

/* "a or b" for a choice knob's message, from its arg "a|b". */
static void choice_words(const char *arg, char *buf, size_t n)
{
    size_t len = 0;
    for (const char *p = arg; *p && len + 5 < n; p++) {
        if (*p == '|') {
            memcpy(buf + len, " or ", 4);
            len += 4;
        } else {
            buf[len++] = *p;
        }
    }
    buf[len] = 0;
}

/* One knob from the command line, when given. */
static int apply_knob(const cli_args *a, const ff_synth_knob *k, synth_geom *g, ff_err *e)
{
    long long v = -1;
    if (k->kind == FF_KNOB_CLEAR) {
        if (cli_flag(a, k->flag))
            synth_knob_set(k, g, 0);
        return FF_OK;
    }
    if (k->kind == FF_KNOB_CHOICE) {
        const char *s = cli_get(a, k->flag);
        if (s && (v = choice_index(k->arg, s)) < 0) {
            char words[128];
            choice_words(k->arg, words, sizeof words);
            return ff_fail(e, FF_EUSAGE, "%s is %s, not %s", k->flag, words, s);
        }
    } else {
        /* geometry fits an int (or int64 for widths); the family checks sense */
        int rc = cli_int(a, k->flag, 0, k->kind == FF_KNOB_INT ? (1ll << 30) : (1ll << 40), &v, e);
        if (rc)
            return rc;
    }
    if (v >= 0)
        synth_knob_set(k, g, v);
    return FF_OK;
}

static int is_numeric(const ff_synth_knob *k) { return k->kind == FF_KNOB_INT || k->kind == FF_KNOB_INT64; }

/* Applies the knobs of one kind (numbers, or switches and choices). */
static int apply_knobs(const cli_args *a, const ff_family *fam, int numeric, synth_geom *g, ff_err *e)
{
    for (const ff_synth_knob *k = fam->synth_knobs; k && k->flag; k++) {
        int rc = is_numeric(k) == numeric ? apply_knob(a, k, g, e) : FF_OK;
        if (rc)
            return rc;
    }
    return FF_OK;
}

/* The flags on the preset's geometry. A knob its family does not take is
 * refused rather than silently ignored. Numbers, then the seed, then
 * switches and choices: the order a bad value is reported in. */
static int apply_flags(const cli_args *a, const ff_family *fam, const char *arch, synth_geom *g, ff_err *e)
{
    cli_opt knobs[FF_MAX_OPTS];
    size_t n = synth_knob_opts(knobs, FF_MAX_OPTS);
    for (int i = 0; i < a->nval; i++)
        for (size_t j = 0; j < n; j++)
            if (strcmp(a->name[i], knobs[j].name) == 0 && !synth_knob_find(fam, a->name[i]))
                return ff_fail(e, FF_EUSAGE, "%s does not apply to --arch %s (its family has no such knob)",
                               a->name[i], arch);
    long long seed = -1;
    int rc = apply_knobs(a, fam, 1, g, e);
    if (!rc)
        rc = cli_int(a, "--seed", 0, 1ll << 40, &seed, e);
    if (!rc && seed >= 0)
        g->seed = (uint64_t)seed;
    return rc ? rc : apply_knobs(a, fam, 0, g, e);
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
    if (apply_flags(&a, fam, arch, &g, &e))
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
