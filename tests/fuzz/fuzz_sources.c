/* A vendor-quantized source (config.json, then one shard, from memory):
 * quantization_config read (compressed-tensors INT4 / MXFP4, gpt-oss mxfp4,
 * FP8-block), the decoded view built (companions, shapes, dtypes, slices of
 * fused experts) and every stored weight decoded, with the exact route's
 * span and scales for MXFP4 rows. Lying shapes, missing parts, NaN scales:
 * refused by name, never a crash or a read past a tensor. */
#include <stdlib.h>

#include "checkpoint.h"
#include "fuzz_util.h"
#include "mx_exact.h"
#include "qsource.h"

/* Every MXFP4 row of view tensor t through the exact route's helpers. */
static void exact_rows(const ckpt *c, const qs_weight *w, const ckpt_tensor *t)
{
    uint64_t rows = (uint64_t)t->st->shape[0], cols = t->st->ndim == 2 ? (uint64_t)t->st->shape[1] : 0;
    uint8_t scales[1 << 12];
    mx_span sp = {0};
    for (uint64_t r = 0; r < rows && cols && cols / 16 <= sizeof scales; r++) {
        mx_span_add(&sp, qs_mx_codes_row(c, w, t, r), qs_mx_scales_row(c, w, t, r), 1, cols);
        mx_exact_scales(qs_mx_scales_row(c, w, t, r), 1, cols, 0, scales);
    }
    int k;
    (void)mx_exact_k(&sp, &k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, part, len, 2);
    ckpt c;
    ff_err e;
    if (ckpt_open_memory(&c, "fuzz", len[0] ? (const char *)part[0] : NULL, len[0], part[1], len[1], &e) != FF_OK)
        return 0;
    qs_format f;
    char why[400];
    qs_view v;
    int q = qs_config(c.config, &f, why, sizeof why);
    if (q == 0)
        q = qs_layout(&c, &f);
    if (q == 1 && qs_view_build(&v, &c, &f, &e) == FF_OK) {
        for (size_t i = 0; i < v.ck.ntensors; i++) {
            const qs_weight *w = qs_weight_of(&v, &v.ck.tensors[i]);
            uint16_t *out = NULL;
            if (!w || st_numel(v.ck.tensors[i].st) > (1u << 20))
                continue;
            if (qs_decode(&c, &v, w, NULL, &out, &e) == FF_OK && qs_weight_mx_coded(&v, w))
                exact_rows(&c, w, &v.ck.tensors[i]);
            free(out);
        }
    }
    if (f.kind)
        qs_view_free(&v);
    ckpt_close(&c);
    return 0;
}
