#include "dtype.h"

#include <math.h>
#include <string.h>

#include "vectorize.h"

static const struct { const char *name; size_t size; } k_dtypes[FF_DT_COUNT] = {
    [FF_DT_BOOL] = {"BOOL", 1},       [FF_DT_U8] = {"U8", 1},
    [FF_DT_I8] = {"I8", 1},           [FF_DT_F8_E4M3] = {"F8_E4M3", 1},
    [FF_DT_F8_E5M2] = {"F8_E5M2", 1}, [FF_DT_I16] = {"I16", 2},
    [FF_DT_U16] = {"U16", 2},         [FF_DT_F16] = {"F16", 2},
    [FF_DT_BF16] = {"BF16", 2},       [FF_DT_I32] = {"I32", 4},
    [FF_DT_U32] = {"U32", 4},         [FF_DT_F32] = {"F32", 4},
    [FF_DT_I64] = {"I64", 8},         [FF_DT_U64] = {"U64", 8},
    [FF_DT_F64] = {"F64", 8},
};

ff_dtype ff_dtype_parse(const char *name)
{
    for (int t = 1; t < FF_DT_COUNT; t++)
        if (k_dtypes[t].name && strcmp(k_dtypes[t].name, name) == 0)
            return (ff_dtype)t;
    return FF_DT_INVALID;
}

const char *ff_dtype_name(ff_dtype t)
{
    return (t > 0 && t < FF_DT_COUNT) ? k_dtypes[t].name : "INVALID";
}

size_t ff_dtype_size(ff_dtype t)
{
    return (t > 0 && t < FF_DT_COUNT) ? k_dtypes[t].size : 0;
}

int ff_dtype_is_quantizable(ff_dtype t)
{
    return t == FF_DT_BF16 || t == FF_DT_F16 || t == FF_DT_F32;
}

float ff_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        /* subnormal: value = man * 2^-24, exact in f32 */
        float f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    if (exp == 31)
        v.u = sign | 0x7f800000u | (man << 13);
    else
        v.u = sign | ((exp + 112) << 23) | (man << 13);
    return v.f;
}

uint16_t ff_f32_to_f16(float f)
{
    union { float f; uint32_t u; } v = { .f = f };
    uint16_t sign = (uint16_t)((v.u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f))
        return sign | 0x7e00u;
    if (a >= 65520.0f)
        return sign | 0x7c00u;
    if (a < 0x1p-14f) {
        /* subnormal range: quantum 2^-24; rint rounds half to even */
        return sign | (uint16_t)rintf(a * 0x1p24f);
    }
    uint32_t u = v.u & 0x7fffffffu;
    uint32_t bias = 0xfffu + ((u >> 13) & 1u);
    u += bias;
    return sign | (uint16_t)(((u >> 23) - 112) << 10 | ((u >> 13) & 0x3ffu));
}

float ff_e4m3_to_f32(uint8_t b)
{
    int sign = b & 0x80, exp = (b >> 3) & 0xf, man = b & 7;
    float f;
    if (exp == 0xf && man == 7)
        return NAN;
    if (exp == 0)
        f = (float)man * 0x1p-9f;              /* subnormal: man/8 * 2^-6 */
    else
        f = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -f : f;
}

uint8_t ff_f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7e;
    if (a < 0x1p-6f) {
        /* subnormals are multiples of 2^-9; rintf is round-half-even */
        int m = (int)rintf(a * 0x1p9f);
        return sign | (uint8_t)m;               /* m == 8 is the smallest normal */
    }
    int e;
    float m = frexpf(a, &e);                    /* a = m * 2^e, m in [0.5,1) */
    /* 3 mantissa bits after the leading one: scale to [8,16) and round */
    int q = (int)rintf(m * 16.0f);              /* in [8,16] */
    e -= 1;                                     /* a = (q/8) * 2^e */
    if (q == 16) { q = 8; e += 1; }
    int be = e + 7;
    if (be > 15 || (be == 15 && q - 8 == 7))
        return sign | 0x7e;
    return sign | (uint8_t)(be << 3) | (uint8_t)(q - 8);
}

float ff_round_to(ff_dtype t, float f)
{
    switch (t) {
    case FF_DT_BF16: return ff_round_bf16(f);
    case FF_DT_F16: return ff_f16_to_f32(ff_f32_to_f16(f));
    default: return f;
    }
}

/* Exponent all ones is NaN or infinity: checked on the bits. 16-bit floats
 * (the common case) go through a branch-free block test: (h & exp) + exp_lsb
 * carries into bit 15 only when every exponent bit is set, and never out of
 * the 16-bit lane, so four lanes go through one 64-bit add (GCC 12 at -O2
 * left the 16-bit loop scalar: 3 GB/s, 9% of a quantize). Only a block that
 * has one is searched element by element. */
#define NONFINITE_BLOCK 4096

static int block_has_nonfinite16(const uint16_t *h, size_t n, uint16_t exp, uint16_t lsb)
{
    uint64_t exp4 = exp * 0x0001000100010001ull, lsb4 = lsb * 0x0001000100010001ull, acc = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t w;
        memcpy(&w, h + i, 8);
        acc |= (w & exp4) + lsb4;
    }
    for (; i < n; i++)
        acc |= (uint16_t)((h[i] & exp) + lsb);
    return (acc & 0x8000800080008000ull) != 0;
}

static int is_nonfinite(ff_dtype t, const uint8_t *b, uint64_t i)
{
    switch (t) {
    case FF_DT_BF16: { uint16_t h; memcpy(&h, b + 2 * i, 2); return (h & 0x7f80u) == 0x7f80u; }
    case FF_DT_F16: { uint16_t h; memcpy(&h, b + 2 * i, 2); return (h & 0x7c00u) == 0x7c00u; }
    case FF_DT_F32: { uint32_t w; memcpy(&w, b + 4 * i, 4); return (w & 0x7f800000u) == 0x7f800000u; }
    case FF_DT_F64: { uint64_t w; memcpy(&w, b + 8 * i, 8); return (w & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; }
    case FF_DT_F8_E4M3: return (b[i] & 0x7fu) == 0x7fu;
    default: return 0;
    }
}

/* Branch-free, so it vectorizes (pmaxub). */
VECTORIZE_LOOP uint8_t ff_e4m3_max_magnitude(const uint8_t *p, uint64_t n)
{
    uint8_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b = p[i] & 0x7f;
        m = b > m ? b : m;
    }
    return m;
}

int64_t ff_first_nonfinite(ff_dtype t, const void *data, uint64_t n)
{
    const uint8_t *b = data;
    int half = t == FF_DT_BF16 || t == FF_DT_F16;
    if (t != FF_DT_F32 && t != FF_DT_F64 && t != FF_DT_F8_E4M3 && !half)
        return -1;
    uint16_t exp = t == FF_DT_BF16 ? 0x7f80u : 0x7c00u, lsb = t == FF_DT_BF16 ? 0x0080u : 0x0400u;
    for (uint64_t i0 = 0; i0 < n; i0 += NONFINITE_BLOCK) {
        uint64_t len = n - i0 < NONFINITE_BLOCK ? n - i0 : NONFINITE_BLOCK;
        /* 16-bit data is 2-byte aligned in every safetensors file fp4forge accepts */
        if (half && ((uintptr_t)b & 1) == 0 && !block_has_nonfinite16((const uint16_t *)b + i0, len, exp, lsb))
            continue;
        for (uint64_t i = i0; i < i0 + len; i++)
            if (is_nonfinite(t, b, i))
                return (int64_t)i;
    }
    return -1;
}
