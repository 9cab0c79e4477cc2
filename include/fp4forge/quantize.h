/* Executes a plan: streams the source tensors in file order through the
 * NVFP4 kernel on a thread pool and writes shards at the offsets their
 * headers promised. Memory: the largest fused unit's output, not the model. */
#ifndef FF_QUANTIZE_H
#define FF_QUANTIZE_H

#include <stdio.h>

#include "checkpoint.h"
#include "plan.h"
#include "seat.h"

/* Optional producer of source data in place of the mmap'd bytes (a LoRA
 * merge): load is called once for each kept tensor and each member's source
 * tensor; for one it replaces, it sets *buf to a malloc'd copy of the whole
 * tensor in the tensor's own dtype and shape (so scales are observed in the
 * base dtype, exactly as if the replaced bytes had been read from a folder),
 * else leaves *buf NULL. finish (may be NULL) runs after the last item,
 * before anything is renamed into place. */
typedef struct quant_source {
    void *ctx;
    int (*load)(void *ctx, const ckpt_tensor *t, void **buf, ff_err *e);
    int (*finish)(void *ctx, ff_err *e);
} quant_source;

struct nvfp4_obs;

typedef struct quant_opts {
    int threads;              /* <= 0: all cores */
    uint64_t shard_size;      /* bytes per shard (a tensor never splits) */
    const char *kernel;       /* NULL: the fastest this CPU runs */
    int progress;             /* draw a progress bar on stderr */
    int force;                /* replace an existing OUT_DIR */
    const quant_source *source; /* NULL: every byte comes from the input */
    const char *input_dir;    /* the user's input when the checkpoint read is a doctor shadow (may be NULL) */
    const struct nvfp4_obs *observer; /* NULL or minmax: today's min/max bytes; else an MSE
                                         grid search (src/kernels/nvfp4_mse.h) */
    const struct card_info *card; /* NULL: no model card; else OUT/README.md, written in
                                     the staging folder so OUT never appears without it */
    int mxfp4_reference;      /* MXFP4 sources: every unit re-quantized from its decoded bf16
                                 (llm-compressor's route on the dequantized copy) instead of
                                 carried exactly where E4M3 can (src/quantize/mx_exact.h) */
} quant_opts;

typedef struct quant_stats {
    uint64_t bytes_read, bytes_written;
    size_t shards, tensors;
    double seconds;
    const char *kernel;
    int threads;
    /* MXFP4 sources: weights (and their 16-groups) carried exactly, and
     * those re-quantized because their exponents span more than E4M3 holds
     * (or --mxfp4-route reference asked for it) */
    uint64_t mx_exact, mx_exact_groups, mx_requantized, mx_requantized_groups;
} quant_stats;

int quantize_run(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o,
                 quant_stats *st, ff_err *e);
/* Every refusal quantize_run would make before its first write (the kernel,
 * a LoRA source on an FP8 checkpoint, OUT the input or existing without
 * force), and nothing written: a dry run. out_dir may be NULL. */
int quantize_check(const ckpt *c, const plan *p, const char *out_dir, const quant_opts *o, ff_err *e);

/* The whole job, in the spirit of llama.cpp's llama_model_quantize(in, out,
 * &params): start from quantize_request_default() and set what differs. */
typedef struct quantize_request {
    quant_opts run;           /* threads, shard size, kernel, progress, force, MXFP4 route
                                 (input_dir, source, observer and card are set inside) */
    plan_opts recipe;         /* --ignore / --only / --fp8 and their allowances */
    plan_seat seat;           /* --budget / --fit: FP8 and bf16 where the budget allows */
    const char *observer;     /* a weight observer's name (minmax, mse, expanded-mse or
                                 llm-compressor's); NULL: min/max */
    int doctor;               /* doctor's checks first (default 1): a finding refuses, FF_EDOCTOR */
    int fix;                  /* repair what doctor finds, in a shadow copy (never the input) */
    const char *aux_from;     /* with fix: missing processor files copied from here */
    const char *shadow_base;  /* where fix stages its shadow; NULL: beside OUT (a temp folder without OUT) */
    const char *lora;         /* a PEFT adapter merged in the same pass, or NULL */
    int lora_allow_ignored;
    const char *cache_name;   /* the Hugging Face cache name the input was given as, or NULL */
    const char *base_model;   /* the card's base_model (NULL: cache_name, else config's _name_or_path) */
    const char *hub_id;       /* the repo the output will be uploaded as, or NULL */
    int dry_run;              /* every check of the real run, the plan printed; nothing written */
    int json;                 /* the plan (dry run) or the summary as JSON */
    FILE *report;             /* the plan or the summary; NULL: nothing printed */
    FILE *findings;           /* doctor's findings; NULL: stderr */
} quantize_request;

void quantize_request_default(quantize_request *r);
/* The refusals that need no input (an unknown observer, --fp8 with a search). */
int quantize_request_check(const quantize_request *r, ff_err *e);
/* in to out (out may be NULL for a dry run); the exit-code classes of ff_err. */
int quantize_checkpoint(const char *in, const char *out, const quantize_request *r, ff_err *e);

#endif
