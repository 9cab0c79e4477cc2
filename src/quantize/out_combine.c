/* Small outputs gathered into one write while adjacent in their shard, and
 * the pool threads' write failures collected for the calling thread. */
#include "quantize_int.h"

#include <string.h>

int qz_wc_flush(wcomb *w, shard_set *ss, ff_err *e)
{
    if (!w->len)
        return FF_OK;
    int rc = shards_pwrite(ss, w->shard, w->off, w->buf, w->len, e);
    if (!rc)
        ss->bytes_written += w->len;
    w->len = 0;
    return rc;
}

int qz_out_write(wcomb *w, shard_set *ss, size_t out, const void *buf, uint64_t n, ff_err *e)
{
    if (n >= WC_DIRECT || !w->buf || n != ss->outs[out].nbytes)
        return shards_write(ss, out, buf, n, e);   /* also reports a size mismatch */
    size_t k = ss->out_shard[out];
    uint64_t off = ss->out_abs[out];
    if (w->len && (k != w->shard || off != w->off + w->len || w->len + n > WC_CAP)) {
        int rc = qz_wc_flush(w, ss, e);
        if (rc)
            return rc;
    }
    if (!w->len) {
        w->shard = k;
        w->off = off;
    }
    memcpy(w->buf + w->len, buf, n);
    w->len += n;
    return FF_OK;
}

/* The first write a pool thread failed, as the run's error. */
int qz_slots_error(io_state *io, ff_err *e)
{
    for (int w = 0; w < io->nslots; w++)
        if (io->slots[w].failed) {
            *e = io->slots[w].err;
            return e->code;
        }
    return FF_OK;
}
