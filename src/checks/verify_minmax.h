/* verify --against on an output quantized with a search observer: what
 * llm-compressor's min/max observer would have given, per module. */
#ifndef FF_VERIFY_MINMAX_H
#define FF_VERIFY_MINMAX_H

#include <jansson.h>

#include "checkpoint.h"
#include "plan.h"

/* module -> relative error of the min/max quantization of the source (the
 * plan's units as fused groups); NULL with e filled on a failure. */
json_t *verify_minmax_errors(const plan *p, const ckpt *s, ff_err *e);

#endif
