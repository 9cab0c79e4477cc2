/* The probe's classifier on replies recorded from a real vLLM (CPU build,
 * tiny Gemma-4) by `fp4forge probe --record`: healthy, NaN-planted, and the
 * failure shapes around them. No network: the bytes are replayed from
 * tests/data/probe/ (each file: "HTTP <status>\n" + body). */
#include <math.h>

#include "probe_classify.h"
#include "unit.h"

#define DATA "tests/data/probe/"

typedef struct recorded {
    long status;
    char *body;
    size_t len;
} recorded;

/* Loads a recording; aborts the test binary if it is missing, since every
 * later CHECK would be meaningless. */
static recorded load(const char *name)
{
    recorded r = {0};
    char path[512];
    snprintf(path, sizeof path, DATA "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "missing %s (run from the repository root)\n", path);
        exit(1);
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *nl = strchr(buf, '\n');
    if (sscanf(buf, "HTTP %ld", &r.status) != 1 || !nl) {
        fprintf(stderr, "%s: no status line\n", path);
        exit(1);
    }
    r.body = nl + 1;
    r.len = n - (size_t)(r.body - buf);
    return r;
}

static int gen(probe_kind k, const char *name, probe_gen_info *gi, char *d, size_t dsz)
{
    static const char *const tools[] = {"get_weather", NULL};
    recorded r = load(name);
    return probe_classify_gen(k, r.status, r.body, r.len, tools, gi, d, dsz);
}

static void test_healthy_completion(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_COMPLETION, "healthy_completions.http", &gi, d, sizeof d), PV_OK);
    CHECK_EQ_INT(gi.ntokens, 8);
    CHECK(strcmp(gi.finish_reason, "length") == 0);
    CHECK(gi.min_logprob < 0 && gi.max_logprob <= 0 && isfinite(gi.min_logprob));
    CHECK(!gi.content_null);
}

static void test_healthy_chat(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_CHAT, "healthy_chat.http", &gi, d, sizeof d), PV_OK);
    CHECK_EQ_INT(gi.ntokens, 8);
    CHECK_EQ_INT(gi.completion_tokens, 8);
}

static void test_healthy_tools_no_call(void)
{
    probe_gen_info gi;
    char d[512];
    /* The random model never calls the tool; the request path must still work. */
    CHECK_EQ_INT(gen(PROBE_TOOLS, "healthy_tools.http", &gi, d, sizeof d), PV_OK);
    CHECK_EQ_INT(gi.ntool_calls, 0);
    CHECK(strstr(d, "no tool call") != NULL);
}

static void test_nan_http400_completion(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_COMPLETION, "nan_completions.http", &gi, d, sizeof d), PV_NAN_LOGPROBS);
    CHECK(strstr(d, "HTTP 400") != NULL);
    CHECK(strstr(d, "not JSON compliant") != NULL);
}

static void test_nan_http400_chat(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_CHAT, "nan_chat.http", &gi, d, sizeof d), PV_NAN_LOGPROBS);
}

/* The incident's own shape: without logprobs the NaN seat answers 200 with
 * empty content, the full token count and finish_reason=length. */
static void test_nan_without_logprobs_is_empty(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_COMPLETION, "nan_completions_nologprobs.http", &gi, d, sizeof d),
                 PV_EMPTY_GENERATION);
    CHECK_EQ_INT(gi.completion_tokens, 8);
    CHECK_EQ_INT(gen(PROBE_CHAT, "nan_chat_nologprobs.http", &gi, d, sizeof d), PV_EMPTY_GENERATION);
    CHECK(strstr(d, "finish_reason=length") != NULL);
}

static void test_degenerate_loop(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_COMPLETION, "loop_completions.http", &gi, d, sizeof d), PV_DEGENERATE);
    CHECK_EQ_INT(gen(PROBE_CHAT, "loop_chat.http", &gi, d, sizeof d), PV_DEGENERATE);
    CHECK(strstr(d, "same token") != NULL);
}

static void test_tools_without_parser(void)
{
    probe_gen_info gi;
    char d[512];
    /* vLLM refuses tool_choice=auto when started without a tool parser: the
     * classifier says BAD_RESPONSE; probe.c folds it into TOOLS_FAILED. */
    CHECK_EQ_INT(gen(PROBE_TOOLS, "tools_no_parser.http", &gi, d, sizeof d), PV_BAD_RESPONSE);
    CHECK(strstr(d, "enable-auto-tool-choice") != NULL);
}

static void test_vision_refused(void)
{
    probe_gen_info gi;
    char d[512];
    CHECK_EQ_INT(gen(PROBE_CHAT, "vision_language_model_only.http", &gi, d, sizeof d), PV_BAD_RESPONSE);
    CHECK(strstr(d, "HTTP 400") != NULL);
}

static void test_models(void)
{
    probe_models_info mi;
    char d[512];
    recorded r = load("healthy_models.http");
    CHECK_EQ_INT(probe_classify_models(r.status, r.body, r.len, "tiny-gemma4", &mi, d, sizeof d), PV_OK);
    CHECK_EQ_INT(mi.max_model_len, 512);
    CHECK(strcmp(mi.model, "tiny-gemma4") == 0);
    r = load("healthy_models.http");
    CHECK_EQ_INT(probe_classify_models(r.status, r.body, r.len, NULL, &mi, d, sizeof d), PV_OK);
    r = load("healthy_models.http");
    CHECK_EQ_INT(probe_classify_models(r.status, r.body, r.len, "gemma-prod", &mi, d, sizeof d),
                 PV_MODEL_MISSING);
    CHECK(strstr(d, "first is tiny-gemma4") != NULL);
}

/* Shapes no recording holds, each a few bytes edited from a real reply. */
static void test_synthetic_edges(void)
{
    probe_gen_info gi;
    char d[512];
    const char *bare_nan = "{\"choices\":[{\"text\":\"a\",\"logprobs\":{\"token_logprobs\":[NaN]}}]}";
    CHECK_EQ_INT(probe_classify_gen(PROBE_COMPLETION, 200, bare_nan, strlen(bare_nan), NULL, &gi, d,
                                    sizeof d), PV_NAN_LOGPROBS);
    const char *nul = "{\"choices\":[{\"text\":\"a b\",\"finish_reason\":\"stop\",\"logprobs\":"
                      "{\"tokens\":[\"a\",\" b\"],\"token_logprobs\":[-0.5,null]}}]}";
    CHECK_EQ_INT(probe_classify_gen(PROBE_COMPLETION, 200, nul, strlen(nul), NULL, &gi, d, sizeof d),
                 PV_NAN_LOGPROBS);
    const char *pos = "{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\",\"logprobs\":"
                      "{\"tokens\":[\"a\"],\"token_logprobs\":[3.5]}}]}";
    CHECK_EQ_INT(probe_classify_gen(PROBE_COMPLETION, 200, pos, strlen(pos), NULL, &gi, d, sizeof d),
                 PV_BAD_LOGPROBS);
    const char *null_content = "{\"choices\":[{\"message\":{\"content\":null},\"finish_reason\":\"length\"}],"
                               "\"usage\":{\"completion_tokens\":64}}";
    CHECK_EQ_INT(probe_classify_gen(PROBE_CHAT, 200, null_content, strlen(null_content), NULL, &gi, d,
                                    sizeof d), PV_EMPTY_GENERATION);
    CHECK(gi.content_null);
    const char *bad_call = "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"function\":"
                           "{\"name\":\"get_weather\",\"arguments\":\"{city:\"}}]},\"finish_reason\":\"tool_calls\"}]}";
    const char *const tools[] = {"get_weather", NULL};
    CHECK_EQ_INT(probe_classify_gen(PROBE_TOOLS, 200, bad_call, strlen(bad_call), tools, &gi, d, sizeof d),
                 PV_TOOLS_FAILED);
    const char *good_call = "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"function\":"
                            "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
                            "\"finish_reason\":\"tool_calls\"}]}";
    CHECK_EQ_INT(probe_classify_gen(PROBE_TOOLS, 200, good_call, strlen(good_call), tools, &gi, d,
                                    sizeof d), PV_OK);
    CHECK_EQ_INT(gi.ntool_calls, 1);
    CHECK_EQ_INT(probe_classify_gen(PROBE_CHAT, 200, "<html>", 6, NULL, &gi, d, sizeof d), PV_BAD_RESPONSE);
    CHECK_EQ_INT(probe_classify_gen(PROBE_CHAT, 500, "", 0, NULL, &gi, d, sizeof d), PV_BAD_RESPONSE);
    CHECK(probe_status_is_loading(503) && !probe_status_is_loading(200));
}

static void test_verdict_names_are_distinct_codes(void)
{
    CHECK(strcmp(probe_verdict_name(PV_NAN_LOGPROBS), "NAN_LOGPROBS") == 0);
    CHECK(strcmp(probe_verdict_name(PV_EMPTY_GENERATION), "EMPTY_GENERATION") == 0);
    for (int v = PV_UNREACHABLE; v <= PV_BAD_RESPONSE; v++)
        CHECK(strcmp(probe_verdict_name(v), "UNKNOWN") != 0);
    CHECK_EQ_INT(PV_UNREACHABLE, 10);
    CHECK_EQ_INT(PV_BAD_RESPONSE, 19);
}

int main(void)
{
    RUN(test_healthy_completion);
    RUN(test_healthy_chat);
    RUN(test_healthy_tools_no_call);
    RUN(test_nan_http400_completion);
    RUN(test_nan_http400_chat);
    RUN(test_nan_without_logprobs_is_empty);
    RUN(test_degenerate_loop);
    RUN(test_tools_without_parser);
    RUN(test_vision_refused);
    RUN(test_models);
    RUN(test_synthetic_edges);
    RUN(test_verdict_names_are_distinct_codes);
    return UNIT_END();
}
