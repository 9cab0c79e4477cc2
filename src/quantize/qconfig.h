/* config.json for the output: the input's config plus the quantization_config
 * that compressed-tensors' ModelCompressor writes for NVFP4A16, so vLLM picks
 * its W4A16 FP4 scheme and transformers + compressed-tensors load it; with
 * FP8 modules (--fp8), its multi-group form: an FP8 weight-only group
 * (naive-quantized, vLLM's W8A16 FP8 scheme) beside the NVFP4A16 one. */
#ifndef FF_QCONFIG_H
#define FF_QCONFIG_H

#include <jansson.h>

#include "plan.h"

/* The quantization_config object (new reference). */
json_t *qconfig_build(const plan *p);
/* A copy of `config` with quantization_config set (new reference). */
json_t *qconfig_apply(const json_t *config, const plan *p);

#endif
