/* What vLLM's encoder profiling reserves for a vision tower (fit): the
 * arithmetic the families' encoder_bytes hooks share. */
#ifndef FF_ENCODER_H
#define FF_ENCODER_H

#include <jansson.h>
#include <stdint.h>

#include "family.h"

/* vLLM profiles the encoder with as many max-size images as its encoder
 * cache holds (max(max_num_batched_tokens, tokens per image) embeddings):
 * the cache itself in bf16 (hidden: the text model's width) plus the
 * tower's transient tensors for every patch of those images, per_image
 * soft tokens each pooled from pool x pool patches, the tower's widths
 * read from vision (its hidden_size and intermediate_size). */
uint64_t ff_encoder_pooled_bytes(const json_t *vision, int64_t hidden, int64_t batched_tokens, int64_t per_image,
                                 int64_t pool);

/* The encoder_bytes hook of a family with no model of its own tower yet
 * (Llama-4, Qwen3.5, Kimi): the pooled estimate from its vision_config's
 * default_output_length (280) and pooling_kernel_size (3), Gemma-4's keys
 * and defaults, which fit has always applied to them. 0 without a
 * vision_config object. */
uint64_t ff_encoder_default_bytes(const json_t *config, const ff_geometry *g, int64_t batched_tokens);

#endif
