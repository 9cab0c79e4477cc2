/* Byte and word loops that GCC 12 leaves scalar at -O2 (objdump: no pmaxub)
 * are compiled at -O3 one function at a time; clang, which builds the fuzz
 * harnesses, has no such attribute. */
#ifndef FF_VECTORIZE_H
#define FF_VECTORIZE_H

#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE_LOOP __attribute__((optimize("O3")))
#else
#define VECTORIZE_LOOP
#endif

#endif
