#include "prefetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"

#define FOLIO (2ull << 20)
/* Linux reads at most max(read_ahead_kb, max_sectors_kb) of the device per
 * WILLNEED call and drops the rest of the range silently (a 32 MB span got
 * 8 MB read on the virtio disk here), so WILLNEED is asked for in pieces of
 * the default read_ahead_kb, which no device caps below unless tuned down. */
#define WILLNEED_PIECE (128ull << 10)
/* Ranges waiting: enough that the caller never waits on a disk that keeps up. */
#define RING 256

typedef struct pf_range {
    const uint8_t *map;
    uint64_t size, a, b;
} pf_range;

struct prefetch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t more, room;
    pf_range ring[RING];
    unsigned head, count;
    int stopping;
    prefetch_mode mode;
};

static long page_size(void)
{
    return sysconf(_SC_PAGESIZE);
}

int prefetch_resident(const uint8_t *p)
{
    long pg = page_size();
    unsigned char v = 0;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
    return mincore(page, (size_t)pg, &v) == 0 && (v & 1);
}

int prefetch_prepare(const uint8_t *map, uint64_t size)
{
    return !map || !size || madvise((void *)map, size, MADV_HUGEPAGE) == 0;
}

static void willneed(const uint8_t *lo, const uint8_t *hi)
{
    for (const uint8_t *at = lo; at < hi; at += WILLNEED_PIECE)
        madvise((void *)at, (size_t)(hi - at) < WILLNEED_PIECE ? (size_t)(hi - at) : WILLNEED_PIECE, MADV_WILLNEED);
}

/* Faults one block in and unmaps it again: the page cache keeps the folios
 * and our RSS does not grow. Returns 0 when the kernel cannot populate. */
static int populate(const uint8_t *lo, const uint8_t *hi)
{
    if (st_map_populate(lo, (uint64_t)(hi - lo)) != 0 && errno == EINVAL)
        return 0;
    madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED);
    return 1;
}

/* Whole 2 MB blocks of the mapping, so each is one folio and none is split
 * when it is unmapped; a block whose first and last pages are cached is taken
 * as cached, so a page-cached run costs two mincore calls a block. */
static void read_range(prefetch_mode *mode, const pf_range *r)
{
    uint64_t pg = (uint64_t)page_size(), end = (r->size + pg - 1) & ~(pg - 1);
    uint64_t whole = (r->b + FOLIO - 1) & ~(FOLIO - 1), hi = whole < end ? whole : end;
    for (uint64_t blk = r->a & ~(FOLIO - 1); blk < hi; blk += FOLIO) {
        const uint8_t *lo = r->map + blk, *top = r->map + (blk + FOLIO < hi ? blk + FOLIO : hi);
        if (prefetch_resident(lo) && prefetch_resident(top - 1))
            continue;
        if (*mode == PREFETCH_FOLIOS && !populate(lo, top))
            *mode = PREFETCH_WILLNEED;
        if (*mode == PREFETCH_WILLNEED)
            willneed(lo, top);
    }
}

static void *prefetch_main(void *arg)
{
    prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->count && !pf->stopping)
            pthread_cond_wait(&pf->more, &pf->mu);
        if (!pf->count)
            break;
        pf_range r = pf->ring[pf->head];
        pf->head = (pf->head + 1) % RING;
        pf->count--;
        pthread_cond_signal(&pf->room);
        pthread_mutex_unlock(&pf->mu);
        read_range(&pf->mode, &r);
        pthread_mutex_lock(&pf->mu);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

prefetch *prefetch_start(prefetch_mode mode)
{
    prefetch *pf = calloc(1, sizeof *pf);
    if (!pf)
        return NULL;
    pf->mode = mode;
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->more, NULL);
    pthread_cond_init(&pf->room, NULL);
    if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0) {
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->more);
        pthread_cond_destroy(&pf->room);
        free(pf);
        return NULL;
    }
    return pf;
}

void prefetch_range(prefetch *pf, const uint8_t *map, uint64_t size, uint64_t a, uint64_t b)
{
    if (!map || a >= b)
        return;
    pf_range r = {.map = map, .size = size, .a = a, .b = b < size ? b : size};
    if (!pf) {
        prefetch_mode willneed_only = PREFETCH_WILLNEED;
        read_range(&willneed_only, &r);
        return;
    }
    pthread_mutex_lock(&pf->mu);
    while (pf->count == RING)
        pthread_cond_wait(&pf->room, &pf->mu);
    pf->ring[(pf->head + pf->count) % RING] = r;
    pf->count++;
    pthread_cond_signal(&pf->more);
    pthread_mutex_unlock(&pf->mu);
}

void prefetch_stop(prefetch *pf)
{
    if (!pf)
        return;
    pthread_mutex_lock(&pf->mu);
    pf->stopping = 1;
    pthread_cond_signal(&pf->more);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->more);
    pthread_cond_destroy(&pf->room);
    free(pf);
}
