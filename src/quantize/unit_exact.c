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
    mx_span *span;            /* span: one per task */
    uint64_t *bad;            /* span: the first E8M0 NaN row of each task, or UINT64_MAX */
    const uint8_t *table;     /* fill: exponent -> scale byte */
    uint8_t *codes, *scales;
} exact_job;

static uint64_t range_rows(const plan_member *m, uint64_t r0)
{
    return m->rows - r0 < EXACT_ROWS ? m->rows - r0 : EXACT_ROWS;
}

static void span_task(void *ctx, size_t t)
{
    exact_job *j = ctx;
    const plan_member *m = &j->x->p->members[j->u->first + j->task_member[t]];
    const qs_weight *w = plan_source_weight(j->x->p, m->src);
    uint64_t r0 = j->task_row[t], n = range_rows(m, r0);
    j->bad[t] = UINT64_MAX;
    /* row by row: a gpt-oss gate is every other stored row */
    for (uint64_t r = r0; r < r0 + n; r++) {
        const uint8_t *d = qs_mx_scales_row(j->x->c, w, m->src, r);
        if (memchr(d, MXFP4_SCALE_NAN, m->cols / MXFP4_GROUP)) {
            j->bad[t] = r;
            return;
        }
        mx_span_add(&j->span[t], qs_mx_codes_row(j->x->c, w, m->src, r), d, 1, m->cols);
    }
}

static int span_fail(const exact_job *j, size_t t, ff_err *e)
{
    const plan_member *m = &j->x->p->members[j->u->first + j->task_member[t]];
    const qs_weight *w = plan_source_weight(j->x->p, m->src);
    return ff_fail(e, FF_EIO, "%s: tensor %s: an exponent of row %llu of %s is E8M0 255, which MX defines as NaN",
                   ckpt_path(j->x->c, w->scale), w->scale->st->name, (unsigned long long)j->bad[t], m->module);
}

/* The unit's exponent span, or the first E8M0 NaN (in row order) refused. */
static int mx_unit_span(const unit_ctx *x, const plan_unit *u, mx_span *sp, ff_err *e)
{
    size_t n = 0;
    for (size_t k = 0; k < u->count; k++)
        n += (size_t)((x->p->members[u->first + k].rows + EXACT_ROWS - 1) / EXACT_ROWS);
    exact_job j = {.x = x, .u = u, .task_member = malloc((n + 1) * sizeof *j.task_member),
                   .task_row = malloc((n + 1) * sizeof *j.task_row), .span = calloc(n + 1, sizeof *j.span),
                   .bad = malloc((n + 1) * sizeof *j.bad)};
    int rc = FF_OK;
    if (!j.task_member || !j.task_row || !j.span || !j.bad) {
        rc = ff_fail(e, FF_EIO, "out of memory quantizing %s", x->p->members[u->first].module);
    } else {
        size_t t = 0;
        for (size_t k = 0; k < u->count; k++)
            for (uint64_t r = 0; r < x->p->members[u->first + k].rows; r += EXACT_ROWS)
                j.task_member[t] = k, j.task_row[t++] = r;
        pool_run(x->pool, n, span_task, &j);
        for (t = 0; t < n && rc == FF_OK; t++)
            rc = j.bad[t] != UINT64_MAX ? span_fail(&j, t, e) : FF_OK;
        for (t = 0; t < n && rc == FF_OK; t++)
            mx_span_merge(sp, &j.span[t]);
    }
    free(j.task_member), free(j.task_row), free(j.span), free(j.bad);
    return rc;
}

static void fill_task(void *ctx, size_t t)
{
    exact_job *j = ctx;
    const plan_member *m = &j->x->p->members[j->u->first + j->member];
    const qs_weight *w = plan_source_weight(j->x->p, m->src);
    uint64_t pb = m->cols / 2, sb = m->cols / NVFP4_GROUP, r0 = (uint64_t)t * EXACT_ROWS;
    for (uint64_t r = r0; r < r0 + range_rows(m, r0); r++) {
        mx_exact_scales_by(j->table, qs_mx_scales_row(j->x->c, w, m->src, r), 1, m->cols, j->scales + r * sb);
        memcpy(j->codes + r * pb, qs_mx_codes_row(j->x->c, w, m->src, r), pb);   /* a gpt-oss slice: every other row */
    }
}

/* Codes copied as they are, scales 2^(e - 127 + k), global scale 2^k. */
static int mx_write_member(const unit_ctx *x, const plan_unit *u, size_t member, float gs, int k, ff_err *e)
{
    const plan_member *m = &x->p->members[u->first + member];
    uint64_t pb = m->cols / 2, sb = m->cols / NVFP4_GROUP;
    /* the codes are copied here, not written from the map: write() faulting
     * the source in page by page inside the kernel cost 2-5 s of sys time
     * on 2.4 GB where a copy costs 0.1 */
    uint8_t table[256];
    mx_exact_table(k, table);
    exact_job j = {.x = x, .u = u, .member = member, .table = table, .scales = malloc(m->rows * sb + 1),
                   .codes = malloc(m->rows * pb + 1)};
    if (!j.scales || !j.codes) {
        free(j.scales);
        free(j.codes);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", m->module);
    }
    pool_run(x->pool, (size_t)((m->rows + EXACT_ROWS - 1) / EXACT_ROWS), fill_task, &j);
    int rc = qz_out_write(&x->io->wc, x->wr, m->out, j.codes, m->rows * pb, e);
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
