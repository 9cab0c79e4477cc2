/* merge: a PEFT LoRA adapter merged into a bf16 checkpoint, W' = W + scale *
 * (B @ A) in f32 rounded once to bf16, behind the gates quantize --lora runs
 * (inert adapter, modules outside the quantized set, unmatched pairs). */
#ifndef FF_MERGE_H
#define FF_MERGE_H

#include <stdint.h>
#include <stdio.h>

#include "doctor.h"
#include "ff_err.h"

typedef struct merge_opts {
    const char *base_dir, *adapter_dir, *out_dir;
    const char *chat_template;    /* written as the output's chat_template.jinja; may be NULL */
    doctor_schema schema;         /* convert the config schema as doctor --schema does */
    int allow_ignored;            /* merge modules the recipe leaves unquantized */
    int force;                    /* replace an existing OUT */
    uint64_t shard_size;
} merge_opts;

/* report: where the summary goes on success (NULL: nowhere). */
int merge_run(const merge_opts *o, FILE *report, ff_err *e);

#endif
