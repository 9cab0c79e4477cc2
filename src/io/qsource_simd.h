/* The vendor-source row decoders (FP8-block, compressed-tensors INT4 and
 * MXFP4) in AVX-512 and AVX2 beside the scalar ones, chosen at run time as
 * the NVFP4 kernels are (nvfp4_dispatch.c). Every vector decoder gives the
 * scalar decoder's bytes for every input: each repeats its IEEE operations
 * one for one (tests/unit/test_qsource_simd.c checks all 256 FP8 bytes, all
 * 16-bit scales and every E8M0 exponent against it). */
#ifndef FF_QSOURCE_SIMD_H
#define FF_QSOURCE_SIMD_H

#include <stdint.h>

#include "dtype.h"

/* fp8b_decode_rows's signature (fp8_block.h). */
typedef void (*qs_fp8_rows_fn)(const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0, uint64_t n,
                               uint16_t *out);
/* ctint_decode_rows's (ct_int.h). */
typedef void (*qs_ctint_rows_fn)(const uint8_t *packed, const uint8_t *scales, ff_dtype sd, uint64_t K,
                                 uint64_t group, uint64_t r0, uint64_t n, uint16_t *out);
/* mxfp4_decode_rows's (mxfp4.h). */
typedef void (*qs_mxfp4_rows_fn)(const uint8_t *packed, const uint8_t *scales, uint64_t K, uint64_t r0, uint64_t n,
                                 uint16_t *out);

typedef struct qs_decoders {
    const char *name;   /* "scalar", "avx2", "avx512" */
    qs_fp8_rows_fn fp8;
    qs_ctint_rows_fn ctint;
    qs_mxfp4_rows_fn mxfp4;
} qs_decoders;

/* The set called name, or NULL when this CPU cannot run it (or it is not
 * built: non-x86 has only "scalar"). */
const qs_decoders *qs_decoders_by_name(const char *name);
/* The fastest set this CPU runs (decided once). */
const qs_decoders *qs_decoders_best(void);

#endif
