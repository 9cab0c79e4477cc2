/* fp4forge probe: asks a served OpenAI-compatible endpoint (vLLM's API) the
 * few questions that tell a healthy seat from one serving NaN, before any
 * alias points at it. The network half lives here; the judgement of each
 * reply is probe_classify.h. */
#ifndef FF_PROBE_H
#define FF_PROBE_H

#include <jansson.h>

#include "ff_err.h"
#include "probe_classify.h"

typedef struct probe_opts {
    const char *base_url;    /* "http://127.0.0.1:8000" (a trailing / or /v1 is fine) */
    const char *model;       /* expected model; NULL = the first one listed */
    const char *api_key;     /* sent as a Bearer token; NULL = none */
    double timeout_s;        /* per request */
    double wait_s;           /* total budget for waiting while the server loads */
    int max_tokens;          /* per generation request */
    const char *vision_path; /* image file for the vision request; NULL = skip */
    int tools;               /* also send a tool-call request */
    const char *record_dir;  /* save every reply as DIR/<check>.http; NULL = no */
} probe_opts;

#define PROBE_MAX_CHECKS 8

typedef struct probe_check {
    char name[16];           /* "health", "models", "completions", "chat", ... */
    int verdict;             /* PV_* */
    long http_status;        /* 0 when no reply came */
    double seconds;
    char detail[512];
} probe_check;

typedef struct probe_report {
    probe_check checks[PROBE_MAX_CHECKS];
    int nchecks;
    int verdict;             /* the first failing check's, else PV_OK */
    char model[256];
    long long max_model_len; /* -1 when unknown */
    int attempts;            /* readiness requests made (1 = ready at once) */
    double waited_s;         /* time spent waiting for readiness */
} probe_report;

/* Runs every check in order and fills rep; stops after a failure that makes
 * the rest meaningless (unreachable, model missing). Returns FF_OK when the
 * probe ran (rep->verdict says how it went), or an ff_err code when it could
 * not (bad options, out of memory, unreadable image). */
int probe_run(const probe_opts *o, probe_report *rep, ff_err *e);

/* The report as one JSON object for deploy scripts (caller decrefs). */
json_t *probe_report_json(const probe_opts *o, const probe_report *rep);

#endif
