/* A Hugging Face checkpoint folder: config.json plus one or more safetensors
 * shards (with or without model.safetensors.index.json), seen as one table of
 * tensors. Opening reads headers only; data is mapped, not read. */
#ifndef FF_CHECKPOINT_H
#define FF_CHECKPOINT_H

#include <jansson.h>

#include "ff_err.h"
#include "safetensors.h"

typedef struct ckpt_tensor {
    const st_tensor *st;    /* name, dtype, shape, offsets */
    int file;               /* index into ckpt.files */
} ckpt_tensor;

typedef struct ckpt {
    char *dir;
    json_t *config;         /* config.json, or NULL when the folder has none */
    st_file *files;
    size_t nfiles;
    ckpt_tensor *tensors;   /* shard order, then header order */
    size_t ntensors;
    size_t *hash;           /* open addressing over tensors, for ckpt_find */
    uint64_t *hash_tag;     /* each slot's full hash: a probe that misses compares
                             * 8 bytes, not a name in another cache line */
    size_t hash_cap;
    uint64_t hash_key[2];   /* SipHash key drawn per checkpoint: names come
                             * from the file (src/base/siphash.h) */
    uint64_t total_bytes;   /* sum of tensor bytes */
} ckpt;

/* need_config: refuse a folder without config.json. */
/* On failure c holds nothing (ckpt_close is then a no-op). */
int ckpt_open(ckpt *c, const char *dir, int need_config, ff_err *e);
/* The same with every shard's header read and no shard mapped: ckpt_data
 * must not be used. Commands that read only names, dtypes and shapes
 * (inspect, plan, fit, doctor, diff) open so, and a shard larger than the
 * address space left to the process (`ulimit -v`) still opens. */
/* A checkpoint held in memory: config.json's text (NULL: none) and one
 * shard's bytes (borrowed: they must outlive c), named name in messages.
 * The fuzzers read through it without writing a file per input. */
int ckpt_open_memory(ckpt *c, const char *name, const char *config, size_t config_len, const uint8_t *shard,
                     size_t shard_len, ff_err *e);
int ckpt_open_headers(ckpt *c, const char *dir, int need_config, ff_err *e);
/* The one line for a checkpoint argument that is no folder: missing, a GGUF
 * file (with the transformers call that converts it), another file. */
int ckpt_not_a_folder(const char *path, ff_err *e);
void ckpt_close(ckpt *c);
const ckpt_tensor *ckpt_find(const ckpt *c, const char *name);
/* The tensor named stem's first stem_len bytes followed by suffix: names
 * built from another ("<mod>" + ".weight_packed") are looked up whatever
 * their length, with no fixed buffer to outgrow. */
const ckpt_tensor *ckpt_find_join(const ckpt *c, const char *stem, size_t stem_len, const char *suffix);
static inline const uint8_t *ckpt_data(const ckpt *c, const ckpt_tensor *t)
{
    return st_data(&c->files[t->file], t->st);
}
static inline const char *ckpt_path(const ckpt *c, const ckpt_tensor *t)
{
    return c->files[t->file].path;
}
/* Copies every file of in_dir that is not weights (shards, index) or a
 * doctor backup into out_dir: tokenizer, chat template, generation and
 * processor configs travel with every checkpoint fp4forge writes. config.json
 * too when with_config (callers that rewrite it pass 0). */
int ckpt_copy_aux(const char *in_dir, const char *out_dir, int with_config, ff_err *e);
/* A second table over tensors that live in c's files (a decoded view of a
 * quantized source): view->tensors (malloc'd, view->ntensors of them) are
 * set by the caller; view borrows c's dir, config and files (c must outlive
 * it) and gets its own lookup table. ckpt_view_close frees the tensors and
 * the table, nothing of c. */
int ckpt_view_open(ckpt *view, const ckpt *c, ff_err *e);
void ckpt_view_close(ckpt *view);
/* The text model's config: text_config when present, else the top level. */
const json_t *ckpt_text_config(const ckpt *c);

#endif
