/* fp4forge probe BASE_URL: gate a served model before any alias points at it.
 * Prints one line per check and one verdict line; the exit status is the
 * verdict's code (docs/probe.md), so a deploy script can branch on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "commands.h"
#include "probe.h"

static const cli_opt options[] = {
    {"--model", "NAME", "expected model id in /v1/models (default: the first one listed)"},
    {"--api-key-env", "VAR", "send the value of environment variable VAR as the Bearer token"},
    {"--timeout", "S", "per-request time limit in seconds (default 30)"},
    {"--wait", "S", "wait up to S seconds, with back-off, while the server is loading (default 60)"},
    {"--max-tokens", "N", "tokens per generation request (default 8)"},
    {"--vision", "IMAGE", "also send a chat request with this image (verdict VISION_FAILED)"},
    {"--tools", NULL, "also send a tool-call request (verdict TOOLS_FAILED)"},
    {"--record", "DIR", "save every reply as DIR/<check>.http (status line + body)"},
    {"--json", NULL, "print the report as one JSON object instead of text"},
    {NULL, NULL, NULL},
};

const cli_spec probe_spec = {
    "probe", "BASE_URL",
    "Checks an OpenAI-compatible server (vLLM) before traffic moves to it: /health, "
    "/v1/models lists the model, greedy /v1/completions and /v1/chat/completions with "
    "logprobs are finite and non-empty and not one repeated token. Exit status 0 when "
    "healthy, else the failing verdict's code (10 UNREACHABLE .. 19 BAD_RESPONSE).",
    options, 1, 1, NULL,
};

/* A non-negative number option, bounded to a day (seconds) or a million
 * (tokens): past that a typo, not a wish. */
static int num_opt(const cli_args *a, const char *name, double dflt, double *out, ff_err *e)
{
    *out = dflt;
    return cli_real(a, name, 0, 1e6, out, e);
}

static int fill_opts(const cli_args *a, probe_opts *o, ff_err *e)
{
    double max_tokens;
    memset(o, 0, sizeof *o);
    o->base_url = a->pos[0];
    o->model = cli_get(a, "--model");
    o->vision_path = cli_get(a, "--vision");
    o->record_dir = cli_get(a, "--record");
    o->tools = cli_flag(a, "--tools");
    if (num_opt(a, "--timeout", 30, &o->timeout_s, e) || num_opt(a, "--wait", 60, &o->wait_s, e) ||
        num_opt(a, "--max-tokens", 8, &max_tokens, e))
        return e->code;
    o->max_tokens = (int)max_tokens;
    const char *var = cli_get(a, "--api-key-env");
    if (var) {
        o->api_key = getenv(var);
        if (!o->api_key || !*o->api_key)
            return ff_fail(e, FF_EUSAGE, "--api-key-env %s: variable is unset or empty", var);
    }
    return FF_OK;
}

static void print_text(const probe_opts *o, const probe_report *rep)
{
    for (int i = 0; i < rep->nchecks; i++) {
        const probe_check *c = &rep->checks[i];
        printf("  %-12s %-16s %6.2fs  %s\n", c->name, probe_verdict_name(c->verdict), c->seconds,
               c->detail);
    }
    printf("probe %s: %s (exit %d) model=%s max_model_len=%lld ready_attempts=%d waited=%.1fs\n",
           o->base_url, probe_verdict_name(rep->verdict), rep->verdict,
           rep->model[0] ? rep->model : "-", rep->max_model_len, rep->attempts, rep->waited_s);
}

int cmd_probe(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    probe_opts o;
    if (fill_opts(&a, &o, &e))
        return cmd_report("probe", &e);
    probe_report rep;
    int rc = probe_run(&o, &rep, &e);
    if (rc == FF_OK) {
        if (cli_flag(&a, "--json")) {
            json_t *j = probe_report_json(&o, &rep);
            char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
            if (s)
                printf("%s\n", s);
            free(s);
            json_decref(j);
        } else
            print_text(&o, &rep);
        rc = rep.verdict;
    } else
        rc = cmd_report("probe", &e);
    return rc;
}
