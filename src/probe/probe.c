#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "curl_api.h"
#include "fsutil.h"

/* Short greedy requests: enough tokens to see a loop, few enough to be quick. */
#define PROBE_PROMPT "The quick brown fox jumps over the lazy dog. A seat is probed before"
#define PROBE_CHAT_PROMPT "Name three cities and say something about the weather."
#define BACKOFF_FIRST_S 0.5
#define BACKOFF_MAX_S 5.0
#define IMAGE_MAX_BYTES (20u << 20)

static const char *const TOOL_NAMES[] = {"get_weather", NULL};

typedef struct http_reply {
    long status;       /* 0 = no HTTP reply */
    char *body;
    size_t len;
    int transport;     /* PV_OK, PV_TIMEOUT or PV_UNREACHABLE */
    char err[256];     /* curl's words when transport != PV_OK */
    double seconds;
} http_reply;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    http_reply *r = ud;
    size_t add = sz * n;
    char *nb = realloc(r->body, r->len + add + 1);
    if (!nb)
        return 0; /* curl reports CURLE_WRITE_ERROR */
    memcpy(nb + r->len, p, add);
    r->body = nb;
    r->len += add;
    r->body[r->len] = 0;
    return add;
}

/* The server root without a trailing "/" or "/v1", so paths can be appended. */
static char *root_url(const char *base)
{
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    if (n >= 3 && strncmp(base + n - 3, "/v1", 3) == 0)
        n -= 3;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, base, n);
        s[n] = 0;
    }
    return s;
}

/* One HTTP request; body == NULL means GET. Never fails as a function: the
 * outcome (transport error, status, body) is in *r for the classifier. */
static void http_do(const curl_api *curl, const probe_opts *o, const char *path, const char *body, http_reply *r)
{
    memset(r, 0, sizeof *r);
    char *root = root_url(o->base_url);
    size_t ulen = (root ? strlen(root) : 0) + strlen(path) + 1;
    char *url = malloc(ulen);
    CURL *c = curl->easy_init();
    if (!root || !url || !c) {
        r->transport = PV_UNREACHABLE;
        snprintf(r->err, sizeof r->err, "out of memory");
        goto done;
    }
    snprintf(url, ulen, "%s%s", root, path);
    struct curl_slist *h = curl->slist_append(NULL, "Content-Type: application/json");
    char auth[1100];
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        h = curl->slist_append(h, auth);
    }
    curl->easy_setopt(c, CURLOPT_URL, url);
    curl->easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl->easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
    curl->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(o->timeout_s * 1000));
    curl->easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl->easy_setopt(c, CURLOPT_WRITEDATA, r);
    if (body)
        curl->easy_setopt(c, CURLOPT_POSTFIELDS, body);
    double t0 = now_s();
    CURLcode rc = curl->easy_perform(c);
    r->seconds = now_s() - t0;
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        r->transport = PV_TIMEOUT;
        snprintf(r->err, sizeof r->err, "no reply within %gs", o->timeout_s);
    } else if (rc != CURLE_OK) {
        r->transport = PV_UNREACHABLE;
        snprintf(r->err, sizeof r->err, "%s", curl->easy_strerror(rc));
    } else {
        curl->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    }
    curl->slist_free_all(h);
done:
    if (c)
        curl->easy_cleanup(c);
    free(url);
    free(root);
}

/* --record: DIR/<name>.http = "HTTP <status>\n" + body, the exact bytes the
 * unit tests replay through the classifier. Best effort by design: a probe
 * must not fail because its diagnostics could not be written. */
static void record(const probe_opts *o, const char *name, const http_reply *r)
{
    if (!o->record_dir || r->transport != PV_OK)
        return;
    char file[64];
    snprintf(file, sizeof file, "%s.http", name);
    char *p = fs_join(o->record_dir, file);
    FILE *f = p ? fopen(p, "wb") : NULL;
    if (f) {
        fprintf(f, "HTTP %ld\n", r->status);
        if (r->len)
            fwrite(r->body, 1, r->len, f);
        fclose(f);
    }
    free(p);
}

static probe_check *add_check(probe_report *rep, const char *name)
{
    probe_check *c = &rep->checks[rep->nchecks++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

/* Fills a check from a reply that never got an HTTP status. */
static int transport_fail(probe_check *c, const http_reply *r)
{
    c->verdict = r->transport;
    c->seconds = r->seconds;
    snprintf(c->detail, sizeof c->detail, "%s", r->err);
    return c->verdict;
}

/* Asks path until it answers with something other than "loading": connection
 * refused, timeouts and 502/503/504 are retried with doubling back-off inside
 * the shared --wait budget, so a starting server is waited for but a dead one
 * is never waited on for ever. */
static void wait_ready(const curl_api *curl, const probe_opts *o, probe_report *rep, const char *path, double deadline,
                       http_reply *r)
{
    double backoff = BACKOFF_FIRST_S, t0 = now_s();
    for (;;) {
        http_do(curl, o, path, NULL, r);
        rep->attempts++;
        int loading = r->transport != PV_OK || probe_status_is_loading(r->status);
        double left = deadline - now_s();
        if (!loading || left <= 0)
            break;
        free(r->body);
        sleep_s(backoff < left ? backoff : left);
        backoff = backoff * 2 < BACKOFF_MAX_S ? backoff * 2 : BACKOFF_MAX_S;
    }
    rep->waited_s += now_s() - t0;
}

/* /health: 200 is ready, 404 means the server has none (not an error). */
static int check_health(const curl_api *curl, const probe_opts *o, probe_report *rep, double deadline)
{
    probe_check *c = add_check(rep, "health");
    http_reply r;
    int before = rep->attempts;
    wait_ready(curl, o, rep, "/health", deadline, &r);
    record(o, "health", &r);
    int tries = rep->attempts - before;
    if (r.transport != PV_OK) {
        transport_fail(c, &r);
        c->verdict = PV_UNREACHABLE; /* a timeout here means "never came up" */
        snprintf(c->detail + strlen(c->detail), sizeof c->detail - strlen(c->detail),
                 " (gave up after %d attempt(s), %.1fs)", tries, rep->waited_s);
        return c->verdict;
    }
    c->http_status = r.status;
    c->seconds = r.seconds;
    if (r.status == 200 || r.status == 404)
        snprintf(c->detail, sizeof c->detail, "%s after %d attempt(s), %.1fs",
                 r.status == 200 ? "ready" : "no /health endpoint (404), going on", tries, rep->waited_s);
    else {
        c->verdict = probe_status_is_loading(r.status) ? PV_UNREACHABLE : PV_BAD_RESPONSE;
        snprintf(c->detail, sizeof c->detail, "HTTP %ld (gave up after %d attempt(s), %.1fs)", r.status,
                 tries, rep->waited_s);
    }
    free(r.body);
    return c->verdict;
}

static int check_models(const curl_api *curl, const probe_opts *o, probe_report *rep, double deadline)
{
    probe_check *c = add_check(rep, "models");
    http_reply r;
    wait_ready(curl, o, rep, "/v1/models", deadline, &r);
    record(o, "models", &r);
    if (r.transport != PV_OK)
        return transport_fail(c, &r);
    probe_models_info mi;
    c->http_status = r.status;
    c->seconds = r.seconds;
    c->verdict = probe_classify_models(r.status, r.body, r.len, o->model, &mi, c->detail,
                                       sizeof c->detail);
    snprintf(rep->model, sizeof rep->model, "%s", mi.model);
    rep->max_model_len = mi.max_model_len;
    free(r.body);
    return c->verdict;
}

/* The request bodies, built as JSON so names and prompts are escaped. */
static json_t *gen_request(const probe_opts *o, const probe_report *rep)
{
    return json_pack("{s:s, s:i, s:f, s:b}", "model", rep->model, "max_tokens", o->max_tokens,
                     "temperature", 0.0, "stream", 0);
}

static json_t *user_message(json_t *content)
{
    return json_pack("[{s:s, s:o}]", "role", "user", "content", content);
}

static json_t *tools_spec(void)
{
    return json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}]", "type", "function",
                     "function", "name", TOOL_NAMES[0], "description",
                     "Current weather for a city", "parameters", "type", "object", "properties",
                     "city", "type", "string", "required", "city");
}

/* base64 of a file, as a data: URL the chat API accepts for image_url. */
static char *image_data_url(const char *path, ff_err *e)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    FILE *f = fopen(path, "rb");
    if (!f)
        return ff_fail(e, FF_EIO, "%s: %s", path, strerror(errno)), NULL;
    unsigned char *buf = malloc(IMAGE_MAX_BYTES);
    size_t n = buf ? fread(buf, 1, IMAGE_MAX_BYTES, f) : 0;
    int too_big = buf && n == IMAGE_MAX_BYTES && fgetc(f) != EOF;
    fclose(f);
    if (!buf || n == 0 || too_big) {
        free(buf);
        return ff_fail(e, FF_EIO, "%s: %s", path, too_big ? "image over 20 MiB" : "empty or unreadable"),
               NULL;
    }
    const char *ext = strrchr(path, '.');
    const char *mime = ext && (!strcasecmp(ext, ".jpg") || !strcasecmp(ext, ".jpeg")) ? "image/jpeg"
                       : ext && !strcasecmp(ext, ".webp")                           ? "image/webp"
                       : ext && !strcasecmp(ext, ".gif")                            ? "image/gif"
                                                                                     : "image/png";
    size_t cap = strlen(mime) + 16 + 4 * ((n + 2) / 3) + 1, j;
    char *s = malloc(cap);
    if (s) {
        j = (size_t)snprintf(s, cap, "data:%s;base64,", mime);
        for (size_t i = 0; i < n; i += 3) {
            unsigned v = (unsigned)buf[i] << 16 | (i + 1 < n ? buf[i + 1] << 8 : 0) |
                         (i + 2 < n ? buf[i + 2] : 0);
            s[j++] = b64[v >> 18 & 63];
            s[j++] = b64[v >> 12 & 63];
            s[j++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
            s[j++] = i + 2 < n ? b64[v & 63] : '=';
        }
        s[j] = 0;
    } else
        ff_oom(e, "out of memory");
    free(buf);
    return s;
}

/* Builds the request for one generation check; NULL + e on failure. */
static json_t *build_request(const probe_opts *o, const probe_report *rep, const char *name,
                             ff_err *e)
{
    json_t *req = gen_request(o, rep);
    if (!strcmp(name, "completions")) {
        json_object_set_new(req, "prompt", json_string(PROBE_PROMPT));
        json_object_set_new(req, "logprobs", json_integer(1));
        return req;
    }
    json_object_set_new(req, "logprobs", json_true());
    json_object_set_new(req, "top_logprobs", json_integer(1));
    if (!strcmp(name, "vision")) {
        char *url = image_data_url(o->vision_path, e);
        if (!url) {
            json_decref(req);
            return NULL;
        }
        json_t *content = json_pack("[{s:s, s:s}, {s:s, s:{s:s}}]", "type", "text", "text",
                                    "Describe this image in one sentence.", "type", "image_url",
                                    "image_url", "url", url);
        free(url);
        json_object_set_new(req, "messages", user_message(content));
        return req;
    }
    json_object_set_new(req, "messages",
                        user_message(json_string(!strcmp(name, "tools")
                                                     ? "What is the weather in Paris? Use the tool."
                                                     : PROBE_CHAT_PROMPT)));
    if (!strcmp(name, "tools")) {
        json_object_set_new(req, "tools", tools_spec());
        json_object_set_new(req, "tool_choice", json_string("auto"));
    }
    return req;
}

/* Sends one generation request and classifies the reply. The vision and tool
 * checks fold any failure into their own verdict, keeping the cause in the
 * detail, so a deploy script can tell "text works, images do not". */
static int check_gen(const curl_api *curl, const probe_opts *o, probe_report *rep, const char *name, ff_err *e)
{
    json_t *req = build_request(o, rep, name, e);
    if (!req)
        return -1;
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!body)
        return ff_oom(e, "out of memory"), -1;
    probe_check *c = add_check(rep, name);
    int is_comp = !strcmp(name, "completions");
    http_reply r;
    http_do(curl, o, is_comp ? "/v1/completions" : "/v1/chat/completions", body, &r);
    free(body);
    record(o, name, &r);
    if (r.transport != PV_OK)
        transport_fail(c, &r);
    else {
        probe_gen_info gi;
        probe_kind kind = is_comp ? PROBE_COMPLETION : !strcmp(name, "tools") ? PROBE_TOOLS : PROBE_CHAT;
        c->http_status = r.status;
        c->seconds = r.seconds;
        c->verdict = probe_classify_gen(kind, r.status, r.body, r.len, TOOL_NAMES, &gi, c->detail,
                                        sizeof c->detail);
        if (c->verdict == PV_OK && gi.text[0]) {
            size_t l = strlen(c->detail);
            snprintf(c->detail + l, sizeof c->detail - l, ", text \"%.60s\"", gi.text);
        }
    }
    free(r.body);
    int own = !strcmp(name, "vision") ? PV_VISION_FAILED : !strcmp(name, "tools") ? PV_TOOLS_FAILED : 0;
    if (own && c->verdict != PV_OK && c->verdict != own) {
        char cause[512];
        snprintf(cause, sizeof cause, "%s", c->detail);
        snprintf(c->detail, sizeof c->detail, "%s: %.480s", probe_verdict_name(c->verdict), cause);
        c->verdict = own;
    }
    return c->verdict;
}

/* Overall verdict: the first failing check, in the order they ran. */
static void settle(probe_report *rep)
{
    rep->verdict = PV_OK;
    for (int i = 0; i < rep->nchecks && !rep->verdict; i++)
        rep->verdict = rep->checks[i].verdict;
}

/* The checks in order; FF_OK however they end (the verdicts are in rep),
 * another code when a request could not even be built. */
static int run_checks(const curl_api *curl, const probe_opts *o, probe_report *rep, ff_err *e)
{
    double deadline = now_s() + (o->wait_s > 0 ? o->wait_s : 0);
    /* Without a live, listed model nothing after would mean anything. */
    if (check_health(curl, o, rep, deadline) || check_models(curl, o, rep, deadline)) {
        settle(rep);
        return FF_OK;
    }
    const char *gens[] = {"completions", "chat", o->vision_path ? "vision" : NULL,
                          o->tools ? "tools" : NULL};
    for (size_t i = 0; i < sizeof gens / sizeof *gens; i++)
        if (gens[i] && check_gen(curl, o, rep, gens[i], e) < 0)
            return e->code;
    settle(rep);
    return FF_OK;
}

int probe_run(const probe_opts *o, probe_report *rep, ff_err *e)
{
    memset(rep, 0, sizeof *rep);
    rep->max_model_len = -1;
    if (!o->base_url || strncmp(o->base_url, "http", 4) != 0)
        return ff_fail(e, FF_EUSAGE, "BASE_URL must start with http:// or https://");
    if (o->timeout_s <= 0 || o->max_tokens < 1)
        return ff_fail(e, FF_EUSAGE, "--timeout and --max-tokens must be positive");
    /* curl counts in whole milliseconds and reads 0 as "no limit": a
     * shorter timeout would become none and hang on a silent server */
    if (o->timeout_s < 0.001)
        return ff_fail(e, FF_EUSAGE, "--timeout %g: below 1 ms, the shortest limit curl keeps", o->timeout_s);
    if (o->record_dir && fs_mkdir_p(o->record_dir, e))
        return e->code;
    curl_api curl;
    if (curl_api_open(&curl, "libcurl.so.4", e))
        return e->code;
    int rc = run_checks(&curl, o, rep, e);
    curl_api_close(&curl);
    return rc;
}

/* jansson refuses strings that are not UTF-8, and a reply snippet cut at a
 * byte limit (or a model's raw bytes) may not be: replace what is not. */
static json_t *utf8_string(const char *s)
{
    char buf[sizeof ((probe_check *)0)->detail];
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && j + 1 < sizeof buf;) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        int ok = n > 0 && j + (size_t)n < sizeof buf;
        for (int k = 1; ok && k < n; k++)
            ok = (p[k] & 0xC0) == 0x80;
        json_t *probe = ok ? json_stringn((const char *)p, (size_t)n) : NULL; /* overlongs too */
        ok = probe != NULL;
        json_decref(probe);
        if (!ok) {
            buf[j++] = '?';
            p++;
            continue;
        }
        memcpy(buf + j, p, (size_t)n);
        j += (size_t)n;
        p += n;
    }
    buf[j] = 0;
    return json_string(buf);
}

json_t *probe_report_json(const probe_opts *o, const probe_report *rep)
{
    json_t *checks = json_array();
    for (int i = 0; i < rep->nchecks; i++) {
        const probe_check *c = &rep->checks[i];
        json_array_append_new(checks,
                              json_pack("{s:s, s:s, s:i, s:I, s:f, s:o}", "name", c->name, "verdict",
                                        probe_verdict_name(c->verdict), "exit_code", c->verdict,
                                        "http_status", (json_int_t)c->http_status, "seconds",
                                        c->seconds, "detail", utf8_string(c->detail)));
    }
    json_t *mml = rep->max_model_len >= 0 ? json_integer(rep->max_model_len) : json_null();
    return json_pack("{s:s, s:i, s:s, s:s, s:o, s:{s:i, s:f}, s:o}", "verdict",
                     probe_verdict_name(rep->verdict), "exit_code", rep->verdict, "base_url",
                     o->base_url, "model", rep->model, "max_model_len", mml, "ready", "attempts",
                     rep->attempts, "waited_s", rep->waited_s, "checks", checks);
}
