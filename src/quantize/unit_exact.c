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
    int rc = qz_out_write(&x->io->wc, x->wr, m->out, codes, m->rows * pb, e);
    if (!rc)
        rc = qz_out_write(&x->io->wc, x->wr, m->out + 1, scales, m->rows * sb, e);
    if (!rc)
        rc = qz_out_write(&x->io->wc, x->wr, m->out + 2, &gs, sizeof gs, e);
    free(scales);
    free(codes);
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
        rc = mx_write_member(x, &x->p->members[u->first + i], gs, k, e);
    x->st->mx_exact += u->count;
    x->st->mx_exact_groups += sp.groups;
    return rc;
}
