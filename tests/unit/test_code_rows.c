/* The code-space kernel (nvfp4_code_rows.h), at each width this CPU runs,
 * against what it stands in for: the FP8-block decoder's bf16 rows quantized
 * by the AVX2 threshold kernel and by the scalar kernel, bit for bit. Rows of codes drawn several ways
 * (uniform, mostly small with a few large, zeros and -0, one code
 * repeated), block scales from 2^-140 (bf16 underflow) to 2^120 (448 * s
 * overflows to Inf), negative, +0 and -0, a partial last block, rows in the
 * second half of a scale row, global scales from the weight's amax and
 * arbitrary ones. A NaN byte is reported; a non-finite scale, or rows that
 * span two scale rows, are refused by qs_rows_code_blocks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dtype.h"
#include "fp8_block.h"
#include "nvfp4.h"
#include "nvfp4_code_rows.h"
#include "nvfp4_simd.h"
#include "qsource.h"
#include "unit.h"

enum { N = 128, K = 128 * 5 + 48, SC = 6, HALF = 64 };

static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x;
}

static uint32_t pick(uint32_t *x, uint32_t n)
{
    return (lcg(x) >> 8) % n;
}

/* A code with no NaN: mode 0 uniform, 1 mostly small magnitudes, 2 zeros
 * and -0 among them, 3 one code. */
static uint8_t draw_code(uint32_t *x, int mode, uint8_t one)
{
    uint8_t c = (uint8_t)(lcg(x) >> 24);
    if (mode == 1 && pick(x, 16))
        c = (uint8_t)((c & 0x80) | pick(x, 72));
    if (mode == 2 && pick(x, 3) == 0)
        c &= 0x80;
    if (mode == 3)
        c = one;
    return (c & 0x7f) == 0x7f ? (uint8_t)(c & 0x80) : c;
}

static float draw_scale(uint32_t *x, int round)
{
    static const float special[] = {0.0f, -0.0f, 0x1p-140f, 0x1p120f, -0x1p-130f};
    if (round % 5 == 4 && pick(x, 3) == 0)
        return special[pick(x, 5)];
    float s = ldexpf((float)(8 + pick(x, 8)) / 8.0f, (int)pick(x, 60) - 40);
    return pick(x, 4) == 0 ? -s : s;
}

static float decoded_amax(const uint16_t *v, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(ff_bf16_to_f32(v[i]));
        m = a > m && a <= 3.0e38f ? a : m;
    }
    return m;
}

/* One round: each width's bytes against both references on rows [r0, r0 + 64). */
static int one_round(const uint8_t *w, const float *s, uint64_t r0, float gs, void *work, nvfp4_code_block *blocks)
{
    static uint16_t dec[HALF * K];
    static uint8_t pk[3][HALF * K / 2], sc[3][HALF * K / 16];
    qs_rows q = {.kind = QS_FP8_BLOCK, .data = w, .fp8_scales = (float *)s, .rows = N, .cols = K};
    if (qs_rows_code_blocks(&q, r0, HALF, blocks) != 0)
        return -1;
    fp8b_decode_rows(w, s, N, K, r0, HALF, dec);
    nvfp4_quantize_rows_avx2(dec, FF_DT_BF16, K, 0, HALF, gs, pk[1], sc[1]);
    nvfp4_quantize_rows_scalar(dec, FF_DT_BF16, K, 0, HALF, gs, pk[2], sc[2]);
    int same = memcmp(pk[1], pk[2], sizeof pk[0]) == 0 && memcmp(sc[1], sc[2], sizeof sc[0]) == 0;
    static const int widths[] = {256, 512};
    for (int k = 0; k < 2; k++) {
        if (!nvfp4_code_rows_width_ok(widths[k]))
            continue;
        CHECK_EQ_INT(nvfp4_quantize_code_rows_width(widths[k], w + r0 * K, K, HALF, blocks, gs, work, pk[0], sc[0]),
                     0);
        same &= memcmp(pk[0], pk[1], sizeof pk[0]) == 0 && memcmp(sc[0], sc[1], sizeof sc[0]) == 0;
    }
    CHECK_EQ_INT(nvfp4_quantize_code_rows(w + r0 * K, K, HALF, blocks, gs, work, pk[0], sc[0]), 0);
    return same && memcmp(pk[0], pk[1], sizeof pk[0]) == 0 && memcmp(sc[0], sc[1], sizeof sc[0]) == 0;
}

static void code_rows_equal_decoded(void)
{
    if (!nvfp4_code_rows_ok())
        return;
    static uint8_t w[N * K];
    static uint16_t dec[N * K];
    float s[SC];
    nvfp4_code_block blocks[SC];
    void *work = malloc(nvfp4_code_rows_work(K));
    uint32_t x = 5;
    int compared = 0;
    for (int round = 0; round < 400; round++) {
        int mode = round % 4;
        uint8_t one = (uint8_t)(lcg(&x) >> 24);
        for (size_t i = 0; i < sizeof w; i++)
            w[i] = draw_code(&x, mode, one);
        for (int b = 0; b < SC; b++)
            s[b] = draw_scale(&x, round);
        fp8b_decode_rows(w, s, N, K, 0, N, dec);
        float amax = decoded_amax(dec, (size_t)N * K);
        float gs = round % 3 && amax > 0.0f ? NVFP4_FP8_MAX * NVFP4_FP4_MAX / amax
                                            : ldexpf(1.0f + (float)pick(&x, 100) / 100.0f, (int)pick(&x, 40) - 10);
        if (!(gs > 0.0f && gs <= 3.0e38f))
            gs = 1.0f;
        for (uint64_t r0 = 0; r0 < N; r0 += HALF) {
            int same = one_round(w, s, r0, gs, work, blocks);
            CHECK(same != -1);
            if (same == 0)
                fprintf(stderr, "  round %d rows %llu: the code kernel differs (gs %a)\n", round,
                        (unsigned long long)r0, (double)gs);
            CHECK(same == 1);
            compared++;
        }
    }
    CHECK_EQ_INT(compared, 800);
    free(work);
}

/* A NaN byte anywhere is reported; a scale that is not finite, or rows over
 * two scale rows, are not the kernel's to take. */
static void code_rows_refusals(void)
{
    if (!nvfp4_code_rows_ok())
        return;
    static uint8_t w[N * K], pk[HALF * K / 2], sc[HALF * K / 16];
    float s[SC] = {1, 2, 0.5f, 1, 1, 1};
    nvfp4_code_block blocks[SC];
    void *work = malloc(nvfp4_code_rows_work(K));
    qs_rows q = {.kind = QS_FP8_BLOCK, .data = w, .fp8_scales = s, .rows = N, .cols = K};
    for (uint64_t at = 0; at < (uint64_t)HALF * K; at += 997) {
        memset(w, 0x31, sizeof w);
        w[at] = at % 2 ? 0x7f : 0xff;
        CHECK_EQ_INT(qs_rows_code_blocks(&q, 0, HALF, blocks), 0);
        CHECK_EQ_INT(nvfp4_quantize_code_rows(w, K, HALF, blocks, 1.0f, work, pk, sc), 1);
        for (int width = 256; width <= 512; width += 256)
            if (nvfp4_code_rows_width_ok(width))
                CHECK_EQ_INT(nvfp4_quantize_code_rows_width(width, w, K, HALF, blocks, 1.0f, work, pk, sc), 1);
    }
    CHECK_EQ_INT(qs_rows_code_blocks(&q, HALF, N, blocks), 1);
    static const float bad[] = {INFINITY, -INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        s[4] = bad[i];
        CHECK_EQ_INT(qs_rows_code_blocks(&q, 0, HALF, blocks), 1);
    }
    free(work);
}

int main(void)
{
    RUN(code_rows_equal_decoded);
    RUN(code_rows_refusals);
    return UNIT_END();
}
