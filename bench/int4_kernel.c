/* Single-thread speed of the INT4 kernel (nvfp4_quantize_i4_rows: NVFP4
 * straight from compressed-tensors INT4 codes, group 32, bf16 scales) on
 * one 2048x7168 matrix in memory, a Kimi-K2 expert's shape, with its bytes
 * checked against the route it replaces (decode to bf16, then the bf16
 * kernel). Codes spread as a trained expert's (|code - 8| mostly 3-5, a few
 * at 8), 400 distinct scales. Best of REPS runs, the cache kept warm.
 *   make bench-int4 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#include "bench_rand.h"
#include "nvfp4.h"
#include "nvfp4_int4_rows.h"
#include "nvfp4_simd.h"

#define REPS 50
#define ROWS 2048
#define COLS 7168
#define GROUP 32

/* (code - 8) * scale rounded to bf16, as compressed-tensors decodes */
static void decode(const void *ctx, const uint8_t packed[8], uint16_t scale, uint16_t out[16])
{
    (void)ctx;
    float s = ff_bf16_to_f32(scale);
    for (int i = 0; i < 8; i++) {
        out[2 * i] = ff_f32_to_bf16((float)((int)(packed[i] & 15) - 8) * s);
        out[2 * i + 1] = ff_f32_to_bf16((float)((int)(packed[i] >> 4) - 8) * s);
    }
}

static void fill(uint8_t *codes, uint16_t *scales)
{
    uint64_t r = 88172645463325252ull;
    for (uint64_t i = 0; i < (uint64_t)ROWS * COLS / 2; i++) {
        uint64_t x = bench_next(&r);
        int a = 4 + (int)(x % 9), b = 3 + (int)((x >> 8) % 11);
        if (((x >> 20) & 63) == 0)
            a = 0;
        codes[i] = (uint8_t)(a | b << 4);
    }
    for (uint64_t i = 0; i < (uint64_t)ROWS * COLS / GROUP; i++)
        scales[i] = ff_f32_to_bf16(0.001f * (1.0f + (float)(bench_next(&r) % 400) / 100.0f));
}

/* the route the kernel replaces: every group decoded, then the bf16 kernel */
static void reference(const uint8_t *codes, const uint16_t *scales, float gs, uint8_t *pk, uint8_t *sc)
{
    uint16_t *w = malloc((uint64_t)ROWS * COLS * 2);
    for (uint64_t g = 0; g < (uint64_t)ROWS * COLS / 16; g++)
        decode(NULL, codes + g * 8, scales[g * 16 / GROUP], w + g * 16);
    nvfp4_quantize_rows_scalar(w, FF_DT_BF16, COLS, 0, ROWS, gs, pk, sc);
    free(w);
}

int main(void)
{
    uint64_t n = (uint64_t)ROWS * COLS;
    uint8_t *codes = malloc(n / 2), *pk = calloc(n / 2, 1), *sc = calloc(n / 16, 1);
    uint8_t *pk0 = malloc(n / 2), *sc0 = malloc(n / 16);
    uint16_t *scales = malloc(n / GROUP * 2);
    nvfp4_i4_cache *cache = malloc(sizeof *cache);
    if (!codes || !pk || !sc || !pk0 || !sc0 || !scales || !cache)
        return 1;
    fill(codes, scales);
    float gs = 1.0f;
    reference(codes, scales, gs, pk0, sc0);
    nvfp4_i4_cache_init(cache);
    double best = 1e9;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = bench_now();
        nvfp4_quantize_i4_rows(codes, COLS / 2, (const uint8_t *)scales, COLS / GROUP * 2, GROUP, COLS, ROWS, gs,
                               decode, NULL, cache, pk, sc);
        best = fmin(best, bench_now() - t0);
    }
    int same = !memcmp(pk, pk0, n / 2) && !memcmp(sc, sc0, n / 16);
    printf("int4 group %d  %6.3f s  %5.3f ns a 16-group  %6.2f GB/s of NVFP4 out per core  %s\n", GROUP, best,
           best * 1e9 / (double)(n / 16), (double)n * 0.5625 / 1e9 / best,
           same ? "bytes == decode + bf16 kernel" : "BYTES DIFFER");
    return same ? 0 : 1;
}
