/* The MSE observers' passes over a unit: search, choose, quantize with
 * the chosen ranges. */
#include "quantize_int.h"

#include <stdlib.h>

#include "nvfp4_simd.h"

static void search_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t], g = r * (m->cols / NVFP4_GROUP);
    j->task_any[t] = 0;
    j->search(
        j->rows[k], m->src->st->dtype, m->cols, r, qz_task_rows(j, t), j->obs, j->mask[k] ? j->mask[k] + g : NULL,
        j->idx[k] ? j->idx[k] + g : NULL, &j->task_any[t]);
}

static void choose_task(void *ctx, size_t t, int worker)
{
    (void)worker;
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t], g = r * (m->cols / NVFP4_GROUP);
    j->task_top[t] = nvfp4_mse_choose_rows(j->rows[k], m->src->st->dtype, m->cols, r, qz_task_rows(j, t), j->obs,
                                           j->mask[k] ? j->mask[k] + g : NULL, j->idx[k] ? j->idx[k] + g : NULL,
                                           j->stop[k], j->gamax[k] + g);
}

void qz_quant_ranges_task(void *ctx, size_t t, int worker)
{
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t];
    uint8_t *pk, *sc;
    qz_task_outputs(j, t, worker, &pk, &sc);
    (j->ranges_scalar ? nvfp4_quantize_rows_ranges_scalar : nvfp4_quantize_rows_ranges)(
        j->rows[k], m->src->st->dtype, m->cols, r, qz_task_rows(j, t), j->gs, j->gamax[k] + r * (m->cols / NVFP4_GROUP),
        pk, sc);
    qz_release_task_rows(j, t);
    qz_stream_task_rows(j, t, worker, pk);
}

/* Per-member search buffers; -1 when out of memory. */
int qz_obs_alloc(unit_job *j)
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

void qz_obs_free(unit_job *j)
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

/* The MSE observers: search every group (threaded, each group on its own),
 * cut each member at its tensor-wide early stop, and take the global scale
 * from the chosen ranges' max over the fused unit (Observer.get_global_scale).
 * Every reduction is an OR or a max, so the bytes do not depend on threads. */
float qz_observe_ranges(unit_job *j, ff_pool *pool)
{
    /* each element is fake-quantized once per grid step */
    qz_run_tasks_weighted(pool, j, search_task, (uint64_t)j->obs->steps);
    for (size_t k = 0; k < j->u->count; k++) {
        uint64_t any = 0;
        for (size_t t = 0; t < j->ntasks; t++)
            if (j->task_member[t] == k)
                any |= j->task_any[t];
        j->stop[k] = nvfp4_obs_needs_mask(j->obs) ? nvfp4_mse_stop_step(j->obs, any) : j->obs->steps - 1;
    }
    qz_run_tasks(pool, j, choose_task);
    float top = 0.0f;
    for (size_t t = 0; t < j->ntasks; t++)
        top = j->task_top[t] > top ? j->task_top[t] : top;
    return top;
}

/* The search that goes with the min/max kernel --kernel chose, so that
 * --kernel forces every vector path it names (the same bytes on each). */
nvfp4_mse_search_fn qz_search_for(nvfp4_rows_fn kernel)
{
    nvfp4_mse_search_fn avx2 = nvfp4_mse_search_by_name("avx2");
    if (kernel == nvfp4_quantize_rows_scalar)
        return nvfp4_mse_search_rows;
    if (kernel == nvfp4_quantize_rows_avx2 && avx2)
        return avx2;
    return nvfp4_mse_search_rows_simd;
}
