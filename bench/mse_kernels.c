/* Single-thread speed of each MSE observer search (nvfp4_mse_search_by_name)
 * on one 512x4096 bf16 matrix of Gaussian weights in memory, with each
 * kernel's chosen steps checked against the scalar search. ns/step is the
 * time a group-element takes at one grid step, the figure docs/observers.md
 * reasons about; the best of REPS runs each.
 *   make bench-mse */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"
#include "bench_rand.h"
#include "nvfp4_mse.h"

#define REPS 5

static double uniform(uint64_t *r)
{
    return ((double)(bench_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

/* Gaussian weights (Box-Muller), sigma 0.02: a trained Linear's scale */
static uint16_t *gaussian_bf16(uint64_t n)
{
    uint16_t *w = malloc(n * sizeof *w);
    uint64_t r = 88172645463325252ull;
    for (uint64_t i = 0; w && i < n; i++) {
        double z = sqrt(-2.0 * log(uniform(&r))) * cos(6.283185307179586 * uniform(&r));
        w[i] = ff_f32_to_bf16((float)(0.02 * z));
    }
    return w;
}

static double time_search(nvfp4_mse_search_fn fn, const uint16_t *w, uint64_t rows, uint64_t cols,
                          const nvfp4_obs *o, uint64_t *mask, uint8_t *idx, int reps)
{
    double best = 1e9;
    for (int rep = 0; rep < reps; rep++) {
        uint64_t any = 0;
        double t0 = bench_now();
        fn(w, FF_DT_BF16, cols, 0, rows, o, mask, idx, &any);
        best = fmin(best, bench_now() - t0);
    }
    return best;
}

int main(void)
{
    const uint64_t rows = 512, cols = 4096, n = rows * cols, groups = n / 16;
    const char *observers[] = {"mse", "expanded-mse"}, *kernels[] = {"scalar", "avx2", "avx512", "avx512-gather", "avx512-arith"};
    uint16_t *w = gaussian_bf16(n);
    uint64_t *mask0 = calloc(groups, sizeof *mask0), *mask1 = calloc(groups, sizeof *mask1);
    uint8_t *idx0 = calloc(groups, 1), *idx1 = calloc(groups, 1);
    if (!w || !mask0 || !mask1 || !idx0 || !idx1)
        return 1;
    for (int ob = 0; ob < 2; ob++) {
        nvfp4_obs o;
        nvfp4_obs_from_name(observers[ob], &o);
        for (int k = 0; k < 5; k++) {
            nvfp4_mse_search_fn fn = nvfp4_mse_search_by_name(kernels[k]);
            if (!fn) {
                printf("%-13s %-13s not supported here\n", observers[ob], kernels[k]);
                continue;
            }
            double t = time_search(fn, w, rows, cols, &o, k ? mask1 : mask0, k ? idx1 : idx0, k ? REPS : 1);
            int same = !k || (!memcmp(mask0, mask1, groups * sizeof *mask0) && !memcmp(idx0, idx1, groups));
            printf("%-13s %-13s %7.3f s  %7.1f MB/s bf16 per core  %.3f ns/step  %s\n", observers[ob], kernels[k], t,
                   n * 2 / 1e6 / t, t * 1e9 / (double)n / o.steps, same ? "steps == scalar" : "STEPS DIFFER");
        }
    }
    return 0;
}
