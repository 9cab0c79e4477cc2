/* SipHash-2-4 against the reference vectors of Aumasson and Bernstein's
 * paper (key 00..0f, messages 00..(n-1)), and the key drawn per table. */
#include <stdint.h>

#include "siphash.h"
#include "unit.h"

static void reference_vectors(void)
{
    uint64_t key[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    /* the paper's appendix A (15 bytes), and the first and eighth of its
     * 64-entry table (0 and 7 bytes: no whole block, one byte short of one) */
    CHECK(ff_siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    CHECK(ff_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    CHECK(ff_siphash(key, msg, 7) == 0xab0200f58b01d137ull);
    CHECK(ff_siphash(key, msg, 8) == 0x93f5f5799a932462ull);
}

static void keys_differ(void)
{
    uint64_t a[2], b[2];
    ff_sipkey_random(a);
    ff_sipkey_random(b);
    CHECK(a[0] != b[0] || a[1] != b[1]);
    CHECK(ff_siphash(a, "model.layers.0.mlp", 18) != ff_siphash(b, "model.layers.0.mlp", 18));
}

int main(void)
{
    RUN(reference_vectors);
    RUN(keys_differ);
    return UNIT_END();
}
