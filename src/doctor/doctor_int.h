/* Doctor internals shared by doctor.c (report, fix orchestration, backups)
 * and doctor_rules.c (the checks and their fixes, one table). */
#ifndef FF_DOCTOR_INT_H
#define FF_DOCTOR_INT_H

#include <jansson.h>

#include "doctor_check.h"

/* For a checkpoint no family claims, or a family without its own table. */
extern const ff_doctor_check doctor_default_checks[];
extern const ff_doctor_code doctor_default_codes[];

int dctx_open(dctx *c, const char *dir, const doctor_opts *o, ff_err *e);
void dctx_close(dctx *c);

#endif
