/* The FP8 weight-only modules of a mixed output (src/io/decode_fp8.c):
 * which tensors make one (an NVFP4 module's weight_scale does not), the
 * dtype and shape checks, the decode compressed-tensors' Naive decompressor
 * gives (code x scale rounded once to the scale's dtype), and the scales
 * and codes verify and dequantize refuse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "decode_fp8.h"
#include "unit.h"

/* A safetensors image: "m" FP8 [2, 4] with a BF16 [2, 1] scale of type
 * scale_dt, and "p" an NVFP4 module (weight_packed, weight_scale,
 * weight_global_scale). malloc'd, its size in *n. */
static uint8_t *image(const char *weight_dt, const uint8_t codes[8], const uint16_t scales[2], size_t *n)
{
    char hdr[1024];
    int h = snprintf(hdr, sizeof hdr,
                     "{\"m.weight\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                     "\"m.weight_scale\":{\"dtype\":\"BF16\",\"shape\":[2,1],\"data_offsets\":[8,12]},"
                     "\"p.weight_packed\":{\"dtype\":\"U8\",\"shape\":[1,8],\"data_offsets\":[12,20]},"
                     "\"p.weight_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[20,21]},"
                     "\"p.weight_global_scale\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[21,25]}}",
                     weight_dt);
    uint8_t *b = calloc(1, 8 + (size_t)h + 32);
    uint64_t len = (uint64_t)h;
    memcpy(b, &len, 8);
    memcpy(b + 8, hdr, (size_t)h);
    memcpy(b + 8 + h, codes, 8);
    memcpy(b + 8 + h + 8, scales, 4);
    float gs = 1.0f;
    memcpy(b + 8 + h + 21, &gs, 4);
    *n = 8 + (size_t)h + 25;
    return b;
}

static int open_image(ckpt *c, uint8_t *b, size_t n)
{
    ff_err e = {0};
    return ckpt_open_memory(c, "mem", NULL, 0, b, n, &e);
}

static void which_tensors(void)
{
    static const uint8_t codes[8] = {0};
    static const uint16_t scales[2] = {0x3f80, 0x3f80};
    size_t n;
    uint8_t *b = image("F8_E4M3", codes, scales, &n);
    ckpt c;
    char buf[64];
    CHECK_EQ_INT(open_image(&c, b, n), FF_OK);
    CHECK(fp8_module_of(&c, "m.weight", buf, sizeof buf) && strcmp(buf, "m") == 0);
    CHECK_EQ_INT(fp8_part(&c, "m.weight"), 1);
    CHECK_EQ_INT(fp8_part(&c, "m.weight_scale"), 2);
    CHECK_EQ_INT(fp8_part(&c, "p.weight_scale"), 0);   /* NVFP4's block scales */
    CHECK_EQ_INT(fp8_part(&c, "p.weight_packed"), 0);
    CHECK(fp8_module_of(&c, "m.weight", buf, 1) == NULL);   /* no room: not cut */
    ckpt_close(&c);
    free(b);
}

/* Each value once rounded: 1.875 x 1.0078125 = 1.88964844 is exact in f32
 * and rounds to bf16 1.890625 (0x3ff2); 448 x 2^-7, 2^-9 x 2^-7, -0. */
static void decode_as_ct(void)
{
    static const uint8_t codes[8] = {0x38, 0xb8, 0x3f, 0x00, 0x7e, 0x01, 0x80, 0x44};
    static const uint16_t scales[2] = {0x3f81, 0x3c00};
    static const uint16_t want[8] = {0x3f81, 0xbf81, 0x3ff2, 0x0000, 0x4060, 0x3780, 0x8000, 0x3cc0};
    size_t n;
    uint8_t *b = image("F8_E4M3", codes, scales, &n);
    ckpt c;
    fp8_module m;
    ff_err e = {0};
    uint16_t out[8];
    CHECK_EQ_INT(open_image(&c, b, n), FF_OK);
    CHECK_EQ_INT(fp8_find(&c, "m", &m, &e), FF_OK);
    CHECK_EQ_INT(m.rows, 2);
    CHECK_EQ_INT(m.cols, 4);
    CHECK_EQ_INT(m.dtype, FF_DT_BF16);
    fp8_decode_rows(&c, &m, 0, 2, out);
    for (int i = 0; i < 8; i++)
        if (out[i] != want[i])
            printf("  element %d: got %04x want %04x\n", i, out[i], want[i]);
    CHECK(memcmp(out, want, sizeof want) == 0);
    fp8_decode_rows(&c, &m, 1, 1, out);   /* a row alone: the same bits */
    CHECK(memcmp(out, want + 4, 8) == 0);
    uint64_t first = 99;
    float val;
    CHECK_EQ_INT(fp8_bad_scales(&c, &m, &first, &val), 0);
    CHECK_EQ_INT(fp8_nan_codes(&c, &m, &first), 0);
    fp8_module_free(&m);
    ckpt_close(&c);
    free(b);
}

static void refused(void)
{
    static const uint8_t codes[8] = {0x38, 0x7f, 0, 0, 0xff, 0, 0, 0};
    static const uint16_t scales[2] = {0x3f80, 0x0000}, nan_scales[2] = {0x7fc0, 0xbf80};
    size_t n;
    uint8_t *b = image("F8_E4M3", codes, scales, &n);
    ckpt c;
    fp8_module m;
    ff_err e = {0};
    uint64_t first = 99;
    float val = 1;
    CHECK_EQ_INT(open_image(&c, b, n), FF_OK);
    CHECK_EQ_INT(fp8_find(&c, "m", &m, &e), FF_OK);
    CHECK_EQ_INT(fp8_bad_scales(&c, &m, &first, &val), 1);   /* row 1's zero */
    CHECK_EQ_INT(first, 1);
    CHECK(val == 0.0f);
    CHECK_EQ_INT(fp8_nan_codes(&c, &m, &first), 2);           /* 0x7f and 0xff */
    CHECK_EQ_INT(first, 1);
    fp8_module_free(&m);
    ckpt_close(&c);
    free(b);
    b = image("F8_E4M3", codes, nan_scales, &n);   /* NaN, then negative */
    CHECK_EQ_INT(open_image(&c, b, n), FF_OK);
    CHECK_EQ_INT(fp8_find(&c, "m", &m, &e), FF_OK);
    CHECK_EQ_INT(fp8_bad_scales(&c, &m, &first, &val), 2);
    CHECK_EQ_INT(first, 0);
    fp8_module_free(&m);
    ckpt_close(&c);
    free(b);
    b = image("U8", codes, scales, &n);   /* the weight lost its dtype: found, then refused by name */
    CHECK_EQ_INT(open_image(&c, b, n), FF_OK);
    CHECK_EQ_INT(fp8_part(&c, "m.weight"), 1);
    CHECK_EQ_INT(fp8_find(&c, "m", &m, &e), FF_EIO);
    CHECK(strstr(e.msg, "tensor m.weight: FP8 module weight is U8") != NULL);
    fp8_module_free(&m);
    ckpt_close(&c);
    free(b);
}

int main(void)
{
    RUN(which_tensors);
    RUN(decode_as_ct);
    RUN(refused);
    return UNIT_END();
}
