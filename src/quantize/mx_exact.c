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

void mx_exps_present(const mx_rows *w, uint64_t r0, uint64_t r1, uint64_t present[4])
{
    /* a byte stored an exponent: or-ing bits into present made each
     * exponent wait on the last (12% of an MXFP4 job's samples) */
    uint8_t seen[256] = {0};
    for (uint64_t r = r0; r < r1; r++) {
        const uint8_t *e = w->exps(w->ctx, r);
        for (uint64_t j = 0; j < w->cols / 32; j++)
            seen[e[j]] = 1;
    }
    for (int i = 0; i < 256; i++)
        present[i >> 6] |= (uint64_t)seen[i] << (i & 63);
}

/* Does a 32-group of exponent e hold a nonzero code in any of the n
 * weights? The exponents are searched by memchr; only their groups' codes
 * are read. */
static int level_nonzero(const mx_rows *w, size_t n, uint8_t e)
{
    for (size_t k = 0; k < n; k++)
        for (uint64_t r = 0; r < w[k].rows; r++) {
            const uint8_t *ex = w[k].exps(w[k].ctx, r), *end = ex + w[k].cols / 32, *q = ex;
            while ((q = memchr(q, e, (size_t)(end - q))) != NULL) {
                const uint8_t *p = w[k].codes(w[k].ctx, r) + (q - ex) * 16;
                if (nonzero16(p) || nonzero16(p + 8))
                    return 1;
                q++;
            }
        }
    return 0;
}

/* The first level from `from` on (step +1 or -1) that is present and holds
 * a nonzero group, or -1 (none, or more than `levels` tried). */
static int first_nonzero_level(const mx_rows *w, size_t n, const uint64_t present[4], int from, int step, int levels)
{
    for (int e = from, tried = 0; e >= 0 && e <= 255; e += step) {
        if (!(present[e >> 6] >> (e & 63) & 1))
            continue;
        if (level_nonzero(w, n, (uint8_t)e))
            return e;
        if (++tried >= levels)
            return -1;
    }
    return -1;
}

int mx_span_by_levels(const mx_rows *w, size_t n, const uint64_t present[4], int levels, mx_span *s)
{
    int top = first_nonzero_level(w, n, present, 255, -1, levels);
    int bottom = top < 0 ? -1 : first_nonzero_level(w, n, present, 0, 1, levels);
    if (bottom < 0)
        return 0;
    *s = (mx_span){.emin = bottom, .emax = top, .any = 1};
    for (size_t k = 0; k < n; k++)
        s->groups += w[k].rows * (w[k].cols / 16);
    return 1;
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
