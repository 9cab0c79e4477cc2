/* mx_span_add (the exponent span of an MXFP4 weight's nonzero groups, run
 * eight 32-groups a step where the CPU has AVX2) against the rule written
 * out here one 16-group at a time: rows of 1 to 40 32-groups (tails of
 * every length), codes drawn uniform, mostly zero, all -0 (magnitude 0),
 * one nonzero half, exponents 0 to 254 and one exponent throughout, and
 * spans added to one that already holds groups. */
#include <stdint.h>
#include <string.h>

#include "mx_exact.h"
#include "unit.h"

static uint32_t lcg(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

static void reference(mx_span *s, const uint8_t *packed, const uint8_t *e8m0, uint64_t groups)
{
    for (uint64_t g = 0; g < groups; g++) {
        int nonzero = 0;
        for (int b = 0; b < 8; b++)
            nonzero |= (packed[g * 8 + b] & 0x77) != 0;
        if (!nonzero)
            continue;
        int e = e8m0[g / 2];
        s->emin = !s->any || e < s->emin ? e : s->emin;
        s->emax = !s->any || e > s->emax ? e : s->emax;
        s->any = 1;
    }
    s->groups += groups;
}

/* mode 0 uniform, 1 mostly zero groups, 2 all -0 nibbles, 3 one nonzero half a group */
static uint8_t draw(uint32_t *x, int mode, uint64_t byte)
{
    uint8_t c = (uint8_t)lcg(x);
    if (mode == 1)
        return lcg(x) % 23 ? 0 : c;
    if (mode == 2)
        return 0x88;
    if (mode == 3)
        return byte % 16 < 8 && byte / 16 % 5 == 0 ? (uint8_t)(c | 1) : (uint8_t)(c & 0x88);
    return c;
}

static void span_matches_reference(void)
{
    static uint8_t packed[40 * 16 * 3], e8m0[40 * 3];
    uint32_t x = 7;
    int cases = 0;
    for (int round = 0; round < 2000; round++) {
        uint64_t rows = 1 + lcg(&x) % 3, cols = 32 * (1 + lcg(&x) % 40);
        uint64_t groups = rows * cols / 16;
        int mode = round % 4;
        for (uint64_t i = 0; i < groups * 8; i++)
            packed[i] = draw(&x, mode, i);
        uint8_t one = (uint8_t)(lcg(&x) % 255);
        for (uint64_t i = 0; i < groups / 2; i++)
            e8m0[i] = round % 7 == 0 ? one : (uint8_t)(lcg(&x) % 255);
        mx_span got = {0}, want = {0};
        if (round % 5 == 0) {
            /* a span already holding groups: an earlier member of the unit */
            got.any = want.any = 1;
            got.emin = want.emin = 100 + (int)(lcg(&x) % 20);
            got.emax = want.emax = got.emin + (int)(lcg(&x) % 20);
            got.groups = want.groups = 64;
        }
        mx_span_add(&got, packed, e8m0, rows, cols);
        reference(&want, packed, e8m0, groups);
        CHECK_EQ_INT(got.any, want.any);
        CHECK_EQ_INT(got.groups, want.groups);
        if (want.any) {
            CHECK_EQ_INT(got.emin, want.emin);
            CHECK_EQ_INT(got.emax, want.emax);
        }
        cases++;
    }
    CHECK_EQ_INT(cases, 2000);
}

/* Contiguous rows for mx_rows. */
typedef struct flat_rows {
    const uint8_t *packed, *e8m0;
    uint64_t cols;
} flat_rows;

static const uint8_t *flat_codes(const void *ctx, uint64_t r)
{
    const flat_rows *f = ctx;
    return f->packed + r * (f->cols / 2);
}

static const uint8_t *flat_exps(const void *ctx, uint64_t r)
{
    const flat_rows *f = ctx;
    return f->e8m0 + r * (f->cols / 32);
}

/* mx_span_by_levels over one or two weights == mx_span_add over all their
 * rows, whenever it decides; it declines only where more than `levels`
 * levels at an end hold nothing but zero groups. Zero groups are planted
 * at the top and bottom exponents (padding under 2^-127, a pruned block),
 * -0 nibbles, one nonzero half, all-zero weights. */
static void span_by_levels_matches(void)
{
    static uint8_t packed[2][40 * 16 * 3], e8m0[2][40 * 3];
    uint32_t x = 11;
    int decided = 0, declined = 0;
    for (int round = 0; round < 3000; round++) {
        size_t n = 1 + round % 2;
        uint64_t rows = 1 + lcg(&x) % 3, cols = 32 * (1 + lcg(&x) % 40), groups = rows * cols / 16;
        flat_rows f[2];
        mx_rows w[2];
        mx_span want = {0};
        uint64_t present[4] = {0};
        for (size_t k = 0; k < n; k++) {
            int mode = (round / 2 + (int)k) % 4;
            for (uint64_t i = 0; i < groups * 8; i++)
                packed[k][i] = round % 17 == 3 ? 0 : draw(&x, mode, i);
            for (uint64_t i = 0; i < groups / 2; i++)
                e8m0[k][i] = (uint8_t)(round % 3 ? 120 + lcg(&x) % 12 : lcg(&x) % 255);
            for (uint64_t i = 0; round % 4 == 1 && i < groups / 2; i += 3) {   /* zero groups at the ends */
                e8m0[k][i] = (uint8_t)(i % 2 ? 0 : 200 + lcg(&x) % 3);
                memset(packed[k] + i * 16, lcg(&x) % 2 ? 0x88 : 0, 16);
            }
            f[k] = (flat_rows){.packed = packed[k], .e8m0 = e8m0[k], .cols = cols};
            w[k] = (mx_rows){.codes = flat_codes, .exps = flat_exps, .ctx = &f[k], .rows = rows, .cols = cols};
            mx_exps_present(&w[k], 0, rows, present);
            mx_span_add(&want, packed[k], e8m0[k], rows, cols);
        }
        mx_span got = {0};
        if (!mx_span_by_levels(w, n, present, 4, &got)) {
            declined++;
            continue;
        }
        decided++;
        CHECK_EQ_INT(got.any, want.any);
        CHECK_EQ_INT(got.groups, want.groups);
        CHECK_EQ_INT(got.emin, want.emin);
        CHECK_EQ_INT(got.emax, want.emax);
    }
    CHECK(decided > 1500);
    CHECK(declined > 50);   /* all-zero weights, and zero levels past the limit, go the full way */
}

int main(void)
{
    RUN(span_matches_reference);
    RUN(span_by_levels_matches);
    return UNIT_END();
}
