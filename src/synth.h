/* Synthetic Gemma-4 checkpoints: the real tensor names, config schema and
 * geometry (scaled by flags), deterministic pseudo-random weights. The
 * embedded default for the demo, the tests and the benchmark. */
#ifndef FF_SYNTH_H
#define FF_SYNTH_H

#include <stdint.h>

#include "ff_err.h"

typedef struct synth_geom {
    int moe;
    int layers, full_every;       /* every Nth layer is full attention (the last always is) */
    int64_t hidden, intermediate, vocab;
    int heads, kv_heads, head_dim;
    int global_head_dim, global_kv_heads, k_eq_v;
    int experts, top_k;
    int64_t moe_intermediate;
    int ple;                      /* hidden_size_per_layer_input; 0 = no per-layer embeddings */
    int sliding_window;
    int vision_layers;            /* 0 = no vision tower */
    int64_t vision_hidden, vision_intermediate;
    int vision_heads;
    int legacy_schema;            /* flat global_head_dim fields instead of per_layer_config */
    uint64_t seed;
} synth_geom;

/* Presets: "gemma4-dense" / "gemma4-moe" at "tiny" (default) or "real"
 * (31B dense, 26B-A4B MoE) size. Returns 0 if the names are unknown. */
int synth_preset(const char *arch, const char *size, synth_geom *g);
/* Bytes the checkpoint's tensors will take. */
uint64_t synth_bytes(const synth_geom *g);
/* sparse: headers and file sizes only (the data reads as zeros and takes no
 * disk), for planning and fit at the real 50-60 GB geometry. */
int synth_write(const synth_geom *g, const char *out_dir, uint64_t shard_size, int threads,
                int force, int sparse, ff_err *e);

#endif
