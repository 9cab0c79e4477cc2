/* The probe's reply classifier: an OpenAI-compatible server's reply body.
 * The first byte picks the endpoint kind and HTTP status; the rest is the body. */
#include "fuzz_util.h"
#include "probe_classify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const long statuses[] = {200, 400, 404, 500, 503, 0, 200, 200};
    probe_kind kind = (probe_kind)(data[0] % 3);
    long status = statuses[(data[0] >> 2) & 7];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    static const char *const tools[] = {"get_weather", NULL};
    char detail[256];
    probe_gen_info gi;
    (void)probe_classify_gen(kind, status, body, len, tools, &gi, detail, sizeof detail);
    probe_models_info mi;
    (void)probe_classify_models(status, body, len, "m", &mi, detail, sizeof detail);
    (void)probe_status_is_loading(status);
    return 0;
}
