/* Exact E2M1 thresholds for bf16 input. For one e4m3 scale code and one
 * global scale, a bf16 element's code depends only on its bits: the bucket
 * of |x| / eff is monotone in |x|, and |x|'s bits order as its value. So
 * eight 16-bit edges, found once with the scalar kernel's own arithmetic,
 * give the scalar kernel's codes with integer compares and no division. */
#ifndef FF_NVFP4_THRESH_H
#define FF_NVFP4_THRESH_H

#include <stdint.h>

/* edge[k] for k < 7: one less than the smallest |x| bits whose bucket is
 * above k; edge[7]: one less than the smallest |x| bits with x / eff != 0
 * (below it a negative x gives -0.0 and no sign bit). Each 16-bit edge is
 * stored twice in its int32 so one dword broadcast fills a vector. */
typedef struct {
    int32_t edge[8];
} nvfp4_thr;

/* One call's table: edges are found the first time a scale code appears,
 * since 64 rows of real-geometry weights meet ~17 of the 126 codes. */
typedef struct {
    float gs;
    uint32_t built_bits[4];   /* code c's edges are built: bit c % 32 of word c / 32 */
    nvfp4_thr code[128];
} nvfp4_thr_table;

void nvfp4_thr_init(nvfp4_thr_table *t, float gs);

/* Builds the entries of the n codes that are missing; kept out of line and
 * cold so the kernel's vector registers need no spills around it. */
__attribute__((cold, noinline)) void nvfp4_thr_build_codes(nvfp4_thr_table *t, const int32_t *codes, unsigned n);

#endif
