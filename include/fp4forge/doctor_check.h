/* What a family's doctor checks may use (src/families/NAME/NAME_doctor.c):
 * the run's context, the findings' and notes' writers, and the checks and
 * fixes every family shares. Below both the families and the doctor, so a
 * family never reaches into the doctor's own internals (doctor_int.h). */
#ifndef FF_DOCTOR_CHECK_H
#define FF_DOCTOR_CHECK_H

#include <jansson.h>

#include "checkpoint.h"
#include "doctor.h"
#include "family.h"

/* What a check or fix needs, loaded once per run. JSON files are edited in
 * memory by the fixes and written (after a backup) only when dirty. */
typedef struct dctx {
    const char *dir;
    const doctor_opts *o;
    json_t *config;
    json_t *text;            /* text_config or config itself (borrowed) */
    ckpt ck;
    int has_ck;
    char ck_why[1100];       /* why the tensors could not be opened */
    const ff_family *fam;    /* NULL: a model_type no family claims */
    void *fam_state;         /* the family's own, from its doctor_open */
    json_t *tok;             /* tokenizer.json or NULL */
    json_t *tokcfg;          /* tokenizer_config.json or NULL */
    int tokcfg_lossy;        /* parsed with big ints as reals: never rewrite */
    int dirty_config, dirty_tok, dirty_tokcfg;
    int oom;                 /* a check ran out of memory: what it found says
                              * nothing about the folder (ff_err.oom) */
} dctx;

/* Checks and fixes every family shares (doctor_common.c). */
void doctor_check_aux(dctx *c, doctor_report *r);
void doctor_check_tokenizer(dctx *c, doctor_report *r);
int doctor_fix_aux(dctx *c, doctor_finding *f, ff_err *e);
int doctor_fix_template(dctx *c, doctor_finding *f, ff_err *e);
int doctor_fix_tokenizer(dctx *c, doctor_finding *f, ff_err *e);
#define DOCTOR_COMMON_CODES                                                  \
    {"AUX_PROCESSOR_MISSING", doctor_fix_aux},                               \
    {"AUX_PREPROCESSOR_MISSING", doctor_fix_aux},                            \
    {"AUX_CHAT_TEMPLATE_MISSING", doctor_fix_template},                      \
    {"TOKENIZER_TRUNCATION", doctor_fix_tokenizer},                          \
    {"TOKENIZER_PADDING", doctor_fix_tokenizer},                             \
    {"TOKENIZER_MAX_LENGTH", doctor_fix_tokenizer},                          \
    {"TENSORS_UNREADABLE", NULL}

void doctor_add(doctor_report *r, const char *code, const char *file, int layer,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void doctor_note(doctor_finding *f, int fixed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
