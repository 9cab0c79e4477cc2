/* ff_first_nonfinite: the bit test that keeps NaN/Inf out of kept tensors,
 * at every position of a block boundary, for each float dtype. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "unit.h"

static void plant_and_find(ff_dtype t, size_t n)
{
    size_t esz = ff_dtype_size(t);
    uint8_t *b = calloc(n, esz);
    CHECK(ff_first_nonfinite(t, b, n) == -1);
    size_t spots[] = {0, 1, 4095, 4096, 4097, n / 2, n - 1};
    for (size_t k = 0; k < sizeof spots / sizeof *spots; k++) {
        size_t i = spots[k];
        for (int inf = 0; inf < 2; inf++) {
            uint8_t *p = b + i * esz;
            if (t == FF_DT_BF16) { uint16_t v = inf ? 0xff80 : 0x7fc1; memcpy(p, &v, 2); }
            if (t == FF_DT_F16) { uint16_t v = inf ? 0x7c00 : 0xfe01; memcpy(p, &v, 2); }
            if (t == FF_DT_F32) { float v = inf ? -INFINITY : NAN; memcpy(p, &v, 4); }
            if (t == FF_DT_F8_E4M3) *p = inf ? 0xff : 0x7f;
            CHECK(ff_first_nonfinite(t, b, n) == (int64_t)i);
            memset(p, 0, esz);
        }
    }
    /* the largest finite values are not flagged */
    if (t == FF_DT_BF16) { uint16_t v = 0x7f7f; memcpy(b, &v, 2); }
    if (t == FF_DT_F16) { uint16_t v = 0x7bff; memcpy(b, &v, 2); }
    if (t == FF_DT_F8_E4M3) *b = 0x7e;
    CHECK(ff_first_nonfinite(t, b, n) == -1);
    free(b);
}

static void nonfinite_every_dtype(void)
{
    plant_and_find(FF_DT_BF16, 10000);
    plant_and_find(FF_DT_F16, 10000);
    plant_and_find(FF_DT_F32, 10000);
    plant_and_find(FF_DT_F8_E4M3, 10000);
    int32_t ints[4] = {-1, 0x7f800000, 0, 0};
    CHECK(ff_first_nonfinite(FF_DT_I32, ints, 4) == -1);
}

int main(void)
{
    RUN(nonfinite_every_dtype);
    return UNIT_END();
}
