/* One NVFP4 unit: its tasks (64 rows each), the amax and quantizing passes
 * on the pool, the next unit's amax pass riding along, its outputs. */
#include "quantize_int.h"

#include <stdlib.h>
#include <string.h>

#include "fp8_block.h"
#include "nvfp4_code_rows.h"
#include "nvfp4_int4_rows.h"
#include "nvfp4_simd.h"
#include "prefetch.h"
#include "qsource.h"

/* Member k's source tensor: the producer's copy when it made one, else the map. */
static const uint8_t *member_base(const unit_job *j, size_t k)
{
    if (j->data && j->data[k])
        return j->data[k];
    return ckpt_data(j->c, j->p->members[j->u->first + k].src);
}

static int by_rows(const unit_job *j, size_t k)
{
    return j->lazy && j->lazy[k].kind != QS_NONE;
}

/* Task t's first row: decoded into the thread's scratch for a member
 * decoded by rows, else where it lies. */
static const uint8_t *task_source(const unit_job *j, size_t t, int worker)
{
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    if (!by_rows(j, k))
        return j->rows[k] + j->task_row[t] * m->cols * ff_dtype_size(m->src->st->dtype);
    qs_rows_decode(&j->lazy[k], j->task_row[t], qz_task_rows(j, t), (uint16_t *)j->scratch[worker].p);
    return j->scratch[worker].p;
}

/* Points each member at its [rows, cols] weight (transposing stored-
 * transposed experts into a copy), once per unit before the tasks run. */
int qz_locate_members(unit_job *j, ff_err *e)
{
    j->rows = calloc(j->u->count, sizeof *j->rows);
    j->owned = calloc(j->u->count, sizeof *j->owned);
    if (!j->rows || !j->owned)
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    for (size_t k = 0; k < j->u->count; k++) {
        if (by_rows(j, k))
            continue;
        j->rows[k] = plan_member_rows(&j->p->members[j->u->first + k], member_base(j, k), &j->owned[k], e);
        if (!j->rows[k])
            return e->code;
    }
    return FF_OK;
}

uint64_t qz_task_rows(const unit_job *j, size_t t)
{
    size_t k = j->task_member[t];
    uint64_t left = j->p->members[j->u->first + k].rows - j->task_row[t], most = j->member_task_rows[k];
    return left < most ? left : most;
}

/* Before a pass that releases: every block waits for all its tasks. */
static void arm_blocks(unit_job *j)
{
    for (size_t b = 0; b < j->nblocks; b++)
        atomic_store_explicit(&j->block_left[b], j->block_first[b + 1] - j->block_first[b], memory_order_relaxed);
}

/* Task t is done reading its rows; the last task of a block drops the
 * block's rows from the mapping. */
void qz_release_task_rows(unit_job *j, size_t t)
{
    size_t k = j->task_member[t], b = j->task_block[t];
    if (!j->streamed || (j->data && j->data[k]) || j->owned[k] || by_rows(j, k))
        return;
    if (atomic_fetch_sub_explicit(&j->block_left[b], 1, memory_order_acq_rel) != 1)
        return;
    size_t first = j->block_first[b], end = j->block_first[b + 1];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t row_bytes = m->cols * ff_dtype_size(m->src->st->dtype);
    uint64_t rows = j->task_row[end - 1] + qz_task_rows(j, end - 1) - j->task_row[first];
    /* read: the next pass maps them again from the page cache; without the
     * drop a fused gate+up held 462 MB of mapped input until its unit ended */
    st_map_drop(j->rows[k] + j->task_row[first] * row_bytes, rows * row_bytes);
}

static void absmax_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx;
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t row = j->task_row[t], n = qz_task_rows(j, t) * m->cols;
    j->task_bad[t] = UINT64_MAX;
    /* an FP8 source's max from its codes: one byte read an element, nothing decoded */
    if (by_rows(j, j->task_member[t]) && qs_rows_absmax(&j->lazy[j->task_member[t]], row, qz_task_rows(j, t),
                                                         &j->task_amax[t]) == 0)
        return;
    const uint8_t *p = task_source(j, t, worker);
    uint64_t bad;
    /* the element index is the source tensor's (for a stored-transposed
     * expert, the member's own) */
    if (nvfp4_absmax_fast(p, m->src->st->dtype, n, &j->task_amax[t], &bad))
        j->task_bad[t] = ((m->transposed ? 0 : m->row0) + row) * m->cols + bad;
    if (!j->obs)   /* a search reads the rows again right away */
        qz_release_task_rows(j, t);
}

/* Where task t's packed rows and scales go: the unit's arena, or a free
 * buffer of the thread's when the unit is streamed. */
void qz_task_outputs(const unit_job *j, size_t t, int worker, uint8_t **pk, uint8_t **sc)
{
    size_t k = j->task_member[t];
    uint64_t r = j->task_row[t], cols = j->p->members[j->u->first + k].cols;
    if (!j->streamed) {
        *pk = j->packed[k] + r * (cols / 2);
        *sc = j->scales[k] + r * (cols / NVFP4_GROUP);
        return;
    }
    *pk = outq_buffer(j->q, worker);
    *sc = *pk + qz_task_rows(j, t) * (cols / 2);
}

/* The packed rows and the scales follow each other in the buffer. */
void qz_stream_task_rows(const unit_job *j, size_t t, int worker, const uint8_t *pk)
{
    if (!j->streamed)
        return;
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t r = j->task_row[t], n = qz_task_rows(j, t);
    outq_submit(j->q, worker, pk, m->out, r * (m->cols / 2), n * (m->cols / 2), m->out + 1,
                r * (m->cols / NVFP4_GROUP), n * (m->cols / NVFP4_GROUP));
}

/* The amax came from the top-scale blocks, so a NaN byte elsewhere shows
 * first here; qz_write_unit refuses the unit after the pass. */
static void check_codes(unit_job *j, size_t t, const uint8_t *rows)
{
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t bad;
    float amax;
    if (qs_rows_nan(&j->lazy[k], j->task_row[t], qz_task_rows(j, t)) &&
        nvfp4_absmax_fast(rows, FF_DT_BF16, qz_task_rows(j, t) * m->cols, &amax, &bad))
        j->task_bad[t] = j->task_row[t] * m->cols + bad;   /* by rows: row0 0, not transposed */
}

/* An FP8-block member's task quantized from its codes, the decoded rows'
 * bytes (nvfp4_code_rows.h); 1 when it must be decoded instead (a NaN byte
 * to name, or a block the code kernel does not take). The block tables and
 * the kernel's work area use the scratch the decoded rows would fill. */
static int quant_codes(unit_job *j, size_t t, int worker, uint8_t *pk, uint8_t *sc)
{
    size_t k = j->task_member[t];
    if (!j->code_kernel || !by_rows(j, k) || j->lazy[k].kind != QS_FP8_BLOCK)
        return 1;
    const qs_rows *r = &j->lazy[k];
    uint64_t row = j->task_row[t], n = qz_task_rows(j, t);
    uint64_t nb = (r->cols + NVFP4_CODE_BLOCK - 1) / NVFP4_CODE_BLOCK;
    nvfp4_code_block *blocks = (nvfp4_code_block *)j->scratch[worker].p;
    if (nb * sizeof *blocks + nvfp4_code_rows_work(r->cols) > j->scratch[worker].cap)
        return 1;
    /* a scale row (128 rows) at a time: its tables serve those rows only */
    for (uint64_t done = 0, part; done < n; done += part) {
        uint64_t r0 = row + done;
        part = FP8B_BLOCK - r0 % FP8B_BLOCK < n - done ? FP8B_BLOCK - r0 % FP8B_BLOCK : n - done;
        if (qs_rows_code_blocks(r, r0, part, blocks) ||
            nvfp4_quantize_code_rows_width(nvfp4_code_rows_width_for(j->kernel), r->data + r0 * r->cols, r->cols,
                                           part, blocks, j->gs, blocks + nb, pk + done * (r->cols / 2),
                                           sc + done * (r->cols / NVFP4_GROUP)))
            return 1;
    }
    return 0;
}

/* A compressed-tensors INT4 member's task quantized from its codes
 * (nvfp4_int4_rows.h); 1 when it must be decoded instead (another format,
 * scales that are not bf16, no memory for the thread's cache). */
static int quant_int4(unit_job *j, size_t t, int worker, uint8_t *pk, uint8_t *sc)
{
    size_t k = j->task_member[t];
    if (!j->code_kernel || !j->i4 || !by_rows(j, k) || j->lazy[k].kind != QS_CT_INT)
        return 1;
    if (!j->i4[worker] && (j->i4[worker] = malloc(sizeof *j->i4[worker])) != NULL)
        nvfp4_i4_cache_init(j->i4[worker]);
    return !j->i4[worker] ||
           qs_rows_quantize_i4(&j->lazy[k], j->task_row[t], qz_task_rows(j, t), j->gs, j->i4[worker], pk, sc);
}

static void quant_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint8_t *pk, *sc;
    qz_task_outputs(j, t, worker, &pk, &sc);
    if (quant_codes(j, t, worker, pk, sc) == 0 || quant_int4(j, t, worker, pk, sc) == 0) {
        qz_stream_task_rows(j, t, worker, pk);
        return;
    }
    const uint8_t *rows = task_source(j, t, worker);
    if (j->codes_unread)
        check_codes(j, t, rows);
    j->kernel(rows, m->src->st->dtype, m->cols, 0, qz_task_rows(j, t), j->gs, pk, sc);
    qz_release_task_rows(j, t);
    qz_stream_task_rows(j, t, worker, pk);
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
        qz_release_task_rows(v, s);
    }
}

/* quant_task with the side's tasks side_first[t]..side_first[t + 1] read
 * along: the task's rows are shared out over the side's runs. */
static void quant_side_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx, *v = j->side;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t rows = qz_task_rows(j, t), r0 = j->task_row[t], done = 0;
    size_t a = j->side_first[t], b = j->side_first[t + 1];
    uint8_t *pk, *sc;
    qz_task_outputs(j, t, worker, &pk, &sc);
    while (a < b) {
        size_t end = side_run_end(v, a, b);
        const plan_member *vm = &v->p->members[v->u->first + v->task_member[a]];
        uint64_t vrow = v->task_row[a], vrows = v->task_row[end - 1] + qz_task_rows(v, end - 1) - vrow;
        nvfp4_side side = {.p = (const uint16_t *)v->rows[v->task_member[a]] + vrow * vm->cols,
                           .n = vrows * vm->cols};
        uint64_t part = end == b ? rows - done : (rows - done) * (end - a) / (b - a);
        nvfp4_quantize_rows_side(j->kernel, j->rows[k], m->cols, r0 + done, part, j->gs, pk + done * (m->cols / 2),
                                 sc + done * (m->cols / NVFP4_GROUP), &side);
        side_record(v, a, end, side.max);
        done += part;
        a = end;
    }
    if (done < rows)
        j->kernel(j->rows[k], m->src->st->dtype, m->cols, r0 + done, rows - done, j->gs,
                  pk + done * (m->cols / 2), sc + done * (m->cols / NVFP4_GROUP));
    qz_release_task_rows(j, t);
    qz_stream_task_rows(j, t, worker, pk);
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
        uint64_t b = j->member_task_rows[k] * (m->cols / 2 + m->cols / NVFP4_GROUP);
        need = b > need ? b : need;
    }
    return outq_reserve(j->q, need);
}

/* A task's output is one write call of the writer (a pwritev of its codes
 * and scales): at 64 rows the INT4 synth's 2.5 GB went out in 16,074 calls,
 * and on the Zen 3 VM a 64 KB write cost 1.4x a 1 MB one per byte
 * (docs/bench.md). */
#define TASK_OUT_BYTES (1u << 20)

/* Rows a task of member k takes: doubled until its output is about 1 MB,
 * from an FP8-block source's whole scale rows when the code kernel
 * quantizes it, so each block's tables (its scale codes, its edges in code
 * space) are built once for the 128 rows they serve instead of once a half
 * (a 64-row call spent about a third of the kernel's time building them).
 * A search observer keeps 64: its tasks are compute, and more of them
 * balance the threads. */
static uint64_t task_rows_of(const unit_job *j, size_t k)
{
    const plan_member *m = &j->p->members[j->u->first + k];
    int codes = j->code_kernel && !j->obs && j->p->src_view && j->p->src_view->fmt.kind == QS_FP8_BLOCK;
    uint64_t rows = codes && plan_source_weight(j->p, m->src) ? FP8B_BLOCK : ROWS_PER_TASK;
    uint64_t out_row = m->cols / 2 + m->cols / NVFP4_GROUP;
    while (!j->obs && rows * out_row < TASK_OUT_BYTES && rows < m->rows)
        rows *= 2;
    return rows;
}

static int plan_tasks(unit_job *j, out_arena *arena)
{
    size_t n = 0;
    uint64_t bytes = 0;
    if (!(j->member_task_rows = malloc(j->u->count * sizeof *j->member_task_rows)))
        return -1;
    for (size_t k = 0; k < j->u->count; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        j->member_task_rows[k] = task_rows_of(j, k);
        n += (m->rows + j->member_task_rows[k] - 1) / j->member_task_rows[k];
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
        uint64_t task_bytes = j->member_task_rows[k] * m->cols * ff_dtype_size(m->src->st->dtype);
        uint64_t per_block = task_bytes && RELEASE_BLOCK_BYTES > task_bytes ? RELEASE_BLOCK_BYTES / task_bytes : 1;
        for (uint64_t r = 0, i = 0; r < m->rows; r += j->member_task_rows[k], i++) {
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

void qz_free_job(unit_job *j)
{
    for (size_t k = 0; j->data && k < j->u->count; k++)
        qs_buffer_release(j->p->src_view, j->data[k]);   /* decoded copies are reused; others free()d */
    for (size_t k = 0; j->owned && k < j->u->count; k++)
        free(j->owned[k]);
    for (size_t k = 0; j->lazy && k < j->u->count; k++)
        if (by_rows(j, k))
            qs_rows_close(j->c, plan_source_weight(j->p, j->p->members[j->u->first + k].src), &j->lazy[k]);
    free(j->lazy);
    free(j->data);
    free(j->owned);
    free(j->rows);
    free(j->packed);
    free(j->scales);
    free(j->member_task_rows);
    free(j->task_member);
    free(j->task_row);
    free(j->task_amax);
    free(j->task_bad);
    free(j->task_block);
    free(j->block_first);
    free(j->block_left);
    free(j->side_first);
    if (j->obs)
        qz_obs_free(j);
}

/* A member read whole from a stored weight that decodes by rows: decoded a
 * task at a time (by_rows) when the passes allow it (not the searches,
 * which read each row many times). */
static int rows_member(const plan *p, const plan_member *m, const qs_weight *sw, int allowed)
{
    return allowed && qs_rows_able(p->src_view, sw) && !m->transposed && !m->row0 &&
           m->rows * m->cols == st_numel(m->src->st);
}

/* Lets the quant_source replace each member's source bytes; by_rows: a
 * stored weight may be decoded a task's rows at a time. */
int qz_load_members(unit_job *j, const quant_source *qs, ff_pool *pool, int by_rows_ok, ff_err *e)
{
    if (!qs && !j->p->src_view)
        return FF_OK;
    j->data = calloc(j->u->count, sizeof *j->data);
    j->lazy = j->p->src_view ? calloc(j->u->count, sizeof *j->lazy) : NULL;
    if (!j->data || (j->p->src_view && !j->lazy))
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    int rc = FF_OK;
    for (size_t k = 0; k < j->u->count && rc == FF_OK; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        const ckpt_tensor *src = m->src;
        /* a quantized source's weight: decoded to the reference bf16 for this unit only */
        const qs_weight *sw = plan_source_weight(j->p, src);
        uint16_t *dec = NULL;
        if (sw && rows_member(j->p, m, sw, by_rows_ok))
            rc = qs_rows_open(j->c, j->p->src_view, sw, &j->lazy[k], e);
        else if (sw && (rc = qs_decode(j->c, j->p->src_view, sw, pool, &dec, e)) == FF_OK)
            j->data[k] = dec;
        else if (!sw && qs)
            rc = qs->load(qs->ctx, src, &j->data[k], e);
    }
    return rc;
}

void qz_run_tasks_weighted(ff_pool *pool, unit_job *j, pool_worker_fn fn, uint64_t weight)
{
    if (j->elems * weight < SMALL_UNIT_ELEMS) {
        for (size_t t = 0; t < j->ntasks; t++)
            fn(j, t, 0);
        return;
    }
    pool_run_indexed(pool, j->ntasks, fn, j);
}

void qz_run_tasks(ff_pool *pool, unit_job *j, pool_worker_fn fn)
{
    qz_run_tasks_weighted(pool, j, fn, 1);
}

/* Each pool thread's scratch holds a task's rows of every member decoded by rows. */
static int scratch_reserve(unit_job *j, io_state *io, ff_err *e)
{
    uint64_t need = 0;
    for (size_t k = 0; k < j->u->count; k++)
        if (by_rows(j, k)) {
            uint64_t b = j->member_task_rows[k] * j->p->members[j->u->first + k].cols * 2;
            need = b > need ? b : need;
        }
    j->scratch = io->scratch;
    j->i4 = io->i4;
    for (int w = 0; w < io->nslots; w++)
        if (arena_reserve(&io->scratch[w], need))
            return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    return FF_OK;
}

/* Everything a unit needs before its amax pass; on failure the job holds nothing. */
int qz_unit_prepare(unit_job *j, const ckpt *c, const plan *p, const plan_unit *u, nvfp4_rows_fn kernel,
                        const nvfp4_obs *obs, const quant_source *qs, ff_pool *pool, io_state *io, ckpt_writer *wr,
                        ff_err *e)
{
    *j = (unit_job){.c = c, .p = p, .u = u, .kernel = kernel, .obs = obs, .search = qz_search_for(kernel),
                    .ranges_scalar = kernel == nvfp4_quantize_rows_scalar, .wr = wr, .q = io->q,
                    .code_kernel = nvfp4_side_ok(kernel) && nvfp4_code_rows_ok() && nvfp4_i4_rows_ok()};
    if (plan_tasks(j, &io->arena) || (obs && qz_obs_alloc(j))) {
        qz_free_job(j);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
    }
    int rc = qz_load_members(j, qs, pool, !obs, e);
    if (rc == FF_OK)
        rc = qz_locate_members(j, e);
    if (rc == FF_OK)
        rc = scratch_reserve(j, io, e);
    if (rc != FF_OK)
        qz_free_job(j);
    return rc;
}

/* A unit whose passes can carry, or be carried by, another's amax pass:
 * bf16 rows read straight from the map (a quantized source's too), on a kernel with a side path, big
 * enough to be streamed (small units share one arena). */
int qz_can_ride(const plan *p, const plan_unit *u, nvfp4_rows_fn kernel, const nvfp4_obs *obs,
                    const quant_source *qs)
{
    if (u->fp8 || obs || qs || !nvfp4_side_ok(kernel))
        return 0;
    uint64_t elems = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        /* a quantized source's bf16 Linears ride as well; its stored
         * quantized weights are decoded, not mapped */
        if (m->src->st->dtype != FF_DT_BF16 || m->transposed || plan_source_weight(p, m->src))
            return 0;
        elems += m->rows * m->cols;
    }
    return elems >= SMALL_UNIT_ELEMS;
}

/* A unit whose rows are in the page cache, by each member's first and
 * last page: from a cold disk its reads would stall the kernel carrying
 * them (host, 2 threads, cold: 2.24 GB/s riding against 2.42 without). */
int qz_unit_cached(const unit_job *v)
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

/* A quantized-source unit's amax from its largest scales (qs_rows_top_absmax),
 * so the amax pass need not read every code: 1 when every member gave it. */
static int amax_from_scales(unit_job *j)
{
    float amax = 0.0f, a;
    for (size_t k = 0; k < j->u->count; k++) {
        if (!by_rows(j, k) || qs_rows_top_absmax(&j->lazy[k], &a) != 0)
            return 0;
        amax = a > amax ? a : amax;
    }
    for (size_t t = 0; t < j->ntasks; t++) {
        j->task_amax[t] = t ? 0.0f : amax;
        j->task_bad[t] = UINT64_MAX;
    }
    j->codes_unread = 1;
    return 1;
}

/* The first task whose rows hold a NaN or Inf, named by its element. */
static int refuse_bad_task(const unit_job *j, ff_err *e)
{
    for (size_t t = 0; t < j->ntasks; t++) {
        if (j->task_bad[t] == UINT64_MAX)
            continue;
        const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
        return ff_fail(e, FF_EIO, "%s: tensor %s: element %llu is NaN or Inf; refusing to quantize it",
                       ckpt_path(j->c, m->src), m->src->st->name, (unsigned long long)j->task_bad[t]);
    }
    return FF_OK;
}

/* The next unit's amax from its scales (amax_from_scales) as task 0 of this
 * unit's quantizing pass, the pass's own tasks shifted by one. */
typedef struct ahead_run {
    unit_job *j, *ahead;
    pool_worker_fn fn;
} ahead_run;

static void ahead_task(void *ctx, size_t t, int worker)
{
    ahead_run *a = ctx;
    if (t == 0)
        a->ahead->amax_done = amax_from_scales(a->ahead);
    else
        a->fn(a->j, t - 1, worker);
}

/* An INT4 or FP8-block unit's amax comes from its scales, read on the main
 * thread between pool runs while the other threads waited (Kimi-K2 INT4
 * synth, 2 threads: the band scan alone was 5% of the main thread's
 * samples); taken in the previous unit's pass, it overlaps that unit's
 * tasks. */
static void run_quant_pass(ff_pool *pool, unit_job *j, pool_worker_fn fn, unit_job *ahead)
{
    if (!ahead || j->elems < SMALL_UNIT_ELEMS) {
        qz_run_tasks(pool, j, fn);
        return;
    }
    ahead_run a = {.j = j, .ahead = ahead, .fn = fn};
    pool_run_indexed(pool, j->ntasks + 1, ahead_task, &a);
}

int qz_takes_scales_ahead(const plan *p, const plan_unit *u, const nvfp4_obs *obs, const quant_source *qs)
{
    if (u->fp8 || obs || qs || !p->src_view)
        return 0;
    uint64_t elems = 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        const qs_weight *sw = plan_source_weight(p, m->src);
        if (!sw || !rows_member(p, m, sw, 1))
            return 0;
        elems += m->rows * m->cols;
    }
    return (p->src_view->fmt.kind == QS_CT_INT || p->src_view->fmt.kind == QS_FP8_BLOCK) &&
           elems >= SMALL_UNIT_ELEMS;
}

/* The unit's amax (unless it rode along or was taken ahead), global scale,
 * quantizing pass (carrying side's amax pass when side is given, or
 * ahead's amax from its scales) and outputs; frees j. */
int qz_write_unit(unit_job *j, unit_job *side, unit_job *ahead, ff_pool *pool, io_state *io, ckpt_writer *wr,
                  ff_err *e)
{
    const plan *p = j->p;
    const plan_unit *u = j->u;
    int rc = FF_OK;
    if (!j->amax_done && !amax_from_scales(j)) {
        arm_blocks(j);
        qz_run_tasks(pool, j, absmax_task);
    }
    float amax = 0.0f;
    rc = refuse_bad_task(j, e);
    for (size_t t = 0; t < j->ntasks; t++)
        amax = j->task_amax[t] > amax ? j->task_amax[t] : amax;
    if (rc == FF_OK) {
        if (j->obs)
            amax = qz_observe_ranges(j, pool);
        j->gs = nvfp4_global_scale(amax, p->members[u->first].src->st->dtype);
        arm_blocks(j);
        if (side && attach_side(j, side) == 0) {
            arm_blocks(side);
            qz_run_tasks(pool, j, quant_side_task);
            side->amax_done = 1;
        } else {
            run_quant_pass(pool, j, j->obs ? qz_quant_ranges_task : quant_task, ahead);
        }
        rc = outq_error(io->q, e);
        if (rc == FF_OK)
            rc = refuse_bad_task(j, e);
        for (size_t k = 0; k < u->count && rc == FF_OK; k++) {
            const plan_member *m = &p->members[u->first + k];
            if (!j->streamed) {   /* a streamed unit's tasks queued their rows */
                rc = qz_out_write(&io->wc, wr, m->out, j->packed[k], m->rows * m->cols / 2, e);
                if (!rc)
                    rc = qz_out_write(&io->wc, wr, m->out + 1, j->scales[k], m->rows * m->cols / NVFP4_GROUP, e);
            }
            if (!rc)
                rc = qz_out_write(&io->wc, wr, m->out + 2, &j->gs, sizeof j->gs, e);
        }
    }
    qz_free_job(j);
    return rc;
}
