/* doctor on a folder of config.json, tokenizer.json, tokenizer_config.json
 * and a shard: every check, then the JSON report (UTF-8 cut included). */
#include <jansson.h>

#include "doctor.h"
#include "fuzz_util.h"

static const char *const names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                    "model.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_parts(data, size, names, 4);
    doctor_opts o = {.stamp = "20260101-000000"};
    doctor_report r;
    ff_err e;
    if (doctor_check(fz_dir(), &o, &r, &e) != FF_OK)
        return 0;
    json_t *j = doctor_report_json(&r);
    char *s = json_dumps(j, 0);
    if (!s) /* a finding that is not valid UTF-8 would make the report unprintable */
        abort();
    free(s);
    json_decref(j);
    doctor_report_free(&r);
    return 0;
}
