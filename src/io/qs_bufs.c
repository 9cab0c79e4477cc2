#include "qs_bufs.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct qs_buf {
    uint16_t *p;
    size_t cap;
    int busy;
} qs_buf;

struct qs_bufs {
    pthread_mutex_t mu;   /* kept weights and units may decode on different threads */
    qs_buf b[QS_BUFS];
};

qs_bufs *qs_bufs_new(void)
{
    qs_bufs *b = calloc(1, sizeof *b);
    if (b && pthread_mutex_init(&b->mu, NULL) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

void qs_bufs_free(qs_bufs *b)
{
    if (!b)
        return;
    for (int i = 0; i < QS_BUFS; i++)
        if (!b->b[i].busy)   /* one still out is its holder's (who may have free()d it) */
            free(b->b[i].p);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The idle slot to serve bytes from: the smallest that fits, else one to
 * refill: the largest idle one too small (its memory freed first), an
 * empty one only when none is idle, so the slots in use stay as many as
 * the copies ever held at once; -1 when every slot is busy. */
static int pick(const qs_bufs *b, size_t bytes)
{
    int fit = -1, refill = -1;
    for (int i = 0; i < QS_BUFS; i++) {
        const qs_buf *s = &b->b[i];
        if (s->busy)
            continue;
        if (s->p && s->cap >= bytes && (fit < 0 || s->cap < b->b[fit].cap))
            fit = i;
        else if (refill < 0 || (s->p && (!b->b[refill].p || s->cap > b->b[refill].cap)))
            refill = i;
    }
    return fit >= 0 ? fit : refill;
}

uint16_t *qs_bufs_take(qs_bufs *b, size_t bytes)
{
    bytes = bytes ? bytes : 1;
    if (!b)
        return malloc(bytes);
    pthread_mutex_lock(&b->mu);
    int i = pick(b, bytes);
    qs_buf *s = i >= 0 ? &b->b[i] : NULL;
    if (s && (!s->p || s->cap < bytes)) {
        free(s->p);
        s->p = malloc(bytes);
        s->cap = s->p ? bytes : 0;
    }
    uint16_t *p = s ? s->p : NULL;
    if (p)
        s->busy = 1;
    pthread_mutex_unlock(&b->mu);
    return s ? p : malloc(bytes);
}

int qs_bufs_give(qs_bufs *b, uint16_t *p)
{
    int mine = 0;
    if (!b)
        return 0;
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < QS_BUFS && !mine; i++)
        if (b->b[i].busy && b->b[i].p == p) {
            b->b[i].busy = 0;
            mine = 1;
        }
    pthread_mutex_unlock(&b->mu);
    return mine;
}
