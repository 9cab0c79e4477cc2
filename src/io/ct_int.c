#include "ct_int.h"

#include <float.h>
#include <string.h>

#include "vectorize.h"

/* What one scale makes of each of the 16 codes: the reference's product,
 * rounded as its dtype chain rounds it. */
static void group_table(float s, ff_dtype sd, uint16_t tab[16])
{
    for (int k = 0; k < 16; k++) {
        float v = (float)(k - 8) * s;   /* f32 multiply: what torch does for each dtype */
        if (sd == FF_DT_F16)
            v = ff_f16_to_f32(ff_f32_to_f16(v));   /* the product lands in f16 first */
        tab[k] = ff_f32_to_bf16(v);
    }
}

/* group is a multiple of 8 (qs_config refuses others): a word never
 * straddles two groups. */
static void decode_row(const uint8_t *words, const uint8_t *scales, ff_dtype sd, uint64_t K, uint64_t group,
                       uint16_t *out)
{
    uint16_t tab[16];
    for (uint64_t g = 0; g < K / group; g++) {
        group_table(ff_load_f32(scales, sd, g), sd, tab);
        for (uint64_t c = g * group; c < (g + 1) * group; c += 8) {
            uint32_t w;
            memcpy(&w, words + (c / 8) * 4, 4);   /* little-endian, as safetensors stores it */
            for (int i = 0; i < 8; i++, w >>= 4)
                out[c + i] = tab[w & 15];
        }
    }
}

void ctint_decode_rows(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K, uint64_t group,
                       uint64_t r0, uint64_t n, uint16_t *out)
{
    uint64_t wbytes = ctint_row_words(K) * 4, sbytes = (K / group) * ff_dtype_size(sd);
    for (uint64_t r = 0; r < n; r++)
        decode_row(packed + (r0 + r) * wbytes, scales + (r0 + r) * sbytes, sd, K, group, out + r * K);
}

/* |decoded value| of code magnitude m under a scale of magnitude s: the
 * decoder's rounding chain (group_table), which is odd, so the sign of
 * the code and of the scale do not change the magnitude. */
static float decoded_abs(int m, float s, ff_dtype sd)
{
    float v = (float)m * s;
    if (sd == FF_DT_F16)
        v = ff_f16_to_f32(ff_f32_to_f16(v));
    return ff_bf16_to_f32(ff_f32_to_bf16(v));
}

/* A scale's magnitude as bits, which order as the magnitudes do. */
static uint32_t scale_bits(const uint8_t *scales, ff_dtype sd, uint64_t i)
{
    if (sd == FF_DT_F32) {
        uint32_t u;
        memcpy(&u, scales + 4 * i, 4);
        return u & 0x7fffffffu;
    }
    uint16_t h;
    memcpy(&h, scales + 2 * i, 2);
    return h & 0x7fffu;
}

static float scale_of_bits(uint32_t b, ff_dtype sd)
{
    if (sd == FF_DT_F32) {
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    return sd == FF_DT_F16 ? ff_f16_to_f32((uint16_t)b) : ff_bf16_to_f32((uint16_t)b);
}

/* The largest scale magnitude bits of n scales. */
VECTORIZE_LOOP static uint32_t top_bits16(const uint8_t *scales, uint64_t n)
{
    uint16_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, scales + 2 * i, 2);
        h &= 0x7fffu;
        m = h > m ? h : m;
    }
    return m;
}

VECTORIZE_LOOP static uint32_t top_bits32(const uint8_t *scales, uint64_t n)
{
    uint32_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, scales + 4 * i, 4);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

/* The largest |code - 8| of a group's codes (bytes p[0, group / 2)). */
static int group_top_code(const uint8_t *p, uint64_t group)
{
    static const uint8_t mag[16] = {8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7};
    int m = 0;
    for (uint64_t i = 0; i < group / 2; i++) {
        int a = mag[p[i] & 15], b = mag[p[i] >> 4];
        m = a > m ? a : m;
        m = b > m ? b : m;
    }
    return m;
}

/* The largest scale bits whose code 8 decodes to at most best: groups at
 * or below them cannot raise it (decoded_abs is monotone in the scale). */
static uint32_t last_bits_within(float best, uint32_t top, ff_dtype sd)
{
    uint32_t lo = 0, hi = top;   /* decoded_abs(8, lo) <= best < decoded_abs(8, top) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (decoded_abs(8, scale_of_bits(mid, sd), sd) <= best)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Any of scales [i, end) with magnitude bits in (floor, ceil]: a branch-free
 * pass the compiler vectorizes, so the bands below cost a read of the
 * scales, not a loop with a branch a scale. */
VECTORIZE_LOOP static int any_in_band(const uint8_t *scales, ff_dtype sd, uint64_t i, uint64_t end, uint32_t floor,
                                      uint32_t ceil)
{
    unsigned any = 0;
    if (sd == FF_DT_F32) {
        for (; i < end; i++) {
            uint32_t u;
            memcpy(&u, scales + 4 * i, 4);
            u &= 0x7fffffffu;
            any |= (u > floor) & (u <= ceil);
        }
        return any != 0;
    }
    for (; i < end; i++) {
        uint16_t h;
        memcpy(&h, scales + 2 * i, 2);
        h &= 0x7fffu;
        any |= (h > floor) & (h <= ceil);
    }
    return any != 0;
}

/* The groups whose scale bits lie in (floor, ceil]: each one's decoded max
 * raises best; stops once best reaches bound. */
static float scan_band(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t N, uint64_t K,
                       uint64_t group, uint32_t floor, uint32_t ceil, float best, float bound)
{
    enum { CHUNK = 256 };
    uint64_t ng = K / group, n = N * ng, wbytes = ctint_row_words(K) * 4;
    for (uint64_t c = 0; c < n && best < bound; c += CHUNK) {
        uint64_t end = n - c < CHUNK ? n : c + CHUNK;
        if (!any_in_band(scales, sd, c, end, floor, ceil))
            continue;
        for (uint64_t i = c; i < end; i++) {
            uint32_t b = scale_bits(scales, sd, i);
            if (b <= floor || b > ceil)
                continue;
            const uint8_t *p = packed + (i / ng) * wbytes + (i % ng) * (group / 2);
            float v = decoded_abs(group_top_code(p, group), scale_of_bits(b, sd), sd);
            best = v > best ? v : best;
        }
    }
    return best;
}

int ctint_top_absmax(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t N, uint64_t K,
                     uint64_t group, float *amax)
{
    uint64_t n = N * (K / group);
    uint32_t top = sd == FF_DT_F32 ? top_bits32(scales, n) : top_bits16(scales, n);
    uint32_t inf = sd == FF_DT_F32 ? 0x7f800000u : sd == FF_DT_F16 ? 0x7c00u : 0x7f80u;
    float bound = decoded_abs(8, scale_of_bits(top, sd), sd), best = 0.0f;
    if (top >= inf || !(bound <= FLT_MAX))
        return 1;   /* a value is NaN or infinite: decoding names it */
    /* Bands of scales from the top down, each twice as wide as the last:
     * with symmetric scales (amax / 7.5) every group holds a 7 or an 8, so
     * the top bands soon give a best that no lower scale's 8 can pass, and
     * the groups below it are never read. */
    uint32_t floor = 0, ceil = top, width = sd == FF_DT_F32 ? 1u << 16 : 1u;
    while (ceil > floor && best < bound) {
        uint32_t lo = ceil - floor > width ? ceil - width : floor;
        best = scan_band(packed, scales, sd, N, K, group, lo, ceil, best, bound);
        ceil = lo;
        width = width < (1u << 30) ? 2 * width : width;
        if (best > 0.0f && best < bound) {
            uint32_t f = last_bits_within(best, top, sd);
            floor = f > floor ? f : floor;
        }
    }
    *amax = best;
    return 0;
}
