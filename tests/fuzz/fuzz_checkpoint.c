/* A checkpoint folder: config.json, the shard index and one shard, then the
 * family's reader (detection, geometry) and the plan over it. */
#include <stdlib.h>

#include "checkpoint.h"
#include "family.h"
#include "fuzz_util.h"
#include "plan.h"

static const char *const names[] = {"config.json", "model.safetensors.index.json",
                                    "model.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_parts(data, size, names, 3);
    ckpt c;
    ff_err e;
    if (ckpt_open(&c, fz_dir(), 0, &e) != FF_OK)
        return 0;
    (void)ckpt_find(&c, "model.embed_tokens.weight");
    if (c.config) {
        const ff_family *fam = ff_family_detect(c.config);
        if (fam)
            free(ff_geometry_new(fam, c.config, &e));
        plan p;
        plan_opts o = {0};
        int rc = plan_build(&p, &c, &o, &e);
        if (rc == FF_OK || rc == FF_EPLAN) /* a refused plan is filled, to be printed */
            json_decref(plan_to_json(&p, &c));
        plan_free(&p);   /* whatever plan_build returned, as its callers do */
    }
    ckpt_close(&c);
    return 0;
}
