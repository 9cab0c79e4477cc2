/* Kernel choice at run time: the SIMD kernels live in nvfp4_simd.c; this file
 * only decides which one the CPU can run. */
#include <string.h>

#include "nvfp4.h"
#include "nvfp4_simd.h"

nvfp4_rows_fn nvfp4_kernel_by_name(const char *name)
{
    if (strcmp(name, "scalar") == 0)
        return nvfp4_quantize_rows_scalar;
#if defined(__x86_64__)
    __builtin_cpu_init();
    /* the AVX2 kernel also uses F16C (vcvtph2ps/vcvtps2ph) for f16 input */
    if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return nvfp4_quantize_rows_avx2;
    if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return nvfp4_quantize_rows_avx512;
#endif
    return NULL;
}

nvfp4_rows_fn nvfp4_best_kernel(const char **name)
{
    static const char *const order[] = {"avx512", "avx2", "scalar"};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        nvfp4_rows_fn fn = nvfp4_kernel_by_name(order[i]);
        if (fn) {
            if (name)
                *name = order[i];
            return fn;
        }
    }
    return nvfp4_quantize_rows_scalar;
}
