/* Synthetic checkpoints: each family's real tensor names, config schema and
 * geometry (scaled by flags), deterministic pseudo-random weights. The
 * embedded default for the demo, the tests and the benchmark. The geometry
 * knobs (synth_geom) live in family.h. */
#ifndef FF_SYNTH_H
#define FF_SYNTH_H

#include <stdint.h>

#include "family.h"
#include "ff_err.h"

typedef struct synth_opts {
    uint64_t shard_size;
    int threads;          /* filling weights; the bytes do not depend on it */
    int force;            /* replace an existing OUT */
    int sparse;           /* headers and file sizes only: the data reads as zeros and takes no disk */
    int fp8_block;        /* --source fp8-block: decoder Linears ("*_proj.weight" under model.layers.)
                             stored F8_E4M3 + F32 weight_scale_inv per 128x128 block, and the
                             config's quantization_config {quant_method: fp8, ...}, as DeepSeek-V3 */
} synth_opts;

/* A preset (a family's --arch value) at "tiny" or "real" size; sets its family. */
int synth_preset(const char *preset, const char *size, synth_geom *g, const ff_family **fam, ff_err *e);
/* Bytes the checkpoint's tensors will take. */
uint64_t synth_bytes(const ff_family *fam, const synth_geom *g);
int synth_write(const ff_family *fam, const synth_geom *g, const char *out_dir, const synth_opts *o, ff_err *e);

#endif
