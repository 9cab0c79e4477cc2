/* gpt-oss's own MXFP4 layout (openai/gpt-oss-20b and -120b; config
 * quantization_config {"quant_method": "mxfp4"}), read as llm-compressor
 * 0.14 linearizes the model (llmcompressor/modeling/moe/gpt_oss.py): one
 * Linear per expert, experts.<e>.{gate,up,down}_proj with weight and bias.
 *   <P>.experts.gate_up_proj_blocks U8 [E, 2I, H/32, 16], _scales U8 [E, 2I,
 *     H/32]: E2M1 codes low nibble first and an E8M0 exponent per 32, rows
 *     in Linear orientation; gate is the even rows, up the odd ones
 *     (transformers' GptOssExperts: gate_up[..., ::2], gate_up[..., 1::2]);
 *   <P>.experts.gate_up_proj_bias BF16 [E, 2I], interleaved the same way;
 *   <P>.experts.down_proj_blocks [E, H, I/32, 16], _scales, down_proj_bias [E, H].
 * Each becomes per-expert view tensors (src/io/qsource.h): gate/up/down
 * weights decoded as transformers' _convert_moe_packed_tensors (code *
 * 2^(e - 127), rounded once to bf16; src/io/mxfp4.h) and the biases sliced.
 *
 * The bf16 copy transformers saves (its MXFP4 dequantizer's output, or a
 * bf16 fine-tune) keeps GptOssExperts' own parameters, used as x @ W:
 *   <P>.experts.gate_up_proj BF16 [E, H, 2I] (gate the even columns, up the
 *     odd ones), <P>.experts.down_proj BF16 [E, I, H], the biases as above.
 * Its experts become the same per-expert views, each a transposed slice
 * copied (llm-compressor's linearization: gate_up_proj[e][:, ::2].T). */
#ifndef FF_GPTOSS_H
#define FF_GPTOSS_H

#include "qsource.h"

/* Does c hold gpt-oss's bf16 fused experts (config model_type gpt_oss, a
 * 3-D experts.gate_up_proj or experts.down_proj)? */
int gptoss_bf16_layout(const ckpt *c);
/* The view entries stored tensor t becomes: 0 for a *_scales (its
 * *_blocks reads it), E or 2E for an expert blocks or bias tensor, -1 for
 * any other tensor (one entry, as stored). */
int64_t gptoss_entries(const ckpt *c, const ckpt_tensor *t);
/* Fills t's entries from v->ck.tensors[k] on (names malloc'd), checking
 * dtypes and shapes; an error names the tensor. */
int gptoss_fill(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, ff_err *e);
/* Rows [r0, r0 + n) of a transposed view tensor t (the bf16 layout's
 * experts) into their place in out (numel bf16): the pool's share of one. */
void gptoss_transpose_rows(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r0, uint64_t n,
                           uint16_t *out);
/* View tensor t (an entry gptoss_fill made) into out (numel bf16). */
int gptoss_decode(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint16_t *out, ff_err *e);

#endif
