#include "cliopt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>

static const cli_opt *find_opt(const cli_spec *s, const char *name)
{
    for (const cli_opt *o = s->opts; o && o->name; o++)
        if (strcmp(o->name, name) == 0)
            return o;
    return NULL;
}

/* Levenshtein distance, capped: names are short, and only "close" matters. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b), row[64];
    if (n >= 63 || m >= 63)
        return 99;
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

const char *cli_closest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;   /* a typo: two edits at most, or a unique prefix */
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, names[i]);
        if (strlen(word) >= 4 && strncmp(names[i], word, strlen(word)) == 0)
            d = d < 2 ? d : 2;
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

static int unknown_option(const cli_spec *s, const char *name, ff_err *e)
{
    const char *names[CLI_MAX_VALS];
    size_t n = 0;
    for (const cli_opt *o = s->opts; o && o->name && n < CLI_MAX_VALS; o++)
        names[n++] = o->name;
    const char *near = cli_closest(name, names, n);
    if (near)
        return ff_fail(e, FF_EUSAGE, "unknown option %s; did you mean %s? (fp4forge %s --help lists them)", name,
                       near, s->cmd);
    return ff_fail(e, FF_EUSAGE, "unknown option %s (fp4forge %s --help lists them)", name, s->cmd);
}

int cli_parse(const cli_spec *s, int argc, char **argv, cli_args *a, ff_err *e)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return FF_OK;
        }
        if (strcmp(arg, "--version") == 0) {
            a->version = 1;
            return FF_OK;
        }
        if (strncmp(arg, "--", 2) == 0 && arg[2]) {
            char name[128];
            const char *eq = strchr(arg, '=');
            size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
            if (n >= sizeof name)
                return ff_fail(e, FF_EUSAGE, "option too long: %s", arg);
            memcpy(name, arg, n);
            name[n] = 0;
            const cli_opt *o = find_opt(s, name);
            if (!o)
                return unknown_option(s, name, e);
            if (a->nval >= CLI_MAX_VALS)
                return ff_fail(e, FF_EUSAGE, "too many options");
            const char *val = "";
            if (o->arg) {
                if (eq)
                    val = eq + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                else
                    return ff_fail(e, FF_EUSAGE, "%s needs a value (%s)", name, o->arg);
            } else if (eq) {
                return ff_fail(e, FF_EUSAGE, "%s takes no value", name);
            }
            a->name[a->nval] = o->name;
            a->val[a->nval++] = val;
            continue;
        }
        if (a->npos >= CLI_MAX_POS || a->npos >= s->max_pos)
            return ff_fail(e, FF_EUSAGE, "unexpected argument %s (usage: fp4forge %s %s)", arg, s->cmd, s->usage);
        a->pos[a->npos++] = arg;
    }
    if (a->npos < s->min_pos)
        return ff_fail(e, FF_EUSAGE, "missing arguments (usage: fp4forge %s %s)", s->cmd, s->usage);
    return FF_OK;
}

void cli_print_help(const cli_spec *s, FILE *out)
{
    fprintf(out, "usage: fp4forge %s %s\n\n%s\n", s->cmd, s->usage, s->summary);
    if (s->opts && s->opts->name)
        fprintf(out, "\noptions:\n");
    for (const cli_opt *o = s->opts; o && o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-28s %s\n", left, o->help);
    }
    fprintf(out, "  %-28s %s\n", "--help", "show this help");
    if (s->more_help)
        s->more_help(out);
}

const char *cli_get(const cli_args *a, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < a->nval; i++)
        if (strcmp(a->name[i], name) == 0)
            v = a->val[i];
    return v;
}

int cli_flag(const cli_args *a, const char *name) { return cli_get(a, name) != NULL; }

const char *cli_next(const cli_args *a, const char *name, int *it)
{
    for (; *it < a->nval; (*it)++)
        if (strcmp(a->name[*it], name) == 0)
            return a->val[(*it)++];
    return NULL;
}

int cli_parse_size(const char *s, double *bytes)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return -1;
    static const struct { const char *suf; double mul; } k[] = {
        {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"M", 1e6}, {"MB", 1e6}, {"G", 1e9},
        {"GB", 1e9}, {"T", 1e12}, {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0},
        {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (strcasecmp(end, k[i].suf) == 0) {
            *bytes = v * k[i].mul;
            return 0;
        }
    return -1;
}

int cli_int(const cli_args *a, const char *name, long long lo, long long hi, long long *out, ff_err *e)
{
    const char *v = cli_get(a, name);
    if (!v)
        return FF_OK;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi)
        return ff_fail(e, FF_EUSAGE, "%s: '%s' is not an integer in [%lld, %lld]", name, v, lo, hi);
    *out = x;
    return FF_OK;
}

int cli_real(const cli_args *a, const char *name, double lo, double hi, double *out, ff_err *e)
{
    const char *v = cli_get(a, name);
    if (!v)
        return FF_OK;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi)
        return ff_fail(e, FF_EUSAGE, "%s: '%s' is not a number in [%g, %g]", name, v, lo, hi);
    *out = x;
    return FF_OK;
}

int cli_size(const cli_args *a, const char *name, double lo, double hi, double *out, ff_err *e)
{
    const char *v = cli_get(a, name);
    double x;
    if (!v)
        return FF_OK;
    if (cli_parse_size(v, &x) || x < lo || x > hi)
        return ff_fail(e, FF_EUSAGE, "%s: '%s' is not a size in [%g, %g] bytes (e.g. 5GB, 500MB, 4GiB)", name, v,
                       lo, hi);
    *out = x;
    return FF_OK;
}

int cli_threads(const cli_args *a, int *out, ff_err *e)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long long n = 0, hi = 8 * (cpus > 0 ? cpus : 1);
    int rc = cli_int(a, "--threads", 1, hi, &n, e);
    *out = (int)n;
    return rc;
}

int cli_shard_size(const cli_args *a, uint64_t *out, ff_err *e)
{
    double sz = 5e9;
    int rc = cli_size(a, "--shard-size", 1e3, 1e15, &sz, e);
    *out = (uint64_t)sz;
    return rc;
}
