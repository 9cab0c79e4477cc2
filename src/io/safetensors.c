#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels answer EINVAL */
#endif

#include "fsutil.h"
#include "jsonio.h"

uint64_t st_numel(const st_tensor *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (uint64_t)t->shape[i];
    return n;
}

const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
    return buf;
}

static int parse_entry(st_file *f, const char *name, json_t *v, st_tensor *t,
                       uint64_t data_len, ff_err *e)
{
    const char *p = f->path;
    if (!json_is_object(v))
        return ff_fail(e, FF_EIO, "%s: tensor %s: header entry is not an object", p, name);
    const char *dt = jsonio_str(v, "dtype", NULL);
    json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
    if (!dt)
        return ff_fail(e, FF_EIO, "%s: tensor %s: no dtype", p, name);
    t->dtype = ff_dtype_parse(dt);
    if (t->dtype == FF_DT_INVALID)
        return ff_fail(e, FF_EIO, "%s: tensor %s: unknown dtype %s", p, name, dt);
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS)
        return ff_fail(e, FF_EIO, "%s: tensor %s: bad shape", p, name);
    t->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return ff_fail(e, FF_EIO, "%s: tensor %s: bad shape", p, name);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && numel > UINT64_MAX / (uint64_t)t->shape[i])
            return ff_fail(e, FF_EIO, "%s: tensor %s: shape overflows", p, name);
        numel *= (uint64_t)t->shape[i];
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
        return ff_fail(e, FF_EIO, "%s: tensor %s: bad data_offsets", p, name);
    json_int_t b = json_integer_value(json_array_get(offs, 0));
    json_int_t en = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || en < b)
        return ff_fail(e, FF_EIO, "%s: tensor %s: data_offsets [%lld, %lld] are reversed", p,
                       name, (long long)b, (long long)en);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (t->end > data_len)
        return ff_fail(e, FF_EIO,
                       "%s: tensor %s: data ends at %llu but the file has only %llu data bytes "
                       "(truncated file or lying header)",
                       p, name, (unsigned long long)t->end, (unsigned long long)data_len);
    if (numel > UINT64_MAX / ff_dtype_size(t->dtype))
        return ff_fail(e, FF_EIO, "%s: tensor %s: %llu %s elements overflow a 64-bit byte count", p, name,
                       (unsigned long long)numel, dt);
    uint64_t want = numel * ff_dtype_size(t->dtype);
    if (t->end - t->begin != want)
        return ff_fail(e, FF_EIO, "%s: tensor %s: %s x %llu elements needs %llu bytes, header says %llu",
                       p, name, dt, (unsigned long long)numel, (unsigned long long)want,
                       (unsigned long long)(t->end - t->begin));
    t->name = strdup(name);
    return t->name ? FF_OK : ff_oom(e, "out of memory");
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Overlapping tensors would alias each other's bytes: refuse them. Sorted
 * neighbours are not enough (an empty tensor between two overlapping ones
 * hides them), so every tensor is compared with the furthest end seen. */
static int check_overlap(st_file *f, ff_err *e)
{
    if (f->ntensors < 2)
        return FF_OK;
    st_tensor **by = malloc(f->ntensors * sizeof *by);
    if (!by)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < f->ntensors; i++)
        by[i] = &f->tensors[i];
    qsort(by, f->ntensors, sizeof *by, cmp_begin);
    int rc = FF_OK;
    const st_tensor *furthest = NULL;
    for (size_t i = 0; i < f->ntensors; i++) {
        if (by[i]->end == by[i]->begin)
            continue;   /* an empty tensor holds no bytes to alias */
        if (furthest && by[i]->begin < furthest->end) {
            rc = ff_fail(e, FF_EIO, "%s: tensor %s overlaps tensor %s", f->path, by[i]->name, furthest->name);
            break;
        }
        if (!furthest || by[i]->end > furthest->end)
            furthest = by[i];
    }
    free(by);
    return rc;
}

/* The header's hlen bytes: in the mapping, or read into *owned when the
 * file is not mapped (a header-only open). NULL with e filled. */
static const char *header_bytes(st_file *f, uint64_t hlen, char **owned, ff_err *e)
{
    *owned = NULL;
    if (f->map)
        return (const char *)f->map + 8;
    char *buf = malloc(hlen ? hlen : 1);
    if (!buf) {
        ff_oom(e, "%s: out of memory reading its header", f->path);
        return NULL;
    }
    for (uint64_t got = 0; got < hlen;) {
        ssize_t r = pread(f->fd, buf + got, hlen - got, (off_t)(8 + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            ff_fail(e, FF_EIO, "%s: cannot read its header: %s", f->path, r ? strerror(errno) : "the file ends early");
            free(buf);
            return NULL;
        }
        got += (uint64_t)r;
    }
    *owned = buf;
    return buf;
}

static int read_header(st_file *f, ff_err *e)
{
    uint8_t lenbuf[8];
    if (f->file_size >= 8 && f->map)
        memcpy(lenbuf, f->map, 8);
    else if (f->file_size < 8 || pread(f->fd, lenbuf, 8, 0) != 8)
        return ff_fail(e, FF_EIO, "%s: too short to be safetensors (%llu bytes)", f->path,
                       (unsigned long long)f->file_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    if (hlen > ST_MAX_HEADER)
        return ff_fail(e, FF_EIO, "%s: header length %llu is not sane", f->path,
                       (unsigned long long)hlen);
    if (hlen > f->file_size - 8)
        return ff_fail(e, FF_EIO, "%s: header length %llu runs past the end of the file (%llu bytes)",
                       f->path, (unsigned long long)hlen, (unsigned long long)f->file_size);
    f->data_off = 8 + hlen;
    char *owned;
    const char *hdr = header_bytes(f, hlen, &owned, e);
    if (!hdr)
        return e ? e->code : FF_EIO;
    char what[4200];
    snprintf(what, sizeof what, "%s: header", f->path);
    json_t *root;
    int rc = jsonio_parse(hdr, hlen, what, &root, e);
    free(owned);
    if (rc)
        return rc;
    size_t n = json_object_size(root);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        json_decref(root);
        return ff_oom(e, "out of memory");
    }
    const char *key;
    json_t *v;
    uint64_t data_len = f->file_size - f->data_off;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            f->metadata = json_incref(v);
            continue;
        }
        rc = parse_entry(f, key, v, &f->tensors[f->ntensors], data_len, e);
        if (rc)
            break;
        f->ntensors++;
    }
    json_decref(root);
    return rc ? rc : check_overlap(f, e);
}

#define FOLIO_ALIGN (2ull << 20)

/* The file mapped at a 2 MB boundary, so page-cache folios of 2 MB can be
 * mapped whole, with one page-table entry (io/prefetch.h says why that
 * matters); the kernel aligns file mappings only on filesystems that ask.
 * Always aligned, or not mapped: st_map_drop rounds down to 2 MB, which
 * from an unaligned base would reach the mapping below. */
static void *map_folio_aligned(int fd, uint64_t size)
{
    uint8_t *span = mmap(NULL, size + FOLIO_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (span == MAP_FAILED)
        return MAP_FAILED;
    uint8_t *at = (uint8_t *)(((uintptr_t)span + FOLIO_ALIGN - 1) & ~(uintptr_t)(FOLIO_ALIGN - 1));
    void *m = mmap(at, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (m == MAP_FAILED) {
        munmap(span, size + FOLIO_ALIGN);
        return m;
    }
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *tail = at + ((size + (uint64_t)pg - 1) & ~(uint64_t)(pg - 1));
    if (at > span)
        munmap(span, (size_t)(at - span));
    if (tail < span + size + FOLIO_ALIGN)
        munmap(tail, (size_t)(span + size + FOLIO_ALIGN - tail));
    return m;
}

void st_map_drop(const uint8_t *p, uint64_t bytes)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(FOLIO_ALIGN - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(FOLIO_ALIGN - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int st_map_populate(const uint8_t *p, uint64_t bytes)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + bytes + pg - 1) & ~(pg - 1);
    return hi > lo && madvise((void *)lo, hi - lo, MADV_POPULATE_READ) != 0 ? -1 : 0;
}

void st_drop_tensor(const st_file *f, const st_tensor *t)
{
    if (f->map && !f->borrowed)
        st_map_drop(st_data(f, t), t->end - t->begin);
}

static int open_and_read(st_file *f, const char *path, int map, ff_err *e)
{
    f->path = strdup(path);
    if (!f->path)
        return ff_oom(e, "out of memory");
    f->fd = fs_open_regular(path, e);   /* a FIFO named by the index would block */
    if (f->fd < 0)
        return e ? e->code : FF_EIO;
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return ff_fail(e, FF_EIO, "%s: cannot stat: %s", path, strerror(errno));
    f->file_size = (uint64_t)st.st_size;
    if (map && f->file_size > 0) {
        void *m = map_folio_aligned(f->fd, f->file_size);
        if (m == MAP_FAILED)
            return ff_fail(e, FF_EIO, "%s: cannot map: %s", path, strerror(errno));
        f->map = m;
    }
    int rc = read_header(f, e);
    /* the map outlives the descriptor: holding one per shard would hit the
     * open-file limit on checkpoints of a thousand shards */
    close(f->fd);
    f->fd = -1;
    return rc;
}

static int open_file(st_file *f, const char *path, int map, ff_err *e)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int rc = open_and_read(f, path, map, e);
    if (rc) /* a refused file holds nothing: callers need not close it */
        st_close(f);
    return rc;
}

int st_open(st_file *f, const char *path, ff_err *e)
{
    return open_file(f, path, 1, e);
}

int st_open_header(st_file *f, const char *path, ff_err *e)
{
    return open_file(f, path, 0, e);
}

int st_open_memory(st_file *f, const char *name, const uint8_t *data, uint64_t size, ff_err *e)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->borrowed = 1;
    f->path = strdup(name);
    f->file_size = size;
    f->map = size ? data : NULL;
    int rc = f->path ? read_header(f, e) : ff_oom(e, "out of memory");
    if (rc)
        st_close(f);
    return rc;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->ntensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->map && !f->borrowed)
        munmap((void *)f->map, f->file_size);
    if (f->fd >= 0)
        close(f->fd);
    json_decref(f->metadata);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* Steps past w written bytes; iov[*i..n) is what is left. */
static void iov_advance(struct iovec *iov, int n, int *i, size_t w)
{
    while (*i < n && w >= iov[*i].iov_len) {
        w -= iov[*i].iov_len;
        (*i)++;
    }
    if (*i < n) {
        iov[*i].iov_base = (uint8_t *)iov[*i].iov_base + w;
        iov[*i].iov_len -= w;
    }
}

/* Each call writes at most this much. A write call of 2 MB or more over a
 * 2 MB boundary of the file gets 2 MB page-cache folios, and on a VM that
 * hands freed memory back to its host (virtio-balloon free page reporting,
 * in 2 MB blocks) each is memory the host must supply again on first touch:
 * `dd` of 925 MB into a reserved file took 5.4-6.7 s in 4 MB writes and
 * 0.13-0.15 s in 1 MB ones on this project's 2-core VM (docs/bench.md). */
#define WRITE_CALL_MAX (1u << 20)

/* How many of iov[i..n) one call takes, the last cut so the call writes at
 * most WRITE_CALL_MAX; *cut_len: that entry's length before the cut, or 0. */
static int take_call(struct iovec *iov, int n, int i, size_t *cut_len)
{
    size_t total = 0;
    int k = i;
    while (k < n && total + iov[k].iov_len <= WRITE_CALL_MAX)
        total += iov[k++].iov_len;
    *cut_len = 0;
    if (k < n && total < WRITE_CALL_MAX) {
        *cut_len = iov[k].iov_len;
        iov[k++].iov_len = WRITE_CALL_MAX - total;
    }
    return k - i;
}

int st_pwritev_all(int fd, const char *path, struct iovec *iov, int n, uint64_t off, ff_err *e)
{
    int i = 0;
    iov_advance(iov, n, &i, 0);   /* past leading empty buffers */
    while (i < n) {
        size_t cut_len;
        int m = take_call(iov, n, i, &cut_len);
        ssize_t w = pwritev(fd, iov + i, m, (off_t)off);
        if (cut_len)
            iov[i + m - 1].iov_len = cut_len;
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ff_fail(e, FF_EIO, "%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
        off += (uint64_t)w;
        iov_advance(iov, n, &i, (size_t)w);
    }
    return FF_OK;
}

int st_pwrite_all(int fd, const char *path, const void *buf, size_t n, uint64_t off, ff_err *e)
{
    struct iovec one = {.iov_base = (void *)buf, .iov_len = n};
    return st_pwritev_all(fd, path, &one, 1, off, e);
}

/* One tensor's header entry; NULL when any allocation failed (jansson drops
 * a key whose value could not be made: the header would lack the tensor). */
static json_t *header_entry(const st_out *t, uint64_t off)
{
    json_t *shape = json_array();
    for (int d = 0; shape && d < t->ndim; d++)
        if (json_array_append_new(shape, json_integer(t->shape[d]))) {
            json_decref(shape);
            shape = NULL;
        }
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", ff_dtype_name(t->dtype), "shape", shape, "data_offsets",
                     (json_int_t)off, (json_int_t)(off + t->nbytes));
}

int st_write_header(int fd, const char *path, st_out *ts, size_t n, uint64_t *data_off, ff_err *e)
{
    json_t *root = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
    uint64_t off = 0;
    for (size_t i = 0; root && i < n; i++) {
        ts[i].offset = off;
        if (json_object_set_new(root, ts[i].name, header_entry(&ts[i], off))) {
            json_decref(root);
            root = NULL;
        }
        off += ts[i].nbytes;
    }
    if (!root)
        return ff_oom(e, "%s: out of memory building the header", path);
    char *s = jsonio_dumps_checked(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return ff_oom(e, "%s: out of memory building the header", path);
    size_t len = strlen(s);
    /* Pad with spaces to 8 bytes so the data section stays aligned, as the
     * reference writer does. */
    size_t padded = (len + 7) & ~(size_t)7;
    uint8_t *buf = malloc(8 + padded);
    if (!buf) {
        free(s);
        return ff_oom(e, "out of memory");
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, s, len);
    memset(buf + 8 + len, ' ', padded - len);
    free(s);
    int rc = st_pwrite_all(fd, path, buf, 8 + padded, 0, e);
    free(buf);
    *data_off = 8 + padded;
    return rc;
}
