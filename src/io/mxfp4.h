/* compressed-tensors `mxfp4-pack-quantized` weights (OCP MXFP4: E2M1 codes,
 * two to a byte, low nibble first; one E8M0 exponent byte per 32 values),
 * decoded bit for bit as compressed-tensors 0.19's MXFP4PackedCompressor
 * .decompress: the exponent e becomes 2 ** (e - 127) in bf16
 * (decompress_mx_scale), the codes their E2M1 values in bf16
 * (unpack_fp4_from_uint8), and dequantize multiplies them in bf16 (an f32
 * product rounded once). code * 2^k is exact in bf16 for every e below 255
 * except past bf16's range (6 * 2^127 overflows), so this is RNE of the f32
 * product. e = 255 is NaN in the MX format (the reference would give Inf and
 * NaN): refused by the caller, never decoded. */
#ifndef FF_MXFP4_H
#define FF_MXFP4_H

#include <stdint.h>

#define MXFP4_GROUP 32
#define MXFP4_SCALE_NAN 255

/* The 16 values exponent byte e gives its codes (code k's value in tab[k]);
 * the vector decoders (qsource_simd.c) look up these very tables. */
void mxfp4_group_table(uint8_t e, uint16_t tab[16]);

/* Rows [r0, r0 + n) of a [N, K] weight: packed codes (K / 2 bytes a row),
 * exponents ([N, K / 32] bytes), into out (n * K bf16). */
void mxfp4_decode_rows(const uint8_t *packed, const uint8_t *scales, uint64_t K, uint64_t r0, uint64_t n,
                       uint16_t *out);

#endif
