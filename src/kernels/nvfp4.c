#include "nvfp4.h"

#include <float.h>
#include <math.h>
#include <string.h>

const float nvfp4_code_value[16] = {
    0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

int nvfp4_absmax(const void *data, ff_dtype t, uint64_t n, float *amax, uint64_t *bad)
{
    float m = 0.0f;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(ff_load_f32(data, t, i));
        if (!(a <= FLT_MAX)) {               /* NaN or Inf */
            *bad = i;
            return 1;
        }
        m = a > m ? a : m;
    }
    *amax = m;
    return 0;
}

float nvfp4_global_scale(float amax, ff_dtype observed)
{
    /* torch clamps amax to finfo.tiny (the same for f32 and bf16; f16's is
     * 2^-14). `2688 / t` is torch's __rtruediv__, which is t.reciprocal() * 2688:
     * two roundings to the observed dtype, not one division. */
    float tiny = observed == FF_DT_F16 ? 0x1p-14f : FLT_MIN;
    float a = amax < tiny ? tiny : amax;
    float inv = ff_round_to(observed, 1.0f / a);
    float gs = ff_round_to(observed, inv * (NVFP4_FP8_MAX * NVFP4_FP4_MAX));
    return isfinite(gs) ? gs : 1.0f;
}

uint8_t nvfp4_fp4_code(float y)
{
    uint8_t sign = y < 0.0f ? 8 : 0;
    float a = fabsf(y);
    uint8_t m;
    /* CT's cast_to_fp4 buckets: closed at the even codes, open at the odd. */
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return sign | m;
}

void nvfp4_quantize_rows_scalar(const void *w, ff_dtype t, uint64_t cols, uint64_t row0,
                                uint64_t nrows, float gs, uint8_t *packed, uint8_t *scales)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++) {
        uint64_t base = (row0 + r) * cols;
        for (uint64_t g = 0; g < groups; g++) {
            float x[NVFP4_GROUP], amax = 0.0f;
            for (int i = 0; i < NVFP4_GROUP; i++) {
                x[i] = ff_load_f32(w, t, base + g * NVFP4_GROUP + (uint64_t)i);
                float a = fabsf(x[i]);
                amax = a > amax ? a : amax;
            }
            float s8f;
            scales[r * groups + g] = nvfp4_group_scale(amax, gs, t, &s8f);
            float eff = s8f / gs;
            uint8_t *out = packed + r * (cols / 2) + g * (NVFP4_GROUP / 2);
            for (int i = 0; i < NVFP4_GROUP; i += 2) {
                uint8_t lo = nvfp4_fp4_code(x[i] / eff);
                uint8_t hi = nvfp4_fp4_code(x[i + 1] / eff);
                out[i / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

void nvfp4_dequantize_rows(const uint8_t *packed, const uint8_t *scales, float gs,
                           uint64_t cols, uint64_t nrows, float *out)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t r = 0; r < nrows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            uint8_t b = packed[r * (cols / 2) + c / 2];
            uint8_t code = (c & 1) ? b >> 4 : b & 15;
            float eff = ff_e4m3_to_f32(scales[r * groups + c / NVFP4_GROUP]) / gs;
            out[r * cols + c] = nvfp4_code_value[code] * eff;
        }
}
