/* Kept tensors: checked for NaN/Inf and written, on the pool or in the
 * writers' turns. */
#include "quantize_int.h"

#include <stdlib.h>

#include "nvfp4_simd.h"
#include "qsource.h"

/* Kept tensors not queued (one thread, or a decoded or loaded copy) of at
 * least two chunks are checked and written chunk by chunk on the pool: an
 * embedding is hundreds of MB that one thread would
 * otherwise scan and copy while the others wait. A multiple of every
 * element size, so no element straddles two chunks. */
#define KEEP_CHUNK (4ull << 20)

/* Mapped kept tensors from this size on go to the writers' turns (with two
 * or more threads); smaller ones (norms) are gathered into one write. */
#define KEEP_QUEUE_MIN (1ull << 20)

typedef struct keep_job {
    const uint8_t *src;
    uint64_t bytes;
    size_t esz;
    ff_dtype dtype;
    size_t out;
    ckpt_writer *wr;
    worker_slot *slots;
    pthread_mutex_t *write_mu;
    int mapped;               /* src is the input's mapping, dropped behind */
    int64_t *first_bad;       /* per chunk: its first non-finite element, or -1 */
} keep_job;

/* bf16 (nearly every kept tensor) takes the quantizer's vector amax, which
 * stops at the same first NaN or Inf: the 64-bit check it replaces ran at
 * ~6 GB/s a core, 3.5-5% of a 2-thread job's samples. */
static int64_t kept_first_nonfinite(ff_dtype t, const uint8_t *p, uint64_t n)
{
    float amax;
    uint64_t bad;
    if (t != FF_DT_BF16 || ((uintptr_t)p & 1))
        return ff_first_nonfinite(t, p, n);
    return nvfp4_absmax_fast(p, t, n, &amax, &bad) ? (int64_t)bad : -1;
}

static size_t elem_size(ff_dtype t)
{
    return ff_dtype_size(t) ? ff_dtype_size(t) : 1;
}

/* The first non-finite element of bytes [at, at + n) of a kept tensor, as
 * its index in the whole tensor; -1: none. */
static int64_t kept_first_bad_at(ff_dtype t, size_t esz, const uint8_t *p, uint64_t at, uint64_t n)
{
    int64_t bad = kept_first_nonfinite(t, p, n / esz);
    return bad < 0 ? -1 : (int64_t)(at / esz) + bad;
}

/* a NaN in a kept tensor (a norm, an embedding, a router) serves NaN as
 * surely as one in a quantized weight: refused the same way */
static int kept_nonfinite_fail(ff_err *e, const ckpt *c, const ckpt_tensor *t, int64_t element)
{
    return ff_fail(e, FF_EIO, "%s: tensor %s: element %lld is NaN or infinite (kept tensors are checked too)",
                   ckpt_path(c, t), t->st->name, (long long)element);
}

/* outq_check's fn for a queued kept tensor: ctx the checkpoint, tensor its
 * ckpt_tensor. */
static int check_kept_piece(const void *ctx, const void *tensor, const uint8_t *p, uint64_t at, uint64_t len,
                            ff_err *e)
{
    const ckpt_tensor *t = tensor;
    int64_t bad = kept_first_bad_at(t->st->dtype, elem_size(t->st->dtype), p, at, len);
    return bad < 0 ? FF_OK : kept_nonfinite_fail(e, ctx, t, bad);
}

static void keep_chunk_task(void *ctx, size_t t, int worker)
{
    keep_job *k = ctx;
    uint64_t at = t * KEEP_CHUNK, n = k->bytes - at < KEEP_CHUNK ? k->bytes - at : KEEP_CHUNK;
    k->first_bad[t] = kept_first_bad_at(k->dtype, k->esz, k->src + at, at, n);
    worker_slot *w = &k->slots[worker];
    pthread_mutex_lock(k->write_mu);
    if (!w->failed && ckpt_writer_put_at(k->wr, k->out, at, k->src + at, n, &w->err))
        w->failed = 1;
    pthread_mutex_unlock(k->write_mu);
    if (k->mapped)
        st_map_drop(k->src + at, n);
}

/* The first non-finite element of a kept tensor (-1: none), written as it
 * is checked; FF_EIO in *rc when a write or an allocation failed. */
static int64_t keep_check_write(keep_job *k, ff_pool *pool, io_state *io, ckpt_writer *wr, int *rc, ff_err *e)
{
    if (k->bytes < 2 * KEEP_CHUNK) {
        int64_t bad = kept_first_nonfinite(k->dtype, k->src, k->bytes / k->esz);
        if (bad < 0)
            *rc = qz_out_write(&io->wc, wr, k->out, k->src, k->bytes, e);
        return bad;
    }
    size_t chunks = (size_t)((k->bytes + KEEP_CHUNK - 1) / KEEP_CHUNK);
    k->first_bad = malloc(chunks * sizeof *k->first_bad);
    if (!k->first_bad) {
        *rc = ff_fail(e, FF_EIO, "out of memory writing %s", ckpt_writer_tensor_name(wr, k->out));
        return -1;
    }
    pool_run_indexed(pool, chunks, keep_chunk_task, k);
    int64_t bad = -1;
    for (size_t t = 0; t < chunks && bad < 0; t++)
        bad = k->first_bad[t];
    free(k->first_bad);
    *rc = qz_slots_error(io, e);
    return bad;
}

/* A mapped kept tensor goes to the writers' turns unread: each piece is
 * checked there, just before its write, and a NaN is the queue's failure
 * (outq_error), which the job reports after the unit in flight. Checked
 * here first, the tensor was read from memory twice: 2.42 GB checkpoint,
 * 2 threads, 12 rounds alternating, CPU 0.674 s against 0.715. With a bad
 * quantized tensor too, whichever is found first is the one named. */
static int queue_keep(const ckpt *c, const plan_item *it, const keep_job *k, io_state *io, ckpt_writer *wr,
                      ff_err *e)
{
    outq_queue_mapped(io->q, k->out, k->src, k->bytes,
                      (outq_check){.fn = check_kept_piece, .ctx = c, .tensor = it->src});
    return outq_error(io->q, e);
}

/* *queued: the tensor's bytes wait in the output queue (mapped), which
 * drops them from the mapping as it writes them. */
int qz_write_keep(const ckpt *c, const plan *p, const plan_item *it, const quant_source *qs, ff_pool *pool,
                      io_state *io, ckpt_writer *wr, int *queued, ff_err *e)
{
    void *buf = NULL;
    uint16_t *dec = NULL;
    const qs_weight *sw = plan_source_weight(p, it->src);
    if (sw && qs_decode(c, p->src_view, sw, NULL, &dec, e))
        return e->code;   /* a kept stored weight is written as the reference bf16 */
    buf = dec;
    if (!sw && qs && qs->load(qs->ctx, it->src, &buf, e))
        return e->code;
    keep_job k = {.src = buf ? buf : ckpt_data(c, it->src),
                  .bytes = sw ? st_numel(it->src->st) * 2 : it->src->st->end - it->src->st->begin,
                  .dtype = sw ? FF_DT_BF16 : it->src->st->dtype, .out = it->out, .wr = wr, .slots = io->slots,
                  .write_mu = &io->write_mu, .mapped = !buf};
    k.esz = elem_size(k.dtype);
    /* one thread writes and quantizes in turn anyway: queueing saves nothing */
    if ((*queued = k.mapped && io->nslots > 1 && k.bytes >= KEEP_QUEUE_MIN))
        return queue_keep(c, it, &k, io, wr, e);
    int rc = FF_OK;
    int64_t bad = keep_check_write(&k, pool, io, wr, &rc, e);
    qs_buffer_release(p->src_view, buf);   /* a decoded copy is reused; a loaded one free()d */
    if (!rc && bad >= 0)
        rc = kept_nonfinite_fail(e, c, it->src, bad);
    return rc;
}
