#include "mxfp4.h"

#include <math.h>

#include "dtype.h"
#include "nvfp4.h"

void mxfp4_group_table(uint8_t e, uint16_t tab[16])
{
    float s = ldexpf(1.0f, (int)e - 127);   /* exact: 2^-127 is an f32 subnormal */
    for (int k = 0; k < 16; k++)
        tab[k] = ff_f32_to_bf16(nvfp4_code_value[k] * s);
}

void mxfp4_decode_rows(const uint8_t *packed, const uint8_t *scales, uint64_t K, uint64_t r0, uint64_t n,
                       uint16_t *out)
{
    uint16_t tab[16];
    for (uint64_t r = 0; r < n; r++) {
        const uint8_t *p = packed + (r0 + r) * (K / 2), *s = scales + (r0 + r) * (K / MXFP4_GROUP);
        uint16_t *o = out + r * K;
        for (uint64_t g = 0; g < K / MXFP4_GROUP; g++) {
            mxfp4_group_table(s[g], tab);
            for (uint64_t i = g * MXFP4_GROUP / 2; i < (g + 1) * MXFP4_GROUP / 2; i++) {
                o[2 * i] = tab[p[i] & 15];
                o[2 * i + 1] = tab[p[i] >> 4];
            }
        }
    }
}
