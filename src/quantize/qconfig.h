/* config.json for the output: the input's config plus the quantization_config
 * that compressed-tensors' ModelCompressor writes for NVFP4A16, so vLLM picks
 * its W4A16 FP4 scheme and transformers + compressed-tensors load it. */
#ifndef FF_QCONFIG_H
#define FF_QCONFIG_H

#include <jansson.h>

#include "plan.h"

/* The quantization_config object (new reference). */
json_t *qconfig_build(const plan *p);
/* A copy of `config` with quantization_config set (new reference). */
json_t *qconfig_apply(const json_t *config, const plan *p);

#endif
