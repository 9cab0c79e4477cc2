/* Reading mapped input into the page cache ahead of its use, on a thread of
 * its own, so the disk streams while the pool computes.
 *
 * Why not MADV_WILLNEED: Linux's forced read-ahead fills the page cache in
 * 4 KB pages, and every later mapping of those pages (this run's, the next
 * run's) costs a page-table entry, a reverse-map update and a TLB flush for
 * each 4 KB. Faulting the pages in through a MADV_HUGEPAGE mapping reads
 * them in 2 MB folios, which the kernel maps with one PMD entry: mapping and
 * dropping 1 GB took 0.115 s in 4 KB pages and 0.01 s in 2 MB folios on the
 * 2-core VM (docs/bench.md). */
#ifndef FF_PREFETCH_H
#define FF_PREFETCH_H

#include <stdint.h>

typedef struct prefetch prefetch;

typedef enum {
    PREFETCH_FOLIOS,    /* fault in through the mapping; WILLNEED where the kernel cannot */
    PREFETCH_WILLNEED,  /* the kernel's forced read-ahead only (tests, old kernels) */
} prefetch_mode;

/* NULL when no thread could be started: prefetch_range then advises
 * WILLNEED from the caller, which never blocks. */
prefetch *prefetch_start(prefetch_mode mode);
/* Asks for [a, b) of map (a whole-file mapping of size bytes) to be read. Returns at once
 * unless many ranges wait unread, which means the disk is the bottleneck. */
void prefetch_range(prefetch *pf, const uint8_t *map, uint64_t size, uint64_t a, uint64_t b);
/* Reads what was asked, then ends the thread. NULL is a no-op. */
void prefetch_stop(prefetch *pf);

/* Marks a whole-file mapping for 2 MB folios; call before prefetch_range.
 * 0 when the kernel refuses (no transparent huge pages): faulting in would
 * then read 128 KB at a time, so PREFETCH_WILLNEED is the better mode. */
int prefetch_prepare(const uint8_t *map, uint64_t size);
/* 1 when the page holding p is in the page cache. */
int prefetch_resident(const uint8_t *p);

#endif
