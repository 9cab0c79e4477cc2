/* An FP8-block source folder (config with quantization_config fp8, F8_E4M3
 * weights with weight_scale_inv): the config check, the scale lookup (shape
 * against the weight's blocks) and the decode of every FP8 weight. */
#include <stdlib.h>

#include "checkpoint.h"
#include "fp8_block.h"
#include "fuzz_util.h"

static const char *const names[] = {"config.json", "model.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_parts(data, size, names, 2);
    ckpt c;
    ff_err e;
    if (ckpt_open(&c, fz_dir(), 1, &e) != FF_OK)
        return 0;
    const char *why;
    if (fp8b_config(c.config, &why) > 0)
        for (size_t i = 0; i < c.ntensors; i++) {
            const ckpt_tensor *t = &c.tensors[i], *scale;
            uint16_t *out = NULL;
            if (t->st->dtype == FF_DT_F8_E4M3 && fp8b_scale_of(&c, t, &scale, &e) == FF_OK && scale &&
                fp8b_decode_tensor(&c, t, scale, NULL, &out, &e) == FF_OK)
                free(out);
        }
    ckpt_close(&c);
    return 0;
}
