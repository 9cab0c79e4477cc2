#include "progress.h"

#include <stdio.h>
#include <time.h>

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_begin(progress *p, uint64_t total, int on)
{
    p->on = on;
    p->total = total ? total : 1;
    p->done = 0;
    p->start = p->last = mono();
}

void progress_add(progress *p, uint64_t bytes, size_t item, size_t items)
{
    p->done += bytes;
    if (!p->on)
        return;
    double t = mono();
    if (t - p->last < 0.2 && item != items)
        return;
    p->last = t;
    double frac = (double)p->done / (double)p->total, el = t - p->start;
    double rate = el > 0 ? (double)p->done / el : 0;
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %5.1f%% %.2f/%.2f GB %zu/%zu tensors %.0f MB/s ETA %.0fs ", bar, frac * 100,
            (double)p->done / 1e9, (double)p->total / 1e9, item, items, rate / 1e6, eta);
    fflush(stderr);
}

void progress_end(progress *p)
{
    if (p->on)
        fputc('\n', stderr);
}
