/* Element types as safetensors spells them, and the exact scalar conversions
 * the quantizer needs (bf16/f16 in, fp8 e4m3fn out), bit for bit as torch. */
#ifndef FF_DTYPE_H
#define FF_DTYPE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

typedef enum {
    FF_DT_INVALID = 0,
    FF_DT_BOOL, FF_DT_U8, FF_DT_I8, FF_DT_F8_E4M3, FF_DT_F8_E5M2,
    FF_DT_I16, FF_DT_U16, FF_DT_F16, FF_DT_BF16,
    FF_DT_I32, FF_DT_U32, FF_DT_F32,
    FF_DT_I64, FF_DT_U64, FF_DT_F64,
    FF_DT_COUNT
} ff_dtype;

ff_dtype ff_dtype_parse(const char *name);   /* FF_DT_INVALID if unknown */
const char *ff_dtype_name(ff_dtype t);
size_t ff_dtype_size(ff_dtype t);
/* The float types a weight may be quantized from. */
int ff_dtype_is_quantizable(ff_dtype t);
/* Index of the first NaN or infinity in n elements of a float dtype
 * (bf16, f16, f32, f64; fp8 e4m3 NaN), or -1 (also for integer dtypes). */
int64_t ff_first_nonfinite(ff_dtype t, const void *data, uint64_t n);
/* The largest magnitude byte (sign bit dropped) of n fp8 e4m3 bytes: e4m3
 * orders its magnitudes as their bits, 0x7f being NaN. An FP8 weight's
 * codes and an NVFP4 module's block scales are both scanned with it. */
uint8_t ff_e4m3_max_magnitude(const uint8_t *p, uint64_t n);

static inline float ff_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
    return v.f;
}

/* Round-to-nearest-even, NaN kept quiet: what torch's .to(bfloat16) does. */
static inline uint16_t ff_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t bias = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + bias) >> 16);
}

/* Rounds a float to the nearest bf16 value and back (the precision torch
 * computes in when an op's inputs are bf16). */
static inline float ff_round_bf16(float f) { return ff_bf16_to_f32(ff_f32_to_bf16(f)); }

float ff_f16_to_f32(uint16_t h);
uint16_t ff_f32_to_f16(float f);

/* fp8 e4m3fn (no infinities, 0x7f/0xff are NaN, max 448). Encoding rounds to
 * nearest even; values beyond 448 saturate (callers clamp first, as torch's
 * path does, so this only matters for robustness). */
uint8_t ff_f32_to_e4m3(float f);
float ff_e4m3_to_f32(uint8_t b);

/* Reads element i of a float tensor of type t as f32 (bf16, f16, f32).
 * memcpy, because a safetensors data section need not be aligned. */
static inline float ff_load_f32(const void *p, ff_dtype t, size_t i)
{
    const unsigned char *b = p;
    uint16_t h;
    float f;
    switch (t) {
    case FF_DT_BF16: memcpy(&h, b + 2 * i, 2); return ff_bf16_to_f32(h);
    case FF_DT_F16: memcpy(&h, b + 2 * i, 2); return ff_f16_to_f32(h);
    default: memcpy(&f, b + 4 * i, 4); return f;
    }
}

/* Rounds f to dtype t's precision and back (identity for f32). */
float ff_round_to(ff_dtype t, float f);

#endif
