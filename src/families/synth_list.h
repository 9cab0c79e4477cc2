/* What a family's synthetic-checkpoint maker fills: the tensors in the order
 * the real library saves them, with how each is initialised. */
#ifndef FF_SYNTH_LIST_H
#define FF_SYNTH_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "ff_err.h"

/* SYNTH_CODES and SYNTH_E8M0 are U8: a vendor's packed E2M1 pairs (any
 * byte is two valid codes) and MX exponents near 2^-6 (what trained
 * weights use; never 255, MX's NaN). */
typedef enum { SYNTH_NORMAL, SYNTH_ONES, SYNTH_CODES, SYNTH_E8M0 } synth_init;

typedef struct synth_tensor {
    char name[160];
    int ndim;
    int64_t shape[4];
    synth_init init;      /* weights ~ N(0, 0.02); norms ~ 1 */
} synth_tensor;

static inline int synth_is_u8(const synth_tensor *t) { return t->init == SYNTH_CODES || t->init == SYNTH_E8M0; }

typedef struct synth_list {
    synth_tensor *t;
    size_t n, cap;
    int oom;              /* an add failed: the maker reports it */
} synth_list;

void synth_add(synth_list *l, synth_init k, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Puts prefix before every name from index `from` on: a multimodal model's
 * text tensors ("language_model.") made by a text family's synth helpers. */
void synth_prefix(synth_list *l, size_t from, const char *prefix);
/* A 4-D tensor (a Conv2d's weight). */
void synth_add_4d(synth_list *l, synth_init k, int64_t a, int64_t b, int64_t c, int64_t d, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* MXFP4 blocks as gpt-oss stores them: U8 [experts, rows, groups, 16]. */
void synth_add_blocks(synth_list *l, int64_t experts, int64_t rows, int64_t groups, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* One small text file (an aux file of the checkpoint). */
int synth_write_text(const char *dir, const char *name, const char *text, ff_err *e);

#endif
