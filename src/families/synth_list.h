/* What a family's synthetic-checkpoint maker fills: the tensors in the order
 * the real library saves them, with how each is initialised. */
#ifndef FF_SYNTH_LIST_H
#define FF_SYNTH_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "ff_err.h"

typedef enum { SYNTH_NORMAL, SYNTH_ONES } synth_init;

typedef struct synth_tensor {
    char name[160];
    int ndim;
    int64_t shape[3];
    synth_init init;      /* weights ~ N(0, 0.02); norms ~ 1 */
} synth_tensor;

typedef struct synth_list {
    synth_tensor *t;
    size_t n, cap;
    int oom;              /* an add failed: the maker reports it */
} synth_list;

void synth_add(synth_list *l, synth_init k, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* One small text file (an aux file of the checkpoint). */
int synth_write_text(const char *dir, const char *name, const char *text, ff_err *e);

#endif
