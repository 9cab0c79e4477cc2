/* Decode buffers kept for reuse by one qs_view (src/io/qsource.h). Each
 * decoded weight is a whole-tensor bf16 copy of tens to hundreds of MB;
 * malloc'd and freed per tensor, glibc maps and unmaps each one (anything
 * above its 32 MB mmap threshold), so every tensor faulted and zeroed its
 * pages afresh: ~10% of an FP8 source's quantize. A handful of buffers
 * reused instead keeps memory flat: at most QS_BUFS of them, none larger
 * than the largest tensor decoded, however many layers the model has. */
#ifndef FF_QS_BUFS_H
#define FF_QS_BUFS_H

#include <stddef.h>
#include <stdint.h>

/* A unit holds its members' copies at once (q/k/v, gate/up: 2-3), and a
 * kept weight one more; beyond this many in use, buffers are plain malloc. */
#define QS_BUFS 8

typedef struct qs_bufs qs_bufs;

qs_bufs *qs_bufs_new(void);
/* Frees the buffers given back; one still taken is its holder's to free. */
void qs_bufs_free(qs_bufs *b);
/* A malloc'd buffer of at least bytes (contents undefined), or NULL (out of
 * memory); b NULL: plain malloc. Its holder either gives it back (reused)
 * or free()s it (never reused, nor freed again here), never both. */
uint16_t *qs_bufs_take(qs_bufs *b, size_t bytes);
/* Gives p back when it came from qs_bufs_take of b and is still taken;
 * 0 when not (the caller frees it). */
int qs_bufs_give(qs_bufs *b, uint16_t *p);

#endif
