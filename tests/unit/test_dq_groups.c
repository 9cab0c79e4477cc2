/* dequantize's bf16 lookup (src/io/decode.c, dq_groups_bf16): every scale
 * byte under every code, for global scales that make finite, subnormal,
 * overflowing and NaN products, gives ff_f32_to_bf16 of the table's f32
 * value bit for bit, by the scalar loop and by the AVX2 shuffles. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "dtype.h"
#include "nvfp4.h"
#include "unit.h"

enum { GROUPS = 256 * 16 };

/* Group g: scale byte g / 16, its 16 codes k = g % 16 + i rotated, so every
 * (scale, code) pair lands in every position of a group. */
static void make_groups(uint8_t *packed, uint8_t *scales)
{
    for (int g = 0; g < GROUPS; g++) {
        scales[g] = (uint8_t)(g / 16);
        for (int i = 0; i < NVFP4_GROUP / 2; i++) {
            int lo = (g % 16 + 2 * i) & 15, hi = (g % 16 + 2 * i + 1) & 15;
            packed[g * 8 + i] = (uint8_t)(lo | hi << 4);
        }
    }
}

static int check_against_f32(const dq_table *t, const uint8_t *packed, const uint8_t *scales, const uint16_t *out)
{
    for (int g = 0; g < GROUPS; g++)
        for (int i = 0; i < NVFP4_GROUP; i++) {
            uint8_t b = packed[g * 8 + i / 2];
            int code = i % 2 ? b >> 4 : b & 15;
            uint16_t want = ff_f32_to_bf16(t->val[scales[g] * 16 + code]);
            if (out[g * NVFP4_GROUP + i] != want) {
                fprintf(stderr, "  scale 0x%02x code %d: 0x%04x, want 0x%04x\n", scales[g], code,
                        out[g * NVFP4_GROUP + i], want);
                return 0;
            }
        }
    return 1;
}

static void every_scale_and_code(void)
{
    static uint8_t packed[GROUPS * 8], scales[GROUPS];
    static uint16_t a[GROUPS * NVFP4_GROUP], b[GROUPS * NVFP4_GROUP];
    static const float globals[] = {448.0f * 6.0f / 3.2f, 1.0f, 1e-30f, 1e30f, 0.0f, NAN, -2.5f};
    dq_table *t = malloc(sizeof *t);
    make_groups(packed, scales);
    for (size_t k = 0; k < sizeof globals / sizeof *globals; k++) {
        dq_table_init(t, globals[k]);
        dq_groups_bf16(t, packed, scales, GROUPS, 0, a);
        CHECK(check_against_f32(t, packed, scales, a));
        if (!t->simd)
            continue;   /* no AVX2 here: the scalar loop is all there is */
        memset(b, 0xa5, sizeof b);
        dq_groups_bf16(t, packed, scales, GROUPS, 1, b);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    /* an odd count and an unaligned start */
    dq_table_init(t, 3.0f);
    dq_groups_bf16(t, packed + 8, scales + 1, 37, 0, a);
    memset(b, 0, sizeof b);
    dq_groups_bf16(t, packed + 8, scales + 1, 37, t->simd, b + 1);
    CHECK(memcmp(a, b + 1, 37 * NVFP4_GROUP * 2) == 0 && b[0] == 0 && b[1 + 37 * NVFP4_GROUP] == 0);
    free(t);
}

int main(void)
{
    RUN(every_scale_and_code);
    return UNIT_END();
}
