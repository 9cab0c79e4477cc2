/* Single-thread speed of the FP8 code-space kernel (nvfp4_quantize_code_rows:
 * NVFP4 straight from an FP8-block source's E4M3 codes) on one 2048x7168
 * matrix in memory, a Kimi-K2 expert's shape, at each width this CPU runs,
 * with the bytes checked against the route it replaces (decode to bf16, then
 * the scalar kernel). Codes are a Gaussian quantized as a trained FP8 expert
 * is (each 128x128 block's largest value at 448), one scale a block. Best of
 * REPS runs, the cache kept warm.
 *   make bench-code-rows */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#include "bench_rand.h"
#include "fp8_block.h"
#include "nvfp4.h"
#include "nvfp4_code_rows.h"
#include "qsource.h"

#define REPS 200
#define ROWS 2048
#define COLS 7168
#define BLK 128

static double gaussian(uint64_t *r)
{
    double u = ((double)(bench_next(r) >> 11) + 0.5) / 9007199254740992.0;
    double v = (double)(bench_next(r) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* E4M3's nearest code to |x| <= 448: a search of its sorted value table */
static uint8_t e4m3_code(double x)
{
    static double value[127];
    if (value[1] == 0.0)
        for (int c = 1; c < 127; c++)
            value[c] = c < 8 ? c * 0x1p-9 : ldexp(1.0 + (c & 7) / 8.0, (c >> 3) - 7);
    double a = fabs(x);
    int lo = 0, hi = 126;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (value[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    int best = a - value[lo] <= value[hi] - a ? lo : hi;
    return (uint8_t)(best | (x < 0 ? 0x80 : 0));
}

static void fill(uint8_t *codes, float *scales)
{
    uint64_t r = 88172645463325252ull;
    for (uint64_t i = 0; i < (uint64_t)ROWS * COLS; i++)
        codes[i] = e4m3_code(fmax(-448.0, fmin(448.0, gaussian(&r) * 448.0 / 4.5)));
    for (uint64_t b = 0; b < (uint64_t)(ROWS / BLK) * (COLS / BLK); b++)
        scales[b] = 2e-5f * (1.0f + (float)(bench_next(&r) % 1000) / 250.0f);
}

static void reference(const uint8_t *codes, const float *scales, float gs, uint8_t *pk, uint8_t *sc)
{
    uint16_t *w = malloc((uint64_t)ROWS * COLS * 2);
    fp8b_decode_rows(codes, scales, ROWS, COLS, 0, ROWS, w);
    nvfp4_quantize_rows_scalar(w, FF_DT_BF16, COLS, 0, ROWS, gs, pk, sc);
    free(w);
}

/* one pass over the matrix, BLK rows a call as the job's tasks take them */
static void run(int width, const uint8_t *codes, const float *scales, float gs, nvfp4_code_block *blocks, void *work,
                uint8_t *pk, uint8_t *sc)
{
    qs_rows q = {.kind = QS_FP8_BLOCK, .data = codes, .fp8_scales = (float *)scales, .rows = ROWS, .cols = COLS};
    for (uint64_t r0 = 0; r0 < ROWS; r0 += BLK) {
        qs_rows_code_blocks(&q, r0, BLK, blocks);
        nvfp4_quantize_code_rows_width(width, codes + r0 * COLS, COLS, BLK, blocks, gs, work, pk + r0 * COLS / 2,
                                       sc + r0 * COLS / 16);
    }
}

int main(void)
{
    uint64_t n = (uint64_t)ROWS * COLS;
    uint8_t *codes = malloc(n), *pk = calloc(n / 2, 1), *sc = calloc(n / 16, 1);
    uint8_t *pk0 = malloc(n / 2), *sc0 = malloc(n / 16);
    float *scales = malloc((n / BLK / BLK) * sizeof *scales);
    nvfp4_code_block *blocks = malloc(COLS / BLK * sizeof *blocks);
    void *work = malloc(nvfp4_code_rows_work(COLS));
    if (!codes || !pk || !sc || !pk0 || !sc0 || !scales || !blocks || !work)
        return 1;
    fill(codes, scales);
    float gs = 0.37f;
    reference(codes, scales, gs, pk0, sc0);
    int status = 0;
    static const int widths[] = {256, 512};
    for (int k = 0; k < 2; k++) {
        if (!nvfp4_code_rows_width_ok(widths[k]))
            continue;
        double best = 1e9;
        for (int rep = 0; rep < REPS; rep++) {
            memset(pk, 0, n / 2);
            double t0 = bench_now();
            run(widths[k], codes, scales, gs, blocks, work, pk, sc);
            best = fmin(best, bench_now() - t0);
        }
        int same = !memcmp(pk, pk0, n / 2) && !memcmp(sc, sc0, n / 16);
        printf("fp8 codes, %d-bit  %6.4f s  %5.3f ns a 16-group  %6.2f GB/s of codes in per core  %s\n", widths[k],
               best, best * 1e9 / (double)(n / 16), (double)n / 1e9 / best,
               same ? "bytes == decode + scalar kernel" : "BYTES DIFFER");
        status |= !same;
    }
    return status;
}
