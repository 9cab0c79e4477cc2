/* fit: will this checkpoint serve on this GPU at this context? From config.json
 * and the safetensors headers alone: weight bytes as loaded (and, for a bf16
 * input, what its NVFP4A16 output would weigh), KV bytes per token per layer
 * type, and the verdict against a memory budget. The KV formula follows vLLM's
 * allocator (docs/fit.md cites the files); reserves for activations and the
 * multimodal encoder are separate, documented estimates. */
#ifndef FF_FIT_H
#define FF_FIT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "ff_err.h"
#include "family.h"

typedef struct fit_opts {
    int64_t context;          /* tokens per sequence asked for (max_model_len) */
    int max_seqs;             /* sequences that must each hold `context` at once */
    int kv_dtype_bytes;       /* 2 bf16, 1 fp8 */
    int64_t batched_tokens;   /* vLLM max_num_batched_tokens: sliding layers also hold these */
    int64_t block_size;       /* KV block (tokens): allocations are whole blocks; 1 = exact */
    int k_is_v_single;        /* engine keeps one tensor where K == V (vLLM does not) */
    int text_only;            /* --language-model-only: no vision weights, no encoder reserve */
    double gpu_total;         /* bytes; 0 = unknown */
    double utilization;       /* 0 = not given */
    double gpu_free;          /* bytes free now; 0 = unknown */
    double act_reserve;       /* bytes; < 0 = estimate */
    double enc_reserve;       /* bytes; < 0 = estimate */
} fit_opts;

void fit_opts_default(fit_opts *o);

/* Weight bytes by kind, from a tensor table (input or planned output). */
typedef struct fit_weights {
    uint64_t packed;          /* NVFP4 weight_packed */
    uint64_t fp8;             /* FP8 weights (weight-only channel-wise outputs, FP8-block sources) */
    uint64_t scales;          /* weight_scale, weight_global_scale (NVFP4's and FP8's) */
    uint64_t other;           /* bf16 (or other) leftovers of the text model */
    uint64_t vision;          /* vision / audio towers and their projections */
    uint64_t total;           /* all of it (vision included) */
} fit_weights;

/* Layers of one kind, grouped: same type, heads, dim and tensors stored. */
typedef struct fit_kv_kind {
    int full;                 /* full attention (else sliding) */
    int kv_heads, head_dim;
    int tensors;              /* 2 (K and V), 1 (one tensor where K == V), 0 (KV-shared) */
    int k_is_v;               /* the checkpoint has no v_proj here */
    int count;                /* layers of this kind */
    uint64_t bytes_per_token; /* per layer */
    int64_t block;            /* tokens per block for this kind (equal page bytes across kinds) */
} fit_kv_kind;

#define FIT_MAX_KINDS 16
#define FIT_COLS 2

/* One answer per weight variant (bf16 as given, NVFP4A16 planned). */
typedef struct fit_verdict {
    const char *label;        /* "bf16", "nvfp4a16", "as given" */
    fit_weights w;
    uint64_t weights;         /* loaded: w.total, less vision when text_only */
    uint64_t need;            /* weights + reserves + KV at the asked context */
    int fits;
    int64_t max_context;      /* largest context that fits (0: not even the weights) */
    int max_context_capped;   /* limited by max_position_embeddings, not memory */
    double util_needed;       /* need / gpu_total; 0 when gpu_total unknown */
} fit_verdict;

typedef struct fit_report {
    fit_opts o;
    int layers, moe, has_vision, quantized;
    int64_t window, max_positions;
    fit_kv_kind kinds[FIT_MAX_KINDS];
    int nkinds;
    uint64_t kv_full_per_token;    /* all full layers together */
    uint64_t kv_sliding_per_token; /* all sliding layers together, while within their window */
    int64_t sliding_tokens;        /* tokens a sliding layer holds at the asked context */
    uint64_t kv_bytes;             /* KV at the asked context x max_seqs, recurrent state included */
    int state_layers;              /* linear-attention layers: a fixed state, no KV per token */
    uint64_t state_per_seq;        /* their state, all layers together, for one sequence */
    uint64_t act_reserve, enc_reserve;
    int act_estimated, enc_estimated;
    double budget;                 /* bytes this seat may use; 0 = unknown */
    const char *budget_from;
    int admission_refused;         /* utilization x total exceeds what is free now */
    fit_verdict col[FIT_COLS];
    int ncols;
    char plan_note[1100];           /* why no NVFP4A16 column, when there is none */
} fit_report;

/* KV bytes per token of each layer kind, from the geometry (no I/O).
 * Returns the number of kinds, or -1 with e filled. */
int fit_kv_kinds(const ff_geometry *g, const fit_opts *o, fit_kv_kind *kinds, int max, ff_err *e);
/* Tokens a sliding layer holds for one sequence of `context` tokens. */
int64_t fit_sliding_tokens(int64_t context, int64_t window, int64_t batched, int64_t block);
/* KV bytes for max_seqs sequences of `context` tokens (with the recurrent state). */
uint64_t fit_kv_bytes(const fit_report *r, int64_t context);
/* Adds one tensor to a weight tally by name. */
/* The matcher (may be NULL) tells a vision/audio tower's tensors apart. */
void fit_weights_add(fit_weights *w, const ff_matcher *m, const char *name, ff_dtype dtype, uint64_t bytes);
/* The reserve estimates (docs/fit.md, "Reserves"). */
uint64_t fit_activation_estimate(const ff_geometry *g, const fit_opts *o);
uint64_t fit_encoder_estimate(const ff_family *fam, const json_t *config, const ff_geometry *g, const fit_opts *o);

/* The whole answer for an open checkpoint. */
int fit_run(fit_report *r, const ckpt *c, const fit_opts *o, ff_err *e);
void fit_print(const fit_report *r, const char *dir, FILE *out);
json_t *fit_to_json(const fit_report *r);

#endif
