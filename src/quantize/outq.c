#include "outq.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

typedef struct piece {
    ckpt_place place;
    uint64_t len;
    const uint8_t *p;
    outq_check check;         /* mapped pieces: */
    uint64_t at;              /* and where in its tensor the piece starts */
} piece;

/* Mapped pieces of this size: small enough that a turn's piece keeps the
 * writer away from its own rows briefly (and stays in cache from its check
 * to its write), large enough to be one pwrite; a multiple of every element
 * size, so a check sees whole elements. */
#define MAPPED_PIECE (1u << 20)

typedef struct qitem {
    size_t buf;               /* index into bufs */
    piece pc[2];
} qitem;

struct outq {
    ckpt_writer *wr;
    ff_pool *pool;
    size_t nbufs;             /* OUTQ_DEPTH a worker */
    uint8_t **bufs;
    unsigned char *queued;    /* per buffer: waiting for the writer (under mu) */
    uint64_t cap;
    pthread_mutex_t mu;
    pthread_cond_t freed;
    qitem *pending, *batch;   /* nbufs each: a buffer is queued at most once */
    size_t npending;
    piece *pieces;            /* 2 * nbufs: the writer's, sorted by place */
    struct iovec *iov;
    int writing;              /* a thread is writing; it drains pending before it stops */
    int failed;               /* and err: the first failure (under mu) */
    ff_err err;
    piece *mapped;            /* kept bytes from the input's mapping, FIFO (under mu) */
    size_t mapped_head, mapped_count, mapped_cap;
};

outq *outq_create(ckpt_writer *wr, ff_pool *pool, int nworkers)
{
    outq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->wr = wr;
    q->pool = pool;
    q->nbufs = (size_t)(nworkers > 0 ? nworkers : 1) * OUTQ_DEPTH;
    q->bufs = calloc(q->nbufs, sizeof *q->bufs);
    q->queued = calloc(q->nbufs, 1);
    q->pending = calloc(q->nbufs, sizeof *q->pending);
    q->batch = calloc(q->nbufs, sizeof *q->batch);
    q->pieces = calloc(2 * q->nbufs, sizeof *q->pieces);
    q->iov = calloc(2 * q->nbufs, sizeof *q->iov);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->freed, NULL);
    if (!q->bufs || !q->queued || !q->pending || !q->batch || !q->pieces || !q->iov) {
        outq_free(q);
        return NULL;
    }
    return q;
}

void outq_free(outq *q)
{
    if (!q)
        return;
    for (size_t b = 0; q->bufs && b < q->nbufs; b++)
        free(q->bufs[b]);
    free(q->bufs);
    free(q->queued);
    free(q->pending);
    free(q->batch);
    free(q->pieces);
    free(q->iov);
    free(q->mapped);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->freed);
    free(q);
}

int outq_reserve(outq *q, uint64_t bytes)
{
    if (bytes <= q->cap)
        return 0;
    for (size_t b = 0; b < q->nbufs; b++) {
        free(q->bufs[b]);
        q->bufs[b] = malloc(bytes);
        if (!q->bufs[b]) {
            q->cap = 0;
            return -1;
        }
    }
    q->cap = bytes;
    return 0;
}

uint8_t *outq_buffer(outq *q, int worker)
{
    size_t first = (size_t)worker * OUTQ_DEPTH;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        for (size_t b = first; b < first + OUTQ_DEPTH; b++)
            if (!q->queued[b]) {
                pthread_mutex_unlock(&q->mu);
                return q->bufs[b];
            }
        pthread_cond_wait(&q->freed, &q->mu);
    }
}

static int by_place(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->place.shard != y->place.shard)
        return x->place.shard < y->place.shard ? -1 : 1;
    return x->place.off < y->place.off ? -1 : x->place.off > y->place.off;
}

/* Pieces from `from` on that continue each other in one file, as iovecs. */
static size_t gather_run(outq *q, size_t from, size_t n, int *niov)
{
    size_t i = from;
    *niov = 0;
    do {
        q->iov[*niov].iov_base = (void *)q->pieces[i].p;
        q->iov[(*niov)++].iov_len = q->pieces[i].len;
        i++;
    } while (i < n && *niov < IOV_MAX && q->pieces[i].place.shard == q->pieces[i - 1].place.shard &&
             q->pieces[i].place.off == q->pieces[i - 1].place.off + q->pieces[i - 1].len);
    return i;
}

/* Outside the lock: only the writer touches batch, pieces and iov. */
static int write_batch(outq *q, size_t nitems, ff_err *e)
{
    size_t n = 0;
    for (size_t i = 0; i < nitems; i++)
        for (int k = 0; k < 2; k++)
            if (q->batch[i].pc[k].len)
                q->pieces[n++] = q->batch[i].pc[k];
    qsort(q->pieces, n, sizeof *q->pieces, by_place);
    for (size_t i = 0; i < n;) {
        int niov;
        size_t next = gather_run(q, i, n, &niov);
        if (ckpt_writer_writev(q->wr, q->pieces[i].place, q->iov, niov, e))
            return e->code;
        i = next;
    }
    return FF_OK;
}

/* Under the lock: the first failure is the one reported. */
static void record_failure(outq *q, const ff_err *e)
{
    if (!q->failed)
        q->err = *e, q->failed = 1;
}

static int place(const outq *q, size_t out, uint64_t at, uint64_t len, const uint8_t *p, piece *pc, ff_err *e)
{
    *pc = (piece){.len = len, .p = p};
    return ckpt_writer_locate(q->wr, out, at, len, &pc->place, e);
}

static size_t buffer_index(const outq *q, int worker, const uint8_t *buf)
{
    size_t b = (size_t)worker * OUTQ_DEPTH;
    while (q->bufs[b] != buf)
        b++;
    return b;
}

/* Under the lock, released while writing: everything queued now. */
static void write_pending(outq *q)
{
    ff_err e;
    size_t n = q->npending;
    int skip = q->failed;   /* after a failure the job is lost: no more writes */
    memcpy(q->batch, q->pending, n * sizeof *q->batch);
    q->npending = 0;
    pthread_mutex_unlock(&q->mu);
    int rc = skip ? FF_OK : write_batch(q, n, &e);
    pthread_mutex_lock(&q->mu);
    if (rc)
        record_failure(q, &e);
    for (size_t i = 0; i < n; i++)
        q->queued[q->batch[i].buf] = 0;
    pthread_cond_broadcast(&q->freed);
}

static int check_then_write(const outq *q, const piece *pc, ff_err *e)
{
    if (pc->check.fn && pc->check.fn(pc->check.ctx, pc->check.tensor, pc->p, pc->at, pc->len, e))
        return e->code;
    struct iovec iov = {.iov_base = (void *)pc->p, .iov_len = pc->len};
    return ckpt_writer_writev(q->wr, pc->place, &iov, 1, e);
}

/* Under the lock, released while writing: the oldest mapped piece. */
static void write_one_mapped(outq *q)
{
    ff_err e;
    piece pc = q->mapped[q->mapped_head];
    q->mapped_head = (q->mapped_head + 1) % q->mapped_cap;
    q->mapped_count--;
    int skip = q->failed;
    pthread_mutex_unlock(&q->mu);
    int rc = skip ? FF_OK : check_then_write(q, &pc, &e);
    if (!rc)
        st_map_drop(pc.p, pc.len);   /* RSS holds a piece, not the tensor */
    pthread_mutex_lock(&q->mu);
    if (rc)
        record_failure(q, &e);
}

/* Doubles the ring, keeping its order; 0 when out of memory. */
static int grow_mapped(outq *q)
{
    size_t cap = q->mapped_cap ? 2 * q->mapped_cap : 64;
    piece *m = malloc(cap * sizeof *m);
    if (!m)
        return 0;
    for (size_t i = 0; i < q->mapped_count; i++)
        m[i] = q->mapped[(q->mapped_head + i) % q->mapped_cap];
    free(q->mapped);
    q->mapped = m;
    q->mapped_head = 0;
    q->mapped_cap = cap;
    return 1;
}

void outq_queue_mapped(outq *q, size_t out, const uint8_t *p, uint64_t len, outq_check check)
{
    for (uint64_t at = 0; at < len; at += MAPPED_PIECE) {
        uint64_t n = len - at < MAPPED_PIECE ? len - at : MAPPED_PIECE;
        piece pc;
        ff_err e;
        int rc = place(q, out, at, n, p + at, &pc, &e);
        pc.check = check;
        pc.at = at;
        pthread_mutex_lock(&q->mu);
        if (!rc && q->mapped_count == q->mapped_cap && !grow_mapped(q))
            rc = ff_oom(&e, "out of memory queueing %s", ckpt_writer_tensor_name(q->wr, out));
        if (rc)
            record_failure(q, &e);
        else
            q->mapped[(q->mapped_head + q->mapped_count++) % q->mapped_cap] = pc;
        pthread_mutex_unlock(&q->mu);
    }
}

int outq_drain(outq *q, ff_err *e)
{
    pthread_mutex_lock(&q->mu);
    while (q->mapped_count)
        write_one_mapped(q);
    pthread_mutex_unlock(&q->mu);
    return outq_error(q, e);
}

/* Under the lock, with no other writer: one mapped piece, and more while
 * the pool's other threads have tasks to take; so the turn ends once no
 * task is left but this thread's own, and the pool run can end. The file
 * takes one writer at a time: a writer that stopped after one piece left
 * the codes an MXFP4 source carries to the final drain, with every other
 * core idle (bench/serial.sh). */
static void write_turn(outq *q)
{
    q->writing = 1;
    int mapped_turn = 1;
    for (;;) {
        if (q->npending)
            write_pending(q);
        else if (q->mapped_count && (mapped_turn || (q->pool && pool_tasks_left(q->pool)))) {
            write_one_mapped(q);
            mapped_turn = 0;
        } else
            break;
    }
    q->writing = 0;
}

void outq_submit(outq *q, int worker, const uint8_t *buf, size_t out_a, uint64_t at_a, uint64_t len_a,
                 size_t out_b, uint64_t at_b, uint64_t len_b)
{
    qitem it = {.buf = buffer_index(q, worker, buf)};
    ff_err e;
    if (place(q, out_a, at_a, len_a, buf, &it.pc[0], &e) || place(q, out_b, at_b, len_b, buf + len_a, &it.pc[1], &e)) {
        /* the buffer was never queued, so it stays free */
        pthread_mutex_lock(&q->mu);
        record_failure(q, &e);
        pthread_mutex_unlock(&q->mu);
        return;
    }
    pthread_mutex_lock(&q->mu);
    q->queued[it.buf] = 1;
    q->pending[q->npending++] = it;
    if (q->writing) {
        pthread_mutex_unlock(&q->mu);
        return;
    }
    write_turn(q);
    pthread_mutex_unlock(&q->mu);
}

void outq_help(outq *q)
{
    pthread_mutex_lock(&q->mu);
    if (!q->writing && (q->npending || q->mapped_count))
        write_turn(q);
    pthread_mutex_unlock(&q->mu);
}

int outq_error(outq *q, ff_err *e)
{
    if (!q->failed)
        return FF_OK;
    q->failed = 0;
    *e = q->err;
    return e->code;
}
