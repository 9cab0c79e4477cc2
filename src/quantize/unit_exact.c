/* MXFP4 sources carried exactly: codes copied, exponents rebased into E4M3
 * (mx_exact.c holds the arithmetic). */
#include "quantize_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mx_exact.h"
#include "mxfp4.h"
#include "qsource.h"

/* Every member an MXFP4 source weight read whole: the exact route's units. */
int qz_mxfp4_unit(const plan *p, const plan_unit *u)
{
    if (!qs_is_mxfp4(p->src_view))
        return 0;
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        if (!qs_weight_mx_coded(p->src_view, plan_source_weight(p, m->src)) || m->transposed || m->row0 ||
            m->rows * m->cols != st_numel(m->src->st))
            return 0;
    }
    return 1;
}

/* The exact route's row ranges on the pool: a unit's span (each range its
 * own, merged in order), then each member's codes and scales filled for
 * its writes. On one thread the span and the copies were the critical
 * path of an MXFP4 job while the pool's other threads idled. */
#define EXACT_ROWS 64

typedef struct exact_job {
    const unit_ctx *x;
    const plan_unit *u;
    size_t member;            /* fill: the member's index in the unit */
    size_t *task_member;      /* span: each task's member */
    uint64_t *task_row;
    mx_span *span;            /* span: one per task (the full span) */
    uint64_t (*present)[4];   /* span: the exponents each task's rows use */
    int full;                 /* span: read every group's codes (mx_span_add) */
    const mx_rows *rows;      /* span: each member's rows */
    uint64_t *bad;            /* span: the first E8M0 NaN row of each task, or UINT64_MAX */
    const uint8_t *table;     /* fill: exponent -> scale byte */
    uint8_t *codes, *scales;
} exact_job;

/* The rows of the range starting at r0 of a weight of `rows` rows. */
static uint64_t range_rows(uint64_t rows, uint64_t r0)
{
    return rows - r0 < EXACT_ROWS ? rows - r0 : EXACT_ROWS;
}

/* A member's rows for mx_exact.c: a gpt-oss gate is every other stored row. */
typedef struct member_rows {
    const ckpt *c;
    const qs_weight *w;
    const ckpt_tensor *t;
} member_rows;

static const uint8_t *member_codes(const void *ctx, uint64_t r)
{
    const member_rows *m = ctx;
    return qs_mx_codes_row(m->c, m->w, m->t, r);
}

static const uint8_t *member_exps(const void *ctx, uint64_t r)
{
    const member_rows *m = ctx;
    return qs_mx_scales_row(m->c, m->w, m->t, r);
}

/* A task's rows: checked for E8M0 NaN, then their exponents noted (or,
 * for the full span, every group's codes read). */
static void span_task(void *ctx, size_t t)
{
    exact_job *j = ctx;
    const mx_rows *w = &j->rows[j->task_member[t]];
    uint64_t r0 = j->task_row[t], n = range_rows(w->rows, r0);
    j->bad[t] = UINT64_MAX;
    for (uint64_t r = r0; r < r0 + n; r++)
        if (memchr(w->exps(w->ctx, r), MXFP4_SCALE_NAN, w->cols / MXFP4_GROUP)) {
            j->bad[t] = r;
            return;
        }
    for (uint64_t r = r0; r < r0 + n && j->full; r++)
        mx_span_add(&j->span[t], w->codes(w->ctx, r), w->exps(w->ctx, r), 1, w->cols);
    if (!j->full)
        mx_exps_present(w, r0, r0 + n, j->present[t]);
    if (j->x->io->q)
        outq_help(j->x->io->q);
}

static int span_fail(const exact_job *j, size_t t, ff_err *e)
{
    const plan_member *m = &j->x->p->members[j->u->first + j->task_member[t]];
    const qs_weight *w = plan_source_weight(j->x->p, m->src);
    return ff_fail(e, FF_EIO, "%s: tensor %s: an exponent of row %llu of %s is E8M0 255, which MX defines as NaN",
                   ckpt_path(j->x->c, w->scale), w->scale->st->name, (unsigned long long)j->bad[t], m->module);
}

/* Levels of exponents tried from each end before the span reads every
 * group: a level holding only zero groups is rare (padding, pruned rows). */
#define SPAN_LEVELS 4

/* The span task by task; the first E8M0 NaN (in row order) refused. */
static int run_span_tasks(exact_job *j, size_t n, ff_err *e)
{
    pool_run(j->x->pool, n, span_task, j);
    for (size_t t = 0; t < n; t++)
        if (j->bad[t] != UINT64_MAX)
            return span_fail(j, t, e);
    return FF_OK;
}

/* The unit's exponent span: from the exponents each task's rows use,
 * level by level (the codes of the few groups at each end read), else
 * every group's codes read, as before: the same span either way. */
static int span_of_tasks(exact_job *j, size_t n, mx_span *sp, ff_err *e)
{
    int rc = run_span_tasks(j, n, e);
    uint64_t present[4] = {0};
    for (size_t t = 0; t < n && rc == FF_OK; t++)
        for (int i = 0; i < 4; i++)
            present[i] |= j->present[t][i];
    if (rc || mx_span_by_levels(j->rows, j->u->count, present, SPAN_LEVELS, sp))
        return rc;
    j->full = 1;
    rc = run_span_tasks(j, n, e);
    for (size_t t = 0; t < n && rc == FF_OK; t++)
        mx_span_merge(sp, &j->span[t]);
    return rc;
}

/* The unit's exponent span, or the first E8M0 NaN (in row order) refused. */
static int mx_unit_span(const unit_ctx *x, const plan_unit *u, mx_span *sp, ff_err *e)
{
    size_t n = 0;
    for (size_t k = 0; k < u->count; k++)
        n += (size_t)((x->p->members[u->first + k].rows + EXACT_ROWS - 1) / EXACT_ROWS);
    mx_rows *rows = calloc(u->count, sizeof *rows);
    member_rows *mr = calloc(u->count, sizeof *mr);
    exact_job j = {.x = x, .u = u, .task_member = malloc((n + 1) * sizeof *j.task_member), .rows = rows,
                   .task_row = malloc((n + 1) * sizeof *j.task_row), .span = calloc(n + 1, sizeof *j.span),
                   .present = calloc(n + 1, sizeof *j.present), .bad = malloc((n + 1) * sizeof *j.bad)};
    int rc = FF_OK;
    if (!rows || !mr || !j.task_member || !j.task_row || !j.span || !j.present || !j.bad) {
        rc = ff_fail(e, FF_EIO, "out of memory quantizing %s", x->p->members[u->first].module);
    } else {
        size_t t = 0;
        for (size_t k = 0; k < u->count; k++) {
            const plan_member *m = &x->p->members[u->first + k];
            mr[k] = (member_rows){.c = x->c, .w = plan_source_weight(x->p, m->src), .t = m->src};
            rows[k] = (mx_rows){.codes = member_codes, .exps = member_exps, .ctx = &mr[k], .rows = m->rows,
                                .cols = m->cols};
            for (uint64_t r = 0; r < m->rows; r += EXACT_ROWS)
                j.task_member[t] = k, j.task_row[t++] = r;
        }
        rc = span_of_tasks(&j, n, sp, e);
    }
    free(j.task_member), free(j.task_row), free(j.span), free(j.present), free(j.bad), free(rows), free(mr);
    return rc;
}

static void fill_task(void *ctx, size_t t)
{
    exact_job *j = ctx;
    const plan_member *m = &j->x->p->members[j->u->first + j->member];
    const qs_weight *w = plan_source_weight(j->x->p, m->src);
    uint64_t pb = m->cols / 2, sb = m->cols / NVFP4_GROUP, r0 = (uint64_t)t * EXACT_ROWS;
    for (uint64_t r = r0; r < r0 + range_rows(m->rows, r0); r++) {
        mx_exact_scales_by(j->table, qs_mx_scales_row(j->x->c, w, m->src, r), 1, m->cols, j->scales + r * sb);
        if (j->codes)   /* a gpt-oss slice: every other row */
            memcpy(j->codes + r * pb, qs_mx_codes_row(j->x->c, w, m->src, r), pb);
    }
    if (j->x->io->q)
        outq_help(j->x->io->q);
}

/* The member's codes when they lie in the mapping as one run; NULL when
 * they do not (a gpt-oss slice). */
static const uint8_t *codes_run(const unit_ctx *x, const plan_member *m)
{
    const qs_weight *w = plan_source_weight(x->p, m->src);
    uint64_t pb = m->cols / 2;
    const uint8_t *first = qs_mx_codes_row(x->c, w, m->src, 0);
    if (m->rows > 1 && qs_mx_codes_row(x->c, w, m->src, m->rows - 1) != first + (m->rows - 1) * pb)
        return NULL;
    return first;
}

/* outq_check's fn for queued codes: nothing to check (every E2M1 code is a
 * number), but mapped in one call so that write() takes them from there:
 * faulting them in page by page inside the kernel cost 2-5 s of sys time
 * on 2.4 GB. */
static int map_codes_piece(const void *ctx, const void *tensor, const uint8_t *p, uint64_t at, uint64_t len,
                           ff_err *e)
{
    (void)ctx, (void)tensor, (void)at, (void)e;
    st_map_populate(p, len);
    return FF_OK;
}

/* The member's codes for the writer: queued to the writers' turns (two or
 * more threads), which later units' pool tasks take while this thread
 * goes on (written here, they kept the other core idle for 299-412 ms of a
 * 2-thread job: bench/serial.sh, Kimi-K2 MXFP4 synth, this project's
 * 2-core VM); else mapped here to be written now; NULL when they must be
 * copied (a gpt-oss slice, or no mapping ahead). */
static const uint8_t *mapped_codes(const unit_ctx *x, const plan_member *m, int *queued)
{
    const uint8_t *first = codes_run(x, m);
    uint64_t bytes = m->rows * (m->cols / 2);
    *queued = first && x->io->q && x->io->nslots > 1;
    if (*queued)
        outq_queue_mapped(x->io->q, m->out, first, bytes, (outq_check){.fn = map_codes_piece});
    return first && (*queued || st_map_populate(first, bytes) == 0) ? first : NULL;
}

/* Codes copied as they are, scales 2^(e - 127 + k), global scale 2^k. */
static int mx_write_member(const unit_ctx *x, const plan_unit *u, size_t member, float gs, int k, ff_err *e)
{
    const plan_member *m = &x->p->members[u->first + member];
    uint64_t pb = m->cols / 2, sb = m->cols / NVFP4_GROUP;
    uint8_t table[256];
    mx_exact_table(k, table);
    int queued;
    const uint8_t *mapped = mapped_codes(x, m, &queued);
    exact_job j = {.x = x, .u = u, .member = member, .table = table, .scales = malloc(m->rows * sb + 1),
                   .codes = mapped ? NULL : malloc(m->rows * pb + 1)};
    if (!j.scales || (!mapped && !j.codes)) {
        free(j.scales);
        free(j.codes);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", m->module);
    }
    pool_run(x->pool, (size_t)((m->rows + EXACT_ROWS - 1) / EXACT_ROWS), fill_task, &j);
    /* mapped codes written here are released behind the item, as every
     * input is; queued ones by the writer, piece by piece */
    int rc = queued ? outq_error(x->io->q, e)
                    : qz_out_write(&x->io->wc, x->wr, m->out, mapped ? mapped : j.codes, m->rows * pb, e);
    if (!rc)
        rc = qz_out_write(&x->io->wc, x->wr, m->out + 1, j.scales, m->rows * sb, e);
    if (!rc)
        rc = qz_out_write(&x->io->wc, x->wr, m->out + 2, &gs, sizeof gs, e);
    free(j.scales);
    free(j.codes);
    return rc;
}

/* An MXFP4 unit carried exactly when E4M3 holds its exponents (*done 1);
 * else counted as re-quantized and left to the reference route. */
int qz_write_unit_exact(const unit_ctx *x, const plan_unit *u, int *done, ff_err *e)
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
        rc = mx_write_member(x, u, i, gs, k, e);
    x->st->mx_exact += u->count;
    x->st->mx_exact_groups += sp.groups;
    return rc;
}
