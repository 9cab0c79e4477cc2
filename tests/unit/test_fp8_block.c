/* FP8-block decoding (src/io/fp8_block.h): every e4m3 code times a block
 * scale, in f32, rounded once to bf16 (transformers' Fp8Dequantize and
 * DeepSeek's weight_dequant); the block each element takes its scale from,
 * edge blocks partial; row ranges decode the same bytes as the whole. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "fp8_block.h"
#include "unit.h"

/* All 256 codes (NaN codes excepted) against a reference written
 * independently: sign, exponent, mantissa by hand, the product in double
 * (exact for 4-bit x 24-bit mantissas), then RNE to bf16 via f32. */
static double e4m3_ref(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

static void test_every_code(void)
{
    static const float scales[] = {1.0f, 0.0001234f, 3.5e-7f, 1.7f, 448.0f / 7.0f};
    uint8_t w[256];
    for (int i = 0; i < 256; i++)
        w[i] = (uint8_t)i;
    uint16_t out[256];
    for (size_t k = 0; k < sizeof scales / sizeof *scales; k++) {
        float s2[2] = {scales[k], scales[k]};
        fp8b_decode_rows(w, s2, 1, 256, 0, 1, out);   /* [1, 256]: two column blocks */
        for (int i = 0; i < 256; i++) {
            if ((i & 0x7f) == 0x7f) {
                CHECK(isnan(ff_bf16_to_f32(out[i])));
                continue;
            }
            float prod = (float)(e4m3_ref((uint8_t)i) * (double)scales[k]);   /* exact product, one rounding to f32 */
            CHECK_EQ_INT(out[i], ff_f32_to_bf16(prod));
        }
    }
}

/* [N, K] = [300, 200]: scale grid [3, 2], the last row block 44 rows, the
 * last column block 72 columns. Each element must take scale[r/128][c/128]. */
static void test_partial_blocks(void)
{
    enum { N = 300, K = 200, SR = 3, SC = 2 };
    uint8_t *w = malloc(N * K);
    uint16_t *out = malloc(N * K * 2), *rows = malloc(N * K * 2);
    float s[SR * SC];
    for (int i = 0; i < SR * SC; i++)
        s[i] = ldexpf(1.0f, i - 3) * 1.25f;
    for (int i = 0; i < N * K; i++)
        w[i] = (uint8_t)((i * 37 + 11) & 0x7e);   /* no NaN codes */
    fp8b_decode_rows(w, s, N, K, 0, N, out);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < K; c++) {
            float want = ff_e4m3_to_f32(w[r * K + c]) * s[(r / 128) * SC + c / 128];
            CHECK_EQ_INT(out[r * K + c], ff_f32_to_bf16(want));
        }
    /* row ranges that straddle block rows decode the same bytes */
    for (int r0 = 0; r0 < N; r0 += 77) {
        int n = N - r0 < 77 ? N - r0 : 77;
        fp8b_decode_rows(w, s, N, K, (uint64_t)r0, (uint64_t)n, rows + r0 * K);
    }
    CHECK(memcmp(out, rows, N * K * 2) == 0);
    free(w);
    free(out);
    free(rows);
}

/* the quantization_config a source must carry to be decoded */
static void test_config(void)
{
    const char *why;
    json_t *c = json_loads("{\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", "
                           "\"weight_block_size\": [128, 128], \"activation_scheme\": \"dynamic\"}}", 0, NULL);
    CHECK(fp8b_config(c, &why) == 1);
    json_object_set_new(json_object_get(c, "quantization_config"), "weight_block_size", json_null());
    CHECK(fp8b_config(c, &why) == -1 && why);
    json_decref(c);
    c = json_loads("{\"quantization_config\": {\"quant_method\": \"compressed-tensors\"}}", 0, NULL);
    CHECK(fp8b_config(c, &why) == -1);
    json_decref(c);
    c = json_loads("{\"model_type\": \"deepseek_v3\"}", 0, NULL);
    CHECK(fp8b_config(c, &why) == 0);
    json_decref(c);
}

int main(void)
{
    RUN(test_every_code);
    RUN(test_partial_blocks);
    RUN(test_config);
    return UNIT_END();
}
