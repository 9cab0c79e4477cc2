/* The clock every single-core kernel bench in bench/ times its best run
 * with: monotonic seconds, so a wall-clock step never shows as speed. */
#ifndef FF_BENCH_CLOCK_H
#define FF_BENCH_CLOCK_H

#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
