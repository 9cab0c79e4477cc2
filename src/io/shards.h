/* Output shards: tensors assigned to files of about shard_size bytes in plan
 * order, headers written first, data written at the promised offsets, and the
 * HF index (model.safetensors.index.json) when there is more than one file. */
#ifndef FF_SHARDS_H
#define FF_SHARDS_H

#include <stdatomic.h>

#include "safetensors.h"

typedef struct shard_set {
    size_t nshards;
    int *fds;
    char **names;           /* file names within the folder */
    char **paths;
    const st_out *outs;
    size_t nouts;
    size_t *out_shard;
    uint64_t *out_abs;      /* absolute file offset of each tensor's data */
    uint64_t hole_bytes;    /* landed by shards_holes, not written */
    uint64_t total_size;    /* tensor bytes, for the index's metadata */
    uint64_t *shard_bytes;  /* each file's size: header and data */
    atomic_uint_fast64_t *landed;   /* bytes written to each file so far */
} shard_set;

int shards_open(shard_set *s, const st_out *outs, size_t n, uint64_t shard_size, const char *dir,
                ff_err *e);
/* Allocates every shard's blocks before any tensor is written, for a caller
 * that writes every byte: a full disk is refused at once instead of after
 * minutes of work, and ext4 takes buffered writes into allocated extents with
 * less work per block than delayed allocation. The file is its full size
 * from here on; shards_close checks, as for every shard set, that every byte
 * was written (a lost piece would otherwise read as zeros). */
int shards_reserve(shard_set *s, ff_err *e);
int shards_write(const shard_set *s, size_t out, const void *buf, uint64_t n, ff_err *e);
/* Bytes [at, at + n) of tensor out. Every write below is safe from several
 * threads at once for disjoint ranges. */
int shards_write_part(const shard_set *s, size_t out, uint64_t at, const void *buf, uint64_t n, ff_err *e);
/* Where bytes [at, at + n) of tensor out lie: their shard and file offset;
 * FF_EIO when the range runs past the tensor (a bug of the caller's). */
int shards_place(const shard_set *s, size_t out, uint64_t at, uint64_t n, size_t *shard, uint64_t *off, ff_err *e);
/* Writes the n buffers back to back at off in shard k (one pwritev a run
 * of adjacent pieces). Safe from several threads for disjoint ranges. */
int shards_pwritev(const shard_set *s, size_t k, uint64_t off, struct iovec *iov, int n, ff_err *e);
/* n bytes at off in shard k (a caller that combines small tensors itself). */
int shards_pwrite(const shard_set *s, size_t k, uint64_t off, const void *buf, uint64_t n, ff_err *e);
/* Each shard extended to its full size without writing (a hole reads as
 * zeros), its bytes counted as landed. */
int shards_holes(shard_set *s, ff_err *e);
/* Refuses a shard with bytes never written (or written twice): a hole or a
 * short file would read as zeros or fail in a loader, far from the cause. */
int shards_close(shard_set *s, const char *dir, ff_err *e);
/* Bytes written so far, headers included, holes not. */
uint64_t shards_bytes_written(const shard_set *s);
void shards_free(shard_set *s);

#endif
