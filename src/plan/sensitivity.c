/* How much each dense unit would lose, read from its weights: the squared
 * error NVFP4A16 (the unit's shared global scale, min/max as quantize does)
 * and FP8 channel-wise leave, summed over the unit. A budget spends bytes
 * where that error, weighted by the kurtosis of the unit's weights, is largest
 * per byte. One pass over the dense weights on a
 * thread pool; each unit's figures are its own, so the thread count does not
 * change them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "fp8_channel.h"
#include "nvfp4.h"
#include "threadpool.h"

#define ROWS_PER_STEP 16

typedef struct measure {
    const plan *p;
    const ckpt *c;
    const size_t *unit_of;      /* budget unit -> plan unit */
    budget_unit *out;
    nvfp4_rows_fn kernel;
    uint64_t *bad;              /* per budget unit: element index of a NaN/Inf, or UINT64_MAX */
    int *oom;
} measure;

static inline float round_dtype(ff_dtype t, float x)
{
    return t == FF_DT_BF16 ? ff_round_bf16(x) : ff_round_to(t, x);
}

/* y rounded to the nearest e4m3fn value, ties to even, saturating at 448
 * as fp8ch_code clamps: the value without the code, so the score's pass does
 * not pay for encoding and decoding every weight. */
static inline float e4m3_round(float y)
{
    float a = fabsf(y);
    if (a >= FP8CH_MAX)
        return copysignf(FP8CH_MAX, y);
    if (a < 0x1p-6f)   /* subnormals: a fixed step of 2^-9 (rintf rounds ties to even) */
        return copysignf(rintf(a * 512.0f) / 512.0f, y);
    uint32_t b;
    memcpy(&b, &a, sizeof b);
    b = (b + 0x7FFFFu + ((b >> 20) & 1u)) & ~0xFFFFFu;   /* keep 3 mantissa bits, RNE */
    memcpy(&a, &b, sizeof a);
    return copysignf(a, y);
}

/* Squared error of NVFP4 over n rows held as floats in wf (w is the same
 * rows as stored, for the kernel), at the unit's global scale gs. */
static double nvfp4_error(const measure *ms, const uint8_t *w, const float *wf, ff_dtype t, uint64_t cols, uint64_t n,
                          float gs, uint8_t *packed, uint8_t *scales, float *deq)
{
    ms->kernel(w, t, cols, 0, n, gs, packed, scales);
    nvfp4_dequantize_rows(packed, scales, gs, cols, n, deq);
    double err = 0;
    for (uint64_t i = 0; i < n * cols; i++) {
        /* compressed-tensors hands back the weight's dtype */
        double d = (double)wf[i] - (double)round_dtype(t, deq[i]);
        err += d * d;
    }
    return err;
}

/* Squared error of FP8 channel-wise on one row (fp8ch_code's arithmetic:
 * w / s rounded to the dtype, then to e4m3), and the row's energy. */
static double fp8_row_error(const float *wf, ff_dtype t, uint64_t cols, double *energy, double *fourth)
{
    float amax = 0.0f;
    for (uint64_t i = 0; i < cols; i++)
        amax = fmaxf(amax, fabsf(wf[i]));
    float s = fp8ch_row_scale(amax, t);
    double err = 0, en = 0, en4 = 0;
    for (uint64_t i = 0; i < cols; i++) {
        float v = wf[i];
        float q = v == 0.0f ? 0.0f : round_dtype(t, e4m3_round(round_dtype(t, v / s)) * s);
        err += ((double)v - q) * ((double)v - q);
        en += (double)v * v;
        en4 += (double)v * v * v * v;
    }
    *energy += en;
    *fourth += en4;
    return err;
}

static int member_errors(const measure *ms, const plan_member *m, float gs, budget_unit *u)
{
    ff_dtype t = m->src->st->dtype;
    uint64_t cols = m->cols, esz = ff_dtype_size(t);
    uint8_t *packed = malloc(ROWS_PER_STEP * cols / 2 + ROWS_PER_STEP * cols / NVFP4_GROUP);
    float *deq = malloc(2 * ROWS_PER_STEP * cols * sizeof *deq);
    if (!packed || !deq) {
        free(packed);
        free(deq);
        return -1;
    }
    float *wf = deq + ROWS_PER_STEP * cols;
    /* dense units hold whole, untransposed Linears: rows start at row0 */
    const uint8_t *w = ckpt_data(ms->c, m->src) + m->row0 * cols * esz;
    for (uint64_t r = 0; r < m->rows; r += ROWS_PER_STEP) {
        uint64_t n = m->rows - r < ROWS_PER_STEP ? m->rows - r : ROWS_PER_STEP;
        const uint8_t *rows = w + r * cols * esz;
        for (uint64_t i = 0; i < n * cols; i++)
            wf[i] = ff_load_f32(rows, t, i);
        u->err[SCHEME_NVFP4] += nvfp4_error(ms, rows, wf, t, cols, n, gs, packed, packed + n * cols / 2, deq);
        for (uint64_t k = 0; k < n; k++)
            u->err[SCHEME_FP8] += fp8_row_error(wf + k * cols, t, cols, &u->energy, &u->fourth);
    }
    free(packed);
    free(deq);
    return 0;
}

/* The unit's global scale, as quantize computes it: one amax over every
 * member. Returns 0, or 1 with the index of a NaN/Inf in *bad. */
static int unit_global_scale(const measure *ms, const plan_unit *pu, float *gs, uint64_t *bad)
{
    float amax = 0.0f;
    uint64_t seen = 0;
    ff_dtype t = ms->p->members[pu->first].src->st->dtype;
    for (size_t k = 0; k < pu->count; k++) {
        const plan_member *m = &ms->p->members[pu->first + k];
        const uint8_t *w = ckpt_data(ms->c, m->src) + m->row0 * m->cols * ff_dtype_size(t);
        float a;
        uint64_t at;
        if (nvfp4_absmax(w, t, m->rows * m->cols, &a, &at)) {
            *bad = seen + at;
            return 1;
        }
        seen += m->rows * m->cols;
        amax = fmaxf(amax, a);
    }
    *gs = nvfp4_global_scale(amax, t);
    return 0;
}

static void measure_unit(void *ctx, size_t i)
{
    const measure *ms = ctx;
    const plan_unit *pu = &ms->p->units[ms->unit_of[i]];
    budget_unit *u = &ms->out[i];
    float gs;
    if (unit_global_scale(ms, pu, &gs, &ms->bad[i]))
        return;
    for (size_t k = 0; k < pu->count; k++)
        if (member_errors(ms, &ms->p->members[pu->first + k], gs, u)) {
            ms->oom[i] = 1;
            return;
        }
    /* NVFP4's relative error is near constant (8.9e-3 on every SmolLM2 unit),
     * so what tells units apart is how heavy-tailed their weights are: the
     * error times the kurtosis squared ranks the KL each unit costs best of
     * the statistics tried (Spearman +0.61 per unit, +0.43 per byte, against
     * err / energy's -0.32 and +0.33: docs/quality.md) */
    double n = (double)u->weights;
    u->kurtosis = u->energy > 0 ? n * u->fourth / (u->energy * u->energy) : 0;
    for (int k = 0; k < 3; k++)
        u->score[k] = u->err[k] * u->kurtosis * u->kurtosis;
}

/* "<first module>", then "+<last name>" of each other member: a fused
 * q/k/v reads "model.layers.0.self_attn.k_proj+q_proj+v_proj". */
static char *unit_label(const plan *p, const plan_unit *pu)
{
    size_t len = 1;
    for (size_t k = 0; k < pu->count; k++)
        len += strlen(p->members[pu->first + k].src->st->name) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t at = 0;
    for (size_t k = 0; k < pu->count; k++) {
        const char *name = p->members[pu->first + k].src->st->name, *end = strrchr(name, '.');
        size_t n = end ? (size_t)(end - name) : strlen(name);   /* without ".weight" */
        const char *from = name;
        if (k) {   /* the member's last component only */
            const char *dot = memrchr(name, '.', n);
            from = dot ? dot + 1 : name;
            s[at++] = '+';
        }
        n -= (size_t)(from - name);
        memcpy(s + at, from, n);
        at += n;
    }
    s[at] = 0;
    return s;
}

/* The unit's identity and sizes, from the plan alone. */
static int unit_shape(const plan *p, const plan_unit *pu, budget_unit *u)
{
    u->module = unit_label(p, pu);
    u->members = pu->count;
    for (size_t k = 0; k < pu->count; k++) {
        const plan_member *m = &p->members[pu->first + k];
        uint64_t n = m->rows * m->cols, esz = ff_dtype_size(m->src->st->dtype);
        u->weights += n;
        u->bytes[SCHEME_NVFP4] += n / 2 + n / NVFP4_GROUP + 4;
        u->bytes[SCHEME_FP8] += n + m->rows * esz;
        u->bytes[SCHEME_KEEP] += n * esz;
    }
    return u->module ? 0 : -1;
}

static int first_failure(const measure *ms, size_t n, ff_err *e)
{
    for (size_t i = 0; i < n; i++) {
        const plan_member *m = &ms->p->members[ms->p->units[ms->unit_of[i]].first];
        if (ms->bad[i] != UINT64_MAX)
            return ff_fail(e, FF_EIO, "%s: tensor %s: NaN or Inf in unit %s (element %llu of the unit)",
                           ckpt_path(ms->c, m->src), m->src->st->name, ms->out[i].module,
                           (unsigned long long)ms->bad[i]);
        if (ms->oom[i])
            return ff_oom(e, "out of memory measuring %s", ms->out[i].module);
    }
    return FF_OK;
}

int budget_measure(const plan *p, const ckpt *c, int threads, budget_unit **units, size_t *n, ff_err *e)
{
    *units = NULL;
    *n = 0;
    size_t nd = 0;
    size_t *unit_of = malloc((p->nunits ? p->nunits : 1) * sizeof *unit_of);
    budget_unit *out = calloc(p->nunits ? p->nunits : 1, sizeof *out);
    uint64_t *bad = malloc((p->nunits ? p->nunits : 1) * sizeof *bad);
    int *oom = calloc(p->nunits ? p->nunits : 1, sizeof *oom);
    ff_pool *pool = pool_create(threads);
    int rc = unit_of && out && bad && oom && pool ? FF_OK : ff_oom(e, "out of memory measuring the units");
    for (size_t i = 0; i < p->nunits && rc == FF_OK; i++) {
        if (!p->units[i].dense || p->units[i].fp8)
            continue;   /* experts and the user's own FP8 choices are not the budget's */
        bad[nd] = UINT64_MAX;
        unit_of[nd] = i;
        out[nd].unit = i;
        if (unit_shape(p, &p->units[i], &out[nd++]))
            rc = ff_oom(e, "out of memory measuring the units");
    }
    if (rc == FF_OK) {
        measure ms = {p, c, unit_of, out, nvfp4_best_kernel(NULL), bad, oom};
        pool_run(pool, nd, measure_unit, &ms);
        rc = first_failure(&ms, nd, e);
    }
    if (pool)
        pool_destroy(pool);
    free(unit_of);
    free(bad);
    free(oom);
    if (rc) {
        for (size_t i = 0; i < nd; i++)
            free(out[i].module);
        free(out);
        return rc;
    }
    *units = out;
    *n = nd;
    return FF_OK;
}
