/* FP8 units of a mixed recipe (--fp8, --budget): channel-wise FP8 weights. */
#include "quantize_int.h"

#include <stdlib.h>

#include "fp8_channel.h"
#include "qsource.h"

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
        rc = qz_out_write(&x->io->wc, x->wr, m->out, f.codes, m->rows * m->cols, e);
    if (rc == FF_OK)
        rc = qz_out_write(&x->io->wc, x->wr, m->out + 1, f.scales, sbytes, e);
    free(f.codes);
    free(f.scales);
    free(f.bad);
    return rc;
}

/* An FP8 unit: each member's rows (decoded or loaded as an NVFP4 unit's
 * are) through the channel-wise FP8 kernel. No global scale: llm-compressor
 * fuses observers for TENSOR_GROUP (NVFP4) only. */
int qz_write_unit_fp8(const unit_ctx *x, const plan_unit *u, ff_err *e)
{
    unit_job j = {.c = x->c, .p = x->p, .u = u};
    int rc = qz_load_members(&j, x->qs, x->pool, 0, e);
    if (rc == FF_OK)
        rc = qz_locate_members(&j, e);
    for (size_t k = 0; rc == FF_OK && k < u->count; k++)
        rc = fp8_write_member(x, &j, k, e);
    qz_free_job(&j);
    return rc;
}
