/* Synthetic checkpoints: each family's real tensor names, config schema and
 * geometry (scaled by flags), deterministic pseudo-random weights. The
 * embedded default for the demo, the tests and the benchmark. The geometry
 * knobs (synth_geom) live in family.h. */
#ifndef FF_SYNTH_H
#define FF_SYNTH_H

#include <stdint.h>

#include "family.h"
#include "ff_err.h"

/* --source: bf16, or a vendor's quantized layout (the config gets its
 * quantization_config):
 *   FP8_BLOCK: decoder Linears ("*_proj" / w1-w3 under model.layers.) as
 *     F8_E4M3 + F32 weight_scale_inv per 128x128 block, as DeepSeek-V3;
 *   INT4: routed experts only as compressed-tensors pack-quantized (I32
 *     weight_packed, BF16 weight_scale per 32, weight_shape), as Kimi-K2.5;
 *   MXFP4: routed experts only as compressed-tensors mxfp4-pack-quantized
 *     (U8 codes, U8 E8M0 weight_scale per 32), as Kimi-K3. */
typedef enum { SYNTH_BF16 = 0, SYNTH_FP8_BLOCK, SYNTH_INT4, SYNTH_MXFP4 } synth_source;

typedef struct synth_opts {
    uint64_t shard_size;
    int threads;          /* filling weights; the bytes do not depend on it */
    int force;            /* replace an existing OUT */
    int sparse;           /* headers and file sizes only: the data reads as zeros and takes no disk */
    synth_source source;  /* --source: how the decoder's Linears are stored */
} synth_opts;

/* A preset (a family's --arch value) at "tiny" or "real" size; sets its family. */
int synth_preset(const char *preset, const char *size, synth_geom *g, const ff_family **fam, ff_err *e);
/* fam's knob `flag` (a synth flag such as "--ple"), or NULL when the family
 * does not take it. */
const ff_synth_knob *synth_knob_find(const ff_family *fam, const char *flag);
/* Sets k's field of g to v: a number, a choice's index, 0 for a switch. */
void synth_knob_set(const ff_synth_knob *k, synth_geom *g, long long v);
/* Bytes the checkpoint's tensors will take. */
uint64_t synth_bytes(const ff_family *fam, const synth_geom *g);
int synth_write(const ff_family *fam, const synth_geom *g, const char *out_dir, const synth_opts *o, ff_err *e);

#endif
