#include "ct_int.h"

#include <string.h>

/* What one scale makes of each of the 16 codes: the reference's product,
 * rounded as its dtype chain rounds it. */
static void group_table(float s, ff_dtype sd, uint16_t tab[16])
{
    for (int k = 0; k < 16; k++) {
        float v = (float)(k - 8) * s;   /* f32 multiply: what torch does for each dtype */
        if (sd == FF_DT_F16)
            v = ff_f16_to_f32(ff_f32_to_f16(v));   /* the product lands in f16 first */
        tab[k] = ff_f32_to_bf16(v);
    }
}

/* group is a multiple of 8 (qs_config refuses others): a word never
 * straddles two groups. */
static void decode_row(const uint8_t *words, const uint8_t *scales, ff_dtype sd, uint64_t K, uint64_t group,
                       uint16_t *out)
{
    uint16_t tab[16];
    for (uint64_t g = 0; g < K / group; g++) {
        group_table(ff_load_f32(scales, sd, g), sd, tab);
        for (uint64_t c = g * group; c < (g + 1) * group; c += 8) {
            uint32_t w;
            memcpy(&w, words + (c / 8) * 4, 4);   /* little-endian, as safetensors stores it */
            for (int i = 0; i < 8; i++, w >>= 4)
                out[c + i] = tab[w & 15];
        }
    }
}

void ctint_decode_rows(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K, uint64_t group,
                       uint64_t r0, uint64_t n, uint16_t *out)
{
    uint64_t wbytes = ctint_row_words(K) * 4, sbytes = (K / group) * ff_dtype_size(sd);
    for (uint64_t r = 0; r < n; r++)
        decode_row(packed + (r0 + r) * wbytes, scales + (r0 + r) * sbytes, sd, K, group, out + r * K);
}
