/* NVFP4 checkpoint -> bf16 checkpoint, bit for bit what compressed-tensors'
 * decompressor gives, so fp4forge output can be compared (or served) by
 * tools that read only bf16. A mixed output's FP8 weight-only modules
 * (quantize --fp8) decode as NaiveQuantizationCompressor.decompress does,
 * into their scale's dtype (the source's). */
#include "dequantize.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "decode.h"
#include "qsource.h"
#include "fsutil.h"
#include "progress.h"
#include "threadpool.h"
#include "decode_fp8.h"
#include "writer.h"

/* One output tensor: a copy of src, or the decode of module. */
typedef struct dq_item {
    const ckpt_tensor *src;
    dq_module mod;
    fp8_module fp8;          /* decoded is 2: an FP8 weight-only module */
    int decoded;
} dq_item;

typedef struct dq_job {
    dq_item *items;
    st_out *outs;
    char **names;
    size_t n;
} dq_job;

static void job_free(dq_job *j)
{
    for (size_t i = 0; i < j->n; i++) {
        dq_module_free(&j->items[i].mod);
        fp8_module_free(&j->items[i].fp8);
        free(j->names[i]);
    }
    free(j->items);
    free(j->outs);
    free(j->names);
}

#define DQ_READS "dequantize reads NVFP4 (compressed-tensors nvfp4-pack-quantized: weight_packed, weight_scale and " \
                 "weight_global_scale per module), mixed with FP8 weight-only modules (naive-quantized)"

/* The global formats a compressed-tensors output of fp4forge has: NVFP4
 * alone, FP8 weight-only alone (every quantized Linear --fp8), or both. */
static int format_read(const char *fmt)
{
    return !fmt || strcmp(fmt, "nvfp4-pack-quantized") == 0 || strcmp(fmt, "mixed-precision") == 0 ||
           strcmp(fmt, FP8_FORMAT) == 0;
}

/* What an input that is not NVFP4 is, in words, or NULL for an NVFP4 one. */
static const char *not_nvfp4(const ckpt *c, char *buf, size_t n)
{
    const json_t *q = c->config ? json_object_get(c->config, "quantization_config") : NULL;
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    const char *fmt = json_string_value(json_object_get(q, "format"));
    size_t modules = 0, fp8 = 0;
    char mod[1024];
    for (size_t i = 0; i < c->ntensors; i++) {
        const st_tensor *t = c->tensors[i].st;
        int fp8_mod = fp8_part(c, t->name) == 1;
        modules += dq_module_of(t->name, mod, sizeof mod) != NULL || fp8_mod;
        fp8 += t->dtype == FF_DT_F8_E4M3 && dq_part(c, t->name) == DQ_PART_NONE && !fp8_mod;
    }
    qs_format qf;
    char qwhy[300], qname[96];
    if (qs_config(c->config, &qf, qwhy, sizeof qwhy) == 1 && qf.kind == QS_FP8_BLOCK)
        snprintf(buf, n, "an FP8-block checkpoint (quant_method fp8: %zu F8_E4M3 weights with weight_scale_inv; "
                         "fp4forge quantize reads it as it is)", fp8);
    else if (qf.kind)
        snprintf(buf, n, "a %s checkpoint (fp4forge quantize reads it as it is)", qs_format_name(&qf, qname, sizeof qname));
    else if (method && strcmp(method, "compressed-tensors") != 0)
        snprintf(buf, n, "a '%s' checkpoint (its quantization_config's quant_method)", method);
    else if (!format_read(fmt))
        snprintf(buf, n, "a compressed-tensors '%s' checkpoint", fmt);
    else if (!modules && fp8)
        snprintf(buf, n, "a checkpoint of %zu F8_E4M3 tensors and no weight_packed", fp8);
    else if (!modules)
        snprintf(buf, n, "%s checkpoint (no weight_packed tensors)", q ? "a" : "an unquantized");
    else
        return NULL;
    return buf;
}

/* A tensor that would make the output wrong while looking whole: scales of a
 * module without codes (they would be copied as orphans and the module lost)
 * or a source-quantization scale beside an NVFP4 module (copied beside a bf16
 * weight that has no use for it). */
static int check_tensor(const ckpt *c, const ckpt_tensor *t, ff_err *e)
{
    char mod[1024];
    const char *part = dq_orphan_part(c, t->st->name, mod, sizeof mod), *stray = dq_stray_scale(c, t->st->name);
    if (part && fp8_part(c, t->st->name))
        part = NULL;   /* an FP8 module's scale: its weight is beside it */
    if (part)
        return ff_fail(e, FF_EIO, "%s: tensor %s: module %s has a %s but no %s: its codes are missing", ckpt_path(c, t),
                       t->st->name, mod, part, DQ_PACKED);
    if (stray)
        return ff_fail(e, FF_EIO, "%s: tensor %s: %s beside an NVFP4 module, a scale left from the source's FP8 "
                                  "quantization (NVFP4A16 has none)", ckpt_path(c, t), t->st->name, stray);
    return FF_OK;
}

/* An FP8 module checked before a byte is written: a scale that is NaN,
 * infinite, zero or negative, or a NaN code, would decode to weights no
 * quantizer meant. Its output tensor: the weight in the scale's dtype. */
static int add_fp8(const ckpt *c, const char *mod, dq_item *it, st_out *o, ff_err *e)
{
    uint64_t first = 0;
    float val = 0;
    int rc = fp8_find(c, mod, &it->fp8, e);
    if (rc)
        return rc;
    if (fp8_bad_scales(c, &it->fp8, &first, &val))
        rc = ff_fail(e, FF_EIO, "%s: tensor %s: FP8 channel scale of row %llu is %g (zero, negative or not finite): "
                                "the row would decode to 0 or NaN", ckpt_path(c, it->fp8.scale),
                     it->fp8.scale->st->name, (unsigned long long)first, (double)val);
    else if (fp8_nan_codes(c, &it->fp8, &first))
        rc = ff_fail(e, FF_EIO, "%s: tensor %s: FP8 code at element %llu is NaN", ckpt_path(c, it->fp8.weight),
                     it->fp8.weight->st->name, (unsigned long long)first);
    if (rc) {
        fp8_module_free(&it->fp8);   /* not counted in j->n yet */
        return rc;
    }
    it->decoded = 2;
    o->dtype = it->fp8.dtype;
    o->ndim = 2;
    o->shape[0] = (int64_t)it->fp8.rows;
    o->shape[1] = (int64_t)it->fp8.cols;
    o->nbytes = it->fp8.rows * it->fp8.cols * ff_dtype_size(it->fp8.dtype);
    return FF_OK;
}

static int add_item(const ckpt *c, const ckpt_tensor *t, dq_job *j, ff_err *e)
{
    char mod[1024];
    dq_item *it = &j->items[j->n];
    st_out *o = &j->outs[j->n];
    memset(it, 0, sizeof *it);
    memset(o, 0, sizeof *o);
    it->src = t;
    int rc = check_tensor(c, t, e);
    if (rc)
        return rc;
    if (fp8_part(c, t->st->name) == 1 && fp8_module_of(c, t->st->name, mod, sizeof mod)) {
        if ((rc = add_fp8(c, mod, it, o, e)))
            return rc;
        j->names[j->n] = strdup(t->st->name);
        if (!j->names[j->n]) {
            fp8_module_free(&it->fp8);
            return ff_oom(e, "out of memory");
        }
    } else if (dq_module_of(t->st->name, mod, sizeof mod)) {
        float gs;
        if ((rc = dq_find(c, mod, &it->mod, e)))
            return ff_wrap(e, "%s: ", c->dir);
        if ((rc = dq_check_global(c, &it->mod, &gs, e))) {
            dq_module_free(&it->mod);   /* not counted in j->n yet */
            return rc;
        }
        it->decoded = 1;
        size_t len = strlen(mod) + 8;
        j->names[j->n] = malloc(len);
        if (!j->names[j->n]) {
            dq_module_free(&it->mod);
            return ff_oom(e, "out of memory");
        }
        snprintf(j->names[j->n], len, "%s.weight", mod);
        o->dtype = FF_DT_BF16;
        o->ndim = 2;
        o->shape[0] = (int64_t)it->mod.rows;
        o->shape[1] = (int64_t)it->mod.cols;
        o->nbytes = it->mod.rows * it->mod.cols * 2;
    } else {
        j->names[j->n] = strdup(t->st->name);
        if (!j->names[j->n])
            return ff_oom(e, "out of memory");
        o->dtype = t->st->dtype;
        o->ndim = t->st->ndim;
        memcpy(o->shape, t->st->shape, sizeof o->shape);
        o->nbytes = t->st->end - t->st->begin;
    }
    o->name = j->names[j->n];
    j->n++;
    return FF_OK;
}

/* The output tensor list in source order: scales vanish into their weight. */
static int build_job(const ckpt *c, dq_job *j, ff_err *e)
{
    char what[256];
    memset(j, 0, sizeof *j);
    if (not_nvfp4(c, what, sizeof what))
        return ff_fail(e, FF_EIO, "%s: %s, not NVFP4: " DQ_READS, c->dir, what);
    size_t cap = c->ntensors ? c->ntensors : 1;
    j->items = calloc(cap, sizeof *j->items);
    j->outs = calloc(cap, sizeof *j->outs);
    j->names = calloc(cap, sizeof *j->names);
    if (!j->items || !j->outs || !j->names)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < c->ntensors; i++) {
        const ckpt_tensor *t = &c->tensors[i];
        if (dq_part(c, t->st->name) == DQ_PART_SCALE || fp8_part(c, t->st->name) == 2)
            continue;  /* a scale: written as part of its module's weight */
        int rc = add_item(c, t, j, e);
        if (rc)
            return rc;
    }
    return FF_OK;
}

/* A module is decoded this many bf16 bytes at a time by the pool, so
 * memory holds one batch instead of the whole weight. */
#define DQ_BATCH (8ull << 20)
/* A batch's tasks each thread takes: each task writes its own rows, so one
 * thread decodes while another writes (the file takes one writer at a
 * time); with one task a thread they decoded together, then queued to
 * write together. 2 threads, 2.2 GB written: of 2, 4, 8, 16 and 32 tasks a
 * thread (docs/bench.md) 8 was the fastest; no task writes less than
 * DQ_TASK_MIN_BYTES, so many threads do not cut a batch into tiny writes. */
#define DQ_TASKS_PER_THREAD 8
#define DQ_TASK_MIN_BYTES (256ull << 10)
/* Tasks in the file's write at once. ext4 holds the inode's lock through a
 * buffered write, and a thread waiting for it spins: on the lent 16-core
 * host, dequantize at 16 threads spent 11-12 s of system time so, against
 * 2 s with this gate and the same wall time (docs/bench.md). One writer and
 * one waiter keep the handoff a spin; the other tasks sleep. A mutex round
 * every write (every waiter asleep) was slower on the 2-core VM, where the
 * gate is off. */
#define DQ_WRITERS 2
/* Kept tensors are copied in pieces, each dropped from the mapping behind. */
#define DQ_PIECE (8ull << 20)

typedef struct dq_batch {
    const ckpt *c;
    const dq_module *m;
    dq_table *t;
    ckpt_writer *w;
    size_t out;
    uint16_t *buf;
    uint64_t row0, rows, per;   /* this batch's rows, and each task's share */
    pthread_mutex_t mu;         /* the first failed write: */
    int rc;
    ff_err err;
    int gated;                  /* more threads than DQ_WRITERS: */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_free;
    int writing;                /* tasks past the gate */
} dq_batch;

static void gate_enter(dq_batch *b)
{
    if (!b->gated)
        return;
    pthread_mutex_lock(&b->gate_mu);
    while (b->writing >= DQ_WRITERS)
        pthread_cond_wait(&b->gate_free, &b->gate_mu);
    b->writing++;
    pthread_mutex_unlock(&b->gate_mu);
}

static void gate_leave(dq_batch *b)
{
    if (!b->gated)
        return;
    pthread_mutex_lock(&b->gate_mu);
    b->writing--;
    pthread_cond_signal(&b->gate_free);
    pthread_mutex_unlock(&b->gate_mu);
}

/* DQ_TASKS_PER_THREAD a thread, fewer where they would write less than
 * DQ_TASK_MIN_BYTES each, never fewer than one a thread */
static size_t batch_tasks(int threads, uint64_t bytes)
{
    uint64_t most = (uint64_t)threads * DQ_TASKS_PER_THREAD, by_size = bytes / DQ_TASK_MIN_BYTES;
    uint64_t n = by_size < most ? by_size : most;
    return (size_t)(n > (uint64_t)threads ? n : (uint64_t)threads);
}

static void batch_task(void *ctx, size_t k)
{
    dq_batch *b = ctx;
    uint64_t at = (uint64_t)k * b->per;
    if (at >= b->rows)
        return;
    uint64_t n = b->rows - at < b->per ? b->rows - at : b->per;
    uint16_t *rows = b->buf + at * b->m->cols;
    dq_stats st = {.first_bad = UINT64_MAX};
    dq_decode_rows(b->c, b->m, b->t, b->row0 + at, n, NULL, rows, &st);
    dq_drop_rows(b->c, b->m, b->row0 + at, n);
    ff_err e;
    gate_enter(b);
    int rc = ckpt_writer_put_at(b->w, b->out, (b->row0 + at) * b->m->cols * 2, rows, n * b->m->cols * 2, &e);
    gate_leave(b);
    if (rc) {
        pthread_mutex_lock(&b->mu);
        if (!b->rc)
            b->rc = e.code, b->err = e;
        pthread_mutex_unlock(&b->mu);
    }
}

/* The global scale was checked, so a NaN/Inf comes from NaN block scales:
 * found from the scales alone before a byte of the module is written. */
static int check_finite(const ckpt *c, const dq_module *m, ff_err *e)
{
    dq_stats st;
    int rc = dq_decode(c, m, NULL, NULL, &st, e);
    if (!rc && st.nonfinite)
        rc = ff_fail(e, FF_EIO, "%s: tensor %s: module %s decodes to %llu NaN/Inf values (first at element %llu): "
                                "NaN block scales", ckpt_path(c, m->scale), m->scale->st->name,
                     m->module, (unsigned long long)st.nonfinite, (unsigned long long)st.first_bad);
    return rc;
}

static int write_decoded(const ckpt *c, const dq_module *m, size_t out, ckpt_writer *w, ff_pool *pool, ff_err *e)
{
    int rc = check_finite(c, m, e);
    uint64_t step = m->cols ? DQ_BATCH / (m->cols * 2) : 1;
    step = step ? step : 1;
    dq_batch b = {.c = c, .m = m, .t = malloc(sizeof(dq_table)), .w = w, .out = out,
                  .buf = malloc(step * m->cols * 2 + 2)};
    pthread_mutex_init(&b.mu, NULL);
    b.gated = pool_threads(pool) > DQ_WRITERS;
    pthread_mutex_init(&b.gate_mu, NULL);
    pthread_cond_init(&b.gate_free, NULL);
    if (!rc && (!b.t || !b.buf))
        rc = ff_oom(e, "out of memory decoding %s", m->module);
    if (!rc) {
        float gs;
        memcpy(&gs, ckpt_data(c, m->global), sizeof gs);
        dq_table_init(b.t, gs);
    }
    for (b.row0 = 0; !rc && b.row0 < m->rows; b.row0 += b.rows) {
        b.rows = m->rows - b.row0 < step ? m->rows - b.row0 : step;
        size_t tasks = batch_tasks(pool_threads(pool), b.rows * m->cols * 2);
        b.per = (b.rows + tasks - 1) / tasks;
        pool_run(pool, tasks, batch_task, &b);
        if (b.rc)
            rc = b.rc, *e = b.err;
    }
    pthread_mutex_destroy(&b.mu);
    pthread_mutex_destroy(&b.gate_mu);
    pthread_cond_destroy(&b.gate_free);
    free(b.t);
    free(b.buf);
    return rc;
}

/* An FP8 module, DQ_BATCH bytes of output at a time (the decode is one
 * multiply a weight: cheaper than handing rows to the pool). */
static int write_fp8(const ckpt *c, const fp8_module *m, size_t out, ckpt_writer *w, ff_err *e)
{
    size_t esz = ff_dtype_size(m->dtype);
    uint64_t step = m->cols ? DQ_BATCH / (m->cols * esz) : 1, row_bytes = m->cols * esz;
    step = step ? step : 1;
    uint8_t *buf = malloc(step * row_bytes + 4);
    int rc = buf ? FF_OK : ff_oom(e, "out of memory decoding %s", m->module);
    for (uint64_t row = 0, n; !rc && row < m->rows; row += n) {
        n = m->rows - row < step ? m->rows - row : step;
        fp8_decode_rows(c, m, row, n, buf);
        fp8_drop_rows(c, m, row, n);
        rc = ckpt_writer_put_at(w, out, row * row_bytes, buf, n * row_bytes, e);
    }
    free(buf);
    return rc;
}

static int write_kept(const ckpt *c, const ckpt_tensor *t, size_t out, ckpt_writer *w, ff_err *e)
{
    uint64_t n = t->st->end - t->st->begin;
    int rc = FF_OK;
    for (uint64_t at = 0; !rc && at < n; at += DQ_PIECE) {
        uint64_t k = n - at < DQ_PIECE ? n - at : DQ_PIECE;
        rc = ckpt_writer_put_at(w, out, at, ckpt_data(c, t) + at, k, e);
        dq_drop(c, t, at, k);
    }
    return rc;
}

static int write_items(const ckpt *c, const dq_job *j, ckpt_writer *w, const dequant_opts *o, ff_err *e)
{
    ff_pool *pool = pool_create(o->threads);
    progress bar;
    int rc = pool ? FF_OK : ff_oom(e, "out of memory starting %d threads", o->threads);
    uint64_t total = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        total += c->tensors[i].st->end - c->tensors[i].st->begin;
    progress_begin(&bar, total, o->progress);
    for (size_t i = 0; i < j->n && rc == FF_OK; i++) {
        const dq_item *it = &j->items[i];
        const dq_module *m = &it->mod;
        if (it->decoded == 2) {
            const fp8_module *f = &it->fp8;
            rc = write_fp8(c, f, i, w, e);
            dq_drop_whole(c, f->weight);
            dq_drop_whole(c, f->scale);
            progress_add(&bar, f->weight->st->end - f->weight->st->begin + f->scale->st->end - f->scale->st->begin,
                         i + 1, j->n);
            continue;
        }
        rc = it->decoded ? write_decoded(c, m, i, w, pool, e) : write_kept(c, it->src, i, w, e);
        if (it->decoded) {
            dq_drop_whole(c, m->packed);
            dq_drop_whole(c, m->scale);
        } else {
            dq_drop_whole(c, it->src);
        }
        progress_add(&bar, it->decoded ? m->packed->st->end - m->packed->st->begin + m->scale->st->end -
                                             m->scale->st->begin + 4 : it->src->st->end - it->src->st->begin,
                     i + 1, j->n);
    }
    progress_end(&bar);
    pool_destroy(pool);
    return rc;
}

/* config.json without quantization_config, then every non-weight file. */
static int write_meta(const ckpt *c, ckpt_writer *w, ff_err *e)
{
    json_t *cfg = c->config ? json_deep_copy(c->config) : NULL;
    if (c->config && !cfg)
        return ff_oom(e, "out of memory");
    json_object_del(cfg, "quantization_config");
    int rc = ckpt_writer_close(w, cfg, c->dir, 0, e);
    json_decref(cfg);
    return rc;
}

int dequantize_run(const char *in, const char *out, const dequant_opts *o, ff_err *e)
{
    ckpt c;
    dq_job j = {0};
    ckpt_writer *w = NULL;
    int rc = ckpt_open(&c, in, 0, e);
    if (!rc && fs_same(in, out))
        rc = ff_fail(e, FF_EUSAGE, "%s: output folder is the input folder", out);
    if (!rc)
        rc = build_job(&c, &j, e);
    const char *inputs[] = {in, NULL};
    if (!rc && !(w = ckpt_writer_begin(out, o->force, inputs, e)))
        rc = e->code;
    if (!rc)
        rc = ckpt_writer_layout(w, j.outs, j.n, o->shard_size, e);
    /* the blocks allocated first, as quantize does: each write then only
     * fills the page cache (docs/bench.md, "Every writer allocates its
     * blocks first") */
    if (!rc)
        rc = ckpt_writer_reserve(w, e);
    if (!rc)
        rc = write_items(&c, &j, w, o, e);
    if (!rc)
        rc = write_meta(&c, w, e);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    ckpt_writer_free(w);
    job_free(&j);
    ckpt_close(&c);
    return rc;
}
