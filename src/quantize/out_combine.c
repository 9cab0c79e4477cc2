/* Small outputs gathered into one write while adjacent in their shard, and
 * the pool threads' write failures collected for the calling thread. */
#include "quantize_int.h"

#include <string.h>

int qz_wc_flush(wcomb *w, ckpt_writer *wr, ff_err *e)
{
    if (!w->len)
        return FF_OK;
    struct iovec iov = {.iov_base = w->buf, .iov_len = w->len};
    int rc = ckpt_writer_writev(wr, w->at, &iov, 1, e);
    w->len = 0;
    return rc;
}

int qz_out_write(wcomb *w, ckpt_writer *wr, size_t out, const void *buf, uint64_t n, ff_err *e)
{
    if (n >= WC_DIRECT || !w->buf)
        return ckpt_writer_put(wr, out, buf, n, e);   /* also reports a size mismatch */
    ckpt_place at;
    if (ckpt_writer_locate(wr, out, 0, n, &at, e))
        return e->code;
    if (w->len && (at.shard != w->at.shard || at.off != w->at.off + w->len || w->len + n > WC_CAP)) {
        int rc = qz_wc_flush(w, wr, e);
        if (rc)
            return rc;
    }
    if (!w->len)
        w->at = at;
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
