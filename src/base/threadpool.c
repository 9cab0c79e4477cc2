#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct worker_arg worker_arg;

struct ff_pool {
    pthread_t *workers;
    worker_arg *args;
    int nworkers;              /* threads besides the caller */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    unsigned long generation;  /* bumped per pool_run, wakes the workers */
    int quitting;
    /* the job in flight */
    pool_worker_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;
    int busy;                  /* workers still inside the current job */
};

struct worker_arg {
    ff_pool *pool;
    int index;
};

static void drain(ff_pool *p, int worker)
{
    size_t i;
    while ((i = atomic_fetch_add(&p->next, 1)) < p->ntasks)
        p->fn(p->ctx, i, worker);
}

static void *worker_main(void *arg)
{
    ff_pool *p = ((worker_arg *)arg)->pool;
    int index = ((worker_arg *)arg)->index;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quitting && p->generation == seen)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->quitting)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ff_pool *pool_create(int threads)
{
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    ff_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->workers = calloc((size_t)threads, sizeof *p->workers);
    p->args = calloc((size_t)threads, sizeof *p->args);
    for (int i = 0; p->workers && p->args && i < threads - 1; i++) {
        p->args[i] = (worker_arg){.pool = p, .index = i + 1};
        if (pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]) != 0)
            break;
        p->nworkers++;
    }
    return p;
}

int pool_threads(const ff_pool *p) { return p->nworkers + 1; }

int pool_tasks_left(ff_pool *p) { return atomic_load(&p->next) < p->ntasks; }

void pool_run_indexed(ff_pool *p, size_t ntasks, pool_worker_fn fn, void *ctx)
{
    if (ntasks == 0)
        return;
    if (ntasks == 1 || p->nworkers == 0) {
        for (size_t i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    p->busy = p->nworkers;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

typedef struct plain_task {
    pool_task_fn fn;
    void *ctx;
} plain_task;

static void run_plain(void *ctx, size_t task, int worker)
{
    (void)worker;
    plain_task *pt = ctx;
    pt->fn(pt->ctx, task);
}

void pool_run(ff_pool *p, size_t ntasks, pool_task_fn fn, void *ctx)
{
    plain_task pt = {fn, ctx};
    pool_run_indexed(p, ntasks, run_plain, &pt);
}

void pool_destroy(ff_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quitting = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    free(p->workers);
    free(p->args);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}
