#include "probe_classify.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

/* A logprob is a log of a probability: above 0 (plus rounding) or below this
 * floor no sane server sends one for a token it actually sampled. */
#define LOGPROB_MAX 1e-3
#define LOGPROB_FLOOR (-1e4)
/* A loop is a run of one token at least this long and covering at least this
 * share of the reply; fewer tokens cannot show a loop with any confidence. */
#define DEGENERATE_MIN_TOKENS 4
#define DEGENERATE_SHARE_PCT 60

const char *probe_verdict_name(int v)
{
    switch (v) {
    case PV_OK: return "OK";
    case PV_UNREACHABLE: return "UNREACHABLE";
    case PV_MODEL_MISSING: return "MODEL_MISSING";
    case PV_NAN_LOGPROBS: return "NAN_LOGPROBS";
    case PV_EMPTY_GENERATION: return "EMPTY_GENERATION";
    case PV_DEGENERATE: return "DEGENERATE";
    case PV_TIMEOUT: return "TIMEOUT";
    case PV_VISION_FAILED: return "VISION_FAILED";
    case PV_TOOLS_FAILED: return "TOOLS_FAILED";
    case PV_BAD_LOGPROBS: return "BAD_LOGPROBS";
    case PV_BAD_RESPONSE: return "BAD_RESPONSE";
    }
    return "UNKNOWN";
}

int probe_status_is_loading(long status)
{
    /* vLLM answers 503 while the engine starts; some proxies say 502/504. */
    return status == 502 || status == 503 || status == 504;
}

/* Writes the reason and returns the verdict, like ff_fail. */
__attribute__((format(printf, 4, 5)))
static int verdict(int v, char *detail, size_t sz, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sz, fmt, ap);
    va_end(ap);
    return v;
}

/* Case-insensitive substring search: error texts vary in capitalisation. */
static int has_word(const char *hay, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++) {
        size_t k = 0;
        while (k < n && tolower((unsigned char)hay[i + k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

/* Copies a snippet of s into a fixed buffer on one line, for reports. */
static void snippet(char *dst, size_t sz, const char *s, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 1 < sz; i++)
        dst[j++] = (s[i] == '\n' || s[i] == '\r' || s[i] == '\t') ? ' ' : s[i];
    dst[j] = 0;
}

/* The message a server put in its error body (OpenAI shape: error.message,
 * vLLM sometimes plain message / detail), or the raw body's start. */
static void error_text(const char *body, size_t len, char *dst, size_t sz)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *m = NULL;
    if (j) {
        json_t *err = json_object_get(j, "error");
        if (json_is_object(err))
            m = json_string_value(json_object_get(err, "message"));
        else if (json_is_string(err))
            m = json_string_value(err);
        if (!m)
            m = json_string_value(json_object_get(j, "message"));
        if (!m)
            m = json_string_value(json_object_get(j, "detail"));
    }
    if (m)
        snippet(dst, sz, m, strlen(m));
    else
        snippet(dst, sz, body, len);
    json_decref(j);
}

/* The tell-tale of NaN served through a JSON API: Python's json refuses it
 * ("Out of range float values are not JSON compliant: nan") and the server
 * turns that into an HTTP 400/500 with the sentence in the body. */
static int names_nonfinite(const char *body, size_t len)
{
    return has_word(body, len, "not JSON compliant") || has_word(body, len, "out of range float") ||
           has_word(body, len, ": nan") || has_word(body, len, ": inf") ||
           has_word(body, len, "-inf") || has_word(body, len, "non-finite");
}

/* A non-2xx reply: NaN if it says so, else the server's own message. */
static int classify_http_error(long status, const char *body, size_t len, char *detail, size_t sz)
{
    char msg[400];
    error_text(body, len, msg, sizeof msg);
    if (status >= 400 && status < 600 && names_nonfinite(body, len))
        return verdict(PV_NAN_LOGPROBS, detail, sz, "HTTP %ld naming non-finite floats: %s", status, msg);
    return verdict(PV_BAD_RESPONSE, detail, sz, "HTTP %ld: %s", status, msg);
}

/* Folds one logprob into the running range; returns a verdict when it is
 * non-finite (null stands for a NaN a server replaced) or absurd. */
static int check_logprob(const json_t *v, int idx, probe_gen_info *info, char *detail, size_t sz)
{
    if (json_is_null(v) || !json_is_number(v))
        return verdict(PV_NAN_LOGPROBS, detail, sz, "logprob of token %d is null (non-finite)", idx);
    double x = json_number_value(v);
    if (!isfinite(x))
        return verdict(PV_NAN_LOGPROBS, detail, sz, "logprob of token %d is non-finite", idx);
    if (x > LOGPROB_MAX || x < LOGPROB_FLOOR)
        return verdict(PV_BAD_LOGPROBS, detail, sz, "logprob of token %d is %g, outside [%g, 0]", idx,
                       x, LOGPROB_FLOOR);
    if (info->ntokens == 0 || x < info->min_logprob)
        info->min_logprob = x;
    if (info->ntokens == 0 || x > info->max_logprob)
        info->max_logprob = x;
    info->ntokens++;
    return PV_OK;
}

/* Longest run of one token repeated back to back. A broken seat loops: the
 * recorded loop seat answered " laz", "l", then " the" six times. */
typedef struct run_tracker {
    const char *prev;
    int cur, best;
    char best_tok[64];
} run_tracker;

static void track(run_tracker *t, const char *tok)
{
    /* An empty token text says nothing (vLLM's tool parser sends "" for
     * tokens it holds back), so it breaks a run rather than extending one. */
    if (!tok || !*tok) {
        t->prev = NULL;
        t->cur = 0;
        return;
    }
    t->cur = t->prev && strcmp(tok, t->prev) == 0 ? t->cur + 1 : 1;
    t->prev = tok;
    if (t->cur > t->best) {
        t->best = t->cur;
        snprintf(t->best_tok, sizeof t->best_tok, "%s", tok);
    }
}

/* /v1/completions: logprobs.tokens[] and logprobs.token_logprobs[]. */
static int scan_completion_logprobs(const json_t *lp, probe_gen_info *info, run_tracker *run,
                                    char *detail, size_t sz)
{
    const json_t *lps = json_object_get(lp, "token_logprobs");
    const json_t *toks = json_object_get(lp, "tokens");
    size_t i;
    const json_t *v;
    json_array_foreach(lps, i, v) {
        int r = check_logprob(v, (int)i, info, detail, sz);
        if (r)
            return r;
        track(run, json_string_value(json_array_get(toks, i)));
    }
    /* top_logprobs: a list of {token: logprob} objects, one per position. */
    const json_t *tops = json_object_get(lp, "top_logprobs");
    json_array_foreach(tops, i, v) {
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            if (json_is_null(x) || (json_is_number(x) && !isfinite(json_number_value(x))))
                return verdict(PV_NAN_LOGPROBS, detail, sz, "top logprob at %d is non-finite", (int)i);
        }
    }
    return PV_OK;
}

/* /v1/chat/completions: logprobs.content[] = {token, logprob, top_logprobs[]}. */
static int scan_chat_logprobs(const json_t *lp, probe_gen_info *info, run_tracker *run,
                              char *detail, size_t sz)
{
    const json_t *content = json_object_get(lp, "content");
    size_t i, k;
    const json_t *e, *t;
    json_array_foreach(content, i, e) {
        int r = check_logprob(json_object_get(e, "logprob"), (int)i, info, detail, sz);
        if (r)
            return r;
        track(run, json_string_value(json_object_get(e, "token")));
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t) {
            const json_t *x = json_object_get(t, "logprob");
            if (!json_is_number(x) || !isfinite(json_number_value(x)))
                return verdict(PV_NAN_LOGPROBS, detail, sz, "top logprob at %d is non-finite", (int)i);
        }
    }
    return PV_OK;
}

/* Only whitespace (or nothing): a reply a user would see as blank. */
static int is_blank(const char *s)
{
    for (; s && *s; s++)
        if (!isspace((unsigned char)*s))
            return 0;
    return 1;
}

/* tool_calls[] must name a function we offered, with JSON-object arguments. */
static int check_tool_calls(const json_t *calls, const char *const *names, probe_gen_info *info,
                            char *detail, size_t sz)
{
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        int offered = 0;
        for (int n = 0; name && names && names[n]; n++)
            offered |= strcmp(names[n], name) == 0;
        if (!offered)
            return verdict(PV_TOOLS_FAILED, detail, sz, "tool call %d names '%s', not an offered tool",
                           (int)i, name ? name : "(none)");
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        int ok = json_is_object(a);
        json_decref(a);
        if (!ok)
            return verdict(PV_TOOLS_FAILED, detail, sz, "tool call %d (%s): arguments are not a JSON object",
                           (int)i, name);
        if (i == 0)
            snprintf(info->tool_name, sizeof info->tool_name, "%s", name);
        info->ntool_calls++;
    }
    return PV_OK;
}

/* Text and finish_reason of choices[0], by request kind. */
static const char *choice_text(probe_kind kind, const json_t *choice, const json_t **msg)
{
    *msg = json_object_get(choice, "message");
    if (kind == PROBE_COMPLETION)
        return json_string_value(json_object_get(choice, "text"));
    return json_string_value(json_object_get(*msg, "content"));
}

/* Judges the parsed 200 reply once the NaN and HTTP paths are ruled out. */
static int classify_choice(probe_kind kind, const json_t *root, const char *const *tool_names,
                           probe_gen_info *info, char *detail, size_t sz)
{
    const json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    if (!json_is_object(choice))
        return verdict(PV_BAD_RESPONSE, detail, sz, "reply has no choices[0]");
    const json_t *msg;
    const char *text = choice_text(kind, choice, &msg);
    info->content_null = text == NULL;
    snippet(info->text, sizeof info->text, text ? text : "", text ? strlen(text) : 0);
    snprintf(info->finish_reason, sizeof info->finish_reason, "%s",
             json_string_value(json_object_get(choice, "finish_reason")) ?: "null");
    info->completion_tokens =
        (int)json_integer_value(json_object_get(json_object_get(root, "usage"), "completion_tokens"));
    if (!json_object_get(json_object_get(root, "usage"), "completion_tokens"))
        info->completion_tokens = -1;

    int r;
    run_tracker run = {0};
    const json_t *lp = json_object_get(choice, "logprobs");
    if (kind == PROBE_COMPLETION)
        r = scan_completion_logprobs(lp, info, &run, detail, sz);
    else
        r = scan_chat_logprobs(lp, info, &run, detail, sz);
    if (r)
        return r;

    const json_t *calls = json_object_get(msg, "tool_calls");
    if (kind == PROBE_TOOLS && json_array_size(calls) > 0) {
        r = check_tool_calls(calls, tool_names, info, detail, sz);
        if (r)
            return r;
        return verdict(PV_OK, detail, sz, "%d well-formed tool call(s), first %s()", info->ntool_calls,
                       info->tool_name);
    }
    if (is_blank(text) && strcmp(info->finish_reason, "length") == 0)
        return verdict(PV_EMPTY_GENERATION, detail, sz,
                       "content %s with finish_reason=length after %d tokens",
                       text ? "empty" : "null", info->completion_tokens);
    info->longest_run = run.best;
    if (run.best >= DEGENERATE_MIN_TOKENS && run.best * 100 >= info->ntokens * DEGENERATE_SHARE_PCT)
        return verdict(PV_DEGENERATE, detail, sz, "%d of %d tokens are the same token '%s' in a row",
                       run.best, info->ntokens, run.best_tok);
    if (info->ntokens == 0)
        return verdict(PV_OK, detail, sz, "finish_reason=%s, no logprobs returned", info->finish_reason);
    return verdict(PV_OK, detail, sz, "%d tokens, logprob in [%.3g, %.3g], finish_reason=%s%s",
                   info->ntokens, info->min_logprob, info->max_logprob, info->finish_reason,
                   kind == PROBE_TOOLS ? ", no tool call made" : "");
}

int probe_classify_gen(probe_kind kind, long status, const char *body, size_t len,
                       const char *const *tool_names, probe_gen_info *info, char *detail,
                       size_t sz)
{
    memset(info, 0, sizeof *info);
    info->completion_tokens = -1;
    if (!body)
        body = "", len = 0;
    if (status < 200 || status > 299)
        return classify_http_error(status, body, len, detail, sz);
    json_t *root = json_loadb(body, len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        /* Some servers write bare NaN/Infinity, which is not JSON at all. */
        if (has_word(body, len, "nan") || has_word(body, len, "infinity"))
            return verdict(PV_NAN_LOGPROBS, detail, sz, "reply is not JSON: it holds NaN/Infinity");
        return verdict(PV_BAD_RESPONSE, detail, sz, "reply is not a JSON object");
    }
    int r = classify_choice(kind, root, tool_names, info, detail, sz);
    json_decref(root);
    return r;
}

int probe_classify_models(long status, const char *body, size_t len, const char *want,
                          probe_models_info *info, char *detail, size_t sz)
{
    memset(info, 0, sizeof *info);
    info->max_model_len = -1;
    if (!body)
        body = "", len = 0;
    if (status < 200 || status > 299)
        return classify_http_error(status, body, len, detail, sz);
    json_t *root = json_loadb(body, len, 0, NULL);
    const json_t *data = json_object_get(root, "data");
    if (!json_is_array(data)) {
        json_decref(root);
        return verdict(PV_BAD_RESPONSE, detail, sz, "/v1/models reply has no data[]");
    }
    info->nmodels = (int)json_array_size(data);
    const json_t *hit = NULL, *m;
    size_t i;
    json_array_foreach(data, i, m) {
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *root_name = json_string_value(json_object_get(m, "root"));
        if (!want || (id && strcmp(id, want) == 0) || (root_name && strcmp(root_name, want) == 0)) {
            hit = m;
            break;
        }
    }
    int r;
    if (!hit) {
        const char *first = json_string_value(json_object_get(json_array_get(data, 0), "id"));
        r = verdict(PV_MODEL_MISSING, detail, sz, "'%s' not among %d served model(s)%s%s",
                    want ? want : "(any)", info->nmodels, first ? ", first is " : "", first ? first : "");
    } else {
        snprintf(info->model, sizeof info->model, "%s",
                 json_string_value(json_object_get(hit, "id")) ?: "");
        json_t *mml = json_object_get(hit, "max_model_len");
        if (json_is_integer(mml))
            info->max_model_len = json_integer_value(mml);
        r = verdict(PV_OK, detail, sz, "%s listed, max_model_len %lld", info->model, info->max_model_len);
    }
    json_decref(root);
    return r;
}
