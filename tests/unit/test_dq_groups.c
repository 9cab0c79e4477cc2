/* dequantize's bf16 lookup (src/io/decode.c, dq_groups_bf16): every scale
 * byte under every code, for global scales that make finite, subnormal,
 * overflowing and NaN products, gives ff_f32_to_bf16 of the table's f32
 * value bit for bit, by the scalar loop and by the AVX2 shuffles. And
 * verify's error sums (dq_error_groups) by the AVX2 lanes are the scalar
 * loop's, bit for bit, with the same count of non-finite values. */
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

static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x;
}

static int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Random codes and source values (weights' magnitudes, or 2^-20 .. 2^20 so
 * that the sums round and a term added out of order shows, or raw bits
 * with NaN and infinite ones) under every scale byte, in runs of
 * every length up to two chunks and past them, from unaligned starts. */
static void error_sums_simd_equal_scalar(void)
{
    enum { N = 300 };
    static uint8_t packed[N * 8], scales[N], src[N * NVFP4_GROUP * 2 + 4];
    static const float globals[] = {448.0f * 6.0f / 3.2f, 1.0f, 1e-30f, 0.0f, NAN};
    dq_table *t = malloc(sizeof *t);
    uint32_t x = 7;
    for (size_t k = 0; k < sizeof globals / sizeof *globals; k++) {
        dq_table_init(t, globals[k]);
        if (!t->simd)
            break;   /* no AVX2 here: the scalar loop is all there is */
        for (int round = 0; round < 60; round++) {
            for (int i = 0; i < N * 8; i++)
                packed[i] = (uint8_t)(lcg(&x) >> 24);
            for (int g = 0; g < N; g++)
                scales[g] = round % 3 ? (uint8_t)(0x20 + (lcg(&x) >> 24) % 0x40) : (uint8_t)(lcg(&x) >> 24);
            for (int i = 0; i < N * NVFP4_GROUP + 1; i++) {
                uint16_t h = (uint16_t)(lcg(&x) >> 16);
                if (round % 2)
                    h = (uint16_t)((h & 0x80ff) | (0x3c00 + (h & 0x0700)));   /* weights' magnitudes */
                else if (round % 10 != 8)   /* 2^-20 .. 2^20: sums that round, so their order shows */
                    h = (uint16_t)((h & 0x807f) | (107 + (h >> 7 & 0xff) % 41) << 7);
                memcpy(src + 2 * i, &h, 2);
            }
            uint64_t groups = (uint64_t)(lcg(&x) >> 8) % N, off = round % 2;
            if (groups > N - off)
                groups = N - off;
            double se[3] = {0.5, 0.5, 0.5}, ss[3] = {0.25, 0.25, 0.25};
            dq_stats st[3] = {{.first_bad = UINT64_MAX}, {.first_bad = UINT64_MAX}, {.first_bad = UINT64_MAX}};
            for (int simd = 0; simd <= t->simd; simd++)   /* scalar, AVX2, AVX-512 where the CPU has them */
                dq_error_groups(t, packed + off * 8, scales + off, groups, 5, src + 2 + off * NVFP4_GROUP * 2,
                                FF_DT_BF16, simd, &se[simd], &ss[simd], &st[simd]);
            for (int simd = 1; simd <= t->simd; simd++) {
                if (!same_double(se[0], se[simd]) || !same_double(ss[0], ss[simd]))
                    fprintf(stderr, "  simd %d, global %g, round %d, %llu groups: se %a / %a, ss %a / %a\n", simd,
                            (double)globals[k], round, (unsigned long long)groups, se[0], se[simd], ss[0], ss[simd]);
                CHECK(same_double(se[0], se[simd]) && same_double(ss[0], ss[simd]));
                CHECK(st[0].nonfinite == st[simd].nonfinite && st[0].first_bad == st[simd].first_bad);
            }
        }
    }
    free(t);
}

int main(void)
{
    RUN(every_scale_and_code);
    RUN(error_sums_simd_equal_scalar);
    return UNIT_END();
}
