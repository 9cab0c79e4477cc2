/* synth --source: a synthetic checkpoint stored the way a vendor ships a
 * quantized model, so the decoders (src/io/qsource.h) have real-geometry
 * inputs without a download. The bf16 values are synth's own; each format
 * encodes them as its reference quantizer would (not bit-exact to one: any
 * valid encoding tests a decoder). */
#ifndef FF_SYNTH_SOURCE_H
#define FF_SYNTH_SOURCE_H

#include <jansson.h>

#include "ff_err.h"
#include "safetensors.h"
#include "synth.h"
#include "synth_list.h"
#include "writer.h"

#define SYNTH_MAX_PARTS 3
#define SYNTH_PART_NAME 192

/* The tensors t is stored as: 0 when it stays bf16, else its parts filled
 * into outs (names in names[]: they must live until the layout is written). */
size_t synth_source_parts(synth_source src, const synth_tensor *t, st_out *outs,
                          char names[SYNTH_MAX_PARTS][SYNTH_PART_NAME]);
/* Encodes t's bf16 values w ([rows, cols]) and writes its parts, the first
 * at output index out. */
int synth_source_write(synth_source src, const synth_tensor *t, const uint16_t *w, ckpt_writer *wr, size_t out,
                       ff_err *e);
/* The config's quantization_config for src (NULL for bf16). */
json_t *synth_source_qconfig(synth_source src);

#endif
