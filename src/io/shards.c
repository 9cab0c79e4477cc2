#include "shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "jsonio.h"

static size_t assign(shard_set *s, uint64_t shard_size)
{
    size_t shard = 0;
    uint64_t used = 0;
    for (size_t i = 0; i < s->nouts; i++) {
        if (used > 0 && used + s->outs[i].nbytes > shard_size) {
            shard++;
            used = 0;
        }
        s->out_shard[i] = shard;
        used += s->outs[i].nbytes;
        s->total_size += s->outs[i].nbytes;
    }
    return s->nouts ? shard + 1 : 1;
}

int shards_open(shard_set *s, const st_out *outs, size_t n, uint64_t shard_size, const char *dir,
                ff_err *e)
{
    memset(s, 0, sizeof *s);
    s->outs = outs;
    s->nouts = n;
    s->out_shard = calloc(n ? n : 1, sizeof *s->out_shard);
    s->out_abs = calloc(n ? n : 1, sizeof *s->out_abs);
    if (!s->out_shard || !s->out_abs)
        return ff_oom(e, "out of memory");
    s->nshards = assign(s, shard_size ? shard_size : UINT64_MAX);
    s->shard_bytes = calloc(s->nshards, sizeof *s->shard_bytes);
    s->landed = calloc(s->nshards, sizeof *s->landed);
    s->fds = malloc(s->nshards * sizeof *s->fds);
    s->names = calloc(s->nshards, sizeof *s->names);
    s->paths = calloc(s->nshards, sizeof *s->paths);
    st_out *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!s->fds || !s->names || !s->paths || !s->shard_bytes || !s->landed || !tmp) {
        free(tmp);
        return ff_oom(e, "out of memory");
    }
    for (size_t k = 0; k < s->nshards; k++)
        s->fds[k] = -1;
    int rc = FF_OK;
    size_t first = 0;
    for (size_t k = 0; k < s->nshards && rc == FF_OK; k++) {
        char name[64];
        if (s->nshards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, s->nshards);
        s->names[k] = strdup(name);
        s->paths[k] = fs_join(dir, name);
        if (!s->names[k] || !s->paths[k]) {
            rc = ff_oom(e, "%s: out of memory", dir);
            break;
        }
        s->fds[k] = open(s->paths[k], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (s->fds[k] < 0) {
            rc = ff_fail(e, FF_EIO, "%s: cannot create: %s", s->paths[k], strerror(errno));
            break;
        }
        size_t last = first;
        while (last < n && s->out_shard[last] == k)
            last++;
        memcpy(tmp, outs + first, (last - first) * sizeof *tmp);
        uint64_t data_off;
        rc = st_write_header(s->fds[k], s->paths[k], tmp, last - first, &data_off, e);
        s->shard_bytes[k] = data_off;
        for (size_t i = first; i < last; i++) {
            s->out_abs[i] = data_off + tmp[i - first].offset;
            s->shard_bytes[k] += tmp[i - first].nbytes;
        }
        if (!rc) {
            atomic_init(&s->landed[k], data_off);
        }
        first = last;
    }
    free(tmp);
    return rc;
}

/* Bytes are counted as they land, for shards_close's check. */
int shards_pwrite(const shard_set *s, size_t k, uint64_t off, const void *buf, uint64_t n, ff_err *e)
{
    int rc = st_pwrite_all(s->fds[k], s->paths[k], buf, n, off, e);
    if (!rc)
        atomic_fetch_add_explicit(&s->landed[k], n, memory_order_relaxed);
    return rc;
}

int shards_reserve(shard_set *s, ff_err *e)
{
    for (size_t k = 0; k < s->nshards; k++) {
        if (fallocate(s->fds[k], 0, 0, (off_t)s->shard_bytes[k]) == 0)
            continue;
        if (errno == EOPNOTSUPP || errno == ENOSYS)   /* such a file system just goes on */
            continue;
        return ff_fail(e, FF_EIO, "%s: cannot reserve its %llu bytes: %s", s->paths[k],
                       (unsigned long long)s->shard_bytes[k], strerror(errno));
    }
    return FF_OK;
}

int shards_write(const shard_set *s, size_t out, const void *buf, uint64_t n, ff_err *e)
{
    if (n != s->outs[out].nbytes)
        return ff_fail(e, FF_EIO, "internal: tensor %s got %llu bytes, header says %llu", s->outs[out].name,
                       (unsigned long long)n, (unsigned long long)s->outs[out].nbytes);
    return shards_pwrite(s, s->out_shard[out], s->out_abs[out], buf, n, e);
}

int shards_place(const shard_set *s, size_t out, uint64_t at, uint64_t n, size_t *shard, uint64_t *off, ff_err *e)
{
    if (at > s->outs[out].nbytes || n > s->outs[out].nbytes - at)
        return ff_fail(e, FF_EIO, "internal: tensor %s: bytes %llu..%llu past its %llu", s->outs[out].name,
                       (unsigned long long)at, (unsigned long long)(at + n),
                       (unsigned long long)s->outs[out].nbytes);
    *shard = s->out_shard[out];
    *off = s->out_abs[out] + at;
    return FF_OK;
}

int shards_write_part(const shard_set *s, size_t out, uint64_t at, const void *buf, uint64_t n, ff_err *e)
{
    size_t k = 0;
    uint64_t off = 0;   /* set when shards_place succeeds; compilers cannot see it */
    if (shards_place(s, out, at, n, &k, &off, e))
        return e->code;
    return shards_pwrite(s, k, off, buf, n, e);
}

int shards_pwritev(const shard_set *s, size_t k, uint64_t off, struct iovec *iov, int n, ff_err *e)
{
    /* counted first: st_pwritev_all advances the entries a call wrote part of */
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += iov[i].iov_len;
    int rc = st_pwritev_all(s->fds[k], s->paths[k], iov, n, off, e);
    if (!rc)
        atomic_fetch_add_explicit(&s->landed[k], bytes, memory_order_relaxed);
    return rc;
}

/* Every writer's shards, not only reserved ones: a tensor its writer never
 * wrote read back as zeros (inside a shard) or a short file (at its end). */
static int check_landed(const shard_set *s, ff_err *e)
{
    for (size_t k = 0; k < s->nshards; k++) {
        uint64_t got = atomic_load(&s->landed[k]);
        if (got != s->shard_bytes[k])
            return ff_fail(e, FF_EIO, "internal: %s: %llu bytes written of its %llu", s->paths[k],
                           (unsigned long long)got, (unsigned long long)s->shard_bytes[k]);
    }
    return FF_OK;
}

/* Every set checked: jansson drops a key whose value could not be made,
 * and an index missing a tensor reads as a checkpoint without it. */
static int write_index(shard_set *s, const char *dir, ff_err *e)
{
    json_t *wm = json_object();
    for (size_t i = 0; wm && i < s->nouts; i++)
        if (json_object_set_new(wm, s->outs[i].name, json_string(s->names[s->out_shard[i]]))) {
            json_decref(wm);
            wm = NULL;
        }
    json_t *j = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)s->total_size, "weight_map", wm);
    char *p = j ? fs_join(dir, "model.safetensors.index.json") : NULL;
    int rc = p ? jsonio_save(p, j, e) : ff_oom(e, "%s: out of memory building the index", dir);
    free(p);
    json_decref(j);
    return rc;
}

int shards_holes(shard_set *s, ff_err *e)
{
    for (size_t k = 0; k < s->nshards; k++) {
        if (ftruncate(s->fds[k], (off_t)s->shard_bytes[k]) != 0)
            return ff_fail(e, FF_EIO, "%s: cannot size: %s", s->paths[k], strerror(errno));
        s->hole_bytes += s->shard_bytes[k] - atomic_exchange(&s->landed[k], s->shard_bytes[k]);
    }
    return FF_OK;
}

int shards_close(shard_set *s, const char *dir, ff_err *e)
{
    int rc = check_landed(s, e);
    for (size_t k = 0; k < s->nshards; k++) {
        if (s->fds[k] >= 0 && close(s->fds[k]) != 0 && rc == FF_OK)
            rc = ff_fail(e, FF_EIO, "%s: close failed: %s", s->paths[k], strerror(errno));
        s->fds[k] = -1;
    }
    if (rc == FF_OK && s->nshards > 1)
        rc = write_index(s, dir, e);
    return rc;
}

uint64_t shards_bytes_written(const shard_set *s)
{
    uint64_t n = 0;
    for (size_t k = 0; s->landed && k < s->nshards; k++)
        n += atomic_load(&s->landed[k]);
    return n - s->hole_bytes;
}

void shards_free(shard_set *s)
{
    for (size_t k = 0; k < s->nshards; k++) {
        if (s->fds && s->fds[k] >= 0)
            close(s->fds[k]);
        if (s->names)
            free(s->names[k]);
        if (s->paths)
            free(s->paths[k]);
    }
    free(s->fds);
    free(s->names);
    free(s->paths);
    free(s->out_shard);
    free(s->out_abs);
    free(s->shard_bytes);
    free(s->landed);
    memset(s, 0, sizeof *s);
}
