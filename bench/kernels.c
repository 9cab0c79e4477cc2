/* Single-thread throughput of each NVFP4 kernel on one 21504x5376 bf16 MLP
 * matrix (in memory), with a byte check against the scalar kernel.
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/kernels.c build/libfp4forge.a -lm -o build/bench_kernels */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvfp4.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    uint64_t rows = 21504, cols = 5376, n = rows * cols;
    uint16_t *w = malloc(n * 2);
    uint64_t r = 88172645463325252ull;
    for (uint64_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        w[i] = ff_f32_to_bf16(((float)(r >> 40) / 16777216.0f - 0.5f) * 0.05f);
    }
    float amax;
    uint64_t bad;
    nvfp4_absmax(w, FF_DT_BF16, n, &amax, &bad);
    float gs = nvfp4_global_scale(amax, FF_DT_BF16);
    uint8_t *p0 = malloc(n / 2), *s0 = malloc(n / 16), *p1 = malloc(n / 2), *s1 = malloc(n / 16);
    const char *names[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        nvfp4_rows_fn fn = nvfp4_kernel_by_name(names[k]);
        if (!fn) {
            printf("%-7s not supported here\n", names[k]);
            continue;
        }
        double t0 = now();
        fn(w, FF_DT_BF16, cols, 0, rows, gs, k ? p1 : p0, k ? s1 : s0);
        double dt = now() - t0;
        int same = !k || (!memcmp(p0, p1, n / 2) && !memcmp(s0, s1, n / 16));
        printf("%-7s %6.3f s  %6.2f GB/s bf16 per core  %s\n", names[k], dt, n * 2 / 1e9 / dt,
               same ? "bytes == scalar" : "BYTES DIFFER");
    }
    return 0;
}
