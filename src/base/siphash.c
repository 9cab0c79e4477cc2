#include "siphash.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

typedef struct sip_state {
    uint64_t v0, v1, v2, v3;
} sip_state;

static void sip_round(sip_state *s)
{
    s->v0 += s->v1;
    s->v1 = ROTL(s->v1, 13) ^ s->v0;
    s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = ROTL(s->v3, 16) ^ s->v2;
    s->v0 += s->v3;
    s->v3 = ROTL(s->v3, 21) ^ s->v0;
    s->v2 += s->v1;
    s->v1 = ROTL(s->v1, 17) ^ s->v2;
    s->v2 = ROTL(s->v2, 32);
}

static void sip_absorb(sip_state *s, uint64_t m)
{
    s->v3 ^= m;
    sip_round(s);
    sip_round(s);
    s->v0 ^= m;
}

static uint64_t load_le64(const uint8_t *p, size_t n)
{
    uint64_t m = 0;
    for (size_t i = 0; i < n; i++)
        m |= (uint64_t)p[i] << (8 * i);
    return m;
}

/* n bytes (n <= 8) at offset i of the two parts laid end to end. */
static uint64_t load_le64_2(const uint8_t *a, size_t alen, const uint8_t *b, size_t i, size_t n)
{
    if (i + n <= alen)
        return load_le64(a + i, n);
    if (i >= alen)
        return load_le64(b + (i - alen), n);
    uint64_t m = 0;
    for (size_t k = 0; k < n; k++, i++)
        m |= (uint64_t)(i < alen ? a[i] : b[i - alen]) << (8 * k);
    return m;
}

uint64_t ff_siphash(const uint64_t key[2], const void *data, size_t len)
{
    return ff_siphash2(key, data, len, "", 0);
}

uint64_t ff_siphash2(const uint64_t key[2], const void *a, size_t alen, const void *b, size_t blen)
{
    const uint8_t *pa = a, *pb = b;
    size_t len = alen + blen;
    sip_state s = {key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull,
                   key[0] ^ 0x6c7967656e657261ull, key[1] ^ 0x7465646279746573ull};
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8)
        sip_absorb(&s, load_le64_2(pa, alen, pb, i, 8));
    /* the last block: the remaining bytes, the length's low byte on top */
    sip_absorb(&s, load_le64_2(pa, alen, pb, whole, len % 8) | (uint64_t)(len & 0xff) << 56);
    s.v2 ^= 0xff;
    for (int r = 0; r < 4; r++)
        sip_round(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

void ff_sipkey_random(uint64_t key[2])
{
    if (getrandom(key, 2 * sizeof *key, GRND_NONBLOCK) == (ssize_t)(2 * sizeof *key))
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    key[0] = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)key;
    key[1] = (uint64_t)t.tv_sec ^ (uint64_t)(uintptr_t)&t << 17;
}
