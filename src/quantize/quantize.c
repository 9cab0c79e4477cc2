#include "quantize.h"
#include "card.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fp8_channel.h"
#include "mx_exact.h"
#include "mxfp4.h"
#include "qsource.h"
#include "fsutil.h"
#include "jsonio.h"
#include "nvfp4.h"
#include "nvfp4_mse.h"
#include "nvfp4_simd.h"
#include "prefetch.h"
#include "progress.h"
#include "qconfig.h"
/* qconfig.c: qconfig_apply with weights.observer set (NULL: memoryless_minmax) */
json_t *qconfig_apply_observer(const json_t *config, const plan *p, const char *observer);
#include "writer_int.h"
#include "outq.h"
#include "shards.h"
#include "threadpool.h"

/* Rows per task: big enough to amortise dispatch, small enough to balance. */
#define ROWS_PER_TASK 64
/* Input rows are dropped from the mapping in blocks of about this many
 * bytes, once every task over the block has read it: each madvise that
 * unmaps pages interrupts every CPU running the pool to flush its TLB, and
 * per 64-row task that cost 16 threads more system time than the kernels
 * (1.3 s against 0.45 s on a 2.4 GB model). In flight: a block a thread. */
#define RELEASE_BLOCK_BYTES (8ull << 20)
/* Units below this many elements run on the calling thread: waking the pool
 * costs more than the work (the 11,520 tiny experts of a scaled-down MoE
 * spent most of their time in futex handshakes). */
#define SMALL_UNIT_ELEMS (1u << 18)

/* One output buffer reused by every unit (grow-only): a fresh malloc per
 * unit is a fresh mmap, so every unit paid page faults and munmap for pages
 * it wrote once; reuse keeps RSS at the largest unit's output. */
typedef struct out_arena {
    uint8_t *p;
    uint64_t cap;
} out_arena;

/* Per pool thread: a kept tensor's chunk that it failed to write, for the
 * calling thread to report. */
typedef struct worker_slot {
    int failed;
    ff_err err;
} worker_slot;

typedef struct unit_job {
    const ckpt *c;
    const plan *p;
    const plan_unit *u;
    nvfp4_rows_fn kernel;
    float gs;
    size_t ntasks;
    size_t *task_member;      /* member index (within unit) of each task */
    uint64_t *task_row;       /* first row of each task */
    float *task_amax;
    uint64_t *task_bad;       /* element index of a NaN/Inf, or UINT64_MAX */
    uint8_t **packed, **scales;  /* into the arena, not owned; NULL when streamed */
    uint64_t elems;           /* elements in the unit, to pick inline or pool */
    int streamed;             /* tasks queue their rows for the shard (outq): big units need no
                                 unit-sized output buffer and the writes overlap the kernels */
    size_t *task_block;       /* release block of each task */
    size_t nblocks;
    size_t *block_first;      /* first task of each block, then ntasks (a block's tasks are consecutive) */
    atomic_size_t *block_left;   /* tasks of the block still to finish this pass */
    const shard_set *ss;
    outq *q;
    void **data;              /* per member: the quant_source's copy, or NULL */
    const uint8_t **rows;     /* per member: its [rows, cols] weight (row 0) */
    void **owned;             /* per member: a transposed copy behind rows, or NULL */
    /* MSE observers only (obs != NULL): per member, per group */
    const nvfp4_obs *obs;
    nvfp4_mse_search_fn search; /* the search of --kernel's choice (the same bytes) */
    int ranges_scalar;        /* --kernel scalar: the scalar ranges quantizer too */
    uint64_t **mask;          /* improvement masks (nvfp4_obs_needs_mask) */
    uint8_t **idx;            /* else the winning step */
    float **gamax;            /* the chosen range */
    int *stop;                /* per member: the tensor-wide early stop step */
    uint64_t *task_any;       /* per task: OR of its groups' masks */
    float *task_top;          /* per task: max chosen range */
    /* The next unit's amax pass inside this one's quantizing pass: that pass
     * alone waits on memory while the kernel leaves the loads idle (host held
     * to 2 CPUs, 4.34 GB: 0.95 s a job, 0.71 s with the pass skipped; riding,
     * bench/run 0.76x of cat against 0.73x, twice; 16 threads 0.42-0.51 s
     * against 0.49-0.56). */
    struct unit_job *side;
    size_t *side_first;       /* per task: its first task of side's; then side->ntasks */
    int amax_done;            /* its amax pass ran inside the previous unit's */
} unit_job;

/* Member k's source tensor: the producer's copy when it made one, else the map. */
static const uint8_t *member_base(const unit_job *j, size_t k)
{
    if (j->data && j->data[k])
        return j->data[k];
    return ckpt_data(j->c, j->p->members[j->u->first + k].src);
}

/* Points each member at its [rows, cols] weight (transposing stored-
 * transposed experts into a copy), once per unit before the tasks run. */
static int locate_members(unit_job *j, ff_err *e)
{
    j->rows = calloc(j->u->count, sizeof *j->rows);
    j->owned = calloc(j->u->count, sizeof *j->owned);
    if (!j->rows || !j->owned)
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    for (size_t k = 0; k < j->u->count; k++) {
        j->rows[k] = plan_member_rows(&j->p->members[j->u->first + k], member_base(j, k), &j->owned[k], e);
        if (!j->rows[k])
            return e->code;
    }
    return FF_OK;
}

static uint64_t task_rows(const unit_job *j, size_t t)
{
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t left = m->rows - j->task_row[t];
    return left < ROWS_PER_TASK ? left : ROWS_PER_TASK;
}

/* Before a pass that releases: every block waits for all its tasks. */
static void arm_blocks(unit_job *j)
{
    for (size_t b = 0; b < j->nblocks; b++)
        atomic_store_explicit(&j->block_left[b], j->block_first[b + 1] - j->block_first[b], memory_order_relaxed);
}

/* Task t is done reading its rows; the last task of a block drops the
 * block's rows from the mapping. */
static void release_task_rows(unit_job *j, size_t t)
{
    size_t k = j->task_member[t], b = j->task_block[t];
    if (!j->streamed || (j->data && j->data[k]) || j->owned[k])
        return;
    if (atomic_fetch_sub_explicit(&j->block_left[b], 1, memory_order_acq_rel) != 1)
        return;
    size_t first = j->block_first[b], end = j->block_first[b + 1];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t row_bytes = m->cols * ff_dtype_size(m->src->st->dtype);
    uint64_t rows = j->task_row[end - 1] + task_rows(j, end - 1) - j->task_row[first];
    /* read: the next pass maps them again from the page cache; without the
     * drop a fused gate+up held 462 MB of mapped input until its unit ended */
    st_map_drop(j->rows[k] + j->task_row[first] * row_bytes, rows * row_bytes);
}

static void absmax_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    unit_job *j = ctx;
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t row = j->task_row[t], n = task_rows(j, t) * m->cols;
    size_t esz = ff_dtype_size(m->src->st->dtype);
    const uint8_t *p = j->rows[j->task_member[t]] + row * m->cols * esz;
    uint64_t bad;
    j->task_bad[t] = UINT64_MAX;
    /* the element index is the source tensor's (for a stored-transposed
     * expert, the member's own) */
    if (nvfp4_absmax_fast(p, m->src->st->dtype, n, &j->task_amax[t], &bad))
        j->task_bad[t] = ((m->transposed ? 0 : m->row0) + row) * m->cols + bad;
    if (!j->obs)   /* a search reads the rows again right away */
        release_task_rows(j, t);
}

/* Where task t's packed rows and scales go: the unit's arena, or a free
 * buffer of the thread's when the unit is streamed. */
static void task_outputs(const unit_job *j, size_t t, int worker, uint8_t **pk, uint8_t **sc)
{
    size_t k = j->task_member[t];
    uint64_t r = j->task_row[t], cols = j->p->members[j->u->first + k].cols;
    if (!j->streamed) {
        *pk = j->packed[k] + r * (cols / 2);
        *sc = j->scales[k] + r * (cols / NVFP4_GROUP);
        return;
    }
    *pk = outq_buffer(j->q, worker);
    *sc = *pk + task_rows(j, t) * (cols / 2);
}

/* The packed rows and the scales follow each other in the buffer. */
static void stream_task_rows(const unit_job *j, size_t t, int worker, const uint8_t *pk)
{
    if (!j->streamed)
        return;
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t r = j->task_row[t], n = task_rows(j, t);
    outq_submit(j->q, worker, pk, m->out, r * (m->cols / 2), n * (m->cols / 2), m->out + 1,
                r * (m->cols / NVFP4_GROUP), n * (m->cols / NVFP4_GROUP));
}

static void quant_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint8_t *pk, *sc;
    task_outputs(j, t, worker, &pk, &sc);
    j->kernel(j->rows[k], m->src->st->dtype, m->cols, j->task_row[t], task_rows(j, t), j->gs, pk, sc);
    release_task_rows(j, t);
    stream_task_rows(j, t, worker, pk);
}

/* Side tasks [a, end) of one member: consecutive, so their rows are one run. */
static size_t side_run_end(const unit_job *v, size_t a, size_t b)
{
    size_t end = a + 1;
    while (end < b && v->task_member[end] == v->task_member[a])
        end++;
    return end;
}

/* The amax of side tasks [a, end) as read by the kernel: the max goes to
 * task a; a NaN or Inf sends the run through absmax_task, which names it. */
static void side_record(unit_job *v, size_t a, size_t end, uint16_t max)
{
    for (size_t s = a; s < end; s++) {
        if (max >= 0x7f80) {
            absmax_task(v, s, 0);
            continue;
        }
        v->task_amax[s] = s == a ? ff_bf16_to_f32(max) : 0.0f;
        v->task_bad[s] = UINT64_MAX;
        release_task_rows(v, s);
    }
}

/* quant_task with the side's tasks side_first[t]..side_first[t + 1] read
 * along: the task's rows are shared out over the side's runs. */
static void quant_side_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx, *v = j->side;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t rows = task_rows(j, t), r0 = j->task_row[t], done = 0;
    size_t a = j->side_first[t], b = j->side_first[t + 1];
    uint8_t *pk, *sc;
    task_outputs(j, t, worker, &pk, &sc);
    while (a < b) {
        size_t end = side_run_end(v, a, b);
        const plan_member *vm = &v->p->members[v->u->first + v->task_member[a]];
        uint64_t vrow = v->task_row[a], vrows = v->task_row[end - 1] + task_rows(v, end - 1) - vrow;
        nvfp4_side side = {.p = (const uint16_t *)v->rows[v->task_member[a]] + vrow * vm->cols,
                           .n = vrows * vm->cols};
        uint64_t part = end == b ? rows - done : (rows - done) * (end - a) / (b - a);
        nvfp4_quantize_rows_side(j->rows[k], m->cols, r0 + done, part, j->gs, pk + done * (m->cols / 2),
                                 sc + done * (m->cols / NVFP4_GROUP), &side);
        side_record(v, a, end, side.max);
        done += part;
        a = end;
    }
    if (done < rows)
        j->kernel(j->rows[k], m->src->st->dtype, m->cols, r0 + done, rows - done, j->gs,
                  pk + done * (m->cols / 2), sc + done * (m->cols / NVFP4_GROUP));
    release_task_rows(j, t);
    stream_task_rows(j, t, worker, pk);
}

static void search_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t], g = r * (m->cols / NVFP4_GROUP);
    j->task_any[t] = 0;
    j->search(
        j->rows[k], m->src->st->dtype, m->cols, r, task_rows(j, t), j->obs, j->mask[k] ? j->mask[k] + g : NULL,
        j->idx[k] ? j->idx[k] + g : NULL, &j->task_any[t]);
}

static void choose_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t], g = r * (m->cols / NVFP4_GROUP);
    j->task_top[t] = nvfp4_mse_choose_rows(j->rows[k], m->src->st->dtype, m->cols, r, task_rows(j, t), j->obs,
                                           j->mask[k] ? j->mask[k] + g : NULL, j->idx[k] ? j->idx[k] + g : NULL,
                                           j->stop[k], j->gamax[k] + g);
}

static void quant_ranges_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t];
    uint8_t *pk, *sc;
    task_outputs(j, t, worker, &pk, &sc);
    (j->ranges_scalar ? nvfp4_quantize_rows_ranges_scalar : nvfp4_quantize_rows_ranges)(
        j->rows[k], m->src->st->dtype, m->cols, r, task_rows(j, t), j->gs, j->gamax[k] + r * (m->cols / NVFP4_GROUP),
        pk, sc);
    release_task_rows(j, t);
    stream_task_rows(j, t, worker, pk);
}

/* Per-member search buffers; -1 when out of memory. */
static int obs_alloc(unit_job *j)
{
    size_t n = j->u->count;
    j->mask = calloc(n, sizeof *j->mask);
    j->idx = calloc(n, sizeof *j->idx);
    j->gamax = calloc(n, sizeof *j->gamax);
    j->stop = calloc(n, sizeof *j->stop);
    j->task_any = calloc(j->ntasks, sizeof *j->task_any);
    j->task_top = calloc(j->ntasks, sizeof *j->task_top);
    if (!j->mask || !j->idx || !j->gamax || !j->stop || !j->task_any || !j->task_top)
        return -1;
    int use_mask = nvfp4_obs_needs_mask(j->obs);
    if (use_mask && j->obs->steps > 64)
        return -1;
    for (size_t k = 0; k < n; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        uint64_t groups = m->rows * (m->cols / NVFP4_GROUP);
        j->gamax[k] = malloc((groups ? groups : 1) * sizeof(float));
        if (use_mask)
            j->mask[k] = malloc((groups ? groups : 1) * sizeof(uint64_t));
        else
            j->idx[k] = malloc(groups ? groups : 1);
        if (!j->gamax[k] || (use_mask ? !j->mask[k] : !j->idx[k]))
            return -1;
    }
    return 0;
}

static void obs_free(unit_job *j)
{
    for (size_t k = 0; k < j->u->count; k++) {
        if (j->mask)
            free(j->mask[k]);
        if (j->idx)
            free(j->idx[k]);
        if (j->gamax)
            free(j->gamax[k]);
    }
    free(j->mask);
    free(j->idx);
    free(j->gamax);
    free(j->stop);
    free(j->task_any);
    free(j->task_top);
}

static int arena_reserve(out_arena *a, uint64_t n)
{
    if (n <= a->cap)
        return 0;
    free(a->p);
    a->p = malloc(n);
    a->cap = a->p ? n : 0;
    return a->p ? 0 : -1;
}

/* Grows the queue's buffers to hold one task's output of the unit's
 * widest member; -1 when out of memory. */
static int buffers_reserve(const unit_job *j)
{
    uint64_t need = 1;
    for (size_t k = 0; k < j->u->count; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        uint64_t b = ROWS_PER_TASK * (m->cols / 2 + m->cols / NVFP4_GROUP);
        need = b > need ? b : need;
    }
    return outq_reserve(j->q, need);
}

static int plan_tasks(unit_job *j, out_arena *arena)
{
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t k = 0; k < j->u->count; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        n += (m->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
        bytes += m->rows * m->cols / 2 + m->rows * m->cols / NVFP4_GROUP;
        j->elems += m->rows * m->cols;
    }
    j->ntasks = n;
    /* small units run inline and gather their outputs for the combiner */
    j->streamed = j->elems >= SMALL_UNIT_ELEMS;
    j->task_member = malloc(n * sizeof *j->task_member);
    j->task_row = malloc(n * sizeof *j->task_row);
    j->task_amax = malloc(n * sizeof *j->task_amax);
    j->task_bad = malloc(n * sizeof *j->task_bad);
    j->task_block = malloc(n * sizeof *j->task_block);
    j->block_first = malloc((n + 1) * sizeof *j->block_first);
    j->block_left = malloc(n * sizeof *j->block_left);
    j->packed = calloc(j->u->count, sizeof *j->packed);
    j->scales = calloc(j->u->count, sizeof *j->scales);
    if (!j->task_member || !j->task_row || !j->task_amax || !j->task_bad || !j->task_block || !j->block_first ||
        !j->block_left || !j->packed || !j->scales ||
        (j->streamed ? buffers_reserve(j) : arena_reserve(arena, bytes + 1)))
        return -1;
    size_t t = 0;
    uint8_t *at = arena->p;
    for (size_t k = 0; k < j->u->count; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        uint64_t task_bytes = ROWS_PER_TASK * m->cols * ff_dtype_size(m->src->st->dtype);
        uint64_t per_block = task_bytes && RELEASE_BLOCK_BYTES > task_bytes ? RELEASE_BLOCK_BYTES / task_bytes : 1;
        for (uint64_t r = 0, i = 0; r < m->rows; r += ROWS_PER_TASK, i++) {
            if (i % per_block == 0)
                j->block_first[j->nblocks++] = t;
            j->task_block[t] = j->nblocks - 1;
            j->task_member[t] = k;
            j->task_row[t++] = r;
        }
        j->block_first[j->nblocks] = t;   /* the end of the last block so far */
        if (j->streamed)
            continue;
        j->packed[k] = at;
        at += m->rows * m->cols / 2;
        j->scales[k] = at;
        at += m->rows * m->cols / NVFP4_GROUP;
    }
    return 0;
}

static void free_job(unit_job *j)
{
    for (size_t k = 0; j->data && k < j->u->count; k++)
        qs_buffer_release(j->p->src_view, j->data[k]);   /* decoded copies are reused; others free()d */
    for (size_t k = 0; j->owned && k < j->u->count; k++)
        free(j->owned[k]);
    free(j->data);
    free(j->owned);
    free(j->rows);
    free(j->packed);
    free(j->scales);
    free(j->task_member);
    free(j->task_row);
    free(j->task_amax);
    free(j->task_bad);
    free(j->task_block);
    free(j->block_first);
    free(j->block_left);
    free(j->side_first);
    if (j->obs)
        obs_free(j);
}

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

/* Small outputs (scales, the 4-byte global scales, tiny experts) gathered
 * into one pwrite while they are adjacent in their shard; big ones go
 * straight from the kernel's buffer (or the mmap, for copied tensors). */
#define WC_CAP (4u << 20)
#define WC_DIRECT (1u << 20)

typedef struct wcomb {
    uint8_t *buf;
    size_t len, shard;
    uint64_t off;
} wcomb;

static int wc_flush(wcomb *w, shard_set *ss, ff_err *e)
{
    if (!w->len)
        return FF_OK;
    int rc = shards_pwrite(ss, w->shard, w->off, w->buf, w->len, e);
    if (!rc)
        ss->bytes_written += w->len;
    w->len = 0;
    return rc;
}

static int out_write(wcomb *w, shard_set *ss, size_t out, const void *buf, uint64_t n, ff_err *e)
{
    if (n >= WC_DIRECT || !w->buf || n != ss->outs[out].nbytes)
        return shards_write(ss, out, buf, n, e);   /* also reports a size mismatch */
    size_t k = ss->out_shard[out];
    uint64_t off = ss->out_abs[out];
    if (w->len && (k != w->shard || off != w->off + w->len || w->len + n > WC_CAP)) {
        int rc = wc_flush(w, ss, e);
        if (rc)
            return rc;
    }
    if (!w->len) {
        w->shard = k;
        w->off = off;
    }
    memcpy(w->buf + w->len, buf, n);
    w->len += n;
    return FF_OK;
}

/* Per-run I/O state shared by the items. */
typedef struct io_state {
    out_arena arena;
    wcomb wc;
    worker_slot *slots;       /* one per pool thread */
    int nslots;
    outq *q;                  /* streamed units' rows, queued kept tensors */
    /* Kept chunks: one pool thread writes at a time: ext4 holds the file's
     * lock for the whole buffered write, and a second writer spins on it in
     * the kernel (28% of a run's CPU when they did); waiting here sleeps. */
    pthread_mutex_t write_mu;
} io_state;

/* The first write a pool thread failed, as the run's error. */
static int slots_error(io_state *io, ff_err *e)
{
    for (int w = 0; w < io->nslots; w++)
        if (io->slots[w].failed) {
            *e = io->slots[w].err;
            return e->code;
        }
    return FF_OK;
}

/* Lets the quant_source replace each member's source bytes. */
static int load_members(unit_job *j, const quant_source *qs, ff_pool *pool, ff_err *e)
{
    if (!qs && !j->p->src_view)
        return FF_OK;
    j->data = calloc(j->u->count, sizeof *j->data);
    if (!j->data)
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    int rc = FF_OK;
    for (size_t k = 0; k < j->u->count && rc == FF_OK; k++) {
        const ckpt_tensor *src = j->p->members[j->u->first + k].src;
        /* a quantized source's weight: decoded to the reference bf16 for this unit only */
        const qs_weight *sw = plan_source_weight(j->p, src);
        uint16_t *dec = NULL;
        if (sw && (rc = qs_decode(j->c, j->p->src_view, sw, pool, &dec, e)) == FF_OK)
            j->data[k] = dec;
        else if (!sw && qs)
            rc = qs->load(qs->ctx, src, &j->data[k], e);
    }
    return rc;
}

static void run_tasks_weighted(ff_pool *pool, unit_job *j, pool_worker_fn fn, uint64_t weight)
{
    if (j->elems * weight < SMALL_UNIT_ELEMS) {
        for (size_t t = 0; t < j->ntasks; t++)
            fn(j, t, 0);
        return;
    }
    pool_run_indexed(pool, j->ntasks, fn, j);
}

static void run_tasks(ff_pool *pool, unit_job *j, pool_worker_fn fn)
{
    run_tasks_weighted(pool, j, fn, 1);
}

/* The MSE observers: search every group (threaded, each group on its own),
 * cut each member at its tensor-wide early stop, and take the global scale
 * from the chosen ranges' max over the fused unit (Observer.get_global_scale).
 * Every reduction is an OR or a max, so the bytes do not depend on threads. */
static float observe_ranges(unit_job *j, ff_pool *pool)
{
    /* each element is fake-quantized once per grid step */
    run_tasks_weighted(pool, j, search_task, (uint64_t)j->obs->steps);
    for (size_t k = 0; k < j->u->count; k++) {
        uint64_t any = 0;
        for (size_t t = 0; t < j->ntasks; t++)
            if (j->task_member[t] == k)
                any |= j->task_any[t];
        j->stop[k] = nvfp4_obs_needs_mask(j->obs) ? nvfp4_mse_stop_step(j->obs, any) : j->obs->steps - 1;
    }
    run_tasks(pool, j, choose_task);
    float top = 0.0f;
    for (size_t t = 0; t < j->ntasks; t++)
        top = j->task_top[t] > top ? j->task_top[t] : top;
    return top;
}

/* The search that goes with the min/max kernel --kernel chose, so that
 * --kernel forces every vector path it names (the same bytes on each). */
static nvfp4_mse_search_fn search_for(nvfp4_rows_fn kernel)
{
    nvfp4_mse_search_fn avx2 = nvfp4_mse_search_by_name("avx2");
    if (kernel == nvfp4_quantize_rows_scalar)
        return nvfp4_mse_search_rows;
    if (kernel == nvfp4_quantize_rows_avx2 && avx2)
        return avx2;
    return nvfp4_mse_search_rows_simd;
}

/* Everything a unit needs before its amax pass; on failure the job holds nothing. */
static int unit_prepare(unit_job *j, const ckpt *c, const plan *p, const plan_unit *u, nvfp4_rows_fn kernel,
                        const nvfp4_obs *obs, const quant_source *qs, ff_pool *pool, io_state *io, shard_set *ss,
                        ff_err *e)
{
    *j = (unit_job){.c = c, .p = p, .u = u, .kernel = kernel, .obs = obs, .search = search_for(kernel),
                    .ranges_scalar = kernel == nvfp4_quantize_rows_scalar, .ss = ss, .q = io->q};
    if (plan_tasks(j, &io->arena) || (obs && obs_alloc(j))) {
        free_job(j);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
    }
    int rc = load_members(j, qs, pool, e);
    if (rc == FF_OK)
        rc = locate_members(j, e);
    if (rc != FF_OK)
        free_job(j);
    return rc;
}

/* A unit whose passes can carry, or be carried by, another's amax pass:
 * bf16 rows read straight from the map, on a kernel with a side path, big
 * enough to be streamed (small units share one arena). */
static int can_ride(const plan *p, const plan_unit *u, nvfp4_rows_fn kernel, const nvfp4_obs *obs,
                    const quant_source *qs)
{
    if (u->fp8 || obs || qs || p->src_view || !nvfp4_side_ok(kernel))
        return 0;
    uint64_t elems = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        if (m->src->st->dtype != FF_DT_BF16 || m->transposed)
            return 0;
        elems += m->rows * m->cols;
    }
    return elems >= SMALL_UNIT_ELEMS;
}

/* The next quantized item's index after item i, or p->nitems. */
static size_t next_unit_item(const plan *p, size_t i)
{
    while (++i < p->nitems && p->items[i].kind != ITEM_QUANT)
        ;
    return i;
}

/* A unit whose rows are in the page cache, by each member's first and
 * last page: from a cold disk its reads would stall the kernel carrying
 * them (host, 2 threads, cold: 2.24 GB/s riding against 2.42 without). */
static int unit_cached(const unit_job *v)
{
    for (size_t k = 0; k < v->u->count; k++) {
        const plan_member *m = &v->p->members[v->u->first + k];
        const uint8_t *first = v->rows[k];
        if (!prefetch_resident(first) || !prefetch_resident(first + m->rows * m->cols * 2 - 1))
            return 0;
    }
    return 1;
}

/* Shares side's tasks out over j's in proportion; -1: out of memory. */
static int attach_side(unit_job *j, unit_job *side)
{
    if (!j->ntasks)
        return -1;
    j->side_first = malloc((j->ntasks + 1) * sizeof *j->side_first);
    if (!j->side_first)
        return -1;
    for (size_t t = 0; t <= j->ntasks; t++)
        j->side_first[t] = (size_t)((uint64_t)t * side->ntasks / j->ntasks);
    j->side = side;
    return 0;
}

/* The unit's amax (unless it rode along), global scale, quantizing pass
 * (carrying side's amax pass when side is given) and outputs; frees j. */
static int write_unit(unit_job *j, unit_job *side, ff_pool *pool, io_state *io, shard_set *ss, ff_err *e)
{
    const plan *p = j->p;
    const plan_unit *u = j->u;
    int rc = FF_OK;
    if (!j->amax_done) {
        arm_blocks(j);
        run_tasks(pool, j, absmax_task);
    }
    float amax = 0.0f;
    for (size_t t = 0; t < j->ntasks; t++) {
        if (j->task_bad[t] != UINT64_MAX) {
            const plan_member *m = &p->members[u->first + j->task_member[t]];
            rc = ff_fail(e, FF_EIO, "%s: tensor %s: element %llu is NaN or Inf; refusing to quantize it",
                         ckpt_path(j->c, m->src), m->src->st->name, (unsigned long long)j->task_bad[t]);
            break;
        }
        amax = j->task_amax[t] > amax ? j->task_amax[t] : amax;
    }
    if (rc == FF_OK) {
        if (j->obs)
            amax = observe_ranges(j, pool);
        j->gs = nvfp4_global_scale(amax, p->members[u->first].src->st->dtype);
        arm_blocks(j);
        if (side && attach_side(j, side) == 0) {
            arm_blocks(side);
            run_tasks(pool, j, quant_side_task);
            side->amax_done = 1;
        } else {
            run_tasks(pool, j, j->obs ? quant_ranges_task : quant_task);
        }
        rc = outq_error(io->q, e);
        for (size_t k = 0; k < u->count && rc == FF_OK; k++) {
            const plan_member *m = &p->members[u->first + k];
            if (j->streamed) {
                ss->bytes_written += m->rows * m->cols / 2 + m->rows * m->cols / NVFP4_GROUP;
            } else {
                rc = out_write(&io->wc, ss, m->out, j->packed[k], m->rows * m->cols / 2, e);
                if (!rc)
                    rc = out_write(&io->wc, ss, m->out + 1, j->scales[k], m->rows * m->cols / NVFP4_GROUP, e);
            }
            if (!rc)
                rc = out_write(&io->wc, ss, m->out + 2, &j->gs, sizeof j->gs, e);
        }
    }
    free_job(j);
    return rc;
}

/* Pipelining across units: the job of item i (prepared already when it
 * rode along with the previous unit) and, when both can, the next unit's
 * job prepared now to ride along; that one is left in *next. */
typedef struct unit_ctx {
    const ckpt *c;
    const plan *p;
    ff_pool *pool;
    nvfp4_rows_fn kernel;
    const nvfp4_obs *obs;
    const quant_source *qs;
    io_state *io;
    shard_set *ss;
    int mx_reference;         /* --mxfp4-route reference */
    quant_stats *st;          /* the exact / re-quantized counts */
} unit_ctx;

/* Every member an MXFP4 source weight read whole: the exact route's units. */
static int mxfp4_unit(const plan *p, const plan_unit *u)
{
    if (!qs_is_mxfp4(p->src_view))
        return 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        if (!plan_source_weight(p, m->src) || m->transposed || m->row0 || m->rows * m->cols != st_numel(m->src->st))
            return 0;
    }
    return 1;
}

/* Row r's exponents, or an E8M0 NaN refused. */
static int mx_nan_row(const ckpt *c, const qs_weight *w, const plan_member *m, uint64_t r, ff_err *e)
{
    const uint8_t *d = qs_mx_scales_row(c, w, m->src, r), *hit = memchr(d, MXFP4_SCALE_NAN, m->cols / MXFP4_GROUP);
    return hit ? ff_fail(e, FF_EIO, "%s: tensor %s: an exponent of row %llu of %s is E8M0 255, which MX defines as NaN",
                         ckpt_path(c, w->scale), w->scale->st->name, (unsigned long long)r, m->module)
               : FF_OK;
}

/* The unit's exponent span (row by row: a gpt-oss gate is every other
 * stored row), or an E8M0 NaN refused. */
static int mx_unit_span(const unit_ctx *x, const plan_unit *u, mx_span *sp, ff_err *e)
{
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &x->p->members[u->first + k];
        const qs_weight *w = plan_source_weight(x->p, m->src);
        for (uint64_t r = 0; r < m->rows; r++) {
            int rc = mx_nan_row(x->c, w, m, r, e);
            if (rc)
                return rc;
            mx_span_add(sp, qs_mx_codes_row(x->c, w, m->src, r), qs_mx_scales_row(x->c, w, m->src, r), 1, m->cols);
        }
    }
    return FF_OK;
}

/* Codes copied as they are, scales 2^(e - 127 + k), global scale 2^k. */
static int mx_write_member(const unit_ctx *x, const plan_member *m, float gs, int k, ff_err *e)
{
    const qs_weight *w = plan_source_weight(x->p, m->src);
    uint64_t pb = m->cols / 2, sb = m->cols / NVFP4_GROUP;
    /* the codes are copied here, not written from the map: write() faulting
     * the source in page by page inside the kernel cost 2-5 s of sys time
     * on 2.4 GB where a copy costs 0.1 */
    uint8_t *scales = malloc(m->rows * sb + 1), *codes = malloc(m->rows * pb + 1);
    if (!scales || !codes) {
        free(scales);
        free(codes);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", m->module);
    }
    uint8_t table[256];
    mx_exact_table(k, table);
    for (uint64_t r = 0; r < m->rows; r++) {
        mx_exact_scales_by(table, qs_mx_scales_row(x->c, w, m->src, r), 1, m->cols, scales + r * sb);
        memcpy(codes + r * pb, qs_mx_codes_row(x->c, w, m->src, r), pb);   /* a gpt-oss slice: every other row */
    }
    int rc = out_write(&x->io->wc, x->ss, m->out, codes, m->rows * pb, e);
    if (!rc)
        rc = out_write(&x->io->wc, x->ss, m->out + 1, scales, m->rows * sb, e);
    if (!rc)
        rc = out_write(&x->io->wc, x->ss, m->out + 2, &gs, sizeof gs, e);
    free(scales);
    free(codes);
    return rc;
}

/* An MXFP4 unit carried exactly when E4M3 holds its exponents (*done 1);
 * else counted as re-quantized and left to the reference route. */
static int write_unit_exact(const unit_ctx *x, const plan_unit *u, int *done, ff_err *e)
{
    mx_span sp = {0};
    int k, rc = mx_unit_span(x, u, &sp, e);
    *done = rc == FF_OK && !x->mx_reference && mx_exact_k(&sp, &k);
    if (rc || !*done) {
        x->st->mx_requantized += u->count;
        x->st->mx_requantized_groups += sp.groups;
        return rc;
    }
    float gs = ldexpf(1.0f, k);
    for (size_t i = 0; i < u->count && rc == FF_OK; i++)
        rc = mx_write_member(x, &x->p->members[u->first + i], gs, k, e);
    x->st->mx_exact += u->count;
    x->st->mx_exact_groups += sp.groups;
    return rc;
}

/* One FP8 member's rows on the pool, ROWS_PER_TASK a task. */
typedef struct fp8_job {
    const uint8_t *w;
    ff_dtype dtype;
    uint64_t rows, cols;
    uint8_t *codes, *scales;
    uint64_t *bad;            /* per task: index of a NaN or Inf in w, or UINT64_MAX */
} fp8_job;

static void fp8_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    fp8_job *f = ctx;
    uint64_t r = t * ROWS_PER_TASK, n = f->rows - r < ROWS_PER_TASK ? f->rows - r : ROWS_PER_TASK;
    f->bad[t] = fp8ch_quantize_rows(f->w, f->dtype, f->cols, r, n, f->codes + r * f->cols,
                                    f->scales + r * ff_dtype_size(f->dtype));
}

/* Member k of an FP8 unit: its weight and per-row scale written, or its
 * first NaN or Inf refused as the NVFP4 path refuses one. */
static int fp8_write_member(const unit_ctx *x, const unit_job *j, size_t k, ff_err *e)
{
    const plan_member *m = &x->p->members[j->u->first + k];
    size_t ntasks = (size_t)((m->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK);
    uint64_t sbytes = m->rows * ff_dtype_size(m->src->st->dtype);
    fp8_job f = {.w = j->rows[k], .dtype = m->src->st->dtype, .rows = m->rows, .cols = m->cols,
                 .codes = malloc(m->rows * m->cols + 1), .scales = malloc(sbytes + 1),
                 .bad = malloc((ntasks ? ntasks : 1) * sizeof *f.bad)};
    int rc = f.codes && f.scales && f.bad ? FF_OK : ff_fail(e, FF_EIO, "out of memory quantizing %s", m->module);
    /* small members on the calling thread, as small NVFP4 units run: waking the pool costs more */
    for (size_t t = 0; rc == FF_OK && m->rows * m->cols < SMALL_UNIT_ELEMS && t < ntasks; t++)
        fp8_task(&f, t, 0);
    if (rc == FF_OK && m->rows * m->cols >= SMALL_UNIT_ELEMS)
        pool_run_indexed(x->pool, ntasks, fp8_task, &f);
    for (size_t t = 0; rc == FF_OK && t < ntasks; t++)
        if (f.bad[t] != UINT64_MAX)
            rc = ff_fail(e, FF_EIO, "%s: tensor %s: element %llu is NaN or Inf; refusing to quantize it",
                         ckpt_path(x->c, m->src), m->src->st->name,
                         (unsigned long long)(m->row0 * m->cols + f.bad[t]));
    if (rc == FF_OK)
        rc = out_write(&x->io->wc, x->ss, m->out, f.codes, m->rows * m->cols, e);
    if (rc == FF_OK)
        rc = out_write(&x->io->wc, x->ss, m->out + 1, f.scales, sbytes, e);
    free(f.codes);
    free(f.scales);
    free(f.bad);
    return rc;
}

/* An FP8 unit: each member's rows (decoded or loaded as an NVFP4 unit's
 * are) through the channel-wise FP8 kernel. No global scale: llm-compressor
 * fuses observers for TENSOR_GROUP (NVFP4) only. */
static int write_unit_fp8(const unit_ctx *x, const plan_unit *u, ff_err *e)
{
    unit_job j = {.c = x->c, .p = x->p, .u = u};
    int rc = load_members(&j, x->qs, x->pool, e);
    if (rc == FF_OK)
        rc = locate_members(&j, e);
    for (size_t k = 0; rc == FF_OK && k < u->count; k++)
        rc = fp8_write_member(x, &j, k, e);
    free_job(&j);
    return rc;
}

static void drop_job(unit_job **j)
{
    if (*j)
        free_job(*j);
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
        return write_unit_fp8(x, u, e);
    }
    if (mxfp4_unit(p, u) && (rc = write_unit_exact(x, u, &exact, e)) == FF_OK && exact) {
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
        if ((rc = unit_prepare(j, x->c, p, u, x->kernel, x->obs, x->qs, x->pool, x->io, x->ss, e)) != FF_OK) {
            free(j);
            return rc;
        }
    }
    if (ni < p->nitems && can_ride(p, u, x->kernel, x->obs, x->qs) &&
        can_ride(p, &p->units[p->items[ni].unit], x->kernel, x->obs, x->qs)) {
        if ((*next = malloc(sizeof **next)) == NULL ||
            (rc = unit_prepare(*next, x->c, p, &p->units[p->items[ni].unit], x->kernel, x->obs, x->qs, x->pool,
                               x->io, x->ss, e)) != FF_OK) {
            free(*next);
            *next = NULL;
            drop_job(&j);
            return rc ? rc : ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
        }
    }
    rc = write_unit(j, *next && unit_cached(*next) ? *next : NULL, x->pool, x->io, x->ss, e);
    free(j);
    if (rc)
        drop_job(next);
    return rc;
}

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
    const shard_set *ss;
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
    if (!w->failed && shards_write_part(k->ss, k->out, at, k->src + at, n, &w->err))
        w->failed = 1;
    pthread_mutex_unlock(k->write_mu);
    if (k->mapped)
        st_map_drop(k->src + at, n);
}

/* The first non-finite element of a kept tensor (-1: none), written as it
 * is checked; FF_EIO in *rc when a write or an allocation failed. */
static int64_t keep_check_write(keep_job *k, ff_pool *pool, io_state *io, shard_set *ss, int *rc, ff_err *e)
{
    if (k->bytes < 2 * KEEP_CHUNK) {
        int64_t bad = kept_first_nonfinite(k->dtype, k->src, k->bytes / k->esz);
        if (bad < 0)
            *rc = out_write(&io->wc, ss, k->out, k->src, k->bytes, e);
        return bad;
    }
    size_t chunks = (size_t)((k->bytes + KEEP_CHUNK - 1) / KEEP_CHUNK);
    k->first_bad = malloc(chunks * sizeof *k->first_bad);
    if (!k->first_bad) {
        *rc = ff_fail(e, FF_EIO, "out of memory writing %s", ss->outs[k->out].name);
        return -1;
    }
    pool_run_indexed(pool, chunks, keep_chunk_task, k);
    int64_t bad = -1;
    for (size_t t = 0; t < chunks && bad < 0; t++)
        bad = k->first_bad[t];
    free(k->first_bad);
    if (!(*rc = slots_error(io, e)))
        ss->bytes_written += k->bytes;
    return bad;
}

/* A mapped kept tensor goes to the writers' turns unread: each piece is
 * checked there, just before its write, and a NaN is the queue's failure
 * (outq_error), which the job reports after the unit in flight. Checked
 * here first, the tensor was read from memory twice: 2.42 GB checkpoint,
 * 2 threads, 12 rounds alternating, CPU 0.674 s against 0.715. With a bad
 * quantized tensor too, whichever is found first is the one named. */
static int queue_keep(const ckpt *c, const plan_item *it, const keep_job *k, io_state *io, shard_set *ss,
                      ff_err *e)
{
    outq_queue_mapped(io->q, k->out, k->src, k->bytes,
                      (outq_check){.fn = check_kept_piece, .ctx = c, .tensor = it->src});
    int rc = outq_error(io->q, e);
    if (!rc)
        ss->bytes_written += k->bytes;
    return rc;
}

/* *queued: the tensor's bytes wait in the output queue (mapped), which
 * drops them from the mapping as it writes them. */
static int write_keep(const ckpt *c, const plan *p, const plan_item *it, const quant_source *qs, ff_pool *pool,
                      io_state *io, shard_set *ss, int *queued, ff_err *e)
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
                  .dtype = sw ? FF_DT_BF16 : it->src->st->dtype, .out = it->out, .ss = ss, .slots = io->slots,
                  .write_mu = &io->write_mu, .mapped = !buf};
    k.esz = elem_size(k.dtype);
    /* one thread writes and quantizes in turn anyway: queueing saves nothing */
    if ((*queued = k.mapped && io->nslots > 1 && k.bytes >= KEEP_QUEUE_MIN))
        return queue_keep(c, it, &k, io, ss, e);
    int rc = FF_OK;
    int64_t bad = keep_check_write(&k, pool, io, ss, &rc, e);
    qs_buffer_release(p->src_view, buf);   /* a decoded copy is reused; a loaded one free()d */
    if (!rc && bad >= 0)
        rc = kept_nonfinite_fail(e, c, it->src, bad);
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
                     shard_set *ss, const quant_opts *o, quant_stats *st, ff_err *e)
{
    progress bar;
    progress_begin(&bar, p->bytes_in, o->progress);
    io_state io = {.wc.buf = malloc(WC_CAP), .nslots = pool_threads(pool)};
    io.slots = calloc((size_t)io.nslots, sizeof *io.slots);
    io.q = outq_create(ss, io.nslots);
    if (!io.slots || !io.q) {
        free(io.wc.buf);
        free(io.slots);
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
    unit_ctx ux = {.c = c, .p = p, .pool = pool, .kernel = kernel, .obs = obs, .qs = o->source, .io = &io, .ss = ss,
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
        rc = it->kind == ITEM_KEEP ? write_keep(c, p, it, o->source, pool, &io, ss, &queued, e)
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
        rc = wc_flush(&io.wc, ss, e);
    progress_end(&bar);
    free(io.arena.p);
    free(io.wc.buf);
    free(io.slots);
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
        rc = shards_reserve(ckpt_writer_shards(w), e);
    if (!rc)
        rc = run_items(c, p, pool, kernel, ckpt_writer_shards(w), o, st, e);
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
