/* The whole quantize job of a source folder (config.json, then one shard):
 * doctor's checks, the plan, and every unit quantized on two threads into a
 * staging folder that is renamed into place. The decoder harnesses stop at
 * a tensor; this one also runs what only a job does with the decoded rows
 * (bf16, FP8-block, compressed-tensors INT4 and MXFP4, gpt-oss sources; the
 * exact route; fused global scales; the output queue). A refusal is
 * a clean return; what was written is removed before the next input. */
#include <stdio.h>
#include <stdlib.h>

#include "fsutil.h"
#include "fuzz_util.h"
#include "quantize.h"

static const char *const names[] = {"config.json", "model.safetensors"};

/* doctor's findings and the job's report would flood libFuzzer's log */
static FILE *quiet(void)
{
    static FILE *f;
    if (!f && !(f = fopen("/dev/null", "w")))
        abort();
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_parts(data, size, names, 2);
    /* beside the input, never inside it (a folder under the input would be
     * read as part of the checkpoint); fz_dir's name makes it this process's */
    char out[128];
    snprintf(out, sizeof out, "%s-out", fz_dir());
    quantize_request r;
    quantize_request_default(&r);
    r.run.threads = 2;
    r.run.force = 1;
    r.report = NULL;
    r.findings = quiet();
    ff_err e;
    (void)quantize_checkpoint(fz_dir(), out, &r, &e);
    (void)fs_rm_rf(out);
    return 0;
}
