/* quantize --fix must repair what doctor finds without writing into the
 * input: it builds a shadow folder beside the output (small files copied,
 * shards symlinked), lets doctor fix the shadow, and quantizes from there. */
#ifndef FF_DOCTOR_SHADOW_H
#define FF_DOCTOR_SHADOW_H

#include <stdio.h>

#include "ff_err.h"

typedef struct doctor_input {
    const char *dir;     /* the folder to quantize from: the input or the shadow */
    char *shadow;        /* owned; removed by doctor_input_done */
} doctor_input;

/* Checks in_dir. Clean: d->dir = in_dir. Findings without `fix`: FF_EDOCTOR
 * with the report on `out`. With `fix`: a fixed shadow (FF_EDOCTOR if doctor
 * cannot prove every fix). */
int doctor_input_prepare(doctor_input *d, const char *in_dir, const char *out_dir, int fix,
                         const char *aux_from, FILE *out, ff_err *e);
void doctor_input_done(doctor_input *d);

#endif
