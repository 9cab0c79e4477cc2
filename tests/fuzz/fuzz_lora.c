/* A LoRA adapter folder: adapter_config.json (patterns, ranks, targets) and
 * adapter_model.safetensors. */
#include "fuzz_util.h"
#include "lora.h"

static const char *const names[] = {"adapter_config.json", "adapter_model.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write_parts(data, size, names, 2);
    lora_adapter l;
    ff_err e;
    if (lora_open(&l, fz_dir(), &e) == FF_OK)
        lora_close(&l);
    return 0;
}
