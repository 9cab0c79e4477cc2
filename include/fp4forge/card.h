/* The model card of a quantized output: OUT/README.md in Hugging Face's
 * conventions (YAML front matter the Hub reads: base_model,
 * base_model_relation: quantized, tags, library_name, and the base card's
 * license, pipeline_tag and language), then what the plan
 * quantized and kept, the observer, the tool and version and the serve line,
 * with the base model's own card kept beneath it. */
#ifndef FF_CARD_H
#define FF_CARD_H

#include <stdio.h>

#include "checkpoint.h"
#include "ff_err.h"
#include "plan.h"

typedef struct card_info {
    const char *base_model;  /* "org/name" the base model is on the Hub as, or
                              * NULL: then config.json's _name_or_path when
                              * it is shaped like one, else none */
    const char *base_card;   /* the input's README.md (may be absent), or NULL */
    const char *serve_path;  /* the output as named to quantize, for the
                              * `vllm serve` line, or NULL */
    const char *observer;    /* llm-compressor's name of the weight observer
                              * (memoryless_minmax when NULL) */
    const char *model_name;  /* the input as named (its last part is the
                              * title when no base model or _name_or_path
                              * names the model), or NULL */
    const char *hub_id;      /* "org/name" the output will be uploaded as
                              * (a second serve line), or NULL */
    char *note;              /* out, or NULL: note_size bytes that get one
                              * line when the base card is not carried as it
                              * is (over 16 MiB, NUL bytes), else "" */
    size_t note_size;
} card_info;

/* Writes the card for plan p of checkpoint c on out. */
int card_print(const plan *p, const ckpt *c, const card_info *ci, FILE *out, ff_err *e);
/* Writes it as out_dir/README.md (beside and renamed over, so a reader sees
 * the old file or the whole new one). */
int card_write(const char *out_dir, const plan *p, const ckpt *c, const card_info *ci, ff_err *e);

#endif
