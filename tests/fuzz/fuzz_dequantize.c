/* What dequantize, verify and repair-scales read of an NVFP4 checkpoint: a
 * config.json and one shard, from memory, then every module found, checked and decoded
 * as those commands do (dq_find, dq_check_global, dq_zero_scale_blocks,
 * dq_decode to bf16 and float), and every tensor's orphan and stray-scale
 * checks. Scales of the wrong shape or dtype, NaN/Inf/subnormal/negative
 * global scales, missing parts: refused or reported, never a crash. */
#include <stdlib.h>

#include "checkpoint.h"
#include "decode.h"
#include "fuzz_util.h"

static void decode_module(const ckpt *c, const char *mod)
{
    dq_module m;
    ff_err e;
    float gs;
    uint64_t first;
    if (dq_find(c, mod, &m, &e) != FF_OK)
        return;
    if (dq_check_global(c, &m, &gs, &e) == FF_OK && m.rows * m.cols <= (1u << 20)) {
        (void)dq_zero_scale_blocks(c, &m, &first);
        float *f = malloc((m.rows * m.cols + 1) * sizeof *f);
        uint16_t *b = malloc((m.rows * m.cols + 1) * sizeof *b);
        dq_stats st;
        if (f && b)
            (void)dq_decode(c, &m, f, b, &st, &e);
        free(f);
        free(b);
    }
    dq_module_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* config.json, then the shard: read from memory (ckpt_open_memory) */
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, part, len, 2);
    ckpt c;
    ff_err e;
    if (ckpt_open_memory(&c, "fuzz", len[0] ? (const char *)part[0] : NULL, len[0], part[1], len[1], &e) != FF_OK)
        return 0;
    char mod[4096];
    for (size_t i = 0; i < c.ntensors; i++) {
        const char *name = c.tensors[i].st->name;
        if (dq_module_of(name, mod, sizeof mod))
            decode_module(&c, mod);
        else
            (void)dq_orphan_part(&c, name, mod, sizeof mod);
        (void)dq_stray_scale(&c, name);
    }
    ckpt_close(&c);
    return 0;
}
