/* Kernel choice at run time: the SIMD kernels live in nvfp4_simd.c; this file
 * only decides which one the CPU can run. */
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <pthread.h>
#endif

#include "nvfp4.h"
#include "nvfp4_simd.h"

#if defined(__x86_64__)
/* F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c" for
 * __builtin_cpu_supports, and the fuzz build uses Debian 12's clang 14.
 * Asked once a process: CPUID exits a virtual machine (about 15 us each on
 * the 2-core VM), and callers ask once a unit or a task. A property of the
 * CPU, set once, so no state a run could change. */
static int f16c_seen;
static pthread_once_t f16c_once = PTHREAD_ONCE_INIT;

static void ask_f16c(void)
{
    unsigned a, b, c, d;
    f16c_seen = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static int cpu_has_f16c(void)
{
    pthread_once(&f16c_once, ask_f16c);
    return f16c_seen;
}

/* the AVX2 kernel also uses F16C (vcvtph2ps/vcvtps2ph) for f16 input */
int nvfp4_cpu_avx2_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

int nvfp4_cpu_avx512_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
#endif

nvfp4_rows_fn nvfp4_kernel_by_name(const char *name)
{
    if (strcmp(name, "scalar") == 0)
        return nvfp4_quantize_rows_scalar;
#if defined(__x86_64__)
    if (strcmp(name, "avx2") == 0 && nvfp4_cpu_avx2_ok())
        return nvfp4_quantize_rows_avx2;
    if (strcmp(name, "avx512") == 0 && nvfp4_cpu_avx512_ok())
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
