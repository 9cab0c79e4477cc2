/* NVFP4 from INT4 codes through a cache of (scale, largest |code - 8|)
 * slots: nvfp4_int4_rows.h says why the bytes are the bf16 kernels'. */
#include "nvfp4_int4_rows.h"

#include <string.h>

#include "nvfp4.h"

static unsigned code_distance(unsigned code) { return code >= 8 ? code - 8 : 8 - code; }

/* The bf16 threshold kernel's E2M1 code of bf16 value v under edges e:
 * how many of the seven bucket edges |v| passes, and the sign bit when v
 * is negative (not NaN) and v / eff is not zero. */
static uint8_t code_by_edges(uint16_t v, const nvfp4_thr *e)
{
    int mag = v & 0x7fff;
    uint8_t bucket = 0;
    for (int k = 0; k < 7; k++)
        bucket += mag > (int16_t)e->edge[k];
    int neg = (int16_t)v < -127;
    return (uint8_t)(bucket | (neg && mag > (int16_t)e->edge[7] ? 8 : 0));
}

/* The slot quantized as a synthetic group holding every code whose
 * |code - 8| is at most maxq (the rest zero, code 8): its max |x| is the
 * real groups', so its scale and its codes are theirs. Kept out of line so
 * the kernel's loop holds no spills for it. */
__attribute__((noinline, cold)) static void build_slot(nvfp4_i4_cache *c, nvfp4_i4_slot *sl, uint16_t scale,
                                                       unsigned maxq, nvfp4_i4_decode_fn dec, const void *ctx)
{
    uint8_t packed[8];
    uint16_t values[16], top = 0;
    for (unsigned i = 0; i < 8; i++) {
        unsigned lo = code_distance(2 * i) <= maxq ? 2 * i : 8, hi = code_distance(2 * i + 1) <= maxq ? 2 * i + 1 : 8;
        packed[i] = (uint8_t)(lo | hi << 4);
    }
    dec(ctx, packed, scale, values);
    for (unsigned n = 0; n < 16; n++)
        top = (values[n] & 0x7fff) > top ? values[n] & 0x7fff : top;
    float s8f;
    sl->scale = nvfp4_group_scale(ff_bf16_to_f32(top), c->gs, FF_DT_BF16, &s8f);
    int32_t code = sl->scale;
    nvfp4_thr_build_codes(&c->edges, &code, 1);
    for (unsigned n = 0; n < 16; n++)
        sl->map[n] = code_by_edges(values[n], &c->edges.code[sl->scale & 0x7f]);
    sl->built = 1;
    c->misses++;
}

/* slot maxq of block b (0-based) */
static nvfp4_i4_slot *slot_at(nvfp4_i4_cache *c, uint32_t b, unsigned maxq)
{
    nvfp4_i4_slot *first = (nvfp4_i4_slot *)(((uintptr_t)c->slot_space + 63) & ~(uintptr_t)63);
    return first + (size_t)b * NVFP4_I4_MAXQ + maxq;
}

/* Every scale dropped: another global scale, or NVFP4_I4_BLOCKS used. */
static void start_over(nvfp4_i4_cache *c)
{
    memset(c->block_of, 0, sizeof c->block_of);
    c->nblocks = 0;
}

__attribute__((noinline, cold)) static uint16_t new_block(nvfp4_i4_cache *c, uint16_t scale)
{
    if (c->nblocks == NVFP4_I4_BLOCKS)
        start_over(c);
    uint32_t b = c->nblocks++;
    for (unsigned q = 0; q < NVFP4_I4_MAXQ; q++)
        slot_at(c, b, q)->built = 0;
    c->block_of[scale] = (uint16_t)(b + 1);
    return (uint16_t)(b + 1);
}

/* scale's block + 1, taken now if it has none */
static uint16_t block_for(nvfp4_i4_cache *c, uint16_t scale)
{
    uint16_t b = c->block_of[scale];
    return __builtin_expect(!b, 0) ? new_block(c, scale) : b;
}

/* slot maxq of block b (scale's), built the first time it is asked */
static const nvfp4_i4_slot *slot_in(nvfp4_i4_cache *c, uint16_t b, uint16_t scale, unsigned maxq,
                                    nvfp4_i4_decode_fn dec, const void *ctx)
{
    nvfp4_i4_slot *sl = slot_at(c, b - 1u, maxq);
    if (__builtin_expect(!sl->built, 0))
        build_slot(c, sl, scale, maxq, dec, ctx);
    return sl;
}

static const nvfp4_i4_slot *lookup(nvfp4_i4_cache *c, uint16_t scale, unsigned maxq, nvfp4_i4_decode_fn dec,
                                   const void *ctx)
{
    return slot_in(c, block_for(c, scale), scale, maxq, dec, ctx);
}

/* Which scale a group takes: a shift when the groups a scale covers are a
 * power of two (group 32, 128: every real checkpoint), as a 64-bit
 * division a group cost a tenth of the kernel. */
typedef struct scale_step {
    uint64_t per;             /* NVFP4 groups a scale */
    int shift;                /* log2(per), or -1 */
} scale_step;

static scale_step step_of(uint64_t group)
{
    uint64_t per = group / NVFP4_GROUP;
    return (scale_step){.per = per, .shift = (per & (per - 1)) == 0 ? __builtin_ctzll(per) : -1};
}

static uint16_t scale_of(const uint8_t *scale_row, uint64_t g, scale_step st)
{
    uint16_t s;
    memcpy(&s, scale_row + (st.shift >= 0 ? g >> st.shift : g / st.per) * 2, sizeof s);
    return s;
}

/* One group without vectors: a row's last groups (fewer than four). */
static void one_group(nvfp4_i4_cache *c, const uint8_t *p, uint16_t scale, nvfp4_i4_decode_fn dec,
                      const void *ctx, uint8_t *pk, uint8_t *sc)
{
    unsigned maxq = 0;
    for (unsigned i = 0; i < 8; i++) {
        unsigned lo = code_distance(p[i] & 15), hi = code_distance(p[i] >> 4);
        maxq = lo > maxq ? lo : maxq;
        maxq = hi > maxq ? hi : maxq;
    }
    const nvfp4_i4_slot *sl = lookup(c, scale, maxq, dec, ctx);
    for (unsigned i = 0; i < 8; i++)
        pk[i] = (uint8_t)(sl->map[p[i] & 15] | sl->map[p[i] >> 4] << 4);
    *sc = sl->scale;
}

/* Groups [g, groups) of a row one at a time: an AVX2 row's last groups
 * (fewer than four), or a whole row where there are no vectors. */
static void groups_one_by_one(nvfp4_i4_cache *c, const uint8_t *p, const uint8_t *scale_row, uint64_t g,
                              uint64_t groups, scale_step st, nvfp4_i4_decode_fn dec, const void *ctx, uint8_t *pk,
                              uint8_t *sc)
{
    for (; g < groups; g++)
        one_group(c, p + g * 8, scale_of(scale_row, g, st), dec, ctx, pk + g * 8, sc + g);
}

void nvfp4_i4_cache_init(nvfp4_i4_cache *c)
{
    c->ready = 0;
    c->misses = 0;
}

static void reset_if_other_gs(nvfp4_i4_cache *c, float gs)
{
    if (c->ready && memcmp(&c->gs, &gs, sizeof gs) == 0)
        return;
    start_over(c);
    nvfp4_thr_init(&c->edges, gs);
    c->gs = gs;
    c->ready = 1;
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "nvfp4_simd.h"

#define T2 __attribute__((target("avx2")))

/* The group's slot: its scale byte to *sc, its map as a vector. */
static T2 inline __m128i slot_map(nvfp4_i4_cache *c, uint16_t scale, unsigned maxq, nvfp4_i4_decode_fn dec,
                                  const void *ctx, uint8_t *sc)
{
    const nvfp4_i4_slot *sl = lookup(c, scale, maxq, dec, ctx);
    *sc = sl->scale;
    return _mm_loadu_si128((const __m128i *)sl->map);
}

/* Two groups under one scale: their block found once, each slot read as
 * soon as it is found (the second's build may not move the first's block:
 * a block is only taken over by new_block). */
static T2 inline void slot_pair(nvfp4_i4_cache *c, uint16_t scale, unsigned q0, unsigned q1, nvfp4_i4_decode_fn dec,
                                const void *ctx, uint8_t *sc, __m128i mp[2])
{
    uint16_t b = block_for(c, scale);
    const nvfp4_i4_slot *s0 = slot_in(c, b, scale, q0, dec, ctx);
    sc[0] = s0->scale;
    mp[0] = _mm_loadu_si128((const __m128i *)s0->map);
    const nvfp4_i4_slot *s1 = slot_in(c, b, scale, q1, dec, ctx);
    sc[1] = s1->scale;
    mp[1] = _mm_loadu_si128((const __m128i *)s1->map);
}

/* Four groups (32 packed bytes) a step: each group's largest |code - 8| by
 * a shuffle and a max over its 8 bytes, its slot looked up, then its 16
 * codes mapped by one in-lane shuffle of the slot's map, two groups to a
 * vector (groups 0 and 2 in one, 1 and 3 in the other, as the 64-bit
 * unpacks leave them). */
static T2 void row_avx2(nvfp4_i4_cache *c, const uint8_t *p, const uint8_t *scale_row, uint64_t groups,
                        scale_step st, nvfp4_i4_decode_fn dec, const void *ctx, uint8_t *pk, uint8_t *sc)
{
    const __m256i dist = _mm256_setr_epi8(8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 7, 6, 5, 4, 3, 2, 1,
                                          0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i low = _mm256_set1_epi8(15);
    uint64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
        /* a page ahead, as the bf16 kernel asks (nvfp4_simd.c): the hardware
         * prefetchers stop at each 4 KB page; past the row's end is fine,
         * prefetches never fault */
        _mm_prefetch((const char *)(p + g * 8) + 4096, _MM_HINT_T0);
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + g * 8));
        __m256i lo = _mm256_and_si256(b, low), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
        __m256i m = _mm256_max_epu8(_mm256_shuffle_epi8(dist, lo), _mm256_shuffle_epi8(dist, hi));
        m = _mm256_max_epu8(m, _mm256_srli_epi64(m, 32));
        m = _mm256_max_epu8(m, _mm256_srli_epi64(m, 16));
        m = _mm256_max_epu8(m, _mm256_srli_epi64(m, 8));
        /* each group's largest |code - 8| is its 8-byte lane's low byte:
         * one store and four byte loads (vector extracts cost more) */
        uint8_t mq[32] __attribute__((aligned(32)));
        _mm256_store_si256((__m256i *)mq, m);
        /* each slot read as soon as it is found: a later group's miss may
         * take the same slot */
        __m128i mp[4];
        if (st.shift >= 1) {
            /* groups g, g + 1 (and g + 2, g + 3) share a scale: one block each pair */
            slot_pair(c, scale_of(scale_row, g, st), mq[0] & 15, mq[8] & 15, dec, ctx, sc + g, mp);
            slot_pair(c, scale_of(scale_row, g + 2, st), mq[16] & 15, mq[24] & 15, dec, ctx, sc + g + 2, mp + 2);
        } else {
            for (unsigned k = 0; k < 4; k++)
                mp[k] = slot_map(c, scale_of(scale_row, g + k, st), mq[8 * k] & 15, dec, ctx, sc + g + k);
        }
        /* per lane: a group's even elements' codes, then its odd elements' */
        __m256i i02 = _mm256_unpacklo_epi64(lo, hi), i13 = _mm256_unpackhi_epi64(lo, hi);
        __m256i t02 = _mm256_inserti128_si256(_mm256_castsi128_si256(mp[0]), mp[2], 1);
        __m256i t13 = _mm256_inserti128_si256(_mm256_castsi128_si256(mp[1]), mp[3], 1);
        __m256i r02 = _mm256_shuffle_epi8(t02, i02), r13 = _mm256_shuffle_epi8(t13, i13);
        /* even | odd << 4 in each lane's low 8 bytes (codes < 16: no carry between bytes) */
        r02 = _mm256_or_si256(r02, _mm256_slli_epi16(_mm256_srli_si256(r02, 8), 4));
        r13 = _mm256_or_si256(r13, _mm256_slli_epi16(_mm256_srli_si256(r13, 8), 4));
        _mm256_storeu_si256((__m256i *)(pk + g * 8), _mm256_unpacklo_epi64(r02, r13));
    }
    groups_one_by_one(c, p, scale_row, g, groups, st, dec, ctx, pk, sc);
}

#define QUANTIZE_ROW row_avx2

int nvfp4_i4_rows_ok(void)
{
    return nvfp4_cpu_avx2_ok();
}

#else
int nvfp4_i4_rows_ok(void)
{
    return 0;
}

static void row_plain(nvfp4_i4_cache *c, const uint8_t *p, const uint8_t *scale_row, uint64_t groups, scale_step st,
                      nvfp4_i4_decode_fn dec, const void *ctx, uint8_t *pk, uint8_t *sc)
{
    groups_one_by_one(c, p, scale_row, 0, groups, st, dec, ctx, pk, sc);
}

#define QUANTIZE_ROW row_plain
#endif

void nvfp4_quantize_i4_rows(const uint8_t *packed, uint64_t row_bytes, const uint8_t *scales,
                            uint64_t scale_row_bytes, uint64_t group, uint64_t cols, uint64_t nrows, float gs,
                            nvfp4_i4_decode_fn dec, const void *ctx, nvfp4_i4_cache *cache, uint8_t *pk,
                            uint8_t *sc)
{
    uint64_t groups = cols / NVFP4_GROUP;
    scale_step st = step_of(group);
    reset_if_other_gs(cache, gs);
    for (uint64_t r = 0; r < nrows; r++)
        QUANTIZE_ROW(cache, packed + r * row_bytes, scales + r * scale_row_bytes, groups, st, dec, ctx,
                     pk + r * (cols / 2), sc + r * groups);
}

