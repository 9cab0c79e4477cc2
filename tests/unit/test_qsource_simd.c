/* The vector decoders of vendor-quantized sources (src/io/qsource_simd.h)
 * against the scalar ones, byte for byte, for every set this CPU runs: all
 * 256 FP8 bytes (NaN bytes 0x7f/0xff and subnormals included) under edge and
 * random f32 scales (zeros, subnormals, infinities, NaNs with payloads);
 * INT4 under every BF16 and every F16 scale and random F32 ones, every group
 * size shape; MXFP4 under every exponent 0..255; odd shapes and row ranges.
 * And the decode buffers' reuse (src/io/qs_bufs.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ct_int.h"
#include "dtype.h"
#include "fp8_block.h"
#include "mxfp4.h"
#include "qs_bufs.h"
#include "qsource.h"
#include "qsource_simd.h"
#include "unit.h"

static const char *const k_sets[] = {"avx2", "avx512"};
#define NSETS (sizeof k_sets / sizeof *k_sets)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Edge scales, as bits: zeros, the smallest subnormal and normal, the
 * largest finite, values whose products overflow or underflow, infinities,
 * quiet and signalling NaNs with payloads, either sign. */
static const uint32_t k_edge_f32[] = {
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00800000, 0x007fffff, 0x7f7fffff, 0xff7fffff,
    0x3f800000, 0xbf800000, 0x3eaaaaab, 0x7b000000, 0x3b800000, 0x0c000000, 0x7f800000, 0xff800000,
    0x7fc00000, 0xffc00000, 0x7fc00001, 0x7fffffff, 0xffffffff, 0x7f800001, 0xff800123, 0x7fa00000,
};
#define NEDGE (sizeof k_edge_f32 / sizeof *k_edge_f32)

/* One decoder set's FP8 rows against the scalar's: rows [r0, r0 + n). */
static int fp8_same(const qs_decoders *d, const uint8_t *w, const float *s, uint64_t N, uint64_t K, uint64_t r0,
                    uint64_t n)
{
    uint16_t *a = malloc(n * K * 2 + 2), *b = malloc(n * K * 2 + 2);
    fp8b_decode_rows(w, s, N, K, r0, n, a);
    d->fp8(w, s, N, K, r0, n, b);
    int same = memcmp(a, b, n * K * 2) == 0;
    for (uint64_t i = 0; !same && i < n * K; i++)
        if (a[i] != b[i]) {
            uint32_t u;
            memcpy(&u, &s[((r0 + i / K) / 128) * ((K + 127) / 128) + (i % K) / 128], 4);
            fprintf(stderr, "  %s fp8: element %llu byte 0x%02x scale 0x%08x: scalar 0x%04x, vector 0x%04x\n",
                    d->name, (unsigned long long)i, w[(r0 + i / K) * K + i % K], (unsigned)u, a[i], b[i]);
            break;
        }
    free(a);
    free(b);
    return same;
}

/* Every byte under each scale: two rows, so that each 128-column block
 * (one scale) sees bytes j and j + 128 across them. */
static void fp8_every_byte_every_scale(void)
{
    enum { NRAND = 4096 };
    uint64_t S = NEDGE + NRAND, K = 128 * S;
    uint8_t *w = malloc(2 * K);
    float *s = malloc(S * sizeof *s);
    for (uint64_t c = 0; c < K; c++) {
        w[c] = (uint8_t)c;
        w[K + c] = (uint8_t)(c + 128);
    }
    for (uint64_t i = 0; i < S; i++) {
        uint32_t u = i < NEDGE ? k_edge_f32[i] : rnd() ^ (rnd() << 16);
        /* half the random ones near 1 (the real scales' range), half any bits */
        if (i >= NEDGE && (i & 1))
            u = 0x30000000u + (u & 0x0fffffffu) + ((u & 1u) << 31);
        s[i] = f32_bits(u);
    }
    for (size_t k = 0; k < NSETS; k++) {
        const qs_decoders *d = qs_decoders_by_name(k_sets[k]);
        if (d)
            CHECK(fp8_same(d, w, s, 2, K, 0, 2));
    }
    free(w);
    free(s);
}

/* Random bytes (NaN bytes included) and finite scales at odd shapes: K not
 * a multiple of 16, 32 or 128, partial edge blocks, row ranges from r0. */
static void fp8_shapes(void)
{
    static const uint64_t Ks[] = {1, 7, 15, 16, 17, 31, 33, 100, 127, 128, 129, 200, 255, 256, 300, 513};
    for (size_t t = 0; t < sizeof Ks / sizeof *Ks; t++) {
        uint64_t K = Ks[t], N = 131 + t * 23, sc = (K + 127) / 128, sr = (N + 127) / 128;
        uint8_t *w = malloc(N * K);
        float *s = malloc(sr * sc * sizeof *s);
        for (uint64_t i = 0; i < N * K; i++)
            w[i] = (uint8_t)rnd();
        for (uint64_t i = 0; i < sr * sc; i++)
            s[i] = ldexpf((float)(rnd() % 1000 + 1) / 777.0f, (int)(rnd() % 40) - 30);
        for (size_t k = 0; k < NSETS; k++) {
            const qs_decoders *d = qs_decoders_by_name(k_sets[k]);
            if (!d)
                continue;
            CHECK(fp8_same(d, w, s, N, K, 0, N));
            CHECK(fp8_same(d, w, s, N, K, 77, N - 77));
        }
        free(w);
        free(s);
    }
}

static int int4_same(const qs_decoders *d, const uint8_t *p, const uint8_t *s, ff_dtype sd, uint64_t K, uint64_t g,
                     uint64_t r0, uint64_t n)
{
    uint16_t *a = malloc(n * K * 2 + 2), *b = malloc(n * K * 2 + 2);
    ctint_decode_rows(p, s, sd, K, g, r0, n, a);
    d->ctint(p, s, sd, K, g, r0, n, b);
    int same = memcmp(a, b, n * K * 2) == 0;
    for (uint64_t i = 0; !same && i < n * K; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "  %s int4 (%s scales, group %llu): element %llu: scalar 0x%04x, vector 0x%04x\n",
                    d->name, ff_dtype_name(sd), (unsigned long long)g, (unsigned long long)i, a[i], b[i]);
            break;
        }
    free(a);
    free(b);
    return same;
}

/* Packed rows in which each group of 32 holds all 16 codes, twice. */
static uint8_t *every_code_rows(uint64_t N, uint64_t K)
{
    uint8_t *p = malloc(N * K / 2);
    for (uint64_t i = 0; i < N * K / 2; i++)
        p[i] = (uint8_t)((i & 15) | ((15 - (i & 15)) << 4));
    return p;
}

/* Every BF16 and every F16 scale value (NaNs, infinities, subnormals), and
 * random F32 bit patterns plus the edge ones, one group each. */
static void int4_every_scale(void)
{
    enum { G = 32, N = 256, K = 256 * G };
    uint8_t *p = every_code_rows(N, K);
    uint16_t *s16 = malloc(N * (K / G) * 2);
    uint32_t *s32 = malloc(N * (K / G) * 4);
    for (uint32_t i = 0; i < N * (K / G); i++) {
        s16[i] = (uint16_t)i;
        s32[i] = i < NEDGE ? k_edge_f32[i] : (i & 1) ? rnd() ^ (rnd() << 16) : 0x38000000u + (rnd() & 0x0fffffffu);
    }
    for (size_t k = 0; k < NSETS; k++) {
        const qs_decoders *d = qs_decoders_by_name(k_sets[k]);
        if (!d)
            continue;
        CHECK(int4_same(d, p, (const uint8_t *)s16, FF_DT_BF16, K, G, 0, N));
        CHECK(int4_same(d, p, (const uint8_t *)s16, FF_DT_F16, K, G, 0, N));
        CHECK(int4_same(d, p, (const uint8_t *)s32, FF_DT_F32, K, G, 0, N));
    }
    free(p);
    free(s16);
    free(s32);
}

/* Random codes and scales for every group size shape: 8 (one word), not a
 * multiple of 32 (a tail), several 32s, large; row ranges from r0. */
static void int4_groups(void)
{
    static const uint64_t groups[] = {8, 16, 24, 32, 40, 56, 64, 96, 128, 136, 1024};
    static const ff_dtype dts[] = {FF_DT_BF16, FF_DT_F16, FF_DT_F32};
    for (size_t t = 0; t < sizeof groups / sizeof *groups; t++) {
        uint64_t g = groups[t], K = g * (1 + t % 4), N = 70;
        uint8_t *p = malloc(N * K / 2);
        uint8_t *s = malloc(N * (K / g) * 4);
        for (uint64_t i = 0; i < N * K / 2; i++)
            p[i] = (uint8_t)rnd();
        for (size_t di = 0; di < 3; di++) {
            for (uint64_t i = 0; i < N * (K / g); i++) {
                float v = ldexpf((float)(rnd() % 4096 + 1) / 3000.0f, -(int)(rnd() % 20)) * ((rnd() & 1) ? -1 : 1);
                if (dts[di] == FF_DT_F32)
                    memcpy(s + 4 * i, &v, 4);
                else {
                    uint16_t h = dts[di] == FF_DT_BF16 ? ff_f32_to_bf16(v) : ff_f32_to_f16(v);
                    memcpy(s + 2 * i, &h, 2);
                }
            }
            for (size_t k = 0; k < NSETS; k++) {
                const qs_decoders *d = qs_decoders_by_name(k_sets[k]);
                if (!d)
                    continue;
                CHECK(int4_same(d, p, s, dts[di], K, g, 0, N));
                CHECK(int4_same(d, p, s, dts[di], K, g, 13, N - 13));
            }
        }
        free(p);
        free(s);
    }
}

static int mx_same(const qs_decoders *d, const uint8_t *p, const uint8_t *s, uint64_t K, uint64_t r0, uint64_t n)
{
    uint16_t *a = malloc(n * K * 2), *b = malloc(n * K * 2);
    mxfp4_decode_rows(p, s, K, r0, n, a);
    d->mxfp4(p, s, K, r0, n, b);
    int same = memcmp(a, b, n * K * 2) == 0;
    free(a);
    free(b);
    return same;
}

/* Every exponent 0..255 (255 the NaN the caller refuses, decoded all the
 * same) over all 16 codes; then random rows and row ranges. */
static void mxfp4_every_exponent(void)
{
    enum { K = 256 * MXFP4_GROUP, N = 40, KR = 7 * MXFP4_GROUP };
    uint8_t *p = every_code_rows(1, K), e[256];
    for (int i = 0; i < 256; i++)
        e[i] = (uint8_t)i;
    uint8_t *pr = malloc(N * KR / 2), *er = malloc(N * KR / MXFP4_GROUP);
    for (uint64_t i = 0; i < N * KR / 2; i++)
        pr[i] = (uint8_t)rnd();
    for (uint64_t i = 0; i < N * KR / MXFP4_GROUP; i++)
        er[i] = (uint8_t)(rnd() % 255);
    for (size_t k = 0; k < NSETS; k++) {
        const qs_decoders *d = qs_decoders_by_name(k_sets[k]);
        if (!d)
            continue;
        CHECK(mx_same(d, p, e, K, 0, 1));
        CHECK(mx_same(d, pr, er, KR, 0, N));
        CHECK(mx_same(d, pr, er, KR, 9, N - 9));
    }
    free(p);
    free(pr);
    free(er);
}

/* The dispatch: scalar always, the best one runnable, its name known. */
static void dispatch(void)
{
    const qs_decoders *best = qs_decoders_best(), *scalar = qs_decoders_by_name("scalar");
    CHECK(scalar && scalar->fp8 == fp8b_decode_rows && scalar->ctint == ctint_decode_rows &&
          scalar->mxfp4 == mxfp4_decode_rows);
    CHECK(best && qs_decoders_by_name(best->name) == best);
    CHECK(qs_decoders_by_name("nonesuch") == NULL);
    int vector = 0;
    for (size_t k = 0; k < NSETS; k++)
        vector |= qs_decoders_by_name(k_sets[k]) != NULL;
    printf("  decoders: best %s%s\n", best->name, vector ? "" : " (no vector set on this CPU: compared nothing)");
}

/* A buffer given back is the next one handed out for a size it holds (no
 * new pages), the smallest that fits; past QS_BUFS taken at once, plain
 * malloc; a pointer it never handed out is not its own; buffers a caller
 * free()d instead are never freed again (ASan would catch the double free). */
static void buffer_reuse(void)
{
    qs_bufs *b = qs_bufs_new();
    uint16_t *big = qs_bufs_take(b, 1 << 20), *small = qs_bufs_take(b, 1 << 12);
    CHECK(big && small && big != small);
    CHECK(qs_bufs_give(b, big) && qs_bufs_give(b, small));
    CHECK(!qs_bufs_give(b, small));   /* given back twice: not taken any more */
    CHECK(qs_bufs_take(b, 1000) == small);
    CHECK(qs_bufs_take(b, 5000) == big);
    uint16_t *more[QS_BUFS + 2];
    for (int i = 0; i < QS_BUFS + 2; i++) {
        more[i] = qs_bufs_take(b, 64);
        more[i][31] = 1;   /* writable, its full size */
    }
    for (int i = 0; i < QS_BUFS + 2; i++)
        if (!qs_bufs_give(b, more[i]))
            free(more[i]);   /* the ones past QS_BUFS were plain malloc */
    uint16_t foreign[4];
    CHECK(!qs_bufs_give(b, foreign));
    free(small);   /* a free() caller: its buffer stays taken, never freed again */
    uint16_t *grown = qs_bufs_take(b, 3 << 20);   /* an idle one too small is replaced */
    CHECK(grown != NULL);
    grown[(3 << 19) - 1] = 7;
    qs_buffer_release(NULL, qs_bufs_take(NULL, 16));   /* no view: plain malloc and free */
    qs_bufs_free(b);
    free(big);
    free(grown);
}

int main(void)
{
    RUN(dispatch);
    RUN(fp8_every_byte_every_scale);
    RUN(fp8_shapes);
    RUN(int4_every_scale);
    RUN(int4_groups);
    RUN(mxfp4_every_exponent);
    RUN(buffer_reuse);
    return UNIT_END();
}
