/* Quantized rows, and kept tensors' bytes, on their way to the shard. A
 * pool thread that finishes a task queues its output and goes on in
 * another of its buffers; one thread
 * at a time (whichever queued while nobody was writing) writes all that is
 * queued, adjacent pieces in one pwritev. The file takes one writer at a
 * time anyway (ext4 holds its lock for the whole write); with a mutex round
 * each task's write, 16 threads queued behind it, and each hand-over woke a
 * sleeper: 16 threads ran the job slower than 8. Kept bytes go in the
 * writers' turns too (outq_queue_mapped). */
#ifndef FF_OUTQ_H
#define FF_OUTQ_H

#include <stdint.h>

#include "ff_err.h"
#include "threadpool.h"
#include "writer.h"

/* Buffers a thread may have queued before it waits for the writer. */
#define OUTQ_DEPTH 4

typedef struct outq outq;

/* pool: the pool whose tasks queue and write (pool_tasks_left). */
outq *outq_create(ckpt_writer *wr, ff_pool *pool, int nworkers);
void outq_free(outq *q);
/* Every buffer at least `bytes` (between pool runs only); -1: out of memory. */
int outq_reserve(outq *q, uint64_t bytes);
/* A free buffer of this worker, waiting while all of them are queued. */
uint8_t *outq_buffer(outq *q, int worker);
/* Queues buf (from outq_buffer) as tensor out_a's bytes [at_a, at_a + len_a)
 * followed in buf by out_b's [at_b, at_b + len_b); may write the queue. A
 * range past its tensor is not queued: it is the error outq_error reports. */
void outq_submit(outq *q, int worker, const uint8_t *buf, size_t out_a, uint64_t at_a, uint64_t len_a,
                 size_t out_b, uint64_t at_b, uint64_t len_b);
/* Checks a kept piece (bytes [at, at + len) of the caller's tensor) just
 * before the writer writes it: FF_OK, or the failure that stops the job. */
typedef struct outq_check {
    int (*fn)(const void *ctx, const void *tensor, const uint8_t *p, uint64_t at, uint64_t len, ff_err *e);
    const void *ctx, *tensor;   /* the caller's; both outlive outq_drain */
} outq_check;

/* A kept tensor's bytes, written straight from the input's mapping by
 * whichever thread takes the writer's turn: one piece a turn, after the
 * rows that wait. So it is written while the pool quantizes the next units,
 * instead of in a phase of its own in which the file's one writer left the
 * other cores waiting. Each piece is checked (check.fn, if set) in the same
 * turn, so the check's read leaves it in cache for the write's; checked
 * ahead of the queue, the tensor was read from memory twice. p must lie in
 * a mapping st_open made that stays until outq_drain: each piece is dropped
 * from it (st_map_drop) once written, which reads back from the file but
 * would zero anonymous memory. */
void outq_queue_mapped(outq *q, size_t out, const uint8_t *p, uint64_t len, outq_check check);
/* A pool task with no rows of its own to queue (the MXFP4 exact route's)
 * takes the writer's turn when nobody holds it: what is pending and one
 * mapped piece. Without it the codes queued by one exact unit waited for a
 * streamed unit's turns or the final drain, while the pool ran tasks that
 * write nothing. */
void outq_help(outq *q);
/* Writes every mapped piece still queued (no pool thread may be writing:
 * between pool runs). FF_OK, or the queue's first failure. */
int outq_drain(outq *q, ff_err *e);
/* The first write that failed since the last call (FF_OK: none). */
int outq_error(outq *q, ff_err *e);

#endif
