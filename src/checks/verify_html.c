/* verify --html: one self-contained page (inline CSS and SVG, no script, no
 * network) that answers "which layers got hurt" at a glance: failing checks
 * first, then the relative error of every quantized tensor as a heatmap of
 * layers x projections (and layers x experts for MoE), then the full table.
 * It reads verify's JSON result only, so it shows exactly what verify found. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "verify.h"

typedef struct row {
    const char *module, *family;
    double rel, snr;
    long long numel;
    int layer, expert;          /* -1 when the name has none */
    const char *proj;           /* the last name component */
} row;

typedef struct heat {
    const char **cols;          /* column labels (projections), or NULL for experts */
    size_t ncols;
    int nlayers;
    double *val;                /* [layer * ncols + col], NAN when absent */
} heat;

/* The number after `key` in a module name ("layers." -> 12), or -1. */
static int index_after(const char *name, const char *key)
{
    const char *p = strstr(name, key);
    return p && p[strlen(key)] >= '0' && p[strlen(key)] <= '9' ? atoi(p + strlen(key)) : -1;
}

static row *read_rows(const json_t *tensors, size_t *n)
{
    *n = json_array_size(tensors);
    row *r = calloc(*n ? *n : 1, sizeof *r);
    for (size_t i = 0; r && i < *n; i++) {
        const json_t *t = json_array_get(tensors, i);
        r[i].module = json_string_value(json_object_get(t, "module"));
        r[i].module = r[i].module ? r[i].module : "?";
        r[i].family = json_string_value(json_object_get(t, "family"));
        r[i].rel = json_number_value(json_object_get(t, "rel_error"));
        r[i].snr = json_number_value(json_object_get(t, "snr_db"));
        r[i].numel = json_integer_value(json_object_get(t, "numel"));
        r[i].layer = index_after(r[i].module, "layers.");
        r[i].expert = index_after(r[i].module, "experts.");
        const char *dot = strrchr(r[i].module, '.');
        r[i].proj = dot ? dot + 1 : r[i].module;
    }
    return r;
}

static size_t col_of(heat *h, const char *name)
{
    for (size_t i = 0; i < h->ncols; i++)
        if (strcmp(h->cols[i], name) == 0)
            return i;
    h->cols[h->ncols] = name;
    return h->ncols++;
}

/* experts = 0: layers x projections of the non-expert modules; 1: layers x
 * experts, each cell the worst of that expert's projections. */
static int build_heat(const row *r, size_t n, int experts, heat *h)
{
    memset(h, 0, sizeof *h);
    int maxe = -1;
    for (size_t i = 0; i < n; i++) {
        if (r[i].layer >= h->nlayers)
            h->nlayers = r[i].layer + 1;
        if (r[i].expert > maxe)
            maxe = r[i].expert;
    }
    h->cols = calloc(n + 1, sizeof *h->cols);
    size_t cap = experts ? (size_t)(maxe + 1) : n + 1;
    h->val = malloc(((size_t)h->nlayers * cap + 1) * sizeof *h->val);
    if (!h->cols || !h->val)
        return -1;
    for (size_t i = 0; i < (size_t)h->nlayers * cap; i++)
        h->val[i] = NAN;
    if (experts)
        h->ncols = (size_t)(maxe + 1);
    for (size_t i = 0; i < n; i++) {
        if (r[i].layer < 0 || (r[i].expert >= 0) != experts)
            continue;
        size_t c = experts ? (size_t)r[i].expert : col_of(h, r[i].proj);
        double *v = &h->val[(size_t)r[i].layer * cap + c];
        if (isnan(*v) || r[i].rel > *v)
            *v = r[i].rel;
    }
    if (!experts) /* the table was sized for every name; cells use the real width */
        for (int l = h->nlayers - 1; l >= 0; l--)
            memmove(&h->val[(size_t)l * h->ncols], &h->val[(size_t)l * cap], h->ncols * sizeof *h->val);
    return 0;
}

static void heat_free(heat *h)
{
    free(h->cols);
    free(h->val);
}

/* Green (no error) to red (verify's per-tensor limit, where a tensor fails)
 * on a fixed scale: a passing model never shows red, whatever the spread of
 * its own errors; beyond the limit, dark red. */
static void color(FILE *o, double v, double lo, double hi)
{
    if (isnan(v)) {
        fputs("#eee", o);
        return;
    }
    if (v > hi) {
        fputs("hsl(0,80%,32%)", o);
        return;
    }
    double t = hi > lo ? (v - lo) / (hi - lo) : 0;
    t = t < 0 ? 0 : t;
    fprintf(o, "hsl(%d,75%%,%d%%)", (int)(120 * (1 - t)), 45 + (int)(10 * (1 - t)));
}

static void svg_heat(FILE *o, const heat *h, int experts, double lo, double hi)
{
    int cw = experts ? 14 : 64, ch = 14, left = 70, top = experts ? 34 : 90;
    fprintf(o, "<svg width='%d' height='%d' font-size='11'>\n",
            left + (int)h->ncols * cw + 10, top + h->nlayers * ch + 10);
    for (size_t c = 0; c < h->ncols; c++) {
        int x = left + (int)c * cw + cw / 2;
        if (experts && c % 8 == 0)
            fprintf(o, "<text x='%d' y='%d' text-anchor='middle'>%zu</text>\n", x, top - 6, c);
        else if (!experts) {
            fprintf(o, "<text transform='translate(%d,%d) rotate(-60)'>", x, top - 4);
            html_esc(o, h->cols[c]);
            fputs("</text>\n", o);
        }
    }
    for (int l = 0; l < h->nlayers; l++) {
        fprintf(o, "<text x='%d' y='%d' text-anchor='end'>layer %d</text>\n", left - 4, top + l * ch + 11, l);
        for (size_t c = 0; c < h->ncols; c++) {
            double v = h->val[(size_t)l * h->ncols + c];
            fprintf(o, "<rect x='%d' y='%d' width='%d' height='%d' fill='", left + (int)c * cw,
                    top + l * ch, cw - 1, ch - 1);
            color(o, v, lo, hi);
            fprintf(o, "'><title>layer %d, ", l);
            if (experts)
                fprintf(o, "expert %zu", c);
            else
                html_esc(o, h->cols[c]);
            fputc(':', o);
            if (isnan(v))
                fputs(" (not quantized)</title></rect>\n", o);
            else
                fprintf(o, " relative error %.4f</title></rect>\n", v);
        }
    }
    fputs("</svg>\n", o);
}

static size_t count_failing(const json_t *checks)
{
    size_t n = 0;
    const char *name;
    const json_t *c;
    json_object_foreach((json_t *)checks, name, c)
        n += !json_is_true(json_object_get(c, "ok"));
    return n;
}

static void checks_section(FILE *o, const json_t *checks, int failing)
{
    const char *name;
    const json_t *c;
    json_object_foreach((json_t *)checks, name, c) {
        int ok = json_is_true(json_object_get(c, "ok"));
        if (ok == failing)
            continue;
        fprintf(o, "<tr class='%s'><td>%s</td><td>", ok ? "pass" : "fail", ok ? "PASS" : "FAIL");
        html_esc(o, name);
        fputs("</td><td>", o);
        html_esc(o, json_string_value(json_object_get(c, "detail")));
        size_t i;
        const json_t *it;
        json_array_foreach(json_object_get(c, "items"), i, it) {
            fputs("<br>", o);
            html_json_text(o, it);
        }
        fputs("</td></tr>\n", o);
    }
}

static int by_rel_desc(const void *a, const void *b)
{
    double x = ((const row *)a)->rel, y = ((const row *)b)->rel;
    return (x < y) - (x > y);
}

static void tensor_table(FILE *o, row *r, size_t n)
{
    qsort(r, n, sizeof *r, by_rel_desc);
    fputs("<h2>Every quantized tensor, worst first</h2>\n<table><tr><th>module</th><th>family</th>"
          "<th>relative error</th><th>SNR dB</th><th>elements</th></tr>\n", o);
    for (size_t i = 0; i < n; i++) {
        fputs("<tr><td>", o);
        html_esc(o, r[i].module);
        fputs("</td><td>", o);
        html_esc(o, r[i].family);
        fprintf(o, "</td><td>%.5f</td><td>%.2f</td><td>%lld</td></tr>\n", r[i].rel, r[i].snr, r[i].numel);
    }
    fputs("</table>\n", o);
}

static void page_head(FILE *o, const json_t *res)
{
    html_begin(o, "fp4forge verify", json_is_true(json_object_get(res, "ok")) ? "PASS" : "FAIL");
    fputs("<p>output: ", o);
    html_esc(o, json_string_value(json_object_get(res, "output")));
    const char *against = json_string_value(json_object_get(res, "against"));
    if (against) {
        fputs("<br>against: ", o);
        html_esc(o, against);
    }
    fputs("</p>\n", o);
}

static void heat_section(FILE *o, const row *r, size_t n, int experts, double lo, double hi)
{
    heat h;
    if (build_heat(r, n, experts, &h) == 0 && h.ncols && h.nlayers) {
        fprintf(o, "<h2>Relative error: layers x %s</h2>\n", experts ? "experts (worst of gate/up/down)" : "projections");
        svg_heat(o, &h, experts, lo, hi);
    }
    heat_free(&h);
}

int verify_write_html(const json_t *res, FILE *o)
{
    const json_t *checks = json_object_get(res, "checks");
    page_head(o, res);
    fputs("<h2>Failing checks</h2>\n", o);
    if (!count_failing(checks))
        fputs("<p>none</p>\n", o);
    fputs("<table>\n", o);
    checks_section(o, checks, 1);
    fputs("</table>\n<h2>Passing checks</h2>\n<table>\n", o);
    checks_section(o, checks, 0);
    fputs("</table>\n", o);
    size_t n;
    row *r = read_rows(json_object_get(res, "tensors"), &n);
    if (!r)
        return -1;
    double best = INFINITY, worst = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        best = fmin(best, r[i].rel);
        worst = fmax(worst, r[i].rel);
    }
    double limit = json_real_value(json_object_get(json_object_get(res, "error"), "max_rel_limit"));
    limit = limit > 0 ? limit : worst;
    if (n) {
        fprintf(o, "<p>colour: relative error from green = 0 to red = %.3f, the limit past which a tensor fails "
                   "(dark red: beyond it); this page's best %.4f, worst %.4f; grey: not quantized</p>\n",
                limit, best, worst);
        heat_section(o, r, n, 0, 0, limit);
        heat_section(o, r, n, 1, 0, limit);
        tensor_table(o, r, n);
    } else {
        fputs("<p>No per-tensor errors: run verify with --against SRC_DIR for the heatmap.</p>\n", o);
    }
    free(r);
    html_end(o);
    return ferror(o) ? -1 : 0;
}
