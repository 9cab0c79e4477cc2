/* Executes a plan: streams the source tensors in file order through the
 * NVFP4 kernel on a thread pool and writes shards at the offsets their
 * headers promised. Memory: the largest fused unit's output, not the model. */
#ifndef FF_QUANTIZE_H
#define FF_QUANTIZE_H

#include "checkpoint.h"
#include "plan.h"

typedef struct quant_opts {
    int threads;              /* <= 0: all cores */
    uint64_t shard_size;      /* bytes per shard (a tensor never splits) */
    const char *kernel;       /* NULL: the fastest this CPU runs */
    int progress;             /* draw a progress bar on stderr */
    int force;                /* replace an existing OUT_DIR */
} quant_opts;

typedef struct quant_stats {
    uint64_t bytes_read, bytes_written;
    size_t shards, tensors;
    double seconds;
    const char *kernel;
    int threads;
} quant_stats;

int quantize_run(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o,
                 quant_stats *st, ff_err *e);

#endif
