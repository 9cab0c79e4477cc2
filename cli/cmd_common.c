#include "cmd_common.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Sizes are bytes up to 1 PB; counts are positive and bounded so that no
 * product in the KV arithmetic overflows 64 bits. */
static int get_size(const cli_args *a, const char *name, double *dst, ff_err *e)
{
    return cli_size(a, name, 0, 1e15, dst, e);
}

static int get_int(const cli_args *a, const char *name, int64_t *dst, ff_err *e)
{
    long long v = *dst;
    int rc = cli_int(a, name, 1, 1ll << 40, &v, e);
    *dst = v;
    return rc;
}

int fit_opts_from_cli(const cli_args *a, fit_opts *o, ff_err *e)
{
    fit_opts_default(o);
    int64_t seqs = o->max_seqs;
    int rc = get_size(a, "--gpu-free", &o->gpu_free, e);
    if (!rc) rc = get_size(a, "--gpu-total", &o->gpu_total, e);
    if (!rc) rc = get_size(a, "--activation-reserve", &o->act_reserve, e);
    if (!rc) rc = get_size(a, "--encoder-reserve", &o->enc_reserve, e);
    if (!rc) rc = get_int(a, "--context", &o->context, e);
    if (!rc) rc = get_int(a, "--max-seqs", &seqs, e);
    if (!rc && seqs > (1 << 20))
        rc = ff_fail(e, FF_EUSAGE, "--max-seqs: '%lld' is more than %d", (long long)seqs, 1 << 20);
    if (!rc) rc = get_int(a, "--batched-tokens", &o->batched_tokens, e);
    if (!rc) rc = get_int(a, "--block-size", &o->block_size, e);
    if (rc)
        return rc;
    o->max_seqs = (int)seqs;
    if (cli_get(a, "--utilization")) {
        if (cli_real(a, "--utilization", 1e-6, 1, &o->utilization, e))
            return e->code;
        if (o->gpu_total <= 0)
            return ff_fail(e, FF_EUSAGE, "--utilization needs --gpu-total");
    }
    const char *kv = cli_get(a, "--kv-dtype");
    if (kv && strcmp(kv, "bf16") && strcmp(kv, "fp8"))
        return ff_fail(e, FF_EUSAGE, "--kv-dtype: bf16 or fp8, not %s", kv);
    o->kv_dtype_bytes = kv && strcmp(kv, "fp8") == 0 ? 1 : 2;
    o->k_is_v_single = cli_flag(a, "--k-eq-v-single");
    o->text_only = cli_flag(a, "--text-only");
    return FF_OK;
}

int seat_from_cli(const cli_args *a, int threads, plan_seat *s, ff_err *e)
{
    plan_seat_default(s);
    s->threads = threads;
    double budget = 0;
    if (cli_size(a, "--budget", 1, 1e18, &budget, e))
        return e->code;
    s->budget = (uint64_t)budget;
    s->fit = cli_flag(a, "--fit");
    /* the table plan and quantize declare, so a seat option added there is covered here */
    static const cli_opt seat_fit[] = {SEAT_FIT_OPTS, {NULL, NULL, NULL}};
    int seat_given = 0;
    for (const cli_opt *o = seat_fit; o->name; o++)
        seat_given |= cli_get(a, o->name) != NULL;
    if (seat_given && !s->fit)
        return ff_fail(e, FF_EUSAGE, "the seat's options (--gpu-free, --context, ...) take --fit");
    return s->fit ? fit_opts_from_cli(a, &s->fit_opts, e) : FF_OK;
}

int recipe_from_cli(const cli_args *a, recipe_args *r, ff_err *e)
{
    memset(r, 0, sizeof *r);
    int it = 0, n = 0;
    const char *v;
    while ((v = cli_next(a, "--ignore", &it)))
        r->ignore[n++] = v;
    r->opts.ignore_re = r->ignore;
    r->opts.nignore = n;
    it = n = 0;
    while ((v = cli_next(a, "--only", &it)))
        r->only[n++] = v;
    r->opts.only_re = r->only;
    r->opts.nonly = n;
    it = n = 0;
    while ((v = cli_next(a, "--fp8", &it)))
        r->fp8[n++] = v;
    r->opts.fp8_re = r->fp8;
    r->opts.nfp8 = n;
    r->opts.allow_router = cli_flag(a, "--allow-router-quantization");
    r->opts.allow_partial = cli_flag(a, "--allow-partial");
    r->opts.infer_family = cli_flag(a, "--infer-family");
    const char *file = cli_get(a, "--family-file");
    if (file && r->opts.infer_family)
        return ff_fail(e, FF_EUSAGE, "--family-file and --infer-family: give one (the file is what inference proposes)");
    if (file && ff_family_load(file, &r->family, e))
        return e->code;
    r->opts.family = r->family;
    return FF_OK;
}

void recipe_free(recipe_args *r)
{
    ff_family_close(r->family);
    r->family = NULL;
    r->opts.family = NULL;
}

/* Which arguments of each command name a checkpoint folder to read: bit i
 * of pos is positional i; opt is an option whose value is one. writes_input
 * is the flag that makes the command write into its input folder; out_pos
 * and out_suffix give a missing output folder its default name; report_opt
 * names a file the command writes (never inside a folder it reads). */
typedef struct input_rule {
    const char *cmd;
    unsigned pos;
    const char *opt;
    const char *writes_input;
    int out_pos;
    const char *out_suffix;
    const char *report_opt;
} input_rule;

static const input_rule input_rules[] = {
    {"quantize", 1u << 0, NULL, NULL, 1, "-NVFP4A16", NULL},  /* the naming published quants use */
    {"plan", 1u << 0, NULL, NULL, -1, NULL, NULL},
    {"inspect", 1u << 0, NULL, NULL, -1, NULL, NULL},
    {"verify", 1u << 0, "--against", NULL, -1, NULL, "--html"},
    {"diff", 1u << 0 | 1u << 1, NULL, NULL, -1, NULL, "--html"},
    {"doctor", 1u << 0, NULL, "--fix", -1, NULL, NULL},
    {"fit", 1u << 0, NULL, NULL, -1, NULL, NULL},
    {"dequantize", 1u << 0, NULL, NULL, -1, NULL, NULL},
    {"merge", 1u << 0, NULL, NULL, -1, NULL, NULL},  /* the base; the adapter is a PEFT folder */
};

static const input_rule *input_rule_of(const char *cmd)
{
    for (size_t i = 0; i < sizeof input_rules / sizeof *input_rules; i++)
        if (strcmp(input_rules[i].cmd, cmd) == 0)
            return &input_rules[i];
    return NULL;
}

/* The environment is read here, at the edge; the library takes the values. */
static hf_env env_now(void)
{
    hf_env env = {getenv("HF_HUB_CACHE"), getenv("HUGGINGFACE_HUB_CACHE"), getenv("HF_HOME"),
                  getenv("XDG_CACHE_HOME"), getenv("HOME")};
    return env;
}

/* Resolves *arg in place when it is a cache name (*repo, when asked for,
 * records the name); a path or other text is left as it is. */
static int resolve_one(const char **arg, const hf_env *env, cli_inputs *in, const char **repo, ff_err *e)
{
    hf_ref *r = &in->refs[in->nrefs];
    int rc = hfcache_lookup(*arg, env, r, e);
    if (rc || !r->dir)
        return rc;
    in->nrefs++;
    *arg = r->dir;
    if (repo)
        *repo = r->repo;
    return FF_OK;
}

/* "./<stem><suffix>": the stem is the cache name's model part, else the
 * input folder's own name (resolved, so "." names the folder; an input that
 * does not resolve keeps its last component, and the command then reports
 * the input, not a missing OUT). */
static char *default_out(const char *input, const char *repo, const char *suffix)
{
    char abs[PATH_MAX], buf[PATH_MAX + 64];
    const char *stem;
    if (repo)
        stem = strchr(repo, '/') + 1;
    else if (realpath(input, abs))
        stem = basename(abs);
    else {
        snprintf(abs, sizeof abs, "%s", input);
        stem = basename(abs);
    }
    snprintf(buf, sizeof buf, "./%s%s", stem, suffix);
    return strdup(buf);
}

/* doctor --fix writes backups and rewritten files beside its input: inside
 * the cache that would change a snapshot (and the blobs its links share with
 * other revisions) behind huggingface_hub's back. A cache name is refused
 * as a name, wherever its folders' links lead. */
static int refuse_cache_write(const input_rule *rule, const cli_args *a, const hf_env *env, ff_err *e)
{
    if (!rule->writes_input || !cli_flag(a, rule->writes_input) ||
        (!a->hf_repo[0] && !hfcache_contains(a->pos[0], env)))
        return FF_OK;
    const char *name = a->hf_repo[0] ? a->hf_repo[0] : a->pos[0];
    return ff_fail(e, FF_EUSAGE,
                   "%s %s: %s is in the Hugging Face cache, which fp4forge never writes; run `fp4forge quantize "
                   "%s OUT --fix` (it fixes a shadow copy beside OUT) or copy the snapshot out (cp -rL %s DIR) "
                   "and fix the copy",
                   rule->cmd, rule->writes_input, a->pos[0], name, a->pos[0]);
}

/* A report written into a checkpoint folder the command reads replaces its
 * files (verify OUT --html OUT/model.safetensors replaced the weights), and
 * one written into a snapshot's repo folder changes the cache. */
static int report_outside(const input_rule *rule, const char *report, const char *dir, ff_err *e)
{
    if (!hfcache_writes_into_input(report, dir))
        return FF_OK;
    return ff_fail(e, FF_EUSAGE, "%s %s: inside %s, a checkpoint folder %s reads; write the report somewhere else",
                   rule->report_opt, report, dir, rule->cmd);
}

static int refuse_report_inside(const input_rule *rule, const cli_args *a, ff_err *e)
{
    const char *report = rule->report_opt ? cli_get(a, rule->report_opt) : NULL;
    int rc = FF_OK;
    for (int i = 0; report && i < a->npos && rc == FF_OK; i++)
        if (rule->pos & (1u << i))
            rc = report_outside(rule, report, a->pos[i], e);
    for (int i = 0; report && rule->opt && i < a->nval && rc == FF_OK; i++)
        if (strcmp(a->name[i], rule->opt) == 0)
            rc = report_outside(rule, report, a->val[i], e);
    return rc;
}

int cli_resolve_inputs(const char *cmd, cli_args *a, cli_inputs *in, ff_err *e)
{
    memset(in, 0, sizeof *in);
    const input_rule *rule = input_rule_of(cmd);
    if (!rule)
        return FF_OK;
    hf_env env = env_now();
    int rc = FF_OK;
    for (int i = 0; i < a->npos && rc == FF_OK; i++)
        if (rule->pos & (1u << i))
            rc = resolve_one(&a->pos[i], &env, in, &a->hf_repo[i], e);
    for (int i = 0; i < a->nval && rc == FF_OK && rule->opt; i++)
        if (strcmp(a->name[i], rule->opt) == 0 && in->nrefs < CLI_MAX_POS)
            rc = resolve_one(&a->val[i], &env, in, NULL, e);
    if (rc == FF_OK)
        rc = refuse_cache_write(rule, a, &env, e);
    if (rc == FF_OK)
        rc = refuse_report_inside(rule, a, e);
    if (rc == FF_OK && rule->out_suffix && a->npos == rule->out_pos && a->npos < CLI_MAX_POS && a->npos > 0) {
        in->default_out = default_out(a->pos[0], a->hf_repo[0], rule->out_suffix);
        if (in->default_out)
            a->pos[a->npos++] = in->default_out;
    }
    return rc;
}

void cli_inputs_free(cli_inputs *in)
{
    for (int i = 0; i < in->nrefs; i++)
        hf_ref_free(&in->refs[i]);
    free(in->default_out);
    memset(in, 0, sizeof *in);
}

int cmd_write_page(const char *path, int (*writer)(const json_t *, FILE *), const json_t *r, ff_err *e)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ff_fail(e, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
    int bad = writer(r, f);
    if (fclose(f) != 0 || bad)
        return ff_fail(e, FF_EIO, "%s: writing the page failed", path);
    return FF_OK;
}
