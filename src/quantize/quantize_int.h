/* Private to src/quantize: the quantize job split along its seams. quantize.c
 * drives the plan's items in file order; unit_tasks.c runs one NVFP4 unit's
 * passes on the pool; unit_observe.c the MSE searches; unit_exact.c MXFP4
 * sources carried exactly; unit_fp8.c FP8 units; keep_write.c kept tensors;
 * out_combine.c small writes gathered into one. */
#ifndef FF_QUANTIZE_INT_H
#define FF_QUANTIZE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "quantize.h"
#include "nvfp4.h"
#include "nvfp4_mse.h"
#include "outq.h"
#include "qsource.h"
#include "writer.h"
#include "threadpool.h"

/* Rows per task: big enough to amortise dispatch, small enough to balance. */
#define ROWS_PER_TASK 64
/* Input rows are dropped from the mapping in blocks of about this many
 * bytes, once every task over the block has read it: each madvise that
 * unmaps pages interrupts every CPU running the pool to flush its TLB, and
 * per 64-row task that cost 16 threads more system time than the kernels
 * (1.3 s against 0.45 s on a 2.4 GB model). In flight: a block a thread. */
#define RELEASE_BLOCK_BYTES (8ull << 20)
/* Units below this many elements run on the calling thread: waking the pool
 * costs more than the work (the 11,520 tiny experts of a scaled-down MoE
 * spent most of their time in futex handshakes). */
#define SMALL_UNIT_ELEMS (1u << 18)

/* One output buffer reused by every unit (grow-only): a fresh malloc per
 * unit is a fresh mmap, so every unit paid page faults and munmap for pages
 * it wrote once; reuse keeps RSS at the largest unit's output. */
typedef struct out_arena {
    uint8_t *p;
    uint64_t cap;
} out_arena;

/* Per pool thread: a kept tensor's chunk that it failed to write, for the
 * calling thread to report. */
typedef struct worker_slot {
    int failed;
    ff_err err;
} worker_slot;

typedef struct unit_job {
    const ckpt *c;
    const plan *p;
    const plan_unit *u;
    nvfp4_rows_fn kernel;
    float gs;
    size_t ntasks;
    size_t *task_member;      /* member index (within unit) of each task */
    uint64_t *task_row;       /* first row of each task */
    uint64_t *member_task_rows;   /* per member: rows a task (the last may take fewer) */
    float *task_amax;
    uint64_t *task_bad;       /* element index of a NaN/Inf, or UINT64_MAX */
    uint8_t **packed, **scales;  /* into the arena, not owned; NULL when streamed */
    uint64_t elems;           /* elements in the unit, to pick inline or pool */
    int streamed;             /* tasks queue their rows for the shard (outq): big units need no
                                 unit-sized output buffer and the writes overlap the kernels */
    size_t *task_block;       /* release block of each task */
    size_t nblocks;
    size_t *block_first;      /* first task of each block, then ntasks (a block's tasks are consecutive) */
    atomic_size_t *block_left;   /* tasks of the block still to finish this pass */
    ckpt_writer *wr;
    outq *q;
    void **data;              /* per member: the quant_source's copy, or NULL */
    const uint8_t **rows;     /* per member: its [rows, cols] weight (row 0); NULL when decoded by rows */
    /* Per member of a vendor-quantized source: decoded a task's rows at a
     * time into the thread's scratch (kind QS_NONE: not). A whole bf16 copy
     * was written to memory and read back by both passes: Kimi-K2 FP8, 2
     * threads, 4.08 GB, the decode and the amax pass were a third of the
     * samples. */
    qs_rows *lazy;
    const out_arena *scratch; /* per pool thread: a task's rows of the widest lazy member */
    struct nvfp4_i4_cache **i4;   /* per pool thread: INT4 members' slots (io_state.i4) */
    void **owned;             /* per member: a transposed copy behind rows, or NULL */
    /* MSE observers only (obs != NULL): per member, per group */
    const nvfp4_obs *obs;
    nvfp4_mse_search_fn search; /* the search of --kernel's choice (the same bytes) */
    int ranges_scalar;        /* --kernel scalar: the scalar ranges quantizer too */
    uint64_t **mask;          /* improvement masks (nvfp4_obs_needs_mask) */
    uint8_t **idx;            /* else the winning step */
    float **gamax;            /* the chosen range */
    int *stop;                /* per member: the tensor-wide early stop step */
    uint64_t *task_any;       /* per task: OR of its groups' masks */
    float *task_top;          /* per task: max chosen range */
    /* The next unit's amax pass inside this one's quantizing pass: that pass
     * alone waits on memory while the kernel leaves the loads idle (host held
     * to 2 CPUs, 4.34 GB: 0.95 s a job, 0.71 s with the pass skipped; riding,
     * bench/run 0.76x of cat against 0.73x, twice; 16 threads 0.42-0.51 s
     * against 0.49-0.56). */
    struct unit_job *side;
    size_t *side_first;       /* per task: its first task of side's; then side->ntasks */
    int amax_done;            /* its amax pass ran inside the previous unit's */
    int codes_unread;         /* FP8 amax from the top-scale blocks: the quantizing pass checks for NaN bytes */
    int code_kernel;          /* FP8-block and INT4 members quantized from their codes
                                 (nvfp4_code_rows.h, nvfp4_int4_rows.h) */
} unit_job;

/* Small outputs (scales, the 4-byte global scales, tiny experts) gathered
 * into one pwrite while they are adjacent in their shard; big ones go
 * straight from the kernel's buffer (or the mmap, for copied tensors). */
#define WC_CAP (4u << 20)
#define WC_DIRECT (1u << 20)

typedef struct wcomb {
    uint8_t *buf;
    size_t len;
    ckpt_place at;   /* of buf[0] */
} wcomb;

/* Per-run I/O state shared by the items. */
typedef struct io_state {
    out_arena arena;
    wcomb wc;
    worker_slot *slots;       /* one per pool thread */
    int nslots;
    outq *q;                  /* streamed units' rows, queued kept tensors */
    out_arena *scratch;       /* per pool thread: decoded rows (unit_job.lazy) */
    /* per pool thread, made by its first INT4 task and kept for the run:
     * slots hold for every tensor of one global scale */
    struct nvfp4_i4_cache **i4;
    /* Kept chunks: one pool thread writes at a time: ext4 holds the file's
     * lock for the whole buffered write, and a second writer spins on it in
     * the kernel (28% of a run's CPU when they did); waiting here sleeps. */
    pthread_mutex_t write_mu;
} io_state;

/* Pipelining across units: the job of item i (prepared already when it
 * rode along with the previous unit) and, when both can, the next unit's
 * job prepared now to ride along; that one is left in *next. */
typedef struct unit_ctx {
    const ckpt *c;
    const plan *p;
    ff_pool *pool;
    nvfp4_rows_fn kernel;
    const nvfp4_obs *obs;
    const quant_source *qs;
    io_state *io;
    ckpt_writer *wr;
    int mx_reference;         /* --mxfp4-route reference */
    quant_stats *st;          /* the exact / re-quantized counts */
} unit_ctx;

/* unit_tasks.c: one NVFP4 unit's job */
int qz_locate_members(unit_job *j, ff_err *e);
int qz_load_members(unit_job *j, const quant_source *qs, ff_pool *pool, int by_rows, ff_err *e);
uint64_t qz_task_rows(const unit_job *j, size_t t);
void qz_release_task_rows(unit_job *j, size_t t);
void qz_task_outputs(const unit_job *j, size_t t, int worker, uint8_t **pk, uint8_t **sc);
void qz_stream_task_rows(const unit_job *j, size_t t, int worker, const uint8_t *pk);
void qz_run_tasks_weighted(ff_pool *pool, unit_job *j, pool_worker_fn fn, uint64_t weight);
void qz_run_tasks(ff_pool *pool, unit_job *j, pool_worker_fn fn);
int qz_unit_prepare(unit_job *j, const ckpt *c, const plan *p, const plan_unit *u, nvfp4_rows_fn kernel,
                    const nvfp4_obs *obs, const quant_source *qs, ff_pool *pool, io_state *io, ckpt_writer *wr,
                    ff_err *e);
int qz_can_ride(const plan *p, const plan_unit *u, nvfp4_rows_fn kernel, const nvfp4_obs *obs,
                const quant_source *qs);
int qz_unit_cached(const unit_job *v);
/* A unit whose amax comes from its stored scales (INT4, FP8-block), which
 * the previous unit's pass may take ahead (qz_write_unit's ahead). */
int qz_takes_scales_ahead(const plan *p, const plan_unit *u, const nvfp4_obs *obs, const quant_source *qs);
int qz_write_unit(unit_job *j, unit_job *side, unit_job *ahead, ff_pool *pool, io_state *io, ckpt_writer *wr,
                  ff_err *e);
void qz_free_job(unit_job *j);

/* unit_observe.c: the MSE observers' passes */
int qz_obs_alloc(unit_job *j);
void qz_obs_free(unit_job *j);
float qz_observe_ranges(unit_job *j, ff_pool *pool);
nvfp4_mse_search_fn qz_search_for(nvfp4_rows_fn kernel);
void qz_quant_ranges_task(void *ctx, size_t t, int worker);

/* out_combine.c */
int qz_wc_flush(wcomb *w, ckpt_writer *wr, ff_err *e);
int qz_out_write(wcomb *w, ckpt_writer *wr, size_t out, const void *buf, uint64_t n, ff_err *e);
int qz_slots_error(io_state *io, ff_err *e);

/* unit_exact.c, unit_fp8.c, keep_write.c */
int qz_mxfp4_unit(const plan *p, const plan_unit *u);
int qz_write_unit_exact(const unit_ctx *x, const plan_unit *u, int *done, ff_err *e);
int qz_write_unit_fp8(const unit_ctx *x, const plan_unit *u, ff_err *e);
int qz_write_keep(const ckpt *c, const plan *p, const plan_item *it, const quant_source *qs, ff_pool *pool,
                  io_state *io, ckpt_writer *wr, int *queued, ff_err *e);

#endif
