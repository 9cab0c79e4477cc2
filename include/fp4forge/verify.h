/* verify: proves a quantized output is right, alone and against its source.
 * Each check has a stable name, a pass/fail and the items that failed; the
 * result is printed or returned as JSON, and the command exits 6 on a fail. */
#ifndef FF_VERIFY_H
#define FF_VERIFY_H

#include <jansson.h>
#include <stdio.h>

#include "ff_err.h"

typedef struct verify_opts {
    const char *against;     /* source checkpoint, or NULL */
    double max_rel;          /* per-tensor relative error ceiling */
    double min_snr;          /* per-tensor SNR floor, dB */
    double max_mean_rel;     /* mean relative error ceiling */
    int worst;               /* how many worst tensors to list */
    int threads;             /* <= 0: all cores (the figures do not depend on it) */
    int progress;            /* draw a progress bar on stderr */
    const struct ff_family *family; /* --family-file: the rules that classify the tensors, or NULL */
} verify_opts;

#define VERIFY_MAX_REL 0.25
#define VERIFY_MIN_SNR 12.0
#define VERIFY_MAX_MEAN_REL 0.16
#define VERIFY_WORST 5

/* Runs every check; returns FF_OK when it could run them (see the JSON's
 * "ok" for the verdict), another code when the folders cannot be read. */
int verify_run(const char *out_dir, const verify_opts *o, json_t **result, ff_err *e);
void verify_print(const json_t *result, FILE *out);
/* One self-contained HTML page of a verify result (inline SVG heatmaps of the
 * per-tensor relative error, failing checks first, a table); 0, or -1 when
 * memory or the write failed. */
int verify_write_html(const json_t *result, FILE *out);

#endif
