/* Single-thread throughput of each NVFP4 kernel on one 21504x5376 bf16 MLP
 * matrix (in memory), with a byte check against the scalar kernel. Each
 * figure is the best of REPS runs into pre-touched buffers (page faults and
 * a busy neighbour are not the kernel's), beside the stages a kernel cannot
 * beat: a plain read (the absmax pass every quantize makes) and a copy.
 *   make bench-kernels */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define REPS 5

#include "bench_clock.h"
#include "nvfp4.h"
#include "nvfp4_simd.h"

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
    memset(p0, 0, n / 2), memset(s0, 0, n / 16), memset(p1, 0, n / 2), memset(s1, 0, n / 16);
    double best = 1e9;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = bench_now();
        nvfp4_absmax_fast(w, FF_DT_BF16, n, &amax, &bad);
        best = fmin(best, bench_now() - t0);
    }
    printf("%-7s %6.3f s  %6.2f GB/s bf16 per core  (the read every quantize makes)\n", "absmax", best, n * 2 / 1e9 / best);
    const char *names[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        nvfp4_rows_fn fn = nvfp4_kernel_by_name(names[k]);
        if (!fn) {
            printf("%-7s not supported here\n", names[k]);
            continue;
        }
        best = 1e9;
        for (int rep = 0; rep < (k ? REPS : 1); rep++) {
            double t0 = bench_now();
            fn(w, FF_DT_BF16, cols, 0, rows, gs, k ? p1 : p0, k ? s1 : s0);
            best = fmin(best, bench_now() - t0);
        }
        int same = !k || (!memcmp(p0, p1, n / 2) && !memcmp(s0, s1, n / 16));
        printf("%-7s %6.3f s  %6.2f GB/s bf16 per core  %s\n", names[k], best, n * 2 / 1e9 / best,
               same ? "bytes == scalar" : "BYTES DIFFER");
    }
    return 0;
}
