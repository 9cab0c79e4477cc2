#include "qsource.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_int.h"
#include "fp8_block.h"
#include "gptoss.h"
#include "jsonio.h"
#include "mxfp4.h"
#include "nvfp4_code_rows.h"
#include "nvfp4.h"
#include "nvfp4_int4_rows.h"
#include "qs_bufs.h"
#include "qsource_simd.h"
#include "threadpool.h"

#define CT_INT_FMT "pack-quantized"
#define CT_MXFP4_FMT "mxfp4-pack-quantized"

/* ---- quantization_config ---------------------------------------------------- */

static int refuse(char *why, size_t n, const char *fmt, const char *group, const char *what)
{
    snprintf(why, n, fmt, group, what);
    return -1;
}

/* One weights block a decoder knows: each key is checked, none assumed. */
static int ct_weights(const json_t *w, const char *gname, int mx, qs_format *f, char *why, size_t n)
{
    if (!json_is_object(w))
        return refuse(why, n, "config_groups.%s.weights is missing%s", gname, "");
    const char *type = jsonio_str(w, "type", ""), *strategy = jsonio_str(w, "strategy", "");
    json_int_t bits = json_integer_value(json_object_get(w, "num_bits"));
    json_int_t group = json_integer_value(json_object_get(w, "group_size"));
    const json_t *sym = json_object_get(w, "symmetric"), *act = json_object_get(w, "actorder");
    if (strcmp(type, mx ? "float" : "int") != 0)
        return refuse(why, n, "config_groups.%s.weights.type is '%s'", gname, type);
    if (bits != 4)
        return refuse(why, n, "config_groups.%s.weights.num_bits is not 4%s: fp4forge decodes 4-bit weights only",
                      gname, "");
    if (sym && !json_is_true(sym))
        return refuse(why, n, "config_groups.%s.weights.symmetric is false%s: asymmetric weights (zero points) are "
                              "not decoded", gname, "");
    if (strcmp(strategy, "group") != 0)
        return refuse(why, n, "config_groups.%s.weights.strategy is '%s', not group", gname, strategy);
    if (mx ? group != MXFP4_GROUP : group <= 0 || group % 8 != 0 || group > 1 << 20)
        return refuse(why, n, "config_groups.%s.weights.group_size is not one fp4forge decodes%s (MXFP4: 32; INT4: a "
                              "positive multiple of 8)", gname, "");
    if (json_is_true(json_object_get(w, "dynamic")))
        return refuse(why, n, "config_groups.%s.weights.dynamic is true%s: no stored scales", gname, "");
    const char *order = json_string_value(act);
    if (act && !json_is_null(act) && (!order || (strcmp(order, "static") != 0 && strcmp(order, "weight") != 0)))
        return refuse(why, n, "config_groups.%s.weights.actorder is '%s': activation-ordered groups (weight_g_idx) "
                              "are not decoded", gname, order ? order : "?");
    f->kind = mx ? QS_CT_MXFP4 : QS_CT_INT;
    f->bits = 4;
    f->group = (int)group;
    return 1;
}

/* Every config group in one format fp4forge decodes, with one group size. */
static int ct_config(const json_t *q, qs_format *f, char *why, size_t n)
{
    const char *global = jsonio_str(q, "format", NULL);
    const json_t *groups = json_object_get(q, "config_groups"), *sp = json_object_get(q, "sparsity_config");
    if (sp && !json_is_null(sp) && json_object_size(sp))
        return refuse(why, n, "a sparsity_config%s%s (sparse sources are not decoded)", "", "");
    if (!json_is_object(groups) || json_object_size(groups) == 0)
        return refuse(why, n, "no config_groups%s%s", "", "");
    const char *key;
    const json_t *g;
    qs_format first = {0};
    json_object_foreach((json_t *)groups, key, g) {
        const char *fmt = jsonio_str(g, "format", global);
        if (!fmt)
            return refuse(why, n, "config_groups.%s has no format%s", key, "");
        int mx = strcmp(fmt, CT_MXFP4_FMT) == 0;
        if (!mx && strcmp(fmt, CT_INT_FMT) != 0)
            return refuse(why, n, strcmp(fmt, "nvfp4-pack-quantized") == 0
                                      ? "config_groups.%s is already %s: nothing to quantize"
                                      : "config_groups.%s has format '%s' (decoded: " CT_INT_FMT ", " CT_MXFP4_FMT ")",
                          key, fmt);
        qs_format one = {0};
        if (ct_weights(json_object_get(g, "weights"), key, mx, &one, why, n) < 0)
            return -1;
        if (first.kind && (one.kind != first.kind || one.group != first.group))
            return refuse(why, n, "config_groups.%s differs from the first group in format or group size%s (one "
                                  "scheme per source is decoded)", key, "");
        first = one;
    }
    *f = first;
    return 1;
}

const json_t *qs_config_object(const json_t *config)
{
    const json_t *q = config ? json_object_get(config, "quantization_config") : NULL;
    if (q && !json_is_null(q))
        return q;
    /* Kimi-K2.5 keeps it in text_config; vLLM, transformers and
     * compressed-tensors all look there when the top level has none */
    const json_t *t = config ? json_object_get(config, "text_config") : NULL;
    const json_t *tq = json_is_object(t) ? json_object_get(t, "quantization_config") : NULL;
    return tq && !json_is_null(tq) ? tq : q;
}

int qs_config(const json_t *config, qs_format *f, char *why, size_t n)
{
    const json_t *q = qs_config_object(config);
    memset(f, 0, sizeof *f);
    if (n)
        why[0] = 0;
    if (!q || json_is_null(q))
        return 0;   /* null is none: a config saved with the attribute set to None */
    const char *method = jsonio_str(q, "quant_method", "");
    if (strcmp(method, "fp8") == 0) {
        const char *fw;
        json_t *holder = json_pack("{s:O}", "quantization_config", (json_t *)q);
        int fp8 = holder ? fp8b_config(holder, &fw) : -1;
        json_decref(holder);
        if (!holder)
            return refuse(why, n, "out of memory%s%s", "", "");
        if (fp8 < 0)
            return refuse(why, n, "%s%s", fw, "");
        f->kind = QS_FP8_BLOCK;
        return 1;
    }
    if (strcmp(method, "compressed-tensors") == 0)
        return ct_config(q, f, why, n);
    if (strcmp(method, "mxfp4") == 0) {   /* gpt-oss's own layout (src/io/gptoss.h) */
        f->kind = QS_GPTOSS_MXFP4;
        f->bits = 4;
        f->group = MXFP4_GROUP;
        return 1;
    }
    return refuse(why, n, "quant_method is '%s'%s (decoded: fp8 block, compressed-tensors pack-quantized and "
                          "mxfp4-pack-quantized, gpt-oss's mxfp4)", method, "");
}

const char *qs_format_name(const qs_format *f, char *buf, size_t n)
{
    if (f->kind == QS_FP8_BLOCK)
        snprintf(buf, n, "FP8-block");
    else if (f->kind == QS_CT_INT)
        snprintf(buf, n, "compressed-tensors INT%d pack-quantized, group %d", f->bits, f->group);
    else if (f->kind == QS_CT_MXFP4)
        snprintf(buf, n, "compressed-tensors MXFP4");
    else if (f->kind == QS_GPTOSS_MXFP4)
        snprintf(buf, n, "gpt-oss MXFP4");
    else if (f->kind == QS_GPTOSS_BF16)
        snprintf(buf, n, "gpt-oss bf16 fused experts");
    else
        snprintf(buf, n, "unquantized");
    return buf;
}

int qs_layout(const ckpt *c, qs_format *f)
{
    memset(f, 0, sizeof *f);
    if (!gptoss_bf16_layout(c))
        return 0;
    f->kind = QS_GPTOSS_BF16;
    return 1;
}

/* ---- the view ----------------------------------------------------------------- */

static int is_gptoss(const qs_format *f) { return f->kind == QS_GPTOSS_MXFP4 || f->kind == QS_GPTOSS_BF16; }

static const char *const ct_parts[] = {"weight_scale", "weight_shape", "weight_zero_point", "weight_g_idx",
                                       "weight_global_scale"};
enum { PART_SCALE, PART_SHAPE, PART_ZP, PART_GIDX, PART_GLOBAL, NPARTS };

/* Ends with ".suffix": a whole last name component. */
static size_t stem_of(const char *name, const char *suffix)
{
    size_t a = strlen(name), b = strlen(suffix);
    return a > b + 1 && name[a - b - 1] == '.' && strcmp(name + a - b, suffix) == 0 ? a - b - 1 : 0;
}

/* A companion of name's module; a suffix no tensor of the checkpoint has
 * (parts: qs_view.parts) is not looked up: Kimi-K3 has 247,296 packed
 * experts, and four missed lookups each were a fifth of its plan. */
static const ckpt_tensor *part_of(const ckpt *c, unsigned parts, const char *name, size_t stem, int part)
{
    if (!(parts & 1u << part))
        return NULL;
    char dot[32];
    snprintf(dot, sizeof dot, ".%s", ct_parts[part]);
    return ckpt_find_join(c, name, stem, dot);
}

/* Which companion suffixes occur at all. */
static unsigned parts_present(const ckpt *c)
{
    unsigned parts = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        for (int k = 0; k < NPARTS; k++)
            if (stem_of(c->tensors[i].st->name, ct_parts[k]))
                parts |= 1u << k;
    return parts;
}

static int bad(ff_err *e, const ckpt *c, const ckpt_tensor *t, const char *what)
{
    return ff_fail(e, FF_EIO, "%s: tensor %s: %s", ckpt_path(c, t), t->st->name, what);
}

static int shape_bad(ff_err *e, const ckpt *c, const ckpt_tensor *t, const char *want)
{
    char got[ST_MAX_DIMS * 24 + 4], msg[512];
    snprintf(msg, sizeof msg, "is %s %s, expected %s", ff_dtype_name(t->st->dtype),
             st_shape_str(t->st->shape, t->st->ndim, got, sizeof got), want);
    return bad(e, c, t, msg);
}

/* weight_shape's value, when the shard is mapped: [rows, cols] or an error. */
static int check_shape_value(const ckpt *c, const ckpt_tensor *s, uint64_t rows, uint64_t cols, ff_err *e)
{
    if (!c->files[s->file].map)
        return FF_OK;   /* headers only (plan, fit): quantize checks it */
    const uint8_t *d = ckpt_data(c, s);
    int64_t v[2];
    for (int i = 0; i < 2; i++) {
        if (s->st->dtype == FF_DT_I64)
            memcpy(&v[i], d + 8 * i, 8);
        else {
            int32_t x;
            memcpy(&x, d + 4 * i, 4);
            v[i] = x;
        }
    }
    if ((uint64_t)v[0] == rows && (uint64_t)v[1] == cols)
        return FF_OK;
    char msg[256];
    snprintf(msg, sizeof msg, "says [%lld, %lld] but its weight_packed and weight_scale hold [%llu, %llu]",
             (long long)v[0], (long long)v[1], (unsigned long long)rows, (unsigned long long)cols);
    return bad(e, c, s, msg);
}

/* The companions a CT packed weight needs and those it must not have. */
static int ct_parts_of(const ckpt *c, const qs_view *v, const ckpt_tensor *t, size_t stem, qs_weight *w, ff_err *e)
{
    const qs_format *f = &v->fmt;
    const ckpt_tensor *p[NPARTS];
    for (int i = 0; i < NPARTS; i++)
        p[i] = part_of(c, v->parts, t->st->name, stem, i);
    if (p[PART_ZP])
        return bad(e, c, p[PART_ZP], "a zero point: asymmetric weights are not decoded");
    if (p[PART_GIDX])
        return bad(e, c, p[PART_GIDX], "activation-ordered groups (weight_g_idx) are not decoded");
    if (p[PART_GLOBAL])
        return bad(e, c, p[PART_GLOBAL], "a global scale: an NVFP4 module in a source that is not NVFP4");
    if (ckpt_find_join(c, t->st->name, stem, ".weight"))
        return bad(e, c, t, "a weight_packed beside an unquantized weight of the same module");
    if (!p[PART_SCALE])
        return bad(e, c, t, "no weight_scale beside it");
    if (f->kind == QS_CT_INT && !p[PART_SHAPE])
        return bad(e, c, t, "no weight_shape beside it");
    *w = (qs_weight){.data = t, .scale = p[PART_SCALE], .shape = p[PART_SHAPE]};
    return FF_OK;
}

/* Rows and columns of a CT packed weight, from its tensors' headers. */
static int ct_geometry(const ckpt *c, const qs_format *f, const qs_weight *w, uint64_t *rows, uint64_t *cols,
                       ff_err *e)
{
    const st_tensor *p = w->data->st, *s = w->scale->st;
    int mx = f->kind == QS_CT_MXFP4;
    if (p->ndim != 2)
        return bad(e, c, w->data, p->ndim == 3 ? "3-D packed experts are not decoded (2-D per expert only)"
                                               : "weight_packed is not 2-D");
    if (p->dtype != (mx ? FF_DT_U8 : FF_DT_I32))
        return shape_bad(e, c, w->data, mx ? "U8 [rows, cols / 2]" : "I32 [rows, cols / 8]");
    int sd_ok = mx ? s->dtype == FF_DT_U8 : (s->dtype == FF_DT_BF16 || s->dtype == FF_DT_F16 || s->dtype == FF_DT_F32);
    char want[160];
    if (!sd_ok || s->ndim != 2 || s->shape[0] != p->shape[0] || s->shape[1] < 1) {
        snprintf(want, sizeof want, "%s [%lld, cols / %d] beside weight_packed [%lld, %lld]",
                 mx ? "U8 (E8M0)" : "BF16, F16 or F32", (long long)p->shape[0], f->group, (long long)p->shape[0],
                 (long long)p->shape[1]);
        return shape_bad(e, c, w->scale, want);
    }
    *rows = (uint64_t)p->shape[0];
    *cols = (uint64_t)s->shape[1] * (uint64_t)f->group;
    uint64_t need = mx ? *cols / 2 : ctint_row_words(*cols);
    if ((uint64_t)p->shape[1] != need) {
        snprintf(want, sizeof want, "[%llu, %llu]: weight_scale's %lld groups of %d columns (the config's "
                 "group_size)", (unsigned long long)*rows, (unsigned long long)need, (long long)s->shape[1], f->group);
        return shape_bad(e, c, w->data, want);
    }
    if (!w->shape)
        return FF_OK;
    const st_tensor *sh = w->shape->st;
    if ((sh->dtype != FF_DT_I64 && sh->dtype != FF_DT_I32) || sh->ndim != 1 || sh->shape[0] != 2)
        return shape_bad(e, c, w->shape, "I64 or I32 [2]");
    return check_shape_value(c, w->shape, *rows, *cols, e);
}

/* A CT part ("<mod>.weight_scale", ...) whose module has no weight_packed. */
static const char *ct_orphan(const ckpt *c, const char *name)
{
    for (int i = 0; i < NPARTS; i++) {
        size_t stem = stem_of(name, ct_parts[i]);
        if (stem && !ckpt_find_join(c, name, stem, ".weight_packed"))
            return ct_parts[i];
    }
    return NULL;
}

/* Is t consumed by a stored weight (its scale, shape): no view entry. */
static int is_companion(const ckpt *c, const qs_format *f, const ckpt_tensor *t)
{
    if (is_gptoss(f))
        return gptoss_entries(c, t) == 0;
    if (f->kind == QS_FP8_BLOCK)
        return fp8b_is_scale(c, t->st->name);
    for (int i = 0; i < NPARTS; i++) {
        size_t stem = stem_of(t->st->name, ct_parts[i]);
        if (stem && ckpt_find_join(c, t->st->name, stem, ".weight_packed"))
            return 1;
    }
    return 0;
}

/* The view entry of source tensor t: as stored, or its decoded weight. */
static int view_entry(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, ff_err *e)
{
    v->ck.tensors[k] = *t;
    qs_weight w = {0};
    st_tensor *st = &v->st[k];
    if (v->fmt.kind == QS_FP8_BLOCK) {
        int rc = fp8b_scale_of(c, t, &w.scale, e);
        if (rc || !w.scale)
            return rc;
        w.data = t;
        *st = *t->st;
    } else {
        const char *orphan = ct_orphan(c, t->st->name);
        if (orphan)
            return bad(e, c, t, "its module has no weight_packed: its codes are missing");
        size_t stem = stem_of(t->st->name, "weight_packed");
        if (!stem)
            return FF_OK;
        uint64_t rows, cols;
        int rc = ct_parts_of(c, v, t, stem, &w, e);
        if (!rc)
            rc = ct_geometry(c, &v->fmt, &w, &rows, &cols, e);
        if (rc)
            return rc;
        *st = *t->st;
        st->name = malloc(stem + sizeof ".weight");
        if (!st->name)
            return ff_fail(e, FF_EIO, "out of memory");
        snprintf(st->name, stem + sizeof ".weight", "%.*s.weight", (int)stem, t->st->name);
        st->ndim = 2;
        st->shape[0] = (int64_t)rows;
        st->shape[1] = (int64_t)cols;
    }
    st->dtype = FF_DT_BF16;
    v->ck.tensors[k].st = st;
    v->w[k] = w;
    v->nweights++;
    return FF_OK;
}

/* How many view tensors stored tensor t becomes. */
static size_t entries_of(const ckpt *c, const qs_format *f, const ckpt_tensor *t)
{
    if (is_companion(c, f, t))
        return 0;
    int64_t n = is_gptoss(f) ? gptoss_entries(c, t) : -1;
    return n >= 0 ? (size_t)n : 1;
}

int qs_view_build(qs_view *v, const ckpt *c, const qs_format *f, ff_err *e)
{
    memset(v, 0, sizeof *v);
    v->fmt = *f;
    v->bufs = qs_bufs_new();
    v->parts = parts_present(c);
    /* counted once: each count is a lookup or two per tensor */
    uint32_t *count = malloc((c->ntensors + 1) * sizeof *count);
    size_t n = 1;
    for (size_t i = 0; count && i < c->ntensors; i++)
        n += count[i] = (uint32_t)entries_of(c, f, &c->tensors[i]);
    v->ck.tensors = calloc(n, sizeof *v->ck.tensors);
    v->st = calloc(n, sizeof *v->st);
    v->w = calloc(n, sizeof *v->w);
    if (!count || !v->ck.tensors || !v->st || !v->w || !v->bufs) {
        free(count);
        return ff_oom(e, "out of memory");
    }
    int rc = FF_OK;
    for (size_t i = 0; !rc && i < c->ntensors; i++) {
        size_t k = count[i];
        int split = is_gptoss(f) && gptoss_entries(c, &c->tensors[i]) > 0;
        rc = !k ? FF_OK : split ? gptoss_fill(v, c, &c->tensors[i], v->ck.ntensors, e)
                                : view_entry(v, c, &c->tensors[i], v->ck.ntensors, e);
        v->ck.ntensors += k;   /* filled or not: qs_view_free frees what was named */
    }
    free(count);
    return rc ? rc : ckpt_view_open(&v->ck, c, e);
}

void qs_view_free(qs_view *v)
{
    if (v->fmt.kind != QS_FP8_BLOCK && v->st && v->w)
        for (size_t i = 0; i < v->ck.ntensors; i++)
            if (v->w[i].data)
                free(v->st[i].name);
    ckpt_view_close(&v->ck);
    free(v->st);
    free(v->w);
    qs_bufs_free(v->bufs);
    memset(v, 0, sizeof *v);
}

const qs_weight *qs_weight_of(const qs_view *v, const ckpt_tensor *t)
{
    if (!v || !v->ck.tensors || t < v->ck.tensors || t >= v->ck.tensors + v->ck.ntensors)
        return NULL;
    const qs_weight *w = &v->w[t - v->ck.tensors];
    return w->data ? w : NULL;
}

/* ---- decoding ------------------------------------------------------------------ */

#define DECODE_ROWS 64

typedef struct rows_job {
    const qs_rows *r;
    uint16_t *out;
} rows_job;

static void rows_task(void *ctx, size_t t)
{
    const rows_job *j = ctx;
    uint64_t r0 = (uint64_t)t * DECODE_ROWS, n = j->r->rows - r0 < DECODE_ROWS ? j->r->rows - r0 : DECODE_ROWS;
    qs_rows_decode(j->r, r0, n, j->out + r0 * j->r->cols);
}

/* Scales the reference would turn into NaN or Inf weights: refused. An INT
 * weight's scales were read once into r's tops, and are read again only to
 * name the first bad one. */
static int check_scales(const ckpt *c, const qs_format *f, const qs_weight *w, const qs_rows *r, ff_err *e)
{
    const st_tensor *s = w->scale->st;
    const uint8_t *d = ckpt_data(c, w->scale);
    uint64_t n = st_numel(s);
    char msg[200];
    if (f->kind == QS_CT_MXFP4) {
        const uint8_t *hit = memchr(d, MXFP4_SCALE_NAN, n);
        if (!hit)
            return FF_OK;
        snprintf(msg, sizeof msg, "element %llu is E8M0 255, which MX defines as NaN",
                 (unsigned long long)(hit - d));
        return bad(e, c, w->scale, msg);
    }
    if (r->tops.chunk && ctint_tops_finite(&r->tops, s->dtype))
        return FF_OK;
    int64_t at = ff_first_nonfinite(s->dtype, d, n);
    if (at < 0)
        return FF_OK;
    snprintf(msg, sizeof msg, "element %lld is %s: its group would decode to NaN or Inf", (long long)at,
             ff_load_f32(d, s->dtype, (size_t)at) != ff_load_f32(d, s->dtype, (size_t)at) ? "NaN" : "infinite");
    return bad(e, c, w->scale, msg);
}

typedef struct slice_job {
    const ckpt *c;
    const qs_weight *w;
    const ckpt_tensor *t;
    uint16_t *out;
} slice_job;

static void transpose_task(void *ctx, size_t k)
{
    const slice_job *j = ctx;
    uint64_t rows = (uint64_t)j->t->st->shape[0], r0 = (uint64_t)k * DECODE_ROWS;
    gptoss_transpose_rows(j->c, j->w, j->t, r0, rows - r0 < DECODE_ROWS ? rows - r0 : DECODE_ROWS, j->out);
}

/* A gpt-oss expert's slice: one expert is small next to a whole tensor. A
 * bf16 expert's transposed copy is spread over the pool: on one thread it
 * was most of the job while the other cores waited for it. */
static int decode_slice(const ckpt *c, const qs_view *v, const qs_weight *w, ff_pool *pool, uint16_t **out,
                        ff_err *e)
{
    const ckpt_tensor *t = &v->ck.tensors[w - v->w];
    uint64_t numel = st_numel(t->st);
    /* reused (qs_bufs.h): a fresh 16 MB buffer an expert was 16 MB of page faults and zeroing */
    *out = qs_bufs_take(v->bufs, numel * 2 + 2);
    if (!*out)
        return ff_fail(e, FF_EIO, "out of memory decoding %s", t->st->name);
    if (w->transposed && pool && numel >= (1u << 18)) {
        slice_job j = {.c = c, .w = w, .t = t, .out = *out};
        pool_run(pool, (size_t)((t->st->shape[0] + DECODE_ROWS - 1) / DECODE_ROWS), transpose_task, &j);
        return FF_OK;
    }
    int rc = gptoss_decode(c, w, t, *out, e);
    if (rc) {
        qs_buffer_release(v, *out);
        *out = NULL;
    }
    return rc;
}

void qs_buffer_release(const qs_view *v, uint16_t *p)
{
    if (p && !qs_bufs_give(v ? v->bufs : NULL, p))
        free(p);
}

/* Into a reused buffer (qs_bufs.h says why). */
static int decode_fp8(const ckpt *c, const qs_view *v, const qs_weight *w, ff_pool *pool, uint16_t **out, ff_err *e)
{
    *out = qs_bufs_take(v->bufs, st_numel(w->data->st) * 2);
    if (!*out)
        return ff_fail(e, FF_EIO, "out of memory decoding %s", w->data->st->name);
    int rc = fp8b_decode_into(c, w->data, w->scale, pool, *out, e);
    if (rc) {
        qs_buffer_release(v, *out);
        *out = NULL;
    }
    return rc;
}

int qs_decode(const ckpt *c, const qs_view *v, const qs_weight *w, ff_pool *pool, uint16_t **out, ff_err *e)
{
    *out = NULL;
    if (v->fmt.kind == QS_FP8_BLOCK)
        return decode_fp8(c, v, w, pool, out, e);
    if (w->row_step)
        return decode_slice(c, v, w, pool, out, e);
    qs_rows r;   /* compressed-tensors INT or MXFP4: open frees what it took when it fails */
    int rc = qs_rows_open(c, v, w, &r, e);
    if (rc)
        return rc;
    *out = qs_bufs_take(v->bufs, r.rows * r.cols * 2);
    if (!*out) {
        qs_rows_close(c, w, &r);
        return ff_fail(e, FF_EIO, "out of memory decoding %s", w->data->st->name);
    }
    rows_job j = {.r = &r, .out = *out};
    size_t tasks = (size_t)((r.rows + DECODE_ROWS - 1) / DECODE_ROWS);
    if (pool && r.rows * r.cols >= (1u << 18))
        pool_run(pool, tasks, rows_task, &j);
    else
        for (size_t i = 0; i < tasks; i++)
            rows_task(&j, i);
    /* consumed: a unit holds its decoded copy, not both (the page cache keeps them) */
    qs_rows_close(c, w, &r);
    return FF_OK;
}

/* ---- rows at a time -------------------------------------------------------------- */

int qs_rows_able(const qs_view *v, const qs_weight *w)
{
    qs_kind k = v ? v->fmt.kind : QS_NONE;
    return w && !w->row_step && !w->gather && (k == QS_FP8_BLOCK || k == QS_CT_INT || k == QS_CT_MXFP4);
}

static int fp8_rows_open(const ckpt *c, const qs_weight *w, qs_rows *r, ff_err *e)
{
    const st_tensor *t = w->data->st, *s = w->scale->st;
    uint64_t ns = (uint64_t)s->shape[0] * (uint64_t)s->shape[1];
    r->rows = (uint64_t)t->shape[0];
    r->cols = (uint64_t)t->shape[1];
    r->fp8_scales = malloc(ns ? ns * sizeof *r->fp8_scales : 1);
    if (!r->fp8_scales)
        return ff_fail(e, FF_EIO, "out of memory decoding %s", t->name);
    memcpy(r->fp8_scales, ckpt_data(c, w->scale), ns * sizeof *r->fp8_scales);
    return FF_OK;
}

int qs_rows_open(const ckpt *c, const qs_view *v, const qs_weight *w, qs_rows *r, ff_err *e)
{
    *r = (qs_rows){.kind = v->fmt.kind, .data = ckpt_data(c, w->data), .group = (uint64_t)v->fmt.group};
    if (v->fmt.kind == QS_FP8_BLOCK)
        return fp8_rows_open(c, w, r, e);
    int rc = ct_geometry(c, &v->fmt, w, &r->rows, &r->cols, e);
    r->scales = ckpt_data(c, w->scale);
    r->sd = w->scale->st->dtype;
    if (!rc && v->fmt.kind == QS_CT_INT && ctint_tops_build(r->scales, r->sd, st_numel(w->scale->st), &r->tops))
        rc = ff_fail(e, FF_EIO, "out of memory reading %s", w->scale->st->name);
    if (!rc)
        rc = check_scales(c, &v->fmt, w, r, e);
    if (rc)
        ctint_tops_free(&r->tops);
    return rc;
}

void qs_rows_decode(const qs_rows *r, uint64_t r0, uint64_t n, uint16_t *out)
{
    const qs_decoders *d = qs_decoders_best();   /* each gives the scalar decoder's bytes */
    if (r->kind == QS_FP8_BLOCK)
        d->fp8(r->data, r->fp8_scales, r->rows, r->cols, r0, n, out);
    else if (r->kind == QS_CT_MXFP4)
        d->mxfp4(r->data, r->scales, r->cols, r0, n, out);
    else
        d->ctint(r->data, r->scales, r->sd, r->cols, r->group, r0, n, out);
}

/* Blocks [b0, b0 + nb)'s largest codes over rows [a, z), all under one
 * scale row, read row by row: block by block, each row's 128 bytes lay 7 KB
 * past the last row's and the loads waited on memory (Kimi-K2 FP8, 2
 * threads: 65% of the job's samples on ff_e4m3_max_magnitude's first load). */
#define MAX_BLOCKS 64

static void block_max_codes(const qs_rows *r, uint64_t a, uint64_t z, uint64_t b0, uint64_t nb, uint8_t *m)
{
    memset(m, 0, nb);
    for (uint64_t i = a; i < z; i++) {
        const uint8_t *row = r->data + i * r->cols;
        for (uint64_t b = 0; b < nb; b++) {
            uint64_t c0 = (b0 + b) * FP8B_BLOCK, len = r->cols - c0 < FP8B_BLOCK ? r->cols - c0 : FP8B_BLOCK;
            uint8_t x = ff_e4m3_max_magnitude(row + c0, len);
            m[b] = x > m[b] ? x : m[b];
        }
    }
}

/* |code| under scale, decoded: the decoder's own bits. */
static float code_abs(uint8_t code, float scale)
{
    uint16_t v;
    fp8b_decode_rows(&code, &scale, 1, 1, 0, 1, &v);
    return fabsf(ff_bf16_to_f32(v));
}

static int block_absmax(const qs_rows *r, uint8_t code, uint64_t srow, uint64_t sc, uint64_t b, float *best)
{
    float f = code_abs(code, r->fp8_scales[srow * sc + b]);
    if (code == 0x7f || !(f <= FLT_MAX))
        return 1;
    *best = f > *best ? f : *best;
    return 0;
}

int qs_rows_absmax(const qs_rows *r, uint64_t r0, uint64_t n, float *amax)
{
    if (r->kind != QS_FP8_BLOCK)
        return -1;
    uint64_t sc = (r->cols + FP8B_BLOCK - 1) / FP8B_BLOCK;
    float best = 0.0f;
    uint8_t m[MAX_BLOCKS];
    for (uint64_t a = r0; a < r0 + n;) {
        uint64_t srow = a / FP8B_BLOCK, z = (srow + 1) * FP8B_BLOCK < r0 + n ? (srow + 1) * FP8B_BLOCK : r0 + n;
        for (uint64_t b0 = 0; b0 < sc; b0 += MAX_BLOCKS) {
            uint64_t nb = sc - b0 < MAX_BLOCKS ? sc - b0 : MAX_BLOCKS;
            block_max_codes(r, a, z, b0, nb, m);
            for (uint64_t b = 0; b < nb; b++)
                if (block_absmax(r, m[b], srow, sc, b0 + b, &best))
                    return 1;
        }
        a = z;
    }
    *amax = best;
    return 0;
}

/* Why one block can give a tensor's amax: no value exceeds code 0x7e (448,
 * E4M3's largest finite) under the largest |scale|, so a block under that
 * scale that holds it gives the amax. DeepSeek-style scales (each block's
 * amax / 448) put 448 in every block. */
int qs_rows_top_absmax(const qs_rows *r, float *amax)
{
    if (r->kind == QS_CT_INT && r->group)
        return ctint_top_absmax(r->data, r->scales, r->sd, r->rows, r->cols, r->group, &r->tops, amax);
    if (r->kind != QS_FP8_BLOCK || !r->rows || !r->cols)
        return 1;
    uint64_t sr = (r->rows + FP8B_BLOCK - 1) / FP8B_BLOCK, sc = (r->cols + FP8B_BLOCK - 1) / FP8B_BLOCK;
    float top = 0.0f;
    for (uint64_t i = 0; i < sr * sc; i++) {
        float s = fabsf(r->fp8_scales[i]);
        if (!(s <= FLT_MAX))
            return 1;   /* NaN or infinite: the amax pass names the element */
        top = s > top ? s : top;
    }
    uint8_t m;
    float bound = code_abs(0x7e, top), best = 0.0f;
    if (top == 0.0f || !(bound <= FLT_MAX))
        return 1;
    for (uint64_t i = 0; i < sr * sc && best < bound; i++) {
        if (fabsf(r->fp8_scales[i]) != top)
            continue;
        uint64_t a = i / sc * FP8B_BLOCK, z = a + FP8B_BLOCK < r->rows ? a + FP8B_BLOCK : r->rows;
        block_max_codes(r, a, z, i % sc, 1, &m);
        if (block_absmax(r, m, i / sc, sc, i % sc, &best) != 0)
            return 1;
    }
    if (best < bound)
        return 1;
    *amax = best;
    return 0;
}

/* Any NaN byte (0x7f or 0xff) among rows [r0, r0 + n): one read of the
 * codes, contiguous. */
int qs_rows_nan(const qs_rows *r, uint64_t r0, uint64_t n)
{
    return r->kind == QS_FP8_BLOCK && ff_e4m3_max_magnitude(r->data + r0 * r->cols, n * r->cols) == 0x7f;
}

_Static_assert(NVFP4_CODE_BLOCK == FP8B_BLOCK, "one code table per FP8 block");

/* One block's table: codes 0..126 through the decoder with its scale. */
static int code_block(float scale, nvfp4_code_block *blk)
{
    uint8_t code[128];
    uint16_t v[128];
    if (!(fabsf(scale) <= FLT_MAX))
        return 1;
    for (int c = 0; c < 128; c++)
        code[c] = (uint8_t)c;
    qs_decoders_best()->fp8(code, &scale, 1, 128, 0, 1, v);   /* fp8b_decode_rows's bytes */
    for (int c = 0; c < 127; c++) {
        blk->mag[c] = (uint32_t)(v[c] & 0x7fff) << 16;
        if (c && blk->mag[c] < blk->mag[c - 1])
            return 1;   /* cannot happen for a finite scale; the kernel relies on it */
    }
    blk->mag[127] = blk->mag[126];
    blk->inv_unit = 1.0f / fabsf(scale);
    blk->flip = signbit(scale) ? 0x80 : 0;
    return 0;
}

int qs_rows_code_blocks(const qs_rows *r, uint64_t r0, uint64_t n, nvfp4_code_block *blocks)
{
    if (r->kind != QS_FP8_BLOCK || !n || r0 / FP8B_BLOCK != (r0 + n - 1) / FP8B_BLOCK)
        return 1;
    uint64_t sc = (r->cols + FP8B_BLOCK - 1) / FP8B_BLOCK;
    const float *srow = r->fp8_scales + r0 / FP8B_BLOCK * sc;
    for (uint64_t b = 0; b < sc; b++)
        if (code_block(srow[b], &blocks[b]))
            return 1;
    return 0;
}

/* The cache's synthetic groups decoded by the reference decoder itself. */
static void ctint_group(const void *ctx, const uint8_t packed[8], uint16_t scale, uint16_t out[16])
{
    (void)ctx;
    ctint_decode_rows(packed, (const uint8_t *)&scale, FF_DT_BF16, NVFP4_GROUP, NVFP4_GROUP, 0, 1, out);
}

int qs_rows_quantize_i4(const qs_rows *r, uint64_t r0, uint64_t n, float gs, nvfp4_i4_cache *cache, uint8_t *pk,
                        uint8_t *sc)
{
    if (r->kind != QS_CT_INT || r->sd != FF_DT_BF16 || r->group % NVFP4_GROUP || r->cols % NVFP4_GROUP)
        return 1;
    uint64_t row_bytes = ctint_row_words(r->cols) * 4, scale_row = (r->cols / r->group) * 2;
    nvfp4_quantize_i4_rows(r->data + r0 * row_bytes, row_bytes, r->scales + r0 * scale_row, scale_row, r->group,
                           r->cols, n, gs, ctint_group, NULL, cache, pk, sc);
    return 0;
}

void qs_rows_close(const ckpt *c, const qs_weight *w, qs_rows *r)
{
    free(r->fp8_scales);
    r->fp8_scales = NULL;
    ctint_tops_free(&r->tops);
    st_drop_tensor(&c->files[w->data->file], w->data->st);
}

/* ---- MXFP4 rows (the exact route) --------------------------------------------------- */

static uint64_t stored_row(const qs_weight *w, uint64_t r)
{
    return w->row_step ? w->row0 + r * w->row_step : r;
}

static uint64_t view_cols(const ckpt_tensor *t)
{
    return t->st->ndim == 2 ? (uint64_t)t->st->shape[1] : 1;
}

const uint8_t *qs_mx_codes_row(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r)
{
    return ckpt_data(c, w->data) + stored_row(w, r) * (view_cols(t) / 2);
}

const uint8_t *qs_mx_scales_row(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r)
{
    return ckpt_data(c, w->scale) + stored_row(w, r) * (view_cols(t) / MXFP4_GROUP);
}

int qs_is_mxfp4(const qs_view *v)
{
    return v && (v->fmt.kind == QS_CT_MXFP4 || v->fmt.kind == QS_GPTOSS_MXFP4);
}

int qs_weight_mx_coded(const qs_view *v, const qs_weight *w)
{
    return qs_is_mxfp4(v) && w && w->scale && !w->gather && !w->transposed;
}
