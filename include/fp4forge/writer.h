/* The one checkpoint writer: quantize, dequantize, merge and synth all write
 * through it. It stages everything in OUT.partial-PID beside OUT, lays the
 * tensors out in shards (headers first, then data at the promised offsets),
 * writes the index, config.json and the auxiliary files, and renames the
 * staging folder into place only on commit; freeing an uncommitted writer
 * removes what it staged, so a failure never leaves a half checkpoint. */
#ifndef FF_WRITER_H
#define FF_WRITER_H

#include <jansson.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ff_err.h"
#include "safetensors.h"

typedef struct ckpt_writer ckpt_writer;

/* Refuses an existing OUT unless force, an OUT that is, contains or lies
 * inside one of `inputs` (NULL-terminated, may be NULL), and inputs whose
 * files are not their own regular files (input_files_check: a link leaving
 * the input, a FIFO), before anything is written. NULL with e filled on
 * failure. */
ckpt_writer *ckpt_writer_begin(const char *out_dir, int force, const char *const *inputs, ff_err *e);
/* What ckpt_writer_begin would refuse, checked without writing anything. */
int ckpt_writer_check(const char *out_dir, int force, const char *const *inputs, ff_err *e);
/* Removes what this process stages for out_dir (the staging folder and a
 * doctor shadow beside it): for a program interrupted by a signal. Not
 * async-signal-safe: call it from a thread that waited for the signal. */
void ckpt_writer_discard(const char *out_dir);
/* The staging folder: files written here travel with the checkpoint. */
const char *ckpt_writer_dir(const ckpt_writer *w);
/* Assigns the tensors to shards of about shard_size bytes (a tensor never
 * splits) and writes the headers. outs must outlive the writer. */
int ckpt_writer_layout(ckpt_writer *w, const st_out *outs, size_t n, uint64_t shard_size, ff_err *e);
/* Writes tensor `out`'s data whole (n must be its size). */
int ckpt_writer_put(ckpt_writer *w, size_t out, const void *buf, uint64_t n, ff_err *e);
/* Writes bytes [at, at + n) of tensor `out` at their place in its shard:
 * a tensor in pieces, in any order, each once (a writer that streams keeps
 * one piece in memory, not the tensor). This and the two calls below are
 * safe from several threads at once for disjoint ranges. */
int ckpt_writer_put_at(ckpt_writer *w, size_t out, uint64_t at, const void *buf, uint64_t n, ff_err *e);
/* Where a piece of a tensor lies in the output. A writer that gathers
 * pieces (quantize's output queue, its small scales) compares places and
 * writes a run of adjacent ones, of several tensors, with one call. */
typedef struct ckpt_place {
    size_t shard;
    uint64_t off;   /* in the shard's file */
} ckpt_place;
/* The place of bytes [at, at + n) of tensor `out`; FF_EIO naming the
 * tensor when the range runs past it (the caller's bug). */
int ckpt_writer_locate(const ckpt_writer *w, size_t out, uint64_t at, uint64_t n, ckpt_place *p, ff_err *e);
/* The n buffers back to back from place p on (pieces located, adjacent in
 * one shard). Entries of iov may be advanced past what a short write took. */
int ckpt_writer_writev(ckpt_writer *w, ckpt_place p, struct iovec *iov, int n, ff_err *e);
/* Allocates every shard's blocks now, for a caller that writes every byte:
 * a full disk is refused before minutes of work, and ext4 takes buffered
 * writes into allocated extents with less work per block. */
int ckpt_writer_reserve(ckpt_writer *w, ff_err *e);
/* Tensor out's name as laid out (for a caller's messages). */
const char *ckpt_writer_tensor_name(const ckpt_writer *w, size_t out);
/* Every tensor not written yet is left a hole that reads as zeros, without
 * writing it (synth --sparse: real-size headers and files, no disk used). */
int ckpt_writer_holes(ckpt_writer *w, ff_err *e);
/* Closes the shards (checking every byte promised was written), writes the
 * index, config.json (when config is not NULL) and copies the non-weight
 * files of aux_from (when not NULL; its config.json only if aux_config). */
int ckpt_writer_close(ckpt_writer *w, const json_t *config, const char *aux_from, int aux_config, ff_err *e);
/* Renames the staging folder to OUT. */
int ckpt_writer_commit(ckpt_writer *w, ff_err *e);
uint64_t ckpt_writer_bytes(const ckpt_writer *w);
size_t ckpt_writer_shard_count(const ckpt_writer *w);
/* Removes the staging folder unless committed, and frees. NULL is fine. */
void ckpt_writer_free(ckpt_writer *w);

#endif
