/* The pseudo-random draw the single-core kernel benches in bench/ fill their
 * matrices with: xorshift64, so each bench's matrix is the same every run. */
#ifndef FF_BENCH_RAND_H
#define FF_BENCH_RAND_H

#include <stdint.h>

static inline uint64_t bench_next(uint64_t *r)
{
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

#endif
