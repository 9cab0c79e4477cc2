/* safetensors files: header parsed and validated up front (bounds, overlap,
 * dtype x shape == bytes), data mapped read-only so nothing is copied until a
 * tensor is used. Writing is split: the header is laid out from the list of
 * tensors first, then data is written at the offsets it promised. */
#ifndef FF_SAFETENSORS_H
#define FF_SAFETENSORS_H

#include <jansson.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/uio.h>

#include "dtype.h"
#include "ff_err.h"

#define ST_MAX_DIMS 8
/* A header larger than this is refused as insane (the Rust reader uses 100 MB). */
#define ST_MAX_HEADER (100u << 20)

typedef struct st_tensor {
    char *name;
    ff_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   /* relative to the data section */
} st_tensor;

typedef struct st_file {
    char *path;
    int fd;
    uint64_t file_size;
    uint64_t data_off;      /* 8 + header length */
    const uint8_t *map;     /* whole file, PROT_READ; NULL when empty */
    st_tensor *tensors;     /* in header order */
    size_t ntensors;
    json_t *metadata;       /* "__metadata__" or NULL */
    int borrowed;           /* map is the caller's memory (st_open_memory) */
} st_file;

/* On failure f holds nothing (st_close is then a no-op). */
int st_open(st_file *f, const char *path, ff_err *e);
/* The same, reading the header only: f->map stays NULL and st_data must
 * not be used. For commands that read names, dtypes and shapes: mapping a
 * shard takes its size in address space, which `ulimit -v` may not allow. */
int st_open_header(st_file *f, const char *path, ff_err *e);
/* A safetensors file held in memory (data, size bytes; borrowed, it must
 * outlive f), read as st_open reads a file: the fuzzers parse without a
 * file per input, and a reader can hand over bytes it already holds. name
 * is what messages call it. */
int st_open_memory(st_file *f, const char *name, const uint8_t *data, uint64_t size, ff_err *e);
void st_close(st_file *f);
/* Drops our mapping of [p, p + bytes) of a file's mapping (f->map) once it
 * is read: the page cache keeps the pages, so reading them again maps them
 * again, and RSS holds what is in use instead of all that was read.
 * The range is taken in whole 2 MB blocks of the mapping, both ends rounded
 * down: the input is mapped in 2 MB folios, one page-table entry each, and
 * dropping part of one splits that entry into 512 (1,443 and 1,465 splits
 * in two runs over the 2.42 GB checkpoint's ~1,156 folios when the pages
 * asked were dropped). Rounding down assumes what lies before p in its
 * block is read, as it is when a file is read from its start; a block still
 * in use is mapped again on its next read, which costs time, not bytes.
 * What the end leaves is dropped by the next call or with the mapping.
 * p must lie in a mapping st_open made: those start on a 2 MB boundary, so
 * the rounding never leaves the file's mapping. */
void st_map_drop(const uint8_t *p, uint64_t bytes);
/* Maps bytes [p, p + bytes) of a mapping in one call (MADV_POPULATE_READ),
 * so a write() from them does not fault page by page inside the kernel;
 * -1 where the kernel cannot (before Linux 5.14) or the pages are not there. */
int st_map_populate(const uint8_t *p, uint64_t bytes);
/* A consumed tensor's bytes dropped from f's mapping; nothing for a file read
 * from memory (st_open_memory), whose bytes are the caller's: MADV_DONTNEED
 * there would zero them, and the 2 MB rounding would reach memory before
 * them (a fuzzer found it overwriting its input). */
void st_drop_tensor(const st_file *f, const st_tensor *t);
static inline const uint8_t *st_data(const st_file *f, const st_tensor *t)
{
    return f->map + f->data_off + t->begin;
}
uint64_t st_numel(const st_tensor *t);
/* "[a, b, c]" into buf. */
const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);

/* One tensor the writer will store. offset is filled by st_layout. */
typedef struct st_out {
    const char *name;
    ff_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;        /* relative to the data section */
} st_out;

/* Builds the header for these tensors in this order, writes it to fd at 0 and
 * returns where the data section starts. */
int st_write_header(int fd, const char *path, st_out *ts, size_t n, uint64_t *data_off,
                    ff_err *e);
/* pwritev that finishes or fails: the n buffers back to back at off (iov
 * is consumed). */
int st_pwritev_all(int fd, const char *path, struct iovec *iov, int n, uint64_t off, ff_err *e);
/* pwrite that finishes or fails. */
int st_pwrite_all(int fd, const char *path, const void *buf, size_t n, uint64_t off,
                  ff_err *e);

#endif
