/* What min/max would have given: for an output made with another observer
 * (mse, expanded-mse), verify --against quantizes the source again with
 * llm-compressor's min/max (each plan unit is a fused group: its global scale
 * from the group's largest |x|, as quantize does) and reports that error per
 * tensor beside the chosen observer's, so a user sees the gain. */
#include "verify_minmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "nvfp4.h"

static int member_absmax(const plan_member *m, const ckpt *s, float *amax, ff_err *e)
{
    void *owned = NULL;
    const uint8_t *rows = plan_member_rows(m, ckpt_data(s, m->src), &owned, e);
    if (!rows)
        return FF_EIO;
    uint64_t bad;
    int rc = nvfp4_absmax(rows, m->src->st->dtype, m->rows * m->cols, amax, &bad) ? FF_EIO : FF_OK;
    free(owned);
    return rc ? ff_fail(e, FF_EIO, "%s: NaN or Inf in the source", m->module) : FF_OK;
}

/* Relative error of the bf16 decode of a min/max quantization under gs. */
static int member_rel(const plan_member *m, const ckpt *s, float gs, nvfp4_rows_fn kernel, double *rel, ff_err *e)
{
    uint64_t n = m->rows * m->cols;
    ff_dtype t = m->src->st->dtype;
    uint8_t *packed = malloc(n / 2 + 1), *scales = malloc(n / 16 + 1);
    float *d = malloc((n ? n : 1) * sizeof *d);
    void *owned = NULL;
    const uint8_t *rows = packed && scales && d ? plan_member_rows(m, ckpt_data(s, m->src), &owned, e) : NULL;
    if (rows) {
        kernel(rows, t, m->cols, 0, m->rows, gs, packed, scales);
        nvfp4_dequantize_rows(packed, scales, gs, m->cols, m->rows, d);
        double se = 0, ss = 0;
        for (uint64_t i = 0; i < n; i++) {
            double x = ff_load_f32(rows, t, i), y = ff_round_bf16(d[i]);
            se += (y - x) * (y - x);
            ss += x * x;
        }
        *rel = ss > 0 ? sqrt(se / ss) : (se > 0 ? INFINITY : 0);
    }
    free(owned);
    free(packed);
    free(scales);
    free(d);
    return rows ? FF_OK : (e->code ? e->code : ff_oom(e, "out of memory"));
}

json_t *verify_minmax_errors(const plan *p, const ckpt *s, ff_err *e)
{
    json_t *out = json_object();
    nvfp4_rows_fn kernel = nvfp4_best_kernel(NULL);
    for (size_t u = 0; out && u < p->nunits; u++) {
        const plan_unit *un = &p->units[u];
        float amax = 0, a;
        for (size_t k = 0; k < un->count; k++) {
            if (member_absmax(&p->members[un->first + k], s, &a, e)) {
                json_decref(out);
                return NULL;
            }
            amax = a > amax ? a : amax;
        }
        float gs = nvfp4_global_scale(amax, p->members[un->first].src->st->dtype);
        for (size_t k = 0; k < un->count; k++) {
            const plan_member *m = &p->members[un->first + k];
            double rel = 0;
            if (member_rel(m, s, gs, kernel, &rel, e)) {
                json_decref(out);
                return NULL;
            }
            json_object_set_new(out, m->module, json_real(rel));
        }
    }
    return out;
}
