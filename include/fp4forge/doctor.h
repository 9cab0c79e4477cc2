/* Checkpoint doctor: finds what makes a bf16 checkpoint load wrong or not at
 * all (config schema drift, missing attention fields, stale keys, missing
 * processor files, baked-in tokenizer truncation, tensors that contradict
 * config.json) and repairs what can be proven, backing up every file it
 * changes. Codes are stable: scripts and docs/doctor.md key on them. */
#ifndef FF_DOCTOR_H
#define FF_DOCTOR_H

#include <jansson.h>
#include <stdio.h>
#include <stddef.h>

#include "ff_err.h"

typedef enum doctor_schema {
    DOCTOR_SCHEMA_KEEP = 0,   /* no conversion asked */
    DOCTOR_SCHEMA_LEGACY,     /* the older flat schema, for families that have two */
    DOCTOR_SCHEMA_PER_LAYER,  /* the per-layer schema of transformers >= 5.15 */
} doctor_schema;

typedef struct doctor_opts {
    const char *aux_from;     /* canonical folder to copy missing aux files from, or NULL */
    doctor_schema schema;
    const char *stamp;        /* backup suffix time "YYYYMMDD-HHMMSS"; NULL = now (tests pin it) */
} doctor_opts;

#define DOCTOR_MSG 512

typedef struct doctor_finding {
    const char *code;         /* stable, e.g. "G4_KEQV_GLOBALS_MISSING" */
    char file[256];           /* the file it is about, relative to the folder */
    char msg[DOCTOR_MSG];     /* what is wrong and what it causes */
    int layer;                /* layer concerned, or -1 */
    int arg;                  /* rule-private: which table row raised it */
    int fixed;                /* set by doctor_fix */
    int refused;              /* doctor_fix tried and could not prove a fix */
    char note[DOCTOR_MSG];    /* what the fix did, or why it was refused */
} doctor_finding;

typedef struct doctor_report {
    char *dir;
    doctor_finding *f;
    size_t n, cap;
    size_t lost;              /* findings dropped for want of memory: the run fails */
    char **backups;           /* backup files written by doctor_fix */
    size_t nbackups;
} doctor_report;

/* Runs every check on dir and fills r (fresh; free with doctor_report_free).
 * Returns FF_OK when the checks ran, whatever they found; FF_EIO when dir is
 * not a checkpoint folder or a file cannot be parsed at all (r then holds
 * nothing). */
int doctor_check(const char *dir, const doctor_opts *o, doctor_report *r, ff_err *e);

/* Repairs the findings of a doctor_check report in place, marking each one
 * fixed or refused (with a note), writing DIR/FILE.bak-fp4forge-STAMP before
 * changing FILE. Returns FF_OK when it ran (check doctor_remaining), FF_EIO
 * when a write failed. Re-run doctor_check afterwards to prove the result. */
int doctor_fix(const char *dir, const doctor_opts *o, doctor_report *r, ff_err *e);

/* Findings neither fixed nor otherwise resolved. */
size_t doctor_remaining(const doctor_report *r);

/* Text (one line per finding: "CODE file: message") or one JSON object. */
void doctor_print(const doctor_report *r, int json, FILE *out);

/* The JSON form doctor_print writes (caller decrefs). */
json_t *doctor_report_json(const doctor_report *r);

void doctor_report_free(doctor_report *r);

/* The quantize gate: check dir; when `fix`, repair and re-check. Returns
 * FF_OK when dir is clean afterwards, FF_EDOCTOR (e names the first finding,
 * the report is printed as text on `out` when out != NULL) when findings
 * remain, FF_EIO on bad input. */
int doctor_gate(const char *dir, int fix, const char *aux_from, FILE *out, ff_err *e);

#endif
