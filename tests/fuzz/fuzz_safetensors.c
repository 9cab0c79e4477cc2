/* The safetensors reader on one file held in memory (st_open_memory, no
 * file per input): header JSON, offsets, dtypes, shapes. Every tensor it
 * accepts must lie inside the input, whose exact bounds ASan knows. */
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char shape[128];
    st_file f;
    ff_err e;
    if (st_open_memory(&f, "model.safetensors", data, size, &e) != FF_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < f.ntensors; i++) {
        const st_tensor *t = &f.tensors[i];
        (void)st_numel(t);
        st_shape_str(t->shape, t->ndim, shape, sizeof shape);
        if (t->end > t->begin) /* first and last byte: ASan sees a bad bound */
            sink ^= st_data(&f, t)[0] ^ st_data(&f, t)[t->end - t->begin - 1];
    }
    (void)sink;
    st_close(&f);
    return 0;
}
