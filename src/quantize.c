#include "quantize.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "jsonio.h"
#include "nvfp4.h"
#include "progress.h"
#include "qconfig.h"
#include "shards.h"
#include "threadpool.h"

/* Rows per task: big enough to amortise dispatch, small enough to balance. */
#define ROWS_PER_TASK 64

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
    uint8_t **packed, **scales;
    void **data;              /* per member: the quant_source's copy, or NULL */
} unit_job;

/* Member k's source tensor: the producer's copy when it made one, else the map. */
static const uint8_t *member_base(const unit_job *j, size_t k)
{
    if (j->data && j->data[k])
        return j->data[k];
    return ckpt_data(j->c, j->p->members[j->u->first + k].src);
}

static uint64_t task_rows(const unit_job *j, size_t t)
{
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t left = m->rows - j->task_row[t];
    return left < ROWS_PER_TASK ? left : ROWS_PER_TASK;
}

static void absmax_task(void *ctx, size_t t)
{
    unit_job *j = ctx;
    const plan_member *m = &j->p->members[j->u->first + j->task_member[t]];
    uint64_t row = m->row0 + j->task_row[t], n = task_rows(j, t) * m->cols;
    size_t esz = ff_dtype_size(m->src->st->dtype);
    const uint8_t *p = member_base(j, j->task_member[t]) + row * m->cols * esz;
    uint64_t bad;
    j->task_bad[t] = UINT64_MAX;
    if (nvfp4_absmax(p, m->src->st->dtype, n, &j->task_amax[t], &bad))
        j->task_bad[t] = row * m->cols + bad;
}

static void quant_task(void *ctx, size_t t)
{
    unit_job *j = ctx;
    size_t k = j->task_member[t];
    const plan_member *m = &j->p->members[j->u->first + k];
    uint64_t r = j->task_row[t];
    j->kernel(member_base(j, k), m->src->st->dtype, m->cols, m->row0 + r, task_rows(j, t), j->gs,
              j->packed[k] + r * (m->cols / 2), j->scales[k] + r * (m->cols / NVFP4_GROUP));
}

static int plan_tasks(unit_job *j)
{
    size_t n = 0;
    for (size_t k = 0; k < j->u->count; k++)
        n += (j->p->members[j->u->first + k].rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    j->ntasks = n;
    j->task_member = malloc(n * sizeof *j->task_member);
    j->task_row = malloc(n * sizeof *j->task_row);
    j->task_amax = malloc(n * sizeof *j->task_amax);
    j->task_bad = malloc(n * sizeof *j->task_bad);
    j->packed = calloc(j->u->count, sizeof *j->packed);
    j->scales = calloc(j->u->count, sizeof *j->scales);
    if (!j->task_member || !j->task_row || !j->task_amax || !j->task_bad || !j->packed || !j->scales)
        return -1;
    size_t t = 0;
    for (size_t k = 0; k < j->u->count; k++) {
        const plan_member *m = &j->p->members[j->u->first + k];
        for (uint64_t r = 0; r < m->rows; r += ROWS_PER_TASK) {
            j->task_member[t] = k;
            j->task_row[t++] = r;
        }
        j->packed[k] = malloc(m->rows * m->cols / 2 + 1);
        j->scales[k] = malloc(m->rows * m->cols / NVFP4_GROUP + 1);
        if (!j->packed[k] || !j->scales[k])
            return -1;
    }
    return 0;
}

static void free_job(unit_job *j)
{
    for (size_t k = 0; j->packed && k < j->u->count; k++) {
        free(j->packed[k]);
        free(j->scales[k]);
    }
    for (size_t k = 0; j->data && k < j->u->count; k++)
        free(j->data[k]);
    free(j->data);
    free(j->packed);
    free(j->scales);
    free(j->task_member);
    free(j->task_row);
    free(j->task_amax);
    free(j->task_bad);
}

/* Drops our mapping of bytes already consumed, so RSS stays flat however
 * large the model (the page cache keeps them for whoever reads next). */
static void release_range(const st_file *f, uint64_t begin, uint64_t end, int advice)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t a = (f->data_off + begin) & ~(uint64_t)(pg - 1);
    uint64_t b = f->data_off + end;
    if (f->map && b > a)
        madvise((void *)(f->map + a), b - a, advice);
}

static void advise_item(const ckpt *c, const plan *p, const plan_item *it, int advice)
{
    if (it->kind == ITEM_KEEP) {
        release_range(&c->files[it->src->file], it->src->st->begin, it->src->st->end, advice);
        return;
    }
    const plan_unit *u = &p->units[it->unit];
    for (size_t k = 0; k < u->count; k++) {
        const plan_member *m = &p->members[u->first + k];
        uint64_t esz = ff_dtype_size(m->src->st->dtype), row_bytes = m->cols * esz;
        uint64_t b = m->src->st->begin + m->row0 * row_bytes;
        release_range(&c->files[m->src->file], b, b + m->rows * row_bytes, advice);
    }
}

/* Lets the quant_source replace each member's source bytes. */
static int load_members(unit_job *j, const quant_source *qs, ff_err *e)
{
    if (!qs)
        return FF_OK;
    j->data = calloc(j->u->count, sizeof *j->data);
    if (!j->data)
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", j->p->members[j->u->first].module);
    int rc = FF_OK;
    for (size_t k = 0; k < j->u->count && rc == FF_OK; k++)
        rc = qs->load(qs->ctx, j->p->members[j->u->first + k].src, &j->data[k], e);
    return rc;
}

static int write_unit(const ckpt *c, const plan *p, const plan_unit *u, ff_pool *pool,
                      nvfp4_rows_fn kernel, const quant_source *qs, shard_set *ss, ff_err *e)
{
    unit_job j = {.c = c, .p = p, .u = u, .kernel = kernel};
    int rc = FF_OK;
    if (plan_tasks(&j)) {
        free_job(&j);
        return ff_fail(e, FF_EIO, "out of memory quantizing %s", p->members[u->first].module);
    }
    if ((rc = load_members(&j, qs, e)) != FF_OK) {
        free_job(&j);
        return rc;
    }
    pool_run(pool, j.ntasks, absmax_task, &j);
    float amax = 0.0f;
    for (size_t t = 0; t < j.ntasks; t++) {
        if (j.task_bad[t] != UINT64_MAX) {
            const plan_member *m = &p->members[u->first + j.task_member[t]];
            rc = ff_fail(e, FF_EIO, "%s: tensor %s: element %llu is NaN or Inf; refusing to quantize it",
                         ckpt_path(c, m->src), m->src->st->name, (unsigned long long)j.task_bad[t]);
            break;
        }
        amax = j.task_amax[t] > amax ? j.task_amax[t] : amax;
    }
    if (rc == FF_OK) {
        j.gs = nvfp4_global_scale(amax, p->members[u->first].src->st->dtype);
        pool_run(pool, j.ntasks, quant_task, &j);
        for (size_t k = 0; k < u->count && rc == FF_OK; k++) {
            const plan_member *m = &p->members[u->first + k];
            rc = shards_write(ss, m->out, j.packed[k], m->rows * m->cols / 2, e);
            if (!rc)
                rc = shards_write(ss, m->out + 1, j.scales[k], m->rows * m->cols / NVFP4_GROUP, e);
            if (!rc)
                rc = shards_write(ss, m->out + 2, &j.gs, sizeof j.gs, e);
        }
    }
    free_job(&j);
    return rc;
}

static int write_keep(const ckpt *c, const plan_item *it, const quant_source *qs, shard_set *ss,
                      ff_err *e)
{
    void *buf = NULL;
    if (qs && qs->load(qs->ctx, it->src, &buf, e))
        return e->code;
    const uint8_t *src = buf ? buf : ckpt_data(c, it->src);
    int rc = shards_write(ss, it->out, src, it->src->st->end - it->src->st->begin, e);
    free(buf);
    return rc;
}

/* Everything in the input folder that is not weights travels: tokenizer,
 * chat template, generation/processor configs. */
static int copy_aux(const char *in_dir, const char *out_dir, ff_err *e)
{
    size_t n;
    char **files = fs_list_files(in_dir, &n, e);
    if (!files)
        return e->code;
    int rc = FF_OK;
    for (size_t i = 0; i < n && rc == FF_OK; i++) {
        const char *f = files[i];
        size_t len = strlen(f);
        if ((len > 12 && strcmp(f + len - 12, ".safetensors") == 0) ||
            strcmp(f, "model.safetensors.index.json") == 0 || strcmp(f, "config.json") == 0 ||
            strstr(f, ".bak-fp4forge-"))
            continue;
        char *a = fs_join(in_dir, f), *b = fs_join(out_dir, f);
        rc = fs_copy_file(a, b, e);
        free(a);
        free(b);
    }
    fs_free_list(files, n);
    return rc;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_items(const ckpt *c, const plan *p, ff_pool *pool, nvfp4_rows_fn kernel,
                     shard_set *ss, const quant_opts *o, ff_err *e)
{
    progress bar;
    progress_begin(&bar, p->bytes_in, o->progress);
    int rc = FF_OK;
    for (size_t i = 0; i < p->nitems && rc == FF_OK; i++) {
        const plan_item *it = &p->items[i];
        if (i + 1 < p->nitems)
            advise_item(c, p, &p->items[i + 1], MADV_WILLNEED);
        rc = it->kind == ITEM_KEEP ? write_keep(c, it, o->source, ss, e)
                                   : write_unit(c, p, &p->units[it->unit], pool, kernel, o->source, ss, e);
        advise_item(c, p, it, MADV_DONTNEED);
        progress_add(&bar, it->kind == ITEM_KEEP ? it->src->st->end - it->src->st->begin
                                                 : plan_unit_bytes_in(p, &p->units[it->unit]), i + 1, p->nitems);
    }
    progress_end(&bar);
    if (rc == FF_OK && o->source && o->source->finish)
        rc = o->source->finish(o->source->ctx, e);
    return rc;
}

static int finish(const ckpt *c, const plan *p, shard_set *ss, const char *dir, ff_err *e)
{
    int rc = shards_close(ss, dir, e);
    if (rc)
        return rc;
    json_t *cfg = qconfig_apply(c->config, p);
    char *cp = fs_join(dir, "config.json");
    rc = jsonio_save(cp, cfg, e);
    free(cp);
    json_decref(cfg);
    return rc ? rc : copy_aux(c->dir, dir, e);
}

int quantize_run(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o,
                 quant_stats *st, ff_err *e)
{
    memset(st, 0, sizeof *st);
    nvfp4_rows_fn kernel = o->kernel ? nvfp4_kernel_by_name(o->kernel) : nvfp4_best_kernel(&st->kernel);
    if (!kernel)
        return ff_fail(e, FF_EUSAGE, "kernel %s is unknown or this CPU cannot run it", o->kernel);
    if (o->kernel)
        st->kernel = o->kernel;
    if (fs_same(out_dir, c->dir))
        return ff_fail(e, FF_EUSAGE, "%s: output folder is the input folder", out_dir);
    fs_stage stage;
    int rc = fs_stage_begin(&stage, out_dir, o->force, e);
    if (rc) {
        fs_stage_free(&stage);
        return rc;
    }
    double t0 = now();
    ff_pool *pool = pool_create(o->threads);
    shard_set ss;
    rc = shards_open(&ss, p->outs, p->nouts, o->shard_size, stage.tmp_dir, e);
    if (!rc)
        rc = run_items(c, p, pool, kernel, &ss, o, e);
    if (!rc)
        rc = finish(c, p, &ss, stage.tmp_dir, e);
    st->threads = pool_threads(pool);
    pool_destroy(pool);
    st->shards = ss.nshards;
    st->bytes_written = ss.bytes_written;
    shards_free(&ss);
    if (!rc)
        rc = fs_stage_commit(&stage, e);
    if (rc)
        fs_stage_abort(&stage);
    fs_stage_free(&stage);
    st->bytes_read = p->bytes_in;
    st->tensors = p->nouts;
    st->seconds = now() - t0;
    return rc;
}
