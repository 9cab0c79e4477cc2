/* The INT4 code kernel (nvfp4_int4_rows.h) against what it stands in for:
 * compressed-tensors' INT4 rows decoded by ct_int.c and quantized by the
 * scalar kernel and by the AVX2 threshold kernel, bit for bit. Groups of
 * 16, 32, 48 (not a power of two), 64 and 128 columns, rows whose group
 * count leaves 0 to 3 groups after the last whole step of four; codes
 * uniform, mostly small (zero groups among them), one code repeated, only
 * the extremes; bf16 scales few (cache hits) or many (slots evicted inside
 * one step), negative, +0 and -0, subnormal, up to where 8 * s is
 * bf16's largest finite value; global scales from the weight's amax and arbitrary ones,
 * one cache kept across every call (its slots hold for one global scale).
 * qs_rows_quantize_i4 leaves F32/F16 scales, groups that are not a
 * multiple of 16 and other formats to the decoder. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ct_int.h"
#include "dtype.h"
#include "nvfp4.h"
#include "nvfp4_int4_rows.h"
#include "nvfp4_simd.h"
#include "qsource.h"
#include "unit.h"

enum { ROWS = 64, MAX_K = 512 };

static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x;
}

static uint32_t pick(uint32_t *x, uint32_t n)
{
    return (lcg(x) >> 8) % n;
}

/* mode 0 uniform, 1 mostly |code - 8| small (whole zero groups among
 * them), 2 one code, 3 only codes 0 and 15 */
static unsigned draw_code(uint32_t *x, int mode, unsigned one)
{
    if (mode == 1)
        return pick(x, 4) ? 8 + pick(x, 3) - 1 : pick(x, 16);
    if (mode == 2)
        return one;
    if (mode == 3)
        return pick(x, 2) ? 15 : 0;
    return pick(x, 16);
}

/* few: one of 6 scales (the cache hits); else any of thousands */
static uint16_t draw_scale(uint32_t *x, int few, const uint16_t *six)
{
    static const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7dff, 0xfd80, 0x0080};
    if (few)
        return six[pick(x, 6)];
    if (pick(x, 50) == 0)
        return special[pick(x, 7)];
    uint16_t s = (uint16_t)((60 + pick(x, 120)) << 7 | pick(x, 128));   /* 2^-67 .. 2^52 */
    return pick(x, 3) == 0 ? (uint16_t)(s | 0x8000) : s;
}

static float decoded_amax(const uint16_t *v, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(ff_bf16_to_f32(v[i]));
        m = a > m ? a : m;
    }
    return m;
}

static void decode_group(const void *ctx, const uint8_t packed[8], uint16_t scale, uint16_t out[16])
{
    (void)ctx;
    ctint_decode_rows(packed, (const uint8_t *)&scale, FF_DT_BF16, 16, 16, 0, 1, out);
}

typedef struct i4_case {
    uint64_t group, cols;
    uint8_t packed[ROWS * MAX_K / 2];
    uint16_t scales[ROWS * MAX_K / 16];
} i4_case;

static void fill_case(i4_case *c, uint32_t *x, int round)
{
    static const uint64_t groups[] = {16, 32, 48, 64, 128};
    c->group = groups[round % 5];
    uint64_t ngroups = (MAX_K / c->group) - pick(x, 3);   /* scales a row */
    c->cols = ngroups * c->group;
    int mode = (round / 5) % 4, few = (round / 20) % 2;
    unsigned one = pick(x, 16);
    uint16_t six[6];
    for (int i = 0; i < 6; i++)
        six[i] = draw_scale(x, 0, NULL);
    for (uint64_t i = 0; i < ROWS * c->cols / 2; i++)
        c->packed[i] = (uint8_t)(draw_code(x, mode, one) | draw_code(x, mode, one) << 4);
    for (uint64_t i = 0; i < ROWS * ngroups; i++)
        c->scales[i] = draw_scale(x, few, six);
}

/* The kernel's bytes against both references; 1 when all three agree. */
static int same_as_decoded(const i4_case *c, float gs, nvfp4_i4_cache *cache)
{
    static uint16_t dec[ROWS * MAX_K];
    static uint8_t pk[3][ROWS * MAX_K / 2], sc[3][ROWS * MAX_K / 16];
    uint64_t n = ROWS * c->cols;
    ctint_decode_rows(c->packed, (const uint8_t *)c->scales, FF_DT_BF16, c->cols, c->group, 0, ROWS, dec);
    nvfp4_quantize_i4_rows(c->packed, c->cols / 2, (const uint8_t *)c->scales, c->cols / c->group * 2, c->group,
                           c->cols, ROWS, gs, decode_group, NULL, cache, pk[0], sc[0]);
    nvfp4_quantize_rows_scalar(dec, FF_DT_BF16, c->cols, 0, ROWS, gs, pk[1], sc[1]);
    nvfp4_quantize_rows_avx2(dec, FF_DT_BF16, c->cols, 0, ROWS, gs, pk[2], sc[2]);
    int same = 1;
    for (int k = 1; k < 3; k++)
        same &= memcmp(pk[0], pk[k], n / 2) == 0 && memcmp(sc[0], sc[k], n / 16) == 0;
    return same;
}

static float draw_gs(uint32_t *x, const i4_case *c, int round)
{
    static uint16_t dec[ROWS * MAX_K];
    ctint_decode_rows(c->packed, (const uint8_t *)c->scales, FF_DT_BF16, c->cols, c->group, 0, ROWS, dec);
    float amax = decoded_amax(dec, ROWS * c->cols);
    float gs = round % 3 && amax > 0.0f ? NVFP4_FP8_MAX * NVFP4_FP4_MAX / amax
                                        : ldexpf(1.0f + (float)pick(x, 100) / 100.0f, (int)pick(x, 40) - 10);
    return gs > 0.0f && gs <= 3.0e38f ? gs : 1.0f;
}

static void int4_rows_equal_decoded(void)
{
    if (!nvfp4_i4_rows_ok())
        return;
    static i4_case c;
    nvfp4_i4_cache *cache = malloc(sizeof *cache);
    nvfp4_i4_cache_init(cache);
    uint32_t x = 7;
    int compared = 0;
    uint64_t misses = 0;
    for (int round = 0; round < 400; round++) {
        fill_case(&c, &x, round);
        float gs = draw_gs(&x, &c, round);
        cache->misses = 0;
        int same = same_as_decoded(&c, gs, cache);
        if (!same)
            fprintf(stderr, "  round %d (group %llu, cols %llu, gs %a): the INT4 kernel differs\n", round,
                    (unsigned long long)c.group, (unsigned long long)c.cols, (double)gs);
        CHECK(same);
        /* the same rows again: every slot is found, nothing quantized anew */
        CHECK(same_as_decoded(&c, gs, cache));
        misses += cache->misses;
        compared++;
    }
    CHECK_EQ_INT(compared, 400);
    CHECK(misses > 0);
    free(cache);
}

/* A second pass over the same rows with the same global scale finds every
 * slot (when they all fit), and another global scale empties the cache. */
static void int4_cache_holds_for_one_global_scale(void)
{
    if (!nvfp4_i4_rows_ok())
        return;
    static i4_case c;
    nvfp4_i4_cache *cache = malloc(sizeof *cache);
    nvfp4_i4_cache_init(cache);
    uint32_t x = 11;
    fill_case(&c, &x, 20 + 1);   /* few scales, uniform codes, group 32 */
    cache->misses = 0;
    CHECK(same_as_decoded(&c, 3.0f, cache));
    uint64_t first = cache->misses;
    CHECK(first > 0 && first <= 6 * 9);
    CHECK(same_as_decoded(&c, 3.0f, cache));
    CHECK_EQ_INT(cache->misses, first);
    CHECK(same_as_decoded(&c, 5.0f, cache));
    CHECK_EQ_INT(cache->misses, 2 * first);
    free(cache);
}

/* What the kernel does not take is left to the decoder. */
static void int4_rows_refusals(void)
{
    static uint8_t packed[ROWS * 64], pk[ROWS * 64];
    static uint16_t scales[ROWS * 8];
    uint8_t sc[ROWS * 8];
    nvfp4_i4_cache *cache = malloc(sizeof *cache);
    nvfp4_i4_cache_init(cache);
    qs_rows r = {.kind = QS_CT_INT, .data = packed, .scales = (const uint8_t *)scales, .sd = FF_DT_BF16,
                 .rows = ROWS, .cols = 128, .group = 32};
    if (nvfp4_i4_rows_ok())   /* the caller's check */
        CHECK_EQ_INT(qs_rows_quantize_i4(&r, 0, ROWS, 1.0f, cache, pk, sc), 0);
    r.sd = FF_DT_F32;
    CHECK_EQ_INT(qs_rows_quantize_i4(&r, 0, ROWS, 1.0f, cache, pk, sc), 1);
    r.sd = FF_DT_F16;
    CHECK_EQ_INT(qs_rows_quantize_i4(&r, 0, ROWS, 1.0f, cache, pk, sc), 1);
    r.sd = FF_DT_BF16, r.group = 8;
    CHECK_EQ_INT(qs_rows_quantize_i4(&r, 0, ROWS, 1.0f, cache, pk, sc), 1);
    r.group = 32, r.kind = QS_FP8_BLOCK;
    CHECK_EQ_INT(qs_rows_quantize_i4(&r, 0, ROWS, 1.0f, cache, pk, sc), 1);
    free(cache);
}

int main(void)
{
    RUN(int4_rows_equal_decoded);
    RUN(int4_cache_holds_for_one_global_scale);
    RUN(int4_rows_refusals);
    return UNIT_END();
}
