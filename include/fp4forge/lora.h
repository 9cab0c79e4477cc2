/* PEFT LoRA adapters: read adapter_config.json + adapter_model.safetensors,
 * bind every lora_A/lora_B pair to a base Linear, refuse what would ship a
 * base-identical or mis-targeted "tune" (the gates), and merge
 * W' = W + scale * (B @ A) in f32, rounded once to the base dtype. The same
 * merged bytes feed `merge` (written out) and `quantize --lora` (quantized in
 * the same pass through the executor's quant_source hook). */
#ifndef FF_LORA_H
#define FF_LORA_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "checkpoint.h"
#include "ff_err.h"
#include "plan.h"
#include "quantize.h"

typedef struct lora_module {
    char *module;               /* base module, e.g. model.layers.0.self_attn.q_proj */
    const ckpt_tensor *a, *b;   /* lora_A [r, in], lora_B [out, r] in the adapter */
    const ckpt_tensor *base;    /* <module>.weight in the base (set by lora_bind) */
    int64_t r;                  /* rank (rank_pattern or r; equals A's rows) */
    double alpha;               /* alpha_pattern or lora_alpha */
    float scale;                /* alpha / r, or alpha / sqrt(r) with use_rslora */
    uint64_t b_nonzero;         /* non-zero entries of lora_B */
    double b_norm;              /* Frobenius norm of lora_B */
    uint64_t changed;           /* merged elements that differ from the base */
    float max_delta;            /* largest |scale * (B @ A)| */
    int merged;                 /* produced once by the pass */
} lora_module;

typedef struct lora_adapter {
    char *dir;
    json_t *config;             /* adapter_config.json */
    ckpt ck;                    /* adapter_model.safetensors */
    int64_t r;
    double alpha;
    int rslora, fan_in_fan_out;
    const ckpt *base;           /* set by lora_bind */
    lora_module *mods;          /* sorted by module name */
    size_t nmods;
    size_t ntensors;            /* LoRA tensors in the file (2 per module) */
    /* gate figures */
    size_t b_live;              /* modules whose lora_B has a non-zero entry */
    double b_median_norm;
    uint64_t merged_elems, changed_elems;
    size_t nmerged;
    struct ff_pool *pool;       /* the merge's threads, made on first use (lora_close ends them) */
    void *spare;                /* a merged tensor's buffer given back (lora_give_back) */
    uint64_t spare_bytes;
} lora_adapter;

/* Element i of an adapter or base tensor as f32. Safetensors does not
 * promise aligned data, so f32 is read through memcpy. */
float lora_load(const void *p, ff_dtype t, uint64_t i);

/* Reads and validates the adapter folder: refuses DoRA, modules_to_save,
 * embedding LoRA, bias training, target_parameters and unknown tensors;
 * pairs lora_A with lora_B and resolves each module's r, alpha and scale. */
/* On failure l holds nothing (lora_close is then a no-op). */
int lora_open(lora_adapter *l, const char *dir, ff_err *e);
void lora_close(lora_adapter *l);

/* Resolves rank_pattern / alpha_pattern for a module (PEFT's
 * get_pattern_key: the first key K with module matching (.*\.)?(K)$). */
int lora_pattern_lookup(const json_t *patterns, const char *module, double *val);

/* The gates that run before the pass (each error names the module):
 *  - every adapter pair has a base Linear <module>.weight of matching shape;
 *  - every module is in the plan's quantized set (not vision, router, or
 *    anything the recipe ignores) unless allow_ignored;
 *  - no lora_B is all zeros (an inert adapter). */
int lora_bind(lora_adapter *l, const ckpt *base, const plan *p, int allow_ignored, ff_err *e);

/* Merges one module: out (same dtype and shape as the base tensor) gets
 * round(W + scale * B @ A) computed in f32; counts elements that changed. */
int lora_merge_module(const lora_adapter *l, const lora_module *m, const void *w, void *out,
                      uint64_t *changed, float *max_delta, ff_err *e);

/* The pass's producer: for a base tensor an adapter module targets, *buf
 * gets a malloc'd merged copy (caller frees, or gives it back); NULL for any
 * other tensor. Fails when a module is produced twice or its merge changes
 * nothing. */
int lora_produce(lora_adapter *l, const ckpt_tensor *t, void **buf, ff_err *e);
/* A buffer lora_produce gave (bytes long; NULL: nothing), once written: the
 * next merge reuses it. Fresh pages cost a fault and a zeroing each (a third
 * of a merge's time on a 2.4 GB model). */
void lora_give_back(lora_adapter *l, void *buf, uint64_t bytes);
/* After the pass: the number merged must equal the number in the adapter. */
int lora_finish(lora_adapter *l, ff_err *e);

/* A quant_source over lora_produce / lora_finish, for quantize --lora. */
void lora_quant_source(lora_adapter *l, quant_source *qs);

/* One paragraph of gate figures (pairs, live lora_B, median norm, changed). */
void lora_print_summary(const lora_adapter *l, FILE *out);

#endif
