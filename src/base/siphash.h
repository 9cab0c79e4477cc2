/* SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed hash for tables whose
 * keys come from input files. With a key drawn per table, a header cannot
 * be crafted so its names collide (100k names sharing FNV's low bits made
 * lookups quadratic: inspect 27x, quantize 15x slower). */
#ifndef FF_SIPHASH_H
#define FF_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t ff_siphash(const uint64_t key[2], const void *data, size_t len);
/* The hash of a followed by b, as ff_siphash of the two joined: a name
 * built of a stem and a suffix is looked up without a buffer to hold it. */
uint64_t ff_siphash2(const uint64_t key[2], const void *a, size_t alen, const void *b, size_t blen);
/* A key from the kernel's random source (getrandom), else from the clock
 * and the address space layout: a table keeps working, only its defence
 * weakens. */
void ff_sipkey_random(uint64_t key[2]);

#endif
