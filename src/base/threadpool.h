/* A fixed pool of workers for data-parallel loops: pool_run hands out task
 * indices [0, n) to the workers and the caller, and returns when all are done.
 * Tasks write disjoint outputs, so results never depend on the thread count. */
#ifndef FF_THREADPOOL_H
#define FF_THREADPOOL_H

#include <stddef.h>

typedef void (*pool_task_fn)(void *ctx, size_t task);

typedef struct ff_pool ff_pool;

/* threads <= 0: one per online CPU. */
ff_pool *pool_create(int threads);
void pool_destroy(ff_pool *p);
int pool_threads(const ff_pool *p);
void pool_run(ff_pool *p, size_t ntasks, pool_task_fn fn, void *ctx);

/* The same, telling each task which thread runs it (0 = the caller, up to
 * pool_threads - 1), so tasks can use per-thread scratch without locks. */
typedef void (*pool_worker_fn)(void *ctx, size_t task, int worker);
void pool_run_indexed(ff_pool *p, size_t ntasks, pool_worker_fn fn, void *ctx);

/* From inside a task: whether the run in flight still has tasks no thread
 * has taken. A task that works for the others (the output queue's writer)
 * may go on while they have work of their own. */
int pool_tasks_left(ff_pool *p);

#endif
