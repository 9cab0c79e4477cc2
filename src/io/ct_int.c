#include "ct_int.h"

#include <float.h>
#include <stdlib.h>
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

/* The largest magnitude bits of scales [i, end): branch-free, so the
 * compiler vectorizes it. */
VECTORIZE_LOOP static uint32_t top_bits16(const uint8_t *scales, uint64_t i, uint64_t end)
{
    uint16_t m = 0;
    for (; i < end; i++) {
        uint16_t h;
        memcpy(&h, scales + 2 * i, 2);
        h &= 0x7fffu;
        m = h > m ? h : m;
    }
    return m;
}

VECTORIZE_LOOP static uint32_t top_bits32(const uint8_t *scales, uint64_t i, uint64_t end)
{
    uint32_t m = 0;
    for (; i < end; i++) {
        uint32_t u;
        memcpy(&u, scales + 4 * i, 4);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

int ctint_tops_build(const uint8_t *scales, ff_dtype sd, uint64_t n, ctint_tops *t)
{
    *t = (ctint_tops){.nchunks = (n + CTINT_CHUNK - 1) / CTINT_CHUNK};
    t->chunk = malloc((t->nchunks ? t->nchunks : 1) * sizeof *t->chunk);
    if (!t->chunk)
        return -1;
    for (uint64_t c = 0; c < t->nchunks; c++) {
        uint64_t i = c * CTINT_CHUNK, end = n - i < CTINT_CHUNK ? n : i + CTINT_CHUNK;
        t->chunk[c] = sd == FF_DT_F32 ? top_bits32(scales, i, end) : top_bits16(scales, i, end);
        t->top = t->chunk[c] > t->top ? t->chunk[c] : t->top;
    }
    return 0;
}

void ctint_tops_free(ctint_tops *t)
{
    free(t->chunk);
    t->chunk = NULL;
}

static uint32_t inf_bits(ff_dtype sd)
{
    return sd == FF_DT_F32 ? 0x7f800000u : sd == FF_DT_F16 ? 0x7c00u : 0x7f80u;
}

int ctint_tops_finite(const ctint_tops *t, ff_dtype sd)
{
    return t->top < inf_bits(sd);
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

/* in[k] = 1 when scale i + k has magnitude bits in (floor, ceil], for k
 * up to end - i (at most CTINT_CHUNK): branch-free, so it vectorizes. */
VECTORIZE_LOOP static void band_flags(const uint8_t *scales, ff_dtype sd, uint64_t i, uint64_t end, uint32_t floor,
                                      uint32_t ceil, uint8_t *in)
{
    if (sd == FF_DT_F32) {
        for (uint64_t k = 0; k < end - i; k++) {
            uint32_t u;
            memcpy(&u, scales + 4 * (i + k), 4);
            u &= 0x7fffffffu;
            in[k] = (u > floor) & (u <= ceil);
        }
        return;
    }
    for (uint64_t k = 0; k < end - i; k++) {
        uint16_t h;
        memcpy(&h, scales + 2 * (i + k), 2);
        h &= 0x7fffu;
        in[k] = (h > floor) & (h <= ceil);
    }
}

/* The groups whose scale bits lie in (floor, ceil]: each one's decoded max
 * raises best; stops once best reaches bound. Chunks whose largest scale
 * is at or below floor are not read; in the others a vector pass flags
 * the band, read back eight flags a word. */
static float scan_band(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t N, uint64_t K,
                       uint64_t group, const ctint_tops *t, uint32_t floor, uint32_t ceil, float best, float bound)
{
    uint64_t ng = K / group, n = N * ng, wbytes = ctint_row_words(K) * 4;
    uint8_t in[CTINT_CHUNK];
    for (uint64_t c = 0; c < t->nchunks && best < bound; c++) {
        if (t->chunk[c] <= floor)
            continue;
        uint64_t i0 = c * CTINT_CHUNK, len = n - i0 < CTINT_CHUNK ? n - i0 : CTINT_CHUNK;
        band_flags(scales, sd, i0, i0 + len, floor, ceil, in);
        for (uint64_t k0 = 0; k0 < len; k0 += 8) {
            uint64_t word = 0;   /* flags are bytes 0 or 1: a set bit's byte is its scale */
            memcpy(&word, in + k0, len - k0 < 8 ? len - k0 : 8);
            for (; word; word &= word - 1) {
                uint64_t i = i0 + k0 + (uint64_t)(__builtin_ctzll(word) / 8);
                const uint8_t *p = packed + (i / ng) * wbytes + (i % ng) * (group / 2);
                float v = decoded_abs(group_top_code(p, group), scale_of_bits(scale_bits(scales, sd, i), sd), sd);
                best = v > best ? v : best;
            }
        }
    }
    return best;
}

int ctint_top_absmax(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t N, uint64_t K,
                     uint64_t group, const ctint_tops *t, float *amax)
{
    uint32_t top = t->top;
    float bound = decoded_abs(8, scale_of_bits(top, sd), sd), best = 0.0f;
    if (top >= inf_bits(sd) || !(bound <= FLT_MAX))
        return 1;   /* a value is NaN or infinite: decoding names it */
    /* Bands of scales from the top down, each twice as wide as the last:
     * with symmetric scales (amax / 7.5) every group holds a 7 or an 8, so
     * the top bands soon give a best that no lower scale's 8 can pass, and
     * the groups below it are never read. */
    uint32_t floor = 0, ceil = top, width = sd == FF_DT_F32 ? 1u << 16 : 1u;
    while (ceil > floor && best < bound) {
        uint32_t lo = ceil - floor > width ? ceil - width : floor;
        best = scan_band(packed, scales, sd, N, K, group, t, lo, ceil, best, bound);
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
