/* The probe's judgement, kept apart from the network: each function takes an
 * HTTP status and a response body exactly as a server sent them and names
 * what is wrong, so the classifier is unit-tested on recorded real responses. */
#ifndef FF_PROBE_CLASSIFY_H
#define FF_PROBE_CLASSIFY_H

#include <stddef.h>

/* Verdicts double as exit codes (docs/probe.md, "Exit codes"); 10+ so they
 * never collide with the codes the other commands use (ff_err.h). */
enum {
    PV_OK = 0,
    PV_UNREACHABLE = 10,     /* no answer, or never ready within --wait */
    PV_MODEL_MISSING = 11,   /* /v1/models does not list the expected model */
    PV_NAN_LOGPROBS = 12,    /* non-finite logprob, or HTTP 400 naming NaN/inf */
    PV_EMPTY_GENERATION = 13,/* content null/empty while finish_reason=length */
    PV_DEGENERATE = 14,      /* the reply is one token repeated (run >= 4, >= 60%) */
    PV_TIMEOUT = 15,         /* a request ran past --timeout */
    PV_VISION_FAILED = 16,   /* the image request failed (detail says how) */
    PV_TOOLS_FAILED = 17,    /* the tool-call request failed (detail says how) */
    PV_BAD_LOGPROBS = 18,    /* finite but absurd logprob (> 0, or < -1e4) */
    PV_BAD_RESPONSE = 19,    /* other HTTP error or a body not in the API's shape */
};

/* Name as printed on the verdict line ("NAN_LOGPROBS"); "UNKNOWN" otherwise. */
const char *probe_verdict_name(int verdict);

/* What the generation requests we send look like: they differ in where the
 * text and the logprobs live in the reply. */
typedef enum {
    PROBE_COMPLETION,   /* /v1/completions: choices[0].text, logprobs.token_logprobs */
    PROBE_CHAT,         /* /v1/chat/completions: message.content, logprobs.content[] */
    PROBE_TOOLS,        /* chat with tools: tool_calls[] must be well formed */
} probe_kind;

#define PROBE_MAX_TOKENS_SEEN 256

typedef struct probe_gen_info {
    char finish_reason[32];
    char text[256];        /* the start of the generated text, for the report */
    int content_null;      /* the content field was JSON null or missing */
    int ntokens;           /* tokens with a logprob entry */
    int completion_tokens; /* usage.completion_tokens, -1 if absent */
    double min_logprob, max_logprob;
    int longest_run;       /* most consecutive repeats of one token */
    int ntool_calls;
    char tool_name[64];
} probe_gen_info;

/* Judges one generation reply. Returns a PV_* verdict and writes a one-line
 * reason into detail (always, also for PV_OK). tool_names (NULL-terminated,
 * only for PROBE_TOOLS) are the functions we offered. */
int probe_classify_gen(probe_kind kind, long status, const char *body, size_t len,
                       const char *const *tool_names, probe_gen_info *info,
                       char *detail, size_t detail_sz);

typedef struct probe_models_info {
    char model[256];       /* the model found (want, or the first listed) */
    long long max_model_len; /* -1 when the server does not report it */
    int nmodels;
} probe_models_info;

/* Judges a /v1/models reply: want (may be NULL = take the first listed) must
 * be one of data[].id (or a data[].root, the name it was loaded from). */
int probe_classify_models(long status, const char *body, size_t len, const char *want,
                          probe_models_info *info, char *detail, size_t detail_sz);

/* Whether an HTTP reply means "still loading, ask again later" (503, or a
 * 404/connection failure on /health is handled by the caller). */
int probe_status_is_loading(long status);

#endif
