#include "nvfp4_thresh.h"

#include <string.h>

#include "nvfp4.h"

/* Past +Inf (0x7f80) only NaN bits live; the scalar kernel puts NaN in
 * bucket 7 with no sign, so an edge that finite input never reaches sits
 * here and NaN is handled by the caller's sign test. */
#define MAG_BEYOND_INF 0x7f81u

/* What the scalar kernel decides for |x| = bf16(mag): bucket >= k for
 * k in 1..7, and for k == 0 whether x / eff is nonzero. */
static int reaches(float eff, uint32_t mag, int k)
{
    if (mag >= MAG_BEYOND_INF)
        return 1;
    float y = ff_bf16_to_f32((uint16_t)mag) / eff;
    return k ? (nvfp4_fp4_code(y) & 7) >= k : y > 0.0f;
}

/* The bucket edges of CT's cast_to_fp4 times eff (and for the sign edge
 * half the smallest subnormal times eff, in two steps so it does not
 * underflow early) land within an ulp or two of the answer, so the walk is
 * usually two evaluations. The scalar decision is monotone in mag, so the
 * walk ends at the one edge from any start. */
static uint32_t first_reaching(float eff, int k)
{
    static const float edge_y[8] = {0x1p-75f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float gx = edge_y[k] * eff;
    if (k == 0)
        gx *= 0x1p-75f;
    uint32_t bits;
    memcpy(&bits, &gx, sizeof bits);
    uint32_t g = bits >> 16;
    if (g > MAG_BEYOND_INF)
        g = MAG_BEYOND_INF;
    while (!reaches(eff, g, k))
        g++;
    while (g > 0 && reaches(eff, g - 1, k))
        g--;
    return g;
}

void nvfp4_thr_init(nvfp4_thr_table *t, float gs)
{
    t->gs = gs;
    memset(t->built_bits, 0, sizeof t->built_bits);
}

static void build_entry(nvfp4_thr_table *t, uint8_t scale_code)
{
    /* eff exactly as the kernels compute it: decoded e4m3 over gs, in f32 */
    float eff = ff_e4m3_to_f32(scale_code) / t->gs;
    nvfp4_thr *e = &t->code[scale_code];
    for (int k = 0; k < 8; k++) {
        /* slot 7 holds the nonzero edge (k == 0 in reaches) */
        uint32_t first = first_reaching(eff, k < 7 ? k + 1 : 0);
        uint32_t below = first - 1;   /* first >= 1: 0 / eff is 0, bucket 0 */
        e->edge[k] = (int32_t)(below | below << 16);
    }
    t->built_bits[scale_code >> 5] |= 1u << (scale_code & 31);
}

void nvfp4_thr_build_codes(nvfp4_thr_table *t, const int32_t *codes, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!(t->built_bits[(codes[i] & 0x7f) >> 5] >> (codes[i] & 31) & 1u))
            build_entry(t, (uint8_t)(codes[i] & 0x7f));
}
