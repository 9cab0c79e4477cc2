/* The quantize job: the plan's items in file order, read ahead and released
 * behind, each unit or kept tensor handed to its writer (quantize_int.h),
 * the output staged and committed. */
#include "quantize_int.h"
#include "card.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fsutil.h"
#include "jsonio.h"
#include "nvfp4_simd.h"
#include "prefetch.h"
#include "progress.h"
#include "qsource.h"
/* qconfig.c: qconfig_apply with weights.observer set (NULL: memoryless_minmax) */
json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer);
#include "writer.h"

/* Coalesced file ranges. Consecutive items are nearly always adjacent in
 * the file, so one call covers many small tensors (the 11,520 tiny experts
 * made 24k calls before). DONTNEED drops our mapping of bytes already
 * consumed, so RSS stays flat however large the model (the page cache keeps
 * them); WILLNEED hands the range to the read-ahead thread. */
typedef struct span {
    const st_file *f;
    uint64_t lo, hi;          /* data-relative byte range */
    int advice;
    prefetch *pf;             /* WILLNEED: the thread reading ahead, or NULL */
} span;

#define SPAN_FLUSH_BYTES (32ull << 20)
#define SPAN_GAP (64u << 10)
/* How far ahead of the item being quantized the read-ahead runs. */
#define READAHEAD_BYTES (256ull << 20)

static void span_flush(span *s)
{
    /* both take whole 2 MB blocks of the mapping themselves */
    if (s->f && s->f->map && s->hi > s->lo) {
        uint64_t a = s->f->data_off + s->lo, b = s->f->data_off + s->hi;
        if (s->advice == MADV_WILLNEED)
            prefetch_range(s->pf, s->f->map, s->f->file_size, a, b);
        else
            st_map_drop(s->f->map + a, b - a);
    }
    s->f = NULL;
}

static void span_add(span *s, const st_file *f, uint64_t lo, uint64_t hi)
{
    if (s->f == f && lo <= s->hi + SPAN_GAP && hi + SPAN_GAP >= s->lo) {
        s->lo = lo < s->lo ? lo : s->lo;
        s->hi = hi > s->hi ? hi : s->hi;
    } else {
        span_flush(s);
        s->f = f;
        s->lo = lo;
        s->hi = hi;
    }
    if (s->hi - s->lo >= SPAN_FLUSH_BYTES)
        span_flush(s);
}

static void span_item(span *s, const ckpt *c, const plan *p, const plan_item *it)
{
    if (it->kind == ITEM_KEEP) {
        span_add(s, &c->files[it->src->file], it->src->st->begin, it->src->st->end);
        return;
    }
    const plan_unit *u = &p->units[it->unit];
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        uint64_t lo, hi;
        plan_member_span(m, &lo, &hi);
        span_add(s, &c->files[m->src->file], lo, hi);
    }
}

static uint64_t item_bytes(const plan *p, const plan_item *it)
{
    return it->kind == ITEM_KEEP ? it->src->st->end - it->src->st->begin
                                 : plan_unit_bytes_in(p, &p->units[it->unit]);
}

/* The next quantized item's index after item i, or p->nitems. */
static size_t next_unit_item(const plan *p, size_t i)
{
    while (++i < p->nitems && p->items[i].kind != ITEM_QUANT)
        ;
    return i;
}

static void drop_job(unit_job **j)
{
    if (*j)
        qz_free_job(*j);
    free(*j);
    *j = NULL;
}

/* ni: the next quantized item after i (next_unit_item), or p->nitems. */
static int run_unit(const unit_ctx *x, size_t i, size_t ni, unit_job **next, ff_err *e)
{
    const plan *p = x->p;
    const plan_unit *u = &p->units[p->items[i].unit];
    unit_job *j = *next;
    *next = NULL;
    if (j && j->u != u)
        drop_job(&j);
    int rc = FF_OK, exact = 0;
    if (u->fp8) {
        drop_job(&j);
        return qz_write_unit_fp8(x, u, e);
    }
    if (qz_mxfp4_unit(p, u) && (rc = qz_write_unit_exact(x, u, &exact, e)) == FF_OK && exact) {
        drop_job(&j);
        return FF_OK;
    }
    if (rc) {
        drop_job(&j);
        return rc;
    }
    if (!j) {
        if ((j = malloc(sizeof *j)) == NULL)
            return ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
        if ((rc = qz_unit_prepare(j, x->c, p, u, x->kernel, x->obs, x->qs, x->pool, x->io, x->wr, e)) != FF_OK) {
            free(j);
            return rc;
        }
    }
    const plan_unit *nu = ni < p->nitems ? &p->units[p->items[ni].unit] : NULL;
    int ride = nu && qz_can_ride(p, u, x->kernel, x->obs, x->qs) && qz_can_ride(p, nu, x->kernel, x->obs, x->qs);
    int ahead = nu && !ride && qz_takes_scales_ahead(p, nu, x->obs, x->qs);
    if (ride || ahead) {
        if ((*next = malloc(sizeof **next)) == NULL ||
            (rc = qz_unit_prepare(*next, x->c, p, nu, x->kernel, x->obs, x->qs, x->pool, x->io, x->wr, e)) != FF_OK) {
            free(*next);
            *next = NULL;
            drop_job(&j);
            return rc ? rc : ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
        }
    }
    rc = qz_write_unit(j, ride && qz_unit_cached(*next) ? *next : NULL, ahead ? *next : NULL, x->pool, x->io,
                       x->wr, e);
    free(j);
    if (rc)
        drop_job(next);
    return rc;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Items go in plan order (file order). Read-ahead is advised up to
 * READAHEAD_BYTES past the item being worked on, so the disk streams while
 * the pool quantizes; consumed ranges are released behind it. */
static int run_items(const ckpt *c, const plan *p, ff_pool *pool, nvfp4_rows_fn kernel,
                     ckpt_writer *wr, const quant_opts *o, quant_stats *st, ff_err *e)
{
    progress bar;
    progress_begin(&bar, p->bytes_in, o->progress);
    io_state io = {.wc.buf = malloc(WC_CAP), .nslots = pool_threads(pool)};
    io.slots = calloc((size_t)io.nslots, sizeof *io.slots);
    io.scratch = calloc((size_t)io.nslots, sizeof *io.scratch);
    io.i4 = calloc((size_t)io.nslots, sizeof *io.i4);
    io.q = outq_create(wr, pool, io.nslots);
    if (!io.slots || !io.q || !io.scratch || !io.i4) {
        free(io.wc.buf);
        free(io.slots);
        free(io.scratch);
        free(io.i4);
        outq_free(io.q);
        return ff_fail(e, FF_EIO, "out of memory");
    }
    pthread_mutex_init(&io.write_mu, NULL);
    prefetch_mode mode = PREFETCH_FOLIOS;
    for (size_t f = 0; f < c->nfiles; f++)
        if (!prefetch_prepare(c->files[f].map, c->files[f].file_size))
            mode = PREFETCH_WILLNEED;
    span ahead = {.advice = MADV_WILLNEED, .pf = prefetch_start(mode)}, behind = {.advice = MADV_DONTNEED};
    size_t ra_next = 0;
    uint64_t ra_bytes = 0;    /* advised, not yet consumed */
    const nvfp4_obs *obs = o->observer && o->observer->kind != NVFP4_OBS_MINMAX ? o->observer : NULL;
    unit_ctx ux = {.c = c, .p = p, .pool = pool, .kernel = kernel, .obs = obs, .qs = o->source, .io = &io, .wr = wr,
                   .mx_reference = o->mxfp4_reference, .st = st};
    unit_job *next = NULL;    /* the next unit, its amax pass riding along with this one */
    int rc = FF_OK;
    for (size_t i = 0; i < p->nitems && rc == FF_OK; i++) {
        const plan_item *it = &p->items[i];
        /* through the next unit at least: it may be read along with this one */
        size_t ni = next_unit_item(p, i), must = ni < p->nitems ? ni : i + 1;
        for (; ra_next < p->nitems && (ra_next <= must || ra_bytes < READAHEAD_BYTES); ra_next++) {
            span_item(&ahead, c, p, &p->items[ra_next]);
            ra_bytes += item_bytes(p, &p->items[ra_next]);
        }
        span_flush(&ahead);
        int queued = 0;
        rc = it->kind == ITEM_KEEP ? qz_write_keep(c, p, it, o->source, pool, &io, wr, &queued, e)
                                   : run_unit(&ux, i, ni, &next, e);
        if (!queued)
            span_item(&behind, c, p, it);
        ra_bytes -= item_bytes(p, it);
        progress_add(&bar, item_bytes(p, it), i + 1, p->nitems);
    }
    span_flush(&behind);
    prefetch_stop(ahead.pf);
    drop_job(&next);
    if (rc == FF_OK)   /* kept bytes the writers' turns did not reach */
        rc = outq_drain(io.q, e);
    if (rc == FF_OK)
        rc = qz_wc_flush(&io.wc, wr, e);
    progress_end(&bar);
    free(io.arena.p);
    free(io.wc.buf);
    free(io.slots);
    for (int w = 0; w < io.nslots; w++) {
        free(io.scratch[w].p);
        free(io.i4[w]);
    }
    free(io.scratch);
    free(io.i4);
    outq_free(io.q);
    pthread_mutex_destroy(&io.write_mu);
    if (rc == FF_OK && o->source && o->source->finish)
        rc = o->source->finish(o->source->ctx, e);
    return rc;
}

/* The refusals that need no write: a kernel this CPU cannot run, a LoRA
 * adapter on a quantized source, OUT the input. */
static int refusals(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o, ff_err *e)
{
    if (o->kernel && !nvfp4_kernel_by_name(o->kernel))
        return ff_fail(e, FF_EUSAGE, "kernel %s is unknown or this CPU cannot run it", o->kernel);
    if (o->source && p->src_view)
        return ff_fail(e, FF_EUSAGE, "%s: a quantized source cannot take a LoRA adapter in the same pass", c->dir);
    if (out_dir && fs_same(out_dir, c->dir))
        return ff_fail(e, FF_EUSAGE, "%s: output folder is the input folder", out_dir);
    return FF_OK;
}

int quantize_check(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o, ff_err *e)
{
    const char *inputs[] = {c->dir, o->input_dir, NULL};
    int rc = refusals(c, p, out_dir, o, e);
    return rc || !out_dir ? rc : ckpt_writer_check(out_dir, o->force, inputs, e);
}

int quantize_run(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o,
                 quant_stats *st, ff_err *e)
{
    memset(st, 0, sizeof *st);
    int rc = refusals(c, p, out_dir, o, e);
    if (rc)
        return rc;
    nvfp4_rows_fn kernel = o->kernel ? nvfp4_kernel_by_name(o->kernel) : nvfp4_best_kernel(&st->kernel);
    if (o->kernel)
        st->kernel = o->kernel;
    const char *inputs[] = {c->dir, o->input_dir, NULL};
    ckpt_writer *w = ckpt_writer_begin(out_dir, o->force, inputs, e);
    if (!w)
        return e->code;
    double t0 = now();
    ff_pool *pool = pool_create(o->threads);
    rc = pool ? ckpt_writer_layout(w, p->outs, p->nouts, o->shard_size, e) : ff_fail(e, FF_EIO, "out of memory");
    /* this VM, 2 threads, 2.42 GB: 0.40-0.47 s with the blocks allocated
     * first against 0.47-0.51 s without (bench/ab.sh, docs/bench.md) */
    if (!rc)
        rc = ckpt_writer_reserve(w, e);
    if (!rc)
        rc = run_items(c, p, pool, kernel, w, o, st, e);
    json_t *cfg = rc ? NULL : qconfig_apply_observer(c->config, p, o->observer ? o->observer->llmc_name : NULL);
    if (!rc)
        rc = cfg ? ckpt_writer_close(w, cfg, c->dir, 0, e) : ff_fail(e, FF_EIO, "out of memory");
    if (!rc && o->card && card_write(ckpt_writer_dir(w), p, c, o->card, e))
        rc = ff_wrap(e, "model card: ");
    json_decref(cfg);
    st->threads = pool ? pool_threads(pool) : 0;
    pool_destroy(pool);
    st->shards = ckpt_writer_shard_count(w);
    st->bytes_written = ckpt_writer_bytes(w);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    ckpt_writer_free(w);
    st->bytes_read = p->bytes_in;
    st->tensors = p->nouts;
    st->seconds = now() - t0;
    return rc;
}
