/* Doctor internals shared by doctor.c (report, fix orchestration, backups)
 * and doctor_rules.c (the checks and their fixes, one table). */
#ifndef FF_DOCTOR_INT_H
#define FF_DOCTOR_INT_H

#include <jansson.h>

#include "checkpoint.h"
#include "doctor.h"
#include "gemma4_config.h"

/* What a check or fix needs, loaded once per run. JSON files are edited in
 * memory by the fixes and written (after a backup) only when dirty. */
typedef struct dctx {
    const char *dir;
    const doctor_opts *o;
    json_t *config;
    json_t *text;            /* text_config or config itself (borrowed) */
    int is_g4, g4_ok;
    g4_geometry *g;          /* valid when g4_ok */
    char g4_why[2200];        /* why g4_read failed */
    ckpt ck;
    int has_ck;
    const char *prefix;      /* "model.language_model." or "model." */
    json_t *tok;             /* tokenizer.json or NULL */
    json_t *tokcfg;          /* tokenizer_config.json or NULL */
    int tokcfg_lossy;        /* parsed with big ints as reals: never rewrite */
    int dirty_config, dirty_tok, dirty_tokcfg;
} dctx;

/* One check: adds findings to r. Returns FF_OK or an I/O error. */
typedef void (*doctor_check_fn)(dctx *c, doctor_report *r);
/* One fix for one finding: edits c's JSON (or copies files) and sets
 * f->fixed or f->refused with f->note. Returns FF_OK unless I/O failed. */
typedef int (*doctor_fix_fn)(dctx *c, doctor_finding *f, ff_err *e);

typedef struct doctor_code {
    const char *code;
    doctor_fix_fn fix;       /* NULL: nothing to repair in place (a broken upload) */
} doctor_code;

extern const doctor_check_fn doctor_checks[];
extern const doctor_code doctor_codes[];

void doctor_add(doctor_report *r, const char *code, const char *file, int layer,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void doctor_note(doctor_finding *f, int fixed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int dctx_open(dctx *c, const char *dir, const doctor_opts *o, ff_err *e);
void dctx_close(dctx *c);

#endif
