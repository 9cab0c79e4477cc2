/* The family description loader: a line-oriented text, one directive a line
 * (docs/family-files.md), checked by one directive table, every error naming
 * its line. Lines rather than JSON: a rule is a regex, and JSON's escaping
 * would double every backslash a reader has to check by eye. */
#include "famdesc.h"

#include <ctype.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "jsonio.h"

/* words on one line: a note (up to 599 bytes) is words too */
#define MAX_TOKENS 64
#define MAX_DEFINES 32

typedef struct famparse {
    ff_famdesc *d;
    const char *origin;
    int line;
    unsigned char seen[32];       /* by directive: given once already */
    int experts_line;             /* first experts rule, for the error that lacks its key */
    const char *def_name[MAX_DEFINES], *def_value[MAX_DEFINES];
    int ndefs;
} famparse;

static int perr(const famparse *ps, ff_err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(const famparse *ps, ff_err *e, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ff_fail(e, FF_EIO, "%s:%d: %s", ps->origin, ps->line, msg);
}

/* A copy the description owns (freed with it). */
static const char *own(famparse *ps, const char *s, size_t n, ff_err *e)
{
    ff_famdesc *d = ps->d;
    if (d->nowned == d->cap_owned) {
        size_t cap = d->cap_owned ? 2 * d->cap_owned : 32;
        char **o = realloc(d->owned, cap * sizeof *o);
        if (!o)
            return ff_oom(e, "out of memory"), NULL;
        d->owned = o, d->cap_owned = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return ff_oom(e, "out of memory"), NULL;
    memcpy(c, s, n);
    c[n] = 0;
    return d->owned[d->nowned++] = c;
}

/* ---- patterns: $(NAME) expands a define, then the ERE must compile ---- */

static const char *define_value(const famparse *ps, const char *name, size_t n)
{
    for (int i = 0; i < ps->ndefs; i++)
        if (strlen(ps->def_name[i]) == n && memcmp(ps->def_name[i], name, n) == 0)
            return ps->def_value[i];
    return NULL;
}

/* glibc's regcomp copies a repeated subexpression once per repetition, so
 * stacked or nested repetition grows it exponentially ("a++++++++" takes
 * gigabytes): a pattern that could is refused before it is compiled. A name
 * pattern needs none of it. */
static const char *pattern_bounded(const char *p)
{
    int depth = 0, last_quantified = 0;
    for (; *p; p++) {
        int quantifier = *p == '*' || *p == '+' || *p == '?' || *p == '{';
        if (quantifier && last_quantified)
            return "a repetition of a repetition (it could take gigabytes to compile)";
        if (*p == '{') {
            char *end;
            long lo = strtol(p + 1, &end, 10), hi = *end == ',' ? strtol(end + 1, &end, 10) : lo;
            if (lo > 64 || hi > 64)
                return "a repetition count above 64";
            p = strchr(p, '}') ? strchr(p, '}') : p;
        } else if (*p == '[') {
            const char *close = strchr(p + 2, ']');   /* "[]...]" holds a literal ']' */
            p = close ? close : p;
        } else if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '(' && ++depth > 8) {
            return "groups nested deeper than 8";
        } else if (*p == ')') {
            depth--;
        }
        last_quantified = quantifier;
    }
    return NULL;
}

static const char *expand(famparse *ps, const char *pat, ff_err *e)
{
    char buf[2048];
    size_t len = 0;
    for (const char *s = pat; *s;) {
        const char *piece = s;
        size_t n = 1;
        if (s[0] == '$' && s[1] == '(') {
            const char *close = strchr(s, ')');
            if (!close)
                return perr(ps, e, "'$(' without its ')' in %s", pat), NULL;
            piece = define_value(ps, s + 2, (size_t)(close - s - 2));
            if (!piece)
                return perr(ps, e, "$(%.*s) is not defined above this line", (int)(close - s - 2), s + 2), NULL;
            n = strlen(piece);
            s = close + 1;
        } else {
            s++;
        }
        if (len + n >= sizeof buf)
            return perr(ps, e, "pattern longer than %zu bytes", sizeof buf - 1), NULL;
        memcpy(buf + len, piece, n);
        len += n;
    }
    buf[len] = 0;
    const char *unbounded = pattern_bounded(buf);
    if (unbounded)
        return perr(ps, e, "pattern %s: %s", buf, unbounded), NULL;
    regex_t re;
    int rc = regcomp(&re, buf, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char why[200];
        regerror(rc, &re, why, sizeof why);
        return perr(ps, e, "pattern %s does not compile: %s", buf, why), NULL;
    }
    regfree(&re);
    return own(ps, buf, len, e);
}

/* ---- options after a rule's pattern: key=value, or a bare flag ---- */

enum { OPT_GROUP = 1, OPT_FUSE = 2, OPT_OUT = 4, OPT_LAYOUT = 8, OPT_GUARD = 16, OPT_LINEAR = 32, OPT_PARENT = 64 };

typedef struct rule_opts {
    const char *group, *fuse, *out, *layout, *guard;
    int linear, parent;
} rule_opts;

static const struct {
    const char *name;
    int bit;
    size_t off;              /* where a key=value goes; flags have none */
} opt_table[] = {
    {"group", OPT_GROUP, offsetof(rule_opts, group)},   {"fuse", OPT_FUSE, offsetof(rule_opts, fuse)},
    {"out", OPT_OUT, offsetof(rule_opts, out)},         {"layout", OPT_LAYOUT, offsetof(rule_opts, layout)},
    {"guard", OPT_GUARD, offsetof(rule_opts, guard)},   {"linear", OPT_LINEAR, 0},
    {"parent", OPT_PARENT, 0},
};

static int parse_opt(famparse *ps, const char *tok, int allowed, rule_opts *o, ff_err *e)
{
    const char *eq = strchr(tok, '=');
    size_t klen = eq ? (size_t)(eq - tok) : strlen(tok);
    for (size_t i = 0; i < sizeof opt_table / sizeof *opt_table; i++) {
        if (strlen(opt_table[i].name) != klen || memcmp(opt_table[i].name, tok, klen) != 0)
            continue;
        if (!(allowed & opt_table[i].bit))
            return perr(ps, e, "this rule takes no %s", opt_table[i].name);
        int flag = opt_table[i].bit == OPT_LINEAR || opt_table[i].bit == OPT_PARENT;
        if (flag != !eq || (eq && !eq[1]))
            return perr(ps, e, flag ? "%s is a flag: it takes no value" : "%s needs a value (%s=...)",
                        opt_table[i].name, opt_table[i].name);
        if (opt_table[i].bit == OPT_LINEAR)
            o->linear = 1;
        else if (opt_table[i].bit == OPT_PARENT)
            o->parent = 1;
        else if (!(*(const char **)((char *)o + opt_table[i].off) = own(ps, eq + 1, strlen(eq + 1), e)))
            return e->code;
        return FF_OK;
    }
    return perr(ps, e, "unknown option '%.*s' (group=, fuse=, out=, layout=, guard=, linear, parent)", (int)klen, tok);
}

static int parse_opts(famparse *ps, char **tok, int ntok, int allowed, rule_opts *o, ff_err *e)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < ntok; i++) {
        int rc = parse_opt(ps, tok[i], allowed, o, e);
        if (rc)
            return rc;
    }
    return FF_OK;
}

static int push_rule(famparse *ps, ff_rule *r, ff_err *e)
{
    ff_famdesc *d = ps->d;
    /* one pointer a group: reports key their rows by it, as they do the C
     * tables' string literals */
    for (size_t i = 0; i < d->nrules; i++)
        if (strcmp(d->rules[i].group, r->group) == 0) {
            r->group = d->rules[i].group;
            break;
        }
    if (d->nrules == d->cap_rules) {
        size_t cap = d->cap_rules ? 2 * d->cap_rules : 16;
        ff_rule *n = realloc(d->rules, cap * sizeof *n);
        if (!n)
            return ff_oom(e, "out of memory");
        d->rules = n, d->cap_rules = cap;
    }
    d->rules[d->nrules++] = *r;
    return FF_OK;
}

/* ---- rule directives ---- */

static int rule_common(famparse *ps, char **tok, int ntok, int allowed, ff_rule *r, rule_opts *o, ff_err *e)
{
    memset(r, 0, sizeof *r);
    if (!(r->regex = expand(ps, tok[1], e)))
        return e->code;
    return parse_opts(ps, tok + 2, ntok - 2, allowed, o, e);
}

static int d_quant(famparse *ps, char **tok, int ntok, ff_err *e)
{
    ff_rule r;
    rule_opts o;
    int rc = rule_common(ps, tok, ntok, OPT_GROUP | OPT_FUSE | OPT_OUT, &r, &o, e);
    if (rc)
        return rc;
    r.role = ROLE_LINEAR, r.linear = 1, r.fuse = o.fuse, r.out_name = o.out;
    r.group = o.group ? o.group : "linear";
    return push_rule(ps, &r, e);
}

static int d_expert(famparse *ps, char **tok, int ntok, ff_err *e)
{
    ff_rule r;
    rule_opts o;
    int rc = rule_common(ps, tok, ntok, OPT_FUSE | OPT_OUT, &r, &o, e);
    if (rc)
        return rc;
    r.role = ROLE_LINEAR, r.linear = 1, r.expert = 1, r.group = "experts", r.fuse = o.fuse, r.out_name = o.out;
    if (!ps->experts_line)
        ps->experts_line = ps->line;
    return push_rule(ps, &r, e);
}

static const struct {
    const char *name;
    ff_role role;
    int outs;
} layouts[] = {
    {"fused2", ROLE_EXPERTS_FUSED2, 2}, {"one", ROLE_EXPERTS_ONE, 1},
    {"fused2-t", ROLE_EXPERTS_FUSED2_T, 2}, {"one-t", ROLE_EXPERTS_ONE_T, 1},
    {"fused2i-t", ROLE_EXPERTS_FUSED2I_T, 2},
};

/* out=A[,B]: the per-expert output names of a fused 3-D tensor, want of them. */
static int expert_outs(famparse *ps, const char *out, int want, const char *what, ff_rule *r, ff_err *e)
{
    const char *comma = strchr(out, ',');
    if ((comma != NULL) != (want == 2) || (comma && (comma == out || !comma[1] || strchr(comma + 1, ','))))
        return perr(ps, e, "%s names %d output Linear%s in out= (got %s)", what, want,
                    want == 2 ? "s, comma-separated" : "", out);
    if (!comma) {
        r->expert_out[0] = out;
        return FF_OK;
    }
    if (!(r->expert_out[0] = own(ps, out, (size_t)(comma - out), e)))
        return e->code;
    r->expert_out[1] = comma + 1;
    return FF_OK;
}

static int d_experts(famparse *ps, char **tok, int ntok, ff_err *e)
{
    ff_rule r;
    rule_opts o;
    int rc = rule_common(ps, tok, ntok, OPT_LAYOUT | OPT_OUT, &r, &o, e);
    if (rc)
        return rc;
    if (!o.layout || !o.out)
        return perr(ps, e, "experts needs layout=fused2|one|fused2-t|one-t|fused2i-t and out=NAME[,NAME]");
    size_t k = 0;
    while (k < sizeof layouts / sizeof *layouts && strcmp(layouts[k].name, o.layout) != 0)
        k++;
    if (k == sizeof layouts / sizeof *layouts)
        return perr(ps, e, "layout=%s is not one of fused2, one, fused2-t, one-t, fused2i-t", o.layout);
    char what[40];
    snprintf(what, sizeof what, "layout=%s", o.layout);
    if ((rc = expert_outs(ps, o.out, layouts[k].outs, what, &r, e)))
        return rc;
    r.role = layouts[k].role, r.linear = 1, r.group = "experts";
    if (!ps->experts_line)
        ps->experts_line = ps->line;
    return push_rule(ps, &r, e);
}

static int d_router(famparse *ps, char **tok, int ntok, ff_err *e)
{
    ff_rule r;
    rule_opts o;
    int rc = rule_common(ps, tok, ntok, OPT_PARENT, &r, &o, e);
    if (rc)
        return rc;
    r.role = ROLE_KEEP, r.group = "router", r.linear = 1, r.guard = GUARD_ROUTER, r.ignore_parent = o.parent;
    return push_rule(ps, &r, e);
}

static int keep_rule(famparse *ps, char **tok, int ntok, int tower, ff_err *e)
{
    ff_rule r;
    rule_opts o;
    int rc = rule_common(ps, tok, ntok, OPT_GROUP | OPT_LINEAR | (tower ? 0 : OPT_GUARD | OPT_FUSE | OPT_OUT), &r, &o, e);
    if (rc)
        return rc;
    /* out=: a kept fused 3-D tensor's per-expert names, for the ignore list */
    if (o.out && (rc = expert_outs(ps, o.out, strchr(o.out, ',') ? 2 : 1, "a kept fused tensor", &r, e)))
        return rc;
    /* guard=router: a router's companion that is no Linear (its score
     * correction bias), refused to --only like the router itself */
    static const char *const guards[] = {[GUARD_NONE] = "none", [GUARD_ROUTER] = "router", [GUARD_FIXED] = "fixed"};
    int g = o.guard ? -1 : GUARD_NONE;
    for (int k = 0; o.guard && k < 3; k++)
        if (strcmp(o.guard, guards[k]) == 0)
            g = k;
    if (g < 0)
        return perr(ps, e, "guard=%s is not none, fixed or router (a router Linear is its own rule: router PATTERN)",
                    o.guard);
    /* a kept pair vLLM fuses (DeepSeek-V3.2's indexer wk + weights_proj) is
     * tied, so a recipe cannot quantize one of the two */
    r.role = ROLE_KEEP, r.linear = o.linear, r.tower = tower, r.fuse = o.fuse;
    r.group = o.group ? o.group : tower ? "vision" : "other";
    r.guard = tower ? GUARD_FIXED : (ff_guard)g;
    return push_rule(ps, &r, e);
}

static int d_keep(famparse *ps, char **tok, int ntok, ff_err *e) { return keep_rule(ps, tok, ntok, 0, e); }
static int d_tower(famparse *ps, char **tok, int ntok, ff_err *e) { return keep_rule(ps, tok, ntok, 1, e); }

/* ---- what the description is, and the config keys ---- */

static int is_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
            return 0;
    return 1;
}

static int d_format(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    if (strcmp(tok[1], "1") != 0)
        return perr(ps, e, "format %s: this fp4forge reads format 1", tok[1]);
    return FF_OK;
}

static int d_family(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    if (!is_name(tok[1]))
        return perr(ps, e, "family name '%s': letters, digits, '_', '-' and '.' only", tok[1]);
    return (ps->d->fam.name = own(ps, tok[1], strlen(tok[1]), e)) ? FF_OK : e->code;
}

/* A list directive: every token a key, into a NULL-terminated slot array. */
static int key_list(famparse *ps, char **tok, int ntok, const char **slot, ff_err *e)
{
    for (int i = 1; i < ntok; i++) {
        if (!is_name(tok[i]))
            return perr(ps, e, "'%s' is not a config key or name", tok[i]);
        if (!(slot[i - 1] = own(ps, tok[i], strlen(tok[i]), e)))
            return e->code;
    }
    slot[ntok - 1] = NULL;
    return FF_OK;
}

static int one_key(famparse *ps, const char *tok, const char **slot, ff_err *e)
{
    if (!is_name(tok))
        return perr(ps, e, "'%s' is not a config key", tok);
    return (*slot = own(ps, tok, strlen(tok), e)) ? FF_OK : e->code;
}

static int d_define(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    if (!is_name(tok[1]) || ps->ndefs == MAX_DEFINES)
        return perr(ps, e, "define NAME VALUE: a name of letters, digits and '_', at most %d defines", MAX_DEFINES);
    if (define_value(ps, tok[1], strlen(tok[1])))
        return perr(ps, e, "$(%s) is defined twice", tok[1]);
    const char *v = expand(ps, tok[2], e);
    const char *n = v ? own(ps, tok[1], strlen(tok[1]), e) : NULL;
    if (!n)
        return e->code;
    ps->def_name[ps->ndefs] = n, ps->def_value[ps->ndefs++] = v;
    return FF_OK;
}

static int count_arg(famparse *ps, const char *tok, int64_t *out, ff_err *e)
{
    char *end;
    long long v = strtoll(tok, &end, 10);
    if (!*tok || *end || v < 0 || v > 1000000)
        return perr(ps, e, "'%s' is not a count (0 .. 1000000)", tok);
    *out = v;
    return FF_OK;
}

static int d_mtp(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)tok, (void)ntok, (void)e;
    ps->d->mtp = 1;
    return FF_OK;
}

static int d_note(famparse *ps, char **tok, int ntok, ff_err *e)
{
    char buf[600];
    size_t len = 0;
    /* stop once full: buf + len past the end is undefined even with size 0 */
    for (int i = 1; i < ntok && len < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, "%s%s", i > 1 ? " " : "", tok[i]);
    if (len >= sizeof buf)
        return perr(ps, e, "note longer than %zu bytes", sizeof buf - 1);
    return (ps->d->fam.note = own(ps, buf, len, e)) ? FF_OK : e->code;
}

/* moe-layers all, or terms TERM=KEY that all must hold (famdesc_moe_layers). */
static int d_moe_layers(famparse *ps, char **tok, int ntok, ff_err *e)
{
    famdesc_moe_layers *m = &ps->d->moe;
    static const struct {
        const char *term;
        size_t off;
    } terms[] = {
        {"step", offsetof(famdesc_moe_layers, step)},         {"freq", offsetof(famdesc_moe_layers, freq)},
        {"first-dense", offsetof(famdesc_moe_layers, first_dense)}, {"start", offsetof(famdesc_moe_layers, start)},
        {"end", offsetof(famdesc_moe_layers, end)},           {"interval", offsetof(famdesc_moe_layers, interval)},
        {"except", offsetof(famdesc_moe_layers, except)},
    };
    if (ntok == 2 && strcmp(tok[1], "all") == 0)
        return m->all = 1, FF_OK;
    for (int i = 1; i < ntok; i++) {
        const char *eq = strchr(tok[i], '=');
        size_t k = 0, nt = sizeof terms / sizeof *terms;
        while (eq && k < nt && (strlen(terms[k].term) != (size_t)(eq - tok[i]) ||
                                memcmp(terms[k].term, tok[i], (size_t)(eq - tok[i])) != 0))
            k++;
        if (!eq || k == nt)
            return perr(ps, e, "'%s': moe-layers takes all, or step=, freq=, first-dense=, start=, end=, interval=, "
                               "except= each with a config key", tok[i]);
        int rc = one_key(ps, eq + 1, (const char **)((char *)m + terms[k].off), e);
        if (rc)
            return rc;
    }
    return FF_OK;
}

/* shared-expert KEY dense=N routers=N: MoE layers whose config KEY is > 0
 * carry N more dense Linears and N more kept gates. */
static int d_shared(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    ff_famdesc *d = ps->d;
    if (strncmp(tok[2], "dense=", 6) != 0 || strncmp(tok[3], "routers=", 8) != 0)
        return perr(ps, e, "shared-expert takes KEY dense=N routers=N");
    int rc = one_key(ps, tok[1], &d->shared_key, e);
    if (!rc)
        rc = count_arg(ps, tok[2] + 6, &d->shared_dense, e);
    if (!rc)
        rc = count_arg(ps, tok[3] + 8, &d->shared_routers, e);
    return rc;
}

/* dense-per-layer-kind KIND N / dense-per-moe-layer-kind KIND N: layers
 * whose layer-kinds entry is KIND quantize N dense Linears instead. */
static int kind_count(famparse *ps, char **tok, int moe, ff_err *e)
{
    ff_famdesc *d = ps->d;
    if (d->nkind_dense[moe] == FAMDESC_MAX_KEYS)
        return perr(ps, e, "at most %d layer kinds with their own count", FAMDESC_MAX_KEYS);
    for (int i = 0; i < d->nkind_dense[moe]; i++)
        if (strcmp(d->kind_dense[moe][i].kind, tok[1]) == 0)
            return perr(ps, e, "layer kind '%s' given twice", tok[1]);
    famdesc_kind_count *k = &d->kind_dense[moe][d->nkind_dense[moe]];
    int rc = one_key(ps, tok[1], &k->kind, e);
    if (!rc)
        rc = count_arg(ps, tok[2], &k->dense, e);
    d->nkind_dense[moe] += !rc;
    return rc;
}

/* layer-kind-numbers KEY BASE KIND OTHER: the config list KEY (a dotted
 * path) numbers the layers of KIND from BASE; the others are OTHER. */
static int d_kind_numbers(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    ff_famdesc *d = ps->d;
    if (d->kinds_key)
        return perr(ps, e, "layer kinds are given twice (layer-kinds or layer-kind-numbers once)");
    if (strcmp(tok[2], "0") != 0 && strcmp(tok[2], "1") != 0)
        return perr(ps, e, "'%s' is not a base: the list counts layers from 0 or from 1", tok[2]);
    d->kinds_base = tok[2][0] - '0';
    if (strcmp(tok[3], tok[4]) == 0)
        return perr(ps, e, "the listed layers' kind and the others' are both '%s'", tok[3]);
    int rc = one_key(ps, tok[1], &d->kinds_key, e);
    if (!rc)
        rc = one_key(ps, tok[3], &d->kinds_named, e);
    if (!rc)
        rc = one_key(ps, tok[4], &d->kinds_other, e);
    d->kinds_numbered = !rc;
    return rc;
}

static int d_kinds(famparse *ps, char **tok, int ntok, ff_err *e)
{
    (void)ntok;
    if (ps->d->kinds_key)
        return perr(ps, e, "layer kinds are given twice (layer-kinds or layer-kind-numbers once)");
    return one_key(ps, tok[1], &ps->d->kinds_key, e);
}

static int d_kind_dense(famparse *ps, char **tok, int ntok, ff_err *e) { return (void)ntok, kind_count(ps, tok, 0, e); }
static int d_kind_moe(famparse *ps, char **tok, int ntok, ff_err *e) { return (void)ntok, kind_count(ps, tok, 1, e); }

typedef int (*directive_fn)(famparse *ps, char **tok, int ntok, ff_err *e);

/* What a directive fills: its own handler, or a field of ff_famdesc by
 * kind (a list of keys, one key, a count). */
typedef enum { D_FN, D_KEYS, D_KEY, D_COUNT } dkind;

/* The one table every line is checked against: name, argument counts
 * (max -1: any), how it is read, and whether it may appear twice. */
static const struct directive {
    const char *name;
    int min, max;
    dkind kind;
    directive_fn fn;          /* D_FN */
    size_t off;               /* the others: the field in ff_famdesc */
    int repeat;
    const char *usage;
} directives[] = {
    {"format", 1, 1, D_FN, d_format, 0, 0, "format 1"},
    {"family", 1, 1, D_FN, d_family, 0, 0, "family NAME"},
    {"model-type", 1, FAMDESC_MAX_TYPES, D_KEYS, NULL, offsetof(ff_famdesc, types), 0, "model-type TYPE..."},
    {"config-section", 1, 1, D_KEY, NULL, offsetof(ff_famdesc, section), 0, "config-section KEY"},
    {"define", 2, 2, D_FN, d_define, 0, 1, "define NAME VALUE"},
    {"quant", 1, 4, D_FN, d_quant, 0, 1, "quant PATTERN [group=G] [fuse=K] [out=NAME]"},
    {"expert", 1, 3, D_FN, d_expert, 0, 1, "expert PATTERN [fuse=K] [out=NAME]"},
    {"experts", 3, 3, D_FN, d_experts, 0, 1, "experts PATTERN layout=L out=A[,B]"},
    {"router", 1, 2, D_FN, d_router, 0, 1, "router PATTERN [parent]"},
    {"keep", 1, 6, D_FN, d_keep, 0, 1, "keep PATTERN [group=G] [guard=none|fixed|router] [fuse=K] [out=A[,B]] [linear]"},
    {"tower", 1, 3, D_FN, d_tower, 0, 1, "tower PATTERN [group=G] [linear]"},
    {"layers", 1, 1, D_KEY, NULL, offsetof(ff_famdesc, layers_key), 0, "layers KEY"},
    {"experts-key", 1, FAMDESC_MAX_KEYS, D_KEYS, NULL, offsetof(ff_famdesc, experts_keys), 0, "experts-key KEY..."},
    {"top-k-key", 1, FAMDESC_MAX_KEYS, D_KEYS, NULL, offsetof(ff_famdesc, top_k_keys), 0, "top-k-key KEY..."},
    {"expert-width-key", 1, FAMDESC_MAX_KEYS, D_KEYS, NULL, offsetof(ff_famdesc, width_keys), 0,
     "expert-width-key KEY..."},
    {"moe-layers", 1, 7, D_FN, d_moe_layers, 0, 0, "moe-layers all | TERM=KEY..."},
    {"dense-per-layer", 1, 1, D_COUNT, NULL, offsetof(ff_famdesc, dense_per_layer), 0, "dense-per-layer N"},
    {"dense-per-moe-layer", 1, 1, D_COUNT, NULL, offsetof(ff_famdesc, dense_per_moe_layer), 0,
     "dense-per-moe-layer N"},
    {"layer-kinds", 1, 1, D_FN, d_kinds, 0, 0, "layer-kinds KEY"},
    {"layer-kind-numbers", 4, 4, D_FN, d_kind_numbers, 0, 0, "layer-kind-numbers KEY BASE KIND OTHER"},
    {"dense-per-layer-kind", 2, 2, D_FN, d_kind_dense, 0, 1, "dense-per-layer-kind KIND N"},
    {"dense-per-moe-layer-kind", 2, 2, D_FN, d_kind_moe, 0, 1, "dense-per-moe-layer-kind KIND N"},
    {"routers-per-moe-layer", 1, 1, D_COUNT, NULL, offsetof(ff_famdesc, routers_per_moe_layer), 0,
     "routers-per-moe-layer N"},
    {"shared-expert", 3, 3, D_FN, d_shared, 0, 0, "shared-expert KEY dense=N routers=N"},
    {"mtp", 0, 0, D_FN, d_mtp, 0, 0, "mtp"},
    {"implicit-ignore", 1, FAMDESC_MAX_KEYS, D_KEYS, NULL, offsetof(ff_famdesc, implicit), 0,
     "implicit-ignore MODULE..."},
    {"note", 1, -1, D_FN, d_note, 0, 0, "note TEXT"},
};
#define NDIRECTIVES (sizeof directives / sizeof *directives)
_Static_assert(NDIRECTIVES <= sizeof ((famparse *)0)->seen, "famparse.seen holds every directive");

/* Splits a line into tokens at blanks; a '#' at a token's start ends it. */
static int tokenize(char *line, char **tok)
{
    int n = 0;
    for (char *s = line;;) {
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        if (!*s || *s == '#')
            return n;
        if (n == MAX_TOKENS)
            return -1;
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r')
            s++;
        if (*s)
            *s++ = 0;
    }
}

static int run_directive(famparse *ps, const struct directive *dv, char **tok, int ntok, ff_err *e)
{
    char *field = (char *)ps->d + dv->off;
    switch (dv->kind) {
    case D_KEYS:
        return key_list(ps, tok, ntok, (const char **)field, e);
    case D_KEY:
        return one_key(ps, tok[1], (const char **)field, e);
    case D_COUNT:
        return count_arg(ps, tok[1], (int64_t *)field, e);
    default:
        return dv->fn(ps, tok, ntok, e);
    }
}

static int parse_line(famparse *ps, char *line, ff_err *e)
{
    char *tok[MAX_TOKENS];
    int ntok = tokenize(line, tok);
    if (ntok == 0)
        return FF_OK;
    if (ntok < 0)
        return perr(ps, e, "more than %d words on one line", MAX_TOKENS);
    for (size_t i = 0; i < NDIRECTIVES; i++) {
        const struct directive *dv = &directives[i];
        if (strcmp(dv->name, tok[0]) != 0)
            continue;
        if (ntok - 1 < dv->min || (dv->max >= 0 && ntok - 1 > dv->max))
            return perr(ps, e, "%s takes %s", dv->name, dv->usage);
        if (ps->seen[i] && !dv->repeat)
            return perr(ps, e, "%s given twice", dv->name);
        ps->seen[i] = 1;
        return run_directive(ps, dv, tok, ntok, e);
    }
    return perr(ps, e, "unknown directive '%s' (docs/family-files.md lists them)", tok[0]);
}

static int given(const famparse *ps, const char *name)
{
    for (size_t i = 0; i < NDIRECTIVES; i++)
        if (strcmp(directives[i].name, name) == 0)
            return ps->seen[i];
    return 0;
}

/* What a whole description must say, checked once it is read; the counts
 * only where no C hook of the family (base) computes them. */
static int finish(famparse *ps, const ff_family *base, ff_err *e)
{
    ff_famdesc *d = ps->d;
    ps->line = 0;
    int counts_in_c = base && base->expect;
    if (!given(ps, "format") || !given(ps, "family") || !d->types[0] || (!given(ps, "dense-per-layer") && !counts_in_c))
        return ff_fail(e, FF_EIO, "%s: a description needs format 1, family, model-type and dense-per-layer",
                       ps->origin);
    size_t quantized = 0;
    for (size_t i = 0; i < d->nrules; i++)
        quantized += d->rules[i].role != ROLE_KEEP;
    if (!quantized)
        return ff_fail(e, FF_EIO, "%s: no rule quantizes anything (quant, expert or experts)", ps->origin);
    if (ps->experts_line && !d->experts_keys[0] && !counts_in_c) {
        ps->line = ps->experts_line;
        return perr(ps, e, "an experts rule needs experts-key (the config key giving the expert count)");
    }
    if ((d->nkind_dense[0] || d->nkind_dense[1]) && !d->kinds_key)
        return ff_fail(e, FF_EIO,
                       "%s: dense-per-layer-kind needs layer-kinds (the config key listing each layer's kind) "
                       "or layer-kind-numbers",
                       ps->origin);
    if (d->experts_keys[0] && !given(ps, "moe-layers"))
        d->moe.all = 1;
    if (d->experts_keys[0] && !given(ps, "routers-per-moe-layer"))
        d->routers_per_moe_layer = 1;
    if (!d->layers_key)
        d->layers_key = "num_hidden_layers";
    if (!d->top_k_keys[0])
        d->top_k_keys[0] = "num_experts_per_tok";
    if (!d->width_keys[0])
        d->width_keys[0] = "moe_intermediate_size";
    return FF_OK;
}

/* The family the rest of fp4forge reads: the rows, the words for messages,
 * the C hooks of base (doctor, synth, encoder) when there is one. */
static int fill_family(famparse *ps, const ff_family *base, ff_err *e)
{
    ff_famdesc *d = ps->d;
    ff_family *f = &d->fam;
    const char *name = f->name, *note = f->note;
    if (base)
        *f = *base;
    f->name = name;
    f->note = note ? note : base ? base->note : NULL;
    f->rules = d->rules, f->nrules = d->nrules;
    /* what a built-in family still says in C (a config's layer kinds the
     * counts cannot express, MLA's latent cache) stays; the rest is the text's */
    f->matches = base ? base->matches : NULL;
    f->expect = base ? base->expect : NULL;
    f->geometry = base ? base->geometry : NULL;
    f->override_rule = base && base->override_rule ? base->override_rule : d->mtp ? ff_decoder_mtp_rule : NULL;
    f->implicit_ignore = d->implicit[0] ? d->implicit : base ? base->implicit_ignore : NULL;
    f->desc = d;
    char types[300];
    size_t len = 0;
    types[0] = 0;
    for (int i = 0; d->types[i] && len < sizeof types; i++)
        len += (size_t)snprintf(types + len, len < sizeof types ? sizeof types - len : 0, "%s%s", i ? ", " : "",
                                d->types[i]);
    if (!(f->model_types = own(ps, types, strlen(types), e)))
        return e->code;
    snprintf(d->dense_rule, sizeof d->dense_rule, "%lld a dense layer, %lld a MoE layer%s%s%s, from %s",
             (long long)d->dense_per_layer, (long long)d->dense_per_moe_layer, d->kinds_key ? ", others by " : "",
             d->kinds_key ? d->kinds_key : "", d->kinds_key ? " kind" : "", ps->origin);
    f->dense_rule = base && base->expect ? base->dense_rule : d->dense_rule;
    return FF_OK;
}

int famdesc_parse(const char *text, size_t len, const char *origin, const ff_family *base, ff_famdesc **out,
                  ff_err *e)
{
    *out = NULL;
    ff_famdesc *d = calloc(1, sizeof *d);
    char *copy = malloc(len + 1);
    if (!d || !copy) {
        free(d), free(copy);
        return ff_oom(e, "out of memory");
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    famparse ps = {.d = d, .origin = origin};
    int rc = FF_OK;
    if (memchr(text, 0, len))
        rc = ff_fail(e, FF_EIO, "%s: holds a NUL byte: not a description", origin);
    for (char *s = copy, *nl; rc == FF_OK && s && *s; s = nl ? nl + 1 : NULL) {
        nl = strchr(s, '\n');
        if (nl)
            *nl = 0;
        ps.line++;
        rc = parse_line(&ps, s, e);
    }
    free(copy);
    if (!rc)
        rc = finish(&ps, base, e);
    if (!rc)
        rc = fill_family(&ps, base, e);
    if (rc) {
        famdesc_free(d);
        return rc;
    }
    *out = d;
    return FF_OK;
}

void famdesc_free(ff_famdesc *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nowned; i++)
        free(d->owned[i]);
    free(d->owned);
    free(d->rules);
    free(d);
}
