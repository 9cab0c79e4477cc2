/* The synthetic-checkpoint writer every family's maker shares: a family
 * lists its tensors (names and shapes in save order), its config.json and its
 * auxiliary files; this fills the weights with deterministic pseudo-random
 * bf16 (the bytes do not depend on the thread count) or, sparse, leaves holes
 * that read as zeros, and writes through the one checkpoint writer. */
#include "synth.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "fsutil.h"
#include "synth_list.h"
#include "synth_source.h"
#include "threadpool.h"
#include "writer.h"

static synth_tensor *synth_next(synth_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        synth_tensor *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return NULL;
        l->t = t;
        l->cap = cap;
    }
    return memset(&l->t[l->n++], 0, sizeof *l->t);
}

void synth_add(synth_list *l, synth_init k, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
{
    synth_tensor *t = synth_next(l);
    if (!t) {
        l->oom = 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = a; t->shape[1] = b; t->shape[2] = c;
    t->init = k;
}

void synth_prefix(synth_list *l, size_t from, const char *prefix)
{
    size_t k = strlen(prefix), cap = sizeof l->t[0].name;
    for (size_t i = from; i < l->n; i++) {
        char *name = l->t[i].name;
        size_t n = strnlen(name, cap - 1);
        if (n + k >= cap)
            n = cap - 1 - k;   /* never: the longest text name is ~70 bytes */
        memmove(name + k, name, n);
        memcpy(name, prefix, k);
        name[n + k] = 0;
    }
}

static void add_4d(synth_list *l, synth_init k, const int64_t shape[4], const char *fmt, va_list ap)
{
    synth_tensor *t = synth_next(l);
    if (!t) {
        l->oom = 1;
        return;
    }
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    t->ndim = 4;
    memcpy(t->shape, shape, sizeof t->shape);
    t->init = k;
}

void synth_add_4d(synth_list *l, synth_init k, int64_t a, int64_t b, int64_t c, int64_t d, const char *fmt, ...)
{
    const int64_t shape[4] = {a, b, c, d};
    va_list ap;
    va_start(ap, fmt);
    add_4d(l, k, shape, fmt, ap);
    va_end(ap);
}

void synth_add_blocks(synth_list *l, int64_t experts, int64_t rows, int64_t groups, const char *fmt, ...)
{
    const int64_t shape[4] = {experts, rows, groups, 16};
    va_list ap;
    va_start(ap, fmt);
    add_4d(l, SYNTH_CODES, shape, fmt, ap);
    va_end(ap);
}

int synth_write_text(const char *dir, const char *name, const char *text, ff_err *e)
{
    char *p = fs_join(dir, name);
    FILE *f = p ? fopen(p, "w") : NULL;
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(p);
    return ok ? FF_OK : ff_fail(e, FF_EIO, "%s/%s: cannot write", dir, name);
}

static uint64_t numel(const synth_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static uint64_t elem_bytes(const synth_tensor *t) { return synth_is_u8(t) ? 1 : 2; }

int synth_preset(const char *preset, const char *size, synth_geom *g, const ff_family **fam, ff_err *e)
{
    *fam = ff_family_by_preset(preset);
    if (!*fam) {
        char known[512];
        ff_family_presets(known, sizeof known);
        return ff_fail(e, FF_EUSAGE, "unknown --arch %s (%s)", preset, known);
    }
    int rc = (*fam)->synth_preset(preset, size, g, e);
    snprintf(g->preset, sizeof g->preset, "%s", preset);
    return rc;
}

const ff_synth_knob *synth_knob_find(const ff_family *fam, const char *flag)
{
    for (const ff_synth_knob *k = fam->synth_knobs; k && k->flag; k++)
        if (strcmp(k->flag, flag) == 0)
            return k;
    return NULL;
}

void synth_knob_set(const ff_synth_knob *k, synth_geom *g, long long v)
{
    char *field = (char *)g + k->off;
    if (k->kind == FF_KNOB_INT64) {
        int64_t x = v;
        memcpy(field, &x, sizeof x);
    } else {
        int x = k->kind == FF_KNOB_CLEAR ? 0 : (int)v;
        memcpy(field, &x, sizeof x);
    }
}

uint64_t synth_bytes(const ff_family *fam, const synth_geom *g)
{
    synth_list l = {0};
    uint64_t b = 0;
    if (fam->synth_tensors(g, &l, NULL) == FF_OK)
        for (size_t i = 0; i < l.n; i++)
            b += numel(&l.t[i]) * elem_bytes(&l.t[i]);
    free(l.t);
    return b;
}

/* splitmix64: cheap, seedable per chunk, so the bytes do not depend on the
 * thread count. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

#define CHUNK (1u << 20)   /* elements per independently seeded chunk */
#define BLOCK (32u * CHUNK)

typedef struct fill_job {
    const synth_tensor *t;
    uint64_t seed, first, n;   /* element range of this block */
    uint16_t *buf;
} fill_job;

static void fill_chunk(void *ctx, size_t c)
{
    fill_job *j = ctx;
    uint64_t begin = (uint64_t)c * CHUNK, end = begin + CHUNK < j->n ? begin + CHUNK : j->n;
    uint64_t s = j->seed ^ ((j->first + begin) / CHUNK) * 0x2545f4914f6cdd1dull;
    if (synth_is_u8(j->t)) {
        uint8_t *b = (uint8_t *)j->buf;
        for (uint64_t i = begin; i < end; i++) {
            uint64_t r = mix(&s);
            b[i] = j->t->init == SYNTH_E8M0 ? (uint8_t)(118 + r % 6) : (uint8_t)r;
        }
        return;
    }
    for (uint64_t i = begin; i < end; i++) {
        uint64_t r = mix(&s);
        /* sum of three 21-bit uniforms: mean 1.5, sd 0.5 -> roughly normal */
        float u = (float)(r & 0x1fffff) + (float)((r >> 21) & 0x1fffff) + (float)((r >> 42) & 0x1fffff);
        float z = (u * (1.0f / 2097152.0f) - 1.5f) * 2.0f;
        float v = j->t->init == SYNTH_ONES ? 1.0f + 0.05f * z : 0.02f * z;
        j->buf[i] = ff_f32_to_bf16(v);
    }
}

/* A tensor the source stores quantized: its bf16 values whole, then
 * encoded (src/families/synth_source.c). */
static int write_encoded(const synth_tensor *t, ckpt_writer *w, size_t out, ff_pool *pool, uint64_t seed,
                         synth_source src, ff_err *e)
{
    uint64_t total = numel(t);
    uint16_t *buf = malloc(total * 2 + 1);
    if (!buf)
        return ff_oom(e, "out of memory");
    for (uint64_t first = 0; first < total; first += BLOCK) {
        fill_job j = {.t = t, .seed = hash_name(t->name, seed), .first = first,
                      .n = total - first < BLOCK ? total - first : BLOCK, .buf = buf + first};
        pool_run(pool, (j.n + CHUNK - 1) / CHUNK, fill_chunk, &j);
    }
    int rc = synth_source_write(src, t, buf, w, out, e);
    free(buf);
    return rc;
}

static int write_tensors(const synth_list *l, ckpt_writer *w, ff_pool *pool, uint64_t seed, synth_source src,
                         ff_err *e)
{
    uint16_t *buf = malloc((size_t)BLOCK * 2);
    if (!buf)
        return ff_oom(e, "out of memory");
    int rc = FF_OK;
    size_t out = 0;   /* output index of tensor i (a quantized one is 2 or 3 outputs) */
    for (size_t i = 0; i < l->n && rc == FF_OK; i++) {
        st_out parts[SYNTH_MAX_PARTS];
        char names[SYNTH_MAX_PARTS][SYNTH_PART_NAME];
        size_t np = synth_source_parts(src, &l->t[i], parts, names);
        if (np) {
            rc = write_encoded(&l->t[i], w, out, pool, seed, src, e);
            out += np;
            continue;
        }
        uint64_t total = numel(&l->t[i]);
        for (uint64_t first = 0; first < total && rc == FF_OK; first += BLOCK) {
            fill_job j = {.t = &l->t[i], .seed = hash_name(l->t[i].name, seed), .first = first,
                          .n = total - first < BLOCK ? total - first : BLOCK, .buf = buf};
            pool_run(pool, (j.n + CHUNK - 1) / CHUNK, fill_chunk, &j);
            uint64_t esz = elem_bytes(&l->t[i]);
            rc = ckpt_writer_put_at(w, out, first * esz, buf, j.n * esz, e);
        }
        out++;
    }
    free(buf);
    return rc;
}

int synth_write(const ff_family *fam, const synth_geom *g, const char *out_dir, const synth_opts *o, ff_err *e)
{
    synth_list l = {0};
    int rc = fam->synth_tensors(g, &l, e);
    st_out *outs = rc ? NULL : calloc(l.n ? SYNTH_MAX_PARTS * l.n : 1, sizeof *outs);
    char (*names)[SYNTH_MAX_PARTS][SYNTH_PART_NAME] = rc || !o->source ? NULL : calloc(l.n ? l.n : 1, sizeof *names);
    if (!rc && (!outs || (o->source && !names)))
        rc = ff_oom(e, "out of memory");
    size_t nouts = 0;
    for (size_t i = 0; !rc && i < l.n; i++) {
        size_t np = o->source ? synth_source_parts(o->source, &l.t[i], outs + nouts, names[i]) : 0;
        if (np) {
            nouts += np;
            continue;
        }
        st_out *x = &outs[nouts++];
        x->name = l.t[i].name;
        x->dtype = synth_is_u8(&l.t[i]) ? FF_DT_U8 : FF_DT_BF16;
        x->ndim = l.t[i].ndim;
        memcpy(x->shape, l.t[i].shape, sizeof l.t[i].shape);
        x->nbytes = numel(&l.t[i]) * elem_bytes(&l.t[i]);
    }
    ckpt_writer *w = NULL;
    ff_pool *pool = NULL;
    if (!rc && !(w = ckpt_writer_begin(out_dir, o->force, NULL, e)))
        rc = e->code;
    if (!rc)
        rc = ckpt_writer_layout(w, outs, nouts, o->shard_size, e);
    if (!rc && o->sparse) {
        rc = ckpt_writer_holes(w, e);
    } else if (!rc) {
        pool = pool_create(o->threads);
        rc = write_tensors(&l, w, pool, g->seed, o->source, e);
    }
    json_t *cfg = rc ? NULL : fam->synth_config(g);
    json_t *qc = cfg && o->source ? synth_source_qconfig(o->source) : NULL;
    json_t *text = cfg ? json_object_get(cfg, "text_config") : NULL;
    if (qc)   /* a multimodal model's goes with its text model, as Kimi-K2.5 ships it */
        json_object_set_new(json_is_object(text) ? text : cfg, "quantization_config", qc);
    if (!rc)
        rc = cfg ? ckpt_writer_close(w, cfg, NULL, 0, e) : ff_oom(e, "out of memory");
    json_decref(cfg);
    if (!rc)
        rc = fam->synth_aux(g, ckpt_writer_dir(w), e);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    ckpt_writer_free(w);
    pool_destroy(pool);
    free(outs);
    free(names);
    free(l.t);
    return rc;
}
