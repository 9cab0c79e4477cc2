/* A progress bar on stderr (bytes, items, rate, ETA), drawn at most five
 * times a second and only when asked (the CLI asks when stderr is a TTY). */
#ifndef FF_PROGRESS_H
#define FF_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct progress {
    int on;
    uint64_t total, done;
    double start, last;
} progress;

void progress_begin(progress *p, uint64_t total, int on);
void progress_add(progress *p, uint64_t bytes, size_t item, size_t items);
void progress_end(progress *p);

#endif
