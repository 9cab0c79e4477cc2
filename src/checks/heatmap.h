/* The report pages' heatmaps (verify --html, diff --html): one value per
 * module, drawn as layers x projections and layers x experts (each expert
 * cell the worst of its projections), inline SVG. */
#ifndef FF_HEATMAP_H
#define FF_HEATMAP_H

#include <stddef.h>
#include <stdio.h>

typedef struct heat_value {
    const char *module;  /* "model.layers.3.mlp.experts.7.up_proj" */
    double value;        /* >= 0 */
} heat_value;

typedef struct heat_style {
    const char *title;   /* the value's name in headings: "Relative error" */
    const char *what;    /* and in tooltips: "relative error" */
    double limit;        /* linear: green at 0, red at limit, dark red past it */
    const char *absent;  /* a cell without a value: "not quantized" */
    int exact;           /* 1: green only at exactly 0, any other value red,
                          * darker the larger (a log scale up to limit) */
} heat_style;

/* Layer and expert indices past these are not drawn (a name can claim
 * layer 2147483647; the page stays the size of the model's real maps):
 * the page says how many modules were left out. */
#define HEAT_MAX_LAYER 4095
#define HEAT_MAX_EXPERT 4095

/* Writes both maps (each only when it has a cell) under <h2> headings;
 * -1 when out of memory (the page then has no map). */
int heat_sections(FILE *o, const heat_value *v, size_t n, const heat_style *s);

#endif
