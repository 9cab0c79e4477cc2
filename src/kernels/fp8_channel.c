#include "fp8_channel.h"

#include <math.h>
#include <string.h>

/* torch.finfo(t).eps: what compressed-tensors stores for a zero scale */
static float dtype_eps(ff_dtype t)
{
    switch (t) {
    case FF_DT_BF16: return 0x1p-7f;
    case FF_DT_F16: return 0x1p-10f;
    default: return 0x1p-23f;
    }
}

float fp8ch_row_scale(float absmax, ff_dtype t)
{
    /* bit_range.to(t) / 2 is 448 exactly in every float dtype */
    float s = ff_round_to(t, absmax / FP8CH_MAX);
    return s == 0.0f ? dtype_eps(t) : s;
}

uint8_t fp8ch_code(float w, float s, ff_dtype t)
{
    float q = ff_round_to(t, w / s);
    if (q == 0.0f)
        return 0x00;
    if (q > FP8CH_MAX)
        q = FP8CH_MAX;
    else if (q < -FP8CH_MAX)
        q = -FP8CH_MAX;
    return ff_f32_to_e4m3(q);
}

static void store_scale(uint8_t *dst, ff_dtype t, float s)
{
    uint16_t h;
    switch (t) {
    case FF_DT_BF16: h = ff_f32_to_bf16(s); memcpy(dst, &h, 2); break;
    case FF_DT_F16: h = ff_f32_to_f16(s); memcpy(dst, &h, 2); break;
    default: memcpy(dst, &s, 4); break;
    }
}

uint64_t fp8ch_quantize_rows(const void *w, ff_dtype t, uint64_t cols, uint64_t row0, uint64_t nrows,
                             uint8_t *codes, uint8_t *scales)
{
    size_t esz = ff_dtype_size(t);
    for (uint64_t r = 0; r < nrows; r++) {
        uint64_t base = (row0 + r) * cols;
        float amax = 0.0f;
        for (uint64_t i = 0; i < cols; i++) {
            float v = ff_load_f32(w, t, base + i);
            if (!isfinite(v))
                return base + i;
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
        float s = fp8ch_row_scale(amax, t);
        store_scale(scales + r * esz, t, s);
        for (uint64_t i = 0; i < cols; i++)
            codes[r * cols + i] = fp8ch_code(ff_load_f32(w, t, base + i), s, t);
    }
    return UINT64_MAX;
}
