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

void mx_span_add(mx_span *s, const uint8_t *packed, const uint8_t *e8m0, uint64_t rows, uint64_t cols)
{
    uint64_t groups = rows * (cols / 16);
    for (uint64_t g = 0; g < groups; g++) {
        if (!nonzero16(packed + g * 8))
            continue;
        int e = e8m0[g / 2];   /* a row's 32-groups are its 16-groups in pairs */
        if (!s->any || e < s->emin)
            s->emin = e;
        if (!s->any || e > s->emax)
            s->emax = e;
        s->any = 1;
    }
    s->groups += groups;
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
