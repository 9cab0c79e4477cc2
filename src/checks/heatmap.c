#include "heatmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"

/* Projections past this many names are not columns: a real model has a
 * dozen; thousands are a hostile header, and the page would grow with them. */
#define HEAT_MAX_COLS 64

typedef struct cell_of {
    int layer, expert;  /* -1 when the name has none */
    const char *proj;   /* the last name component */
} cell_of;

typedef struct heat {
    int experts;            /* the layers x experts map */
    const char *cols[HEAT_MAX_COLS];
    size_t ncols;
    int row_of[HEAT_MAX_LAYER + 1]; /* layer -> row, -1 when no cell */
    int layer_of_row[HEAT_MAX_LAYER + 1];
    int nrows;
    double *val;            /* [row * ncols + col], NAN when absent */
    size_t left_out;        /* modules not drawn: indices or names past the caps */
} heat;

/* The index after `key` in a module name ("layers." -> 12); -1 when there
 * is none, -2 when it is past max. */
static int index_after(const char *name, const char *key, int max)
{
    const char *p = strstr(name, key);
    if (!p || p[strlen(key)] < '0' || p[strlen(key)] > '9')
        return -1;
    char *end;
    long v = strtol(p + strlen(key), &end, 10);
    return v > max ? -2 : (int)v;
}

static cell_of parse(const char *module)
{
    const char *dot = strrchr(module, '.');
    return (cell_of){index_after(module, "layers.", HEAT_MAX_LAYER), index_after(module, "experts.", HEAT_MAX_EXPERT),
                     dot ? dot + 1 : module};
}

/* The column of a cell, added when new; -1 past the cap. */
static int column(heat *h, const cell_of *c)
{
    if (h->experts)
        return c->expert;
    for (size_t i = 0; i < h->ncols; i++)
        if (strcmp(h->cols[i], c->proj) == 0)
            return (int)i;
    if (h->ncols == HEAT_MAX_COLS)
        return -1;
    h->cols[h->ncols] = c->proj;
    return (int)h->ncols++;
}

/* First pass: which layers have a cell in this map, the columns, what is
 * left out. Rows follow layer order. */
static void lay_out(heat *h, const heat_value *v, size_t n)
{
    int present[HEAT_MAX_LAYER + 1] = {0};
    for (size_t i = 0; i < n; i++) {
        cell_of c = parse(v[i].module);
        if (c.layer == -1 || (c.expert != -1) != h->experts)
            continue;
        int col = c.layer < 0 || c.expert == -2 ? -1 : column(h, &c);
        if (col < 0) {
            h->left_out++;
            continue;
        }
        present[c.layer] = 1;
        if (h->experts && (size_t)col + 1 > h->ncols)
            h->ncols = (size_t)col + 1;
    }
    for (int l = 0; l <= HEAT_MAX_LAYER; l++) {
        h->row_of[l] = present[l] ? h->nrows : -1;
        if (present[l])
            h->layer_of_row[h->nrows++] = l;
    }
}

/* The cells, each the worst value of its module's tensors (an expert cell:
 * of that expert's projections). */
static int build(heat *h, const heat_value *v, size_t n, int experts)
{
    memset(h, 0, sizeof *h);
    h->experts = experts;
    lay_out(h, v, n);
    size_t cells = (size_t)h->nrows * h->ncols;
    h->val = malloc((cells ? cells : 1) * sizeof *h->val);
    if (!h->val)
        return -1;
    for (size_t i = 0; i < cells; i++)
        h->val[i] = NAN;
    for (size_t i = 0; i < n; i++) {
        cell_of c = parse(v[i].module);
        if (c.layer < 0 || c.expert == -2 || (c.expert != -1) != experts)
            continue;
        int col = column(h, &c);
        if (col < 0)
            continue;
        double *x = &h->val[(size_t)h->row_of[c.layer] * h->ncols + (size_t)col];
        if (isnan(*x) || v[i].value > *x)
            *x = v[i].value;
    }
    return 0;
}

/* Linear: green (0) to red (the limit, where verify fails a tensor), dark
 * red past it, so a passing model never shows red. Exact: green only at 0;
 * any difference red, darker on a log scale from 1e-6 to the limit. */
static void color(FILE *o, double v, const heat_style *s)
{
    if (isnan(v)) {
        fputs("#eee", o);
        return;
    }
    double t = s->limit > 0 ? v / s->limit : 0;
    if (s->exact)
        t = v <= 0 ? 0 : 0.5 + 0.5 * (log10(fmax(v, 1e-6 * s->limit) / s->limit) + 6) / 6;
    if (t > 1) {
        fputs("hsl(0,80%,32%)", o);
        return;
    }
    t = t < 0 ? 0 : t;
    fprintf(o, "hsl(%d,75%%,%d%%)", (int)(120 * (1 - t)), 45 + (int)(10 * (1 - t)));
}

static void column_labels(FILE *o, const heat *h, int left, int top, int cw)
{
    for (size_t c = 0; c < h->ncols; c++) {
        int x = left + (int)c * cw + cw / 2;
        if (h->experts && c % 8 == 0)
            fprintf(o, "<text x='%d' y='%d' text-anchor='middle'>%zu</text>\n", x, top - 6, c);
        else if (!h->experts) {
            fprintf(o, "<text transform='translate(%d,%d) rotate(-60)'>", x, top - 4);
            html_esc(o, h->cols[c]);
            fputs("</text>\n", o);
        }
    }
}

static void cell(FILE *o, const heat *h, int row, size_t c, int x, int y, int cw, const heat_style *s)
{
    double v = h->val[(size_t)row * h->ncols + c];
    fprintf(o, "<rect x='%d' y='%d' width='%d' height='13' fill='", x, y, cw - 1);
    color(o, v, s);
    fprintf(o, "'><title>layer %d, ", h->layer_of_row[row]);
    if (h->experts)
        fprintf(o, "expert %zu", c);
    else
        html_esc(o, h->cols[c]);
    if (isnan(v))
        fprintf(o, ": (%s)</title></rect>\n", s->absent);
    else
        fprintf(o, ": %s %.4g</title></rect>\n", s->what, v);
}

static void svg(FILE *o, const heat *h, const heat_style *s)
{
    int cw = h->experts ? 14 : 64, ch = 14, left = 70, top = h->experts ? 34 : 90;
    fprintf(o, "<svg width='%d' height='%d' font-size='11'>\n", left + (int)h->ncols * cw + 10,
            top + h->nrows * ch + 10);
    column_labels(o, h, left, top, cw);
    for (int r = 0; r < h->nrows; r++) {
        fprintf(o, "<text x='%d' y='%d' text-anchor='end'>layer %d</text>\n", left - 4, top + r * ch + 11,
                h->layer_of_row[r]);
        for (size_t c = 0; c < h->ncols; c++)
            cell(o, h, r, c, left + (int)c * cw, top + r * ch, cw, s);
    }
    fputs("</svg>\n", o);
}

static int section(FILE *o, const heat_value *v, size_t n, int experts, const heat_style *s)
{
    heat *h = malloc(sizeof *h);
    if (!h || build(h, v, n, experts)) {
        if (h)
            free(h->val);
        free(h);
        return -1;
    }
    if (h->nrows && h->ncols) {
        fprintf(o, "<h2>%s: layers x %s</h2>\n", s->title, experts ? "experts (worst of gate/up/down)" : "projections");
        svg(o, h, s);
    }
    if (h->left_out)
        fprintf(o, "<p>%zu module%s not drawn: a layer or expert index past %d, or more than %d projection "
                   "names (the table lists them)</p>\n",
                h->left_out, h->left_out == 1 ? "" : "s", HEAT_MAX_LAYER, HEAT_MAX_COLS);
    free(h->val);
    free(h);
    return 0;
}

int heat_sections(FILE *o, const heat_value *v, size_t n, const heat_style *s)
{
    return section(o, v, n, 0, s) || section(o, v, n, 1, s) ? -1 : 0;
}
