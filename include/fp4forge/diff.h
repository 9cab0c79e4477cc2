/* diff: two checkpoints compared family by family. It refuses (exit 5) when
 * their architecture classes differ: a dense control cannot show what is
 * wrong in a MoE output (its routers, its experts), so its "no difference"
 * would prove nothing. */
#ifndef FF_DIFF_H
#define FF_DIFF_H

#include <jansson.h>
#include <stdio.h>

#include "ff_err.h"

/* Returns FF_OK with *result filled ("same" says the verdict), FF_ECLASS
 * (result still filled) when the classes differ and !allow_class_mismatch.
 * values: also compare what every tensor both hold with one dtype and shape
 * contains, byte for byte (a float tensor's relative difference too); any
 * difference makes the verdict DIFFERENT. */
int diff_run(const char *a, const char *b, int allow_class_mismatch, int values, json_t **result, ff_err *e);
void diff_print(const json_t *result, FILE *out);
/* The comparison as one self-contained HTML page; 0, or -1 when the write failed. */
int diff_write_html(const json_t *result, FILE *out);

#endif
