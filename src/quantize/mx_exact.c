#include "mx_exact.h"

#include <math.h>
#include <string.h>

#include "dtype.h"

/* Does the 16-group at packed (8 bytes) hold a nonzero code? Bit 3 of a
 * code is its sign: -0 is zero. One 8-byte load: this runs on every group. */
static int nonzero16(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return (w & 0x7777777777777777ull) != 0;
}

/* The scalar span of 16-groups [g0, g1): a group counts when it holds a
 * nonzero code, with its 32-group's exponent. */
static void span_scalar(mx_span *s, const uint8_t *packed, const uint8_t *e8m0, uint64_t g0, uint64_t g1)
{
    for (uint64_t g = g0; g < g1; g++) {
        if (!nonzero16(packed + g * 8))
            continue;
        int e = e8m0[g / 2];   /* a row's 32-groups are its 16-groups in pairs */
        if (!s->any || e < s->emin)
            s->emin = e;
        if (!s->any || e > s->emax)
            s->emax = e;
        s->any = 1;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Eight 32-groups (256 bytes of codes, 8 exponents) a step. Each group's
 * two 8-byte halves are or-ed, masked to the magnitudes and compared with
 * zero; the flags are packed to four bytes a group, in the byte order a
 * shuffle of the exponents matches, and a zero group's exponent is made
 * 0xff for the minimum and 0 for the maximum. The span, on every MXFP4
 * weight, ran on one thread at ~12 cycles a group. Returns the 32-groups done. */
__attribute__((target("avx2"))) static uint64_t span_avx2(mx_span *s, const uint8_t *packed, const uint8_t *e8m0,
                                                           uint64_t pairs)
{
    const __m256i mag = _mm256_set1_epi8(0x77), order = _mm256_setr_epi8(
        0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6, 1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
    __m256i lo = _mm256_set1_epi8((char)0xff), hi = _mm256_setzero_si256(), seen = _mm256_setzero_si256();
    uint64_t p = 0;
    for (; p + 8 <= pairs; p += 8) {
        __m256i z[4];
        for (int i = 0; i < 4; i++) {
            __m256i t = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(packed + p * 16 + i * 32)), mag);
            t = _mm256_or_si256(t, _mm256_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
            z[i] = _mm256_cmpeq_epi64(t, _mm256_setzero_si256());
        }
        /* bytes: lane 0 groups 0 2 4 6, lane 1 groups 1 3 5 7, four each */
        __m256i zero = _mm256_packs_epi16(_mm256_packs_epi32(z[0], z[1]), _mm256_packs_epi32(z[2], z[3]));
        uint64_t e8;
        memcpy(&e8, e8m0 + p, sizeof e8);
        __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)e8), order);
        lo = _mm256_min_epu8(lo, _mm256_or_si256(e, zero));
        hi = _mm256_max_epu8(hi, _mm256_andnot_si256(zero, e));
        seen = _mm256_or_si256(seen, _mm256_andnot_si256(zero, _mm256_set1_epi8(1)));
    }
    if (!_mm256_testz_si256(seen, seen)) {
        uint8_t l[32], h[32];
        _mm256_storeu_si256((__m256i *)l, lo);
        _mm256_storeu_si256((__m256i *)h, hi);
        mx_span part = {.emin = 255, .emax = 0, .any = 1};
        for (int i = 0; i < 32; i++) {
            part.emin = l[i] < part.emin ? l[i] : part.emin;
            part.emax = h[i] > part.emax ? h[i] : part.emax;
        }
        mx_span_merge(s, &part);
    }
    return p;
}
#endif

void mx_span_add(mx_span *s, const uint8_t *packed, const uint8_t *e8m0, uint64_t rows, uint64_t cols)
{
    uint64_t groups = rows * (cols / 16), done = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        done = 2 * span_avx2(s, packed, e8m0, groups / 2);
#endif
    span_scalar(s, packed, e8m0, done, groups);
    s->groups += groups;
}

void mx_span_merge(mx_span *s, const mx_span *o)
{
    if (o->any) {
        s->emin = s->any && s->emin < o->emin ? s->emin : o->emin;
        s->emax = s->any && s->emax > o->emax ? s->emax : o->emax;
        s->any = 1;
    }
    s->groups += o->groups;
}

int mx_exact_k(const mx_span *s, int *k)
{
    if (!s->any) {
        *k = 0;   /* all zeros: any scale decodes them */
        return 1;
    }
    *k = MX_EXACT_MAX_POW - (s->emax - 127);
    return s->emax - s->emin <= MX_EXACT_MAX_POW - MX_EXACT_MIN_POW && *k >= -126 && *k <= 127;
}

void mx_exact_table(int k, uint8_t table[256])
{
    for (int e = 0; e < 256; e++) {
        int m = e - 127 + k;
        if (m < MX_EXACT_MIN_POW || m > MX_EXACT_MAX_POW)   /* an all-zero group: any scale will do */
            m = m < MX_EXACT_MIN_POW ? MX_EXACT_MIN_POW : MX_EXACT_MAX_POW;
        table[e] = ff_f32_to_e4m3(ldexpf(1.0f, m));
    }
}

void mx_exact_scales_by(const uint8_t table[256], const uint8_t *e8m0, uint64_t rows, uint64_t cols, uint8_t *scales)
{
    uint64_t pairs = rows * (cols / 32);
    for (uint64_t g = 0; g < pairs; g++)
        scales[2 * g] = scales[2 * g + 1] = table[e8m0[g]];
}

void mx_exact_scales(const uint8_t *e8m0, uint64_t rows, uint64_t cols, int k, uint8_t *scales)
{
    uint8_t table[256];
    mx_exact_table(k, table);
    mx_exact_scales_by(table, e8m0, rows, cols, scales);
}
