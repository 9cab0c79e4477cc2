/* fp4forge doctor DIR: report findings (exit 4), or --fix them with backups
 * and prove the result by checking again from disk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "commands.h"
#include "doctor.h"

static const cli_opt options[] = {
    {"--json", NULL, "print the report as one JSON object"},
    {"--fix", NULL, "repair what can be proven, backing up each changed FILE as FILE.bak-fp4forge-STAMP"},
    {"--aux-from", "CANONICAL_DIR", "copy missing processor / chat template files from this same-family checkpoint"},
    {"--schema", "legacy|per-layer", "convert the config schema, for families with two (legacy only when provably redundant)"},
    {NULL, NULL, NULL},
};

const cli_spec doctor_spec = {
    "doctor", "DIR",
    "Checks a checkpoint folder: the family's own config pitfalls (schema drift, missing\n"
    "attention fields, stale or conflicting keys), missing processor/chat-template files, baked-in tokenizer\n"
    "truncation and every tensor shape against config.json. Each finding has a stable code\n"
    "(docs/doctor.md). Exit 0 clean (or all fixed), 4 findings remain, 1 bad input.",
    options, 1, 1, NULL,
};

static int parse_schema(const char *s, doctor_schema *out, ff_err *e)
{
    if (!s)
        *out = DOCTOR_SCHEMA_KEEP;
    else if (!strcmp(s, "legacy"))
        *out = DOCTOR_SCHEMA_LEGACY;
    else if (!strcmp(s, "per-layer"))
        *out = DOCTOR_SCHEMA_PER_LAYER;
    else
        return ff_fail(e, FF_EUSAGE, "--schema must be legacy or per-layer, not \"%s\"", s);
    return FF_OK;
}

/* --fix --json prints {"fix": report-with-notes, "after": re-check}. */
static void print_fixed(const doctor_report *fixed, const doctor_report *after, int json)
{
    if (!json) {
        doctor_print(fixed, 0, stdout);
        printf("re-check:\n");
        doctor_print(after, 0, stdout);
        return;
    }
    json_t *j = json_pack("{s:o, s:o}", "fix", doctor_report_json(fixed), "after", doctor_report_json(after));
    char *s = json_dumps(j, JSON_INDENT(2));
    printf("%s\n", s);
    free(s);
    json_decref(j);
}

static int run(const char *dir, const doctor_opts *o, int fix, int json, ff_err *e)
{
    doctor_report r, after;
    int rc = doctor_check(dir, o, &r, e);
    if (rc == FF_OK && fix && r.n) {
        rc = doctor_fix(dir, o, &r, e);
        if (rc == FF_OK)
            rc = doctor_check(dir, o, &after, e);
        if (rc == FF_OK) {
            print_fixed(&r, &after, json);
            rc = after.n ? FF_EDOCTOR : FF_OK;
            doctor_report_free(&after);
        }
    } else if (rc == FF_OK) {
        doctor_print(&r, json, stdout);
        rc = r.n ? FF_EDOCTOR : FF_OK;
    }
    doctor_report_free(&r);
    return rc;
}

int cmd_doctor(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    doctor_opts o = {.aux_from = cli_get(&a, "--aux-from")};
    if (parse_schema(cli_get(&a, "--schema"), &o.schema, &e))
        return cmd_report("doctor", &e);
    int rc = run(a.pos[0], &o, cli_flag(&a, "--fix"), cli_flag(&a, "--json"), &e);
    if (rc == FF_EDOCTOR)
        return FF_EDOCTOR;  /* the report already says what remains */
    return rc ? cmd_report("doctor", &e) : 0;
}
