/* verify --html: one self-contained page (inline CSS and SVG, no script, no
 * network) that answers "which layers got hurt" at a glance: failing checks
 * first, then the relative error of every quantized tensor as a heatmap of
 * layers x projections (and layers x experts for MoE), then the full table.
 * It reads verify's JSON result only, so it shows exactly what verify found. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "heatmap.h"
#include "html.h"
#include "verify.h"

typedef struct row {
    const char *module, *family;
    double rel, snr;
    long long numel;
} row;

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
    }
    return r;
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

static void tensor_table(FILE *o, row *r, size_t n, const char *title)
{
    qsort(r, n, sizeof *r, by_rel_desc);
    fprintf(o, "<h2>%s</h2>\n<table><tr><th>module</th><th>family</th>"
               "<th>relative error</th><th>SNR dB</th><th>elements</th></tr>\n", title);
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

/* Colours run from green at 0 to red at the per-tensor limit (0.250),
 * dark red past it: a passing model shows no red, whatever its own spread. */
static int heat_section(FILE *o, const row *r, size_t n, double limit)
{
    heat_value *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++)
        v[i] = (heat_value){r[i].module, r[i].rel};
    heat_style s = {"Relative error", "relative error", limit, "not quantized", 0};
    int rc = heat_sections(o, v, n, &s);
    free(v);
    return rc;
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
        if (heat_section(o, r, n, limit)) {
            free(r);
            return -1;
        }
        tensor_table(o, r, n, "Every quantized tensor, worst first");
    } else {
        fputs("<p>No per-tensor errors: run verify with --against SRC_DIR for the heatmap.</p>\n", o);
    }
    free(r);
    /* a mixed output's FP8 modules: their error is an order smaller, so
     * they get their own table rather than a corner of the NVFP4 heatmap */
    r = read_rows(json_object_get(res, "fp8_tensors"), &n);
    if (r && n)
        tensor_table(o, r, n, "FP8 weight-only tensors (quantize --fp8), worst first");
    free(r);
    html_end(o);
    return ferror(o) ? -1 : 0;
}
