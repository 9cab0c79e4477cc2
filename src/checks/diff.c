#include "diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "dtype.h"
#include "inspect.h"
#include "jsonio.h"
#include "decode_fp8.h"

typedef struct side {
    ckpt c;
    insp s;
    int open;
} side;

/* The class fields that must agree, as a table. */
static json_t *class_diff(const insp_class *a, const insp_class *b)
{
    json_t *d = json_array();
    struct { const char *name; long long x, y; } f[] = {
        {"moe", a->moe, b->moe},
        {"experts", a->experts, b->experts},
        {"layers", a->layers, b->layers},
        {"vision", a->vision, b->vision},
        {"arch", strcmp(a->arch, b->arch) != 0, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].x != f[i].y) {
            char buf[200];
            if (strcmp(f[i].name, "arch") == 0)
                snprintf(buf, sizeof buf, "arch: %s vs %s", a->arch, b->arch);
            else if (strcmp(f[i].name, "moe") == 0)
                snprintf(buf, sizeof buf, "class: %s vs %s", insp_class_name(a), insp_class_name(b));
            else
                snprintf(buf, sizeof buf, "%s: %lld vs %lld", f[i].name, f[i].x, f[i].y);
            json_array_append_new(d, jsonio_string(buf));
        }
    return d;
}

static const insp_row *find_row(const insp *s, const insp_row *r)
{
    for (size_t i = 0; i < s->nrows; i++)
        if (strcmp(s->rows[i].family, r->family) == 0 && s->rows[i].dtype == r->dtype &&
            strcmp(s->rows[i].suffix, r->suffix) == 0)
            return &s->rows[i];
    return NULL;
}

static void row_diff_one(const insp_row *r, const insp_row *o, int a_side, json_t *out)
{
    if (o && !a_side)
        return;  /* both sides present: reported from A's pass */
    if (o && o->count == r->count && o->bytes == r->bytes)
        return;
    json_t *x = json_object();
    const insp_row *ra = a_side ? r : o, *rb = a_side ? o : r;
    json_object_set_new(x, "family", json_string(r->family));
    json_object_set_new(x, "dtype", json_string(ff_dtype_name(r->dtype)));
    json_object_set_new(x, "suffix", json_string(r->suffix));
    json_object_set_new(x, "a", json_integer(ra ? ra->count : 0));
    json_object_set_new(x, "b", json_integer(rb ? rb->count : 0));
    json_object_set_new(x, "a_bytes", json_integer(ra ? (json_int_t)ra->bytes : 0));
    json_object_set_new(x, "b_bytes", json_integer(rb ? (json_int_t)rb->bytes : 0));
    json_array_append_new(out, x);
}

static json_t *table_diff(const insp *a, const insp *b)
{
    json_t *out = json_array();
    for (size_t i = 0; i < a->nrows; i++)
        row_diff_one(&a->rows[i], find_row(b, &a->rows[i]), 1, out);
    for (size_t i = 0; i < b->nrows; i++)
        row_diff_one(&b->rows[i], find_row(a, &b->rows[i]), 0, out);
    return out;
}

/* Names in x's tensor table and not in y's. */
static json_t *names_only(const ckpt *x, const ckpt *y)
{
    json_t *n = json_array();
    for (size_t i = 0; i < x->ntensors; i++)
        if (!ckpt_find(y, x->tensors[i].st->name))
            json_array_append_new(n, jsonio_string(x->tensors[i].st->name));
    return n;
}

static json_t *shape_diff(const ckpt *a, const ckpt *b)
{
    json_t *n = json_array();
    for (size_t i = 0; i < a->ntensors; i++) {
        const st_tensor *x = a->tensors[i].st;
        const ckpt_tensor *t = ckpt_find(b, x->name);
        if (t && (x->dtype != t->st->dtype || x->ndim != t->st->ndim ||
                  memcmp(x->shape, t->st->shape, sizeof x->shape) != 0))
            json_array_append_new(n, jsonio_string(x->name));
    }
    return n;
}

static int has_string(const json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return 1;
    return 0;
}

static json_t *set_minus(const json_t *x, const json_t *y)
{
    json_t *n = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(x, i, v)
        if (json_is_string(v) && !has_string(y, json_string_value(v)))
            json_array_append(n, v);
    return n;
}

/* Mapped only when values are compared: the structure is in the headers. */
static int open_side(side *s, const char *dir, int values, ff_err *e)
{
    int rc = values ? ckpt_open(&s->c, dir, 0, e) : ckpt_open_headers(&s->c, dir, 0, e);
    s->open = 1;
    return rc ? rc : insp_build(&s->s, &s->c, NULL, e);
}

static void close_side(side *s)
{
    insp_free(&s->s);
    if (s->open)
        ckpt_close(&s->c);
}

/* ---- values: what two checkpoints of one structure hold ------------------- */

#define VALUES_LISTED 64

typedef struct value_row {
    const char *name;
    uint64_t bytes, differing;
    double rel;            /* ||a - b|| / ||b|| of a float tensor; -1 for others */
} value_row;

static double float_rel(const uint8_t *x, const uint8_t *y, ff_dtype t, uint64_t n)
{
    double num = 0, den = 0;
    for (uint64_t i = 0; i < n; i++) {
        double a = ff_load_f32(x, t, i), b = ff_load_f32(y, t, i);
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

static int is_float(ff_dtype t)
{
    return t == FF_DT_BF16 || t == FF_DT_F16 || t == FF_DT_F32;
}

/* One tensor both sides hold with one dtype and shape: the bytes that differ
 * (the packed codes, FP8 scales and global scales of a quantized module
 * compare exactly), and a float tensor's relative difference. */
static int compare_values(const ckpt *a, const ckpt_tensor *ta, const ckpt *b, const ckpt_tensor *tb, value_row *row)
{
    const uint8_t *x = ckpt_data(a, ta), *y = ckpt_data(b, tb);
    uint64_t n = ta->st->end - ta->st->begin;
    *row = (value_row){.name = ta->st->name, .bytes = n, .rel = -1};
    if (memcmp(x, y, n) == 0)
        return 0;
    for (uint64_t i = 0; i < n; i++)
        row->differing += x[i] != y[i];
    if (is_float(ta->st->dtype))
        row->rel = float_rel(x, y, ta->st->dtype, st_numel(ta->st));
    return 1;
}

/* A float tensor's relative difference, else the share of its bytes that differ. */
static double row_difference(const value_row *r)
{
    return r->rel >= 0 ? r->rel : (double)r->differing / (double)(r->bytes ? r->bytes : 1);
}

static int by_differing(const void *p, const void *q)
{
    const value_row *a = p, *b = q;
    double fa = row_difference(a), fb = row_difference(b);
    return fa < fb ? 1 : fa > fb ? -1 : strcmp(a->name, b->name);
}

static json_t *value_json(const value_row *r)
{
    json_t *x = json_object();
    json_object_set_new(x, "tensor", jsonio_string(r->name));
    json_object_set_new(x, "bytes_differing", json_integer((json_int_t)r->differing));
    json_object_set_new(x, "bytes", json_integer((json_int_t)r->bytes));
    json_object_set_new(x, "relative_difference", r->rel >= 0 ? json_real(r->rel) : json_null());
    return x;
}

/* Every tensor of A that B holds with the same dtype and shape, compared;
 * those that differ listed worst first (by relative difference, or the share
 * of differing bytes), the first VALUES_LISTED of them. */
/* Each compared module's worst tensor (0 when all its tensors are equal):
 * what diff --html draws as heatmaps. */
static void by_module(json_t *modules, const value_row *row)
{
    const char *dot = strrchr(row->name, '.');
    size_t len = dot ? (size_t)(dot - row->name) : strlen(row->name);
    double d = row->differing ? row_difference(row) : 0;
    const json_t *old = json_object_getn(modules, row->name, len);
    if (!old || json_real_value(old) < d)
        json_object_setn_new(modules, row->name, len, json_real(d));
}

static json_t *value_diff(const ckpt *a, const ckpt *b, json_t *r)
{
    value_row *rows = calloc(a->ntensors ? a->ntensors : 1, sizeof *rows);
    json_t *modules = json_object();
    if (!rows || !modules) {
        free(rows);
        json_decref(modules);
        return NULL;
    }
    size_t n = 0, compared = 0;
    for (size_t i = 0; i < a->ntensors; i++) {
        const ckpt_tensor *ta = &a->tensors[i], *tb = ckpt_find(b, ta->st->name);
        if (!tb || tb->st->dtype != ta->st->dtype || tb->st->end - tb->st->begin != ta->st->end - ta->st->begin)
            continue;
        compared++;
        int differs = compare_values(a, ta, b, tb, &rows[n]);
        by_module(modules, &rows[n]);
        n += differs;
    }
    json_object_set_new(r, "values_by_module", modules);
    json_t *list = json_array();
    qsort(rows, n, sizeof *rows, by_differing);
    for (size_t i = 0; i < n && i < VALUES_LISTED; i++)
        json_array_append_new(list, value_json(&rows[i]));
    json_object_set_new(r, "values_compared", json_integer((json_int_t)compared));
    json_object_set_new(r, "values_differing", json_integer((json_int_t)n));
    free(rows);
    return list;
}

/* ---- schemes: NVFP4A16, FP8 weight-only (quantize --fp8), kept -------------- */

enum { SCH_NONE, SCH_KEPT, SCH_NVFP4, SCH_FP8 };
static const char *const scheme_word[] = {"absent", "kept in its dtype", "NVFP4A16", "FP8 weight-only"};

/* The scheme module m has in c. */
static int scheme_of(const ckpt *c, const char *m)
{
    size_t n = strlen(m);
    const ckpt_tensor *w = ckpt_find_join(c, m, n, ".weight");
    if (ckpt_find_join(c, m, n, ".weight_packed"))
        return SCH_NVFP4;
    if (w && fp8_part(c, w->st->name) == 1)
        return SCH_FP8;
    return w ? SCH_KEPT : SCH_NONE;
}

/* "<m>" of a tensor naming a quantized module (either scheme), else NULL. */
static const char *quant_module(const ckpt *c, const char *name, char *buf, size_t n)
{
    size_t len = strlen(name);
    if (len > 14 && strcmp(name + len - 14, ".weight_packed") == 0 && len - 14 < n) {
        memcpy(buf, name, len - 14);
        buf[len - 14] = 0;
        return buf;
    }
    return fp8_part(c, name) == 1 ? fp8_module_of(c, name, buf, n) : NULL;
}

static void count_into(json_t *o, const ckpt *c, char *buf, size_t n)
{
    json_int_t nv = 0, f8 = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        if (quant_module(c, c->tensors[i].st->name, buf, n)) {
            int k = scheme_of(c, buf);
            nv += k == SCH_NVFP4;
            f8 += k == SCH_FP8;
        }
    json_object_set_new(o, "nvfp4", json_integer(nv));
    json_object_set_new(o, "fp8", json_integer(f8));
}

/* Modules of x quantized with another scheme in y (or kept there), added to
 * by[scheme in x][scheme in y]; one direction, so a module is listed once
 * when y_too is 0 and it is quantized on both sides. */
static void scheme_pairs(const ckpt *x, const ckpt *y, int x_is_a, int skip_both, json_t *by[4][4], char *buf, size_t n)
{
    for (size_t i = 0; i < x->ntensors; i++) {
        if (!quant_module(x, x->tensors[i].st->name, buf, n))
            continue;
        int kx = scheme_of(x, buf), ky = scheme_of(y, buf);
        if (kx == ky || ky == SCH_NONE || (skip_both && ky >= SCH_NVFP4))
            continue;
        json_array_append_new(x_is_a ? by[kx][ky] : by[ky][kx], jsonio_string(buf));
    }
}

/* Only when a side holds FP8 modules: an NVFP4-only diff stays as it was. */
static void scheme_diff(json_t *r, const ckpt *a, const ckpt *b)
{
    size_t longest = 0;
    for (size_t i = 0; i < a->ntensors; i++)
        longest = strlen(a->tensors[i].st->name) > longest ? strlen(a->tensors[i].st->name) : longest;
    for (size_t i = 0; i < b->ntensors; i++)
        longest = strlen(b->tensors[i].st->name) > longest ? strlen(b->tensors[i].st->name) : longest;
    char *buf = malloc(longest + 1);
    if (!buf)
        return;   /* the scheme lines are a summary: the table above has the counts */
    json_t *sa = json_object(), *sb = json_object(), *by[4][4], *list = json_array();
    count_into(sa, a, buf, longest + 1);
    count_into(sb, b, buf, longest + 1);
    if (!jsonio_int(sa, "fp8", 0) && !jsonio_int(sb, "fp8", 0)) {
        json_decref(sa);
        json_decref(sb);
        json_decref(list);
        free(buf);
        return;
    }
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            by[i][k] = json_array();
    scheme_pairs(a, b, 1, 0, by, buf, longest + 1);
    scheme_pairs(b, a, 0, 1, by, buf, longest + 1);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) {
            if (json_array_size(by[i][k])) {
                char what[96];
                snprintf(what, sizeof what, "%s in A, %s in B", scheme_word[i], scheme_word[k]);
                json_array_append_new(list, json_pack("{ss so}", "what", what, "groups", insp_group_names(by[i][k])));
            }
            json_decref(by[i][k]);
        }
    json_object_set_new(r, "schemes_a", sa);
    json_object_set_new(r, "schemes_b", sb);
    json_object_set_new(r, "scheme_differs", list);
    free(buf);
}

static void fill(json_t *r, const side *A, const side *B)
{
    json_t *empty = json_array();
    const json_t *ia = insp_ignore(&A->s), *ib = insp_ignore(&B->s);
    ia = ia ? ia : empty;
    ib = ib ? ib : empty;
    json_t *ta = table_diff(&A->s, &B->s), *oa = names_only(&A->c, &B->c), *ob = names_only(&B->c, &A->c);
    json_t *sh = shape_diff(&A->c, &B->c), *im = set_minus(ia, ib), *ie = set_minus(ib, ia);
    json_object_set_new(r, "tensor_table", ta);
    json_object_set_new(r, "only_in_a", insp_group_names(oa));
    json_object_set_new(r, "only_in_b", insp_group_names(ob));
    json_object_set_new(r, "shape_or_dtype", insp_group_names(sh));
    json_object_set_new(r, "ignore_missing_in_b", insp_group_names(im));
    json_object_set_new(r, "ignore_extra_in_b", insp_group_names(ie));
    json_t *ja = insp_to_json(&A->s), *jb = insp_to_json(&B->s);
    json_object_set(r, "shards_a", json_object_get(ja, "shards"));
    json_object_set(r, "shards_b", json_object_get(jb, "shards"));
    int same = json_array_size(ta) == 0 && json_array_size(oa) == 0 && json_array_size(ob) == 0 &&
               json_array_size(sh) == 0 && json_array_size(im) == 0 && json_array_size(ie) == 0;
    json_object_set_new(r, "same", json_boolean(same));
    scheme_diff(r, &A->c, &B->c);
    json_decref(oa);
    json_decref(ob);
    json_decref(sh);
    json_decref(im);
    json_decref(ie);
    json_decref(ja);
    json_decref(jb);
    json_decref(empty);
}

int diff_run(const char *a, const char *b, int allow, int values, json_t **result, ff_err *e)
{
    side A = {0}, B = {0};
    *result = NULL;
    int rc = open_side(&A, a, values, e);
    if (!rc)
        rc = open_side(&B, b, values, e);
    if (rc) {
        close_side(&A);
        close_side(&B);
        return rc;
    }
    json_t *r = json_object(), *cd = class_diff(&A.s.cls, &B.s.cls);
    json_object_set_new(r, "a", jsonio_string(a));
    json_object_set_new(r, "b", jsonio_string(b));
    json_object_set_new(r, "class_a", json_string(insp_class_name(&A.s.cls)));
    json_object_set_new(r, "class_b", json_string(insp_class_name(&B.s.cls)));
    json_object_set_new(r, "class_differences", cd);
    if (json_array_size(cd) && !allow) {
        json_object_set_new(r, "refused", json_true());
        json_object_set_new(r, "same", json_false());
        rc = ff_fail(e, FF_ECLASS, "architecture classes differ (%s); this control cannot distinguish the "
                     "differences that matter (pass --allow-class-mismatch to compare anyway)",
                     json_string_value(json_array_get(cd, 0)));
    } else {
        json_object_set_new(r, "refused", json_false());
        fill(r, &A, &B);
        json_t *vd = values ? value_diff(&A.c, &B.c, r) : NULL;
        if (values && !vd)
            rc = ff_oom(e, "out of memory comparing values");
        if (json_array_size(vd))
            json_object_set_new(r, "same", json_false());
        if (vd)
            json_object_set_new(r, "values", vd);
    }
    close_side(&A);
    close_side(&B);
    *result = r;
    return rc;
}

static void print_groups(FILE *out, const json_t *groups, const char *what)
{
    size_t i;
    json_t *g;
    json_array_foreach(groups, i, g) {
        const json_t *names = json_object_get(g, "names");
        fprintf(out, "  %lld %s: %s\n", (long long)jsonio_int(g, "count", 0), what, jsonio_str(g, "pattern", ""));
        for (size_t k = 0; k < json_array_size(names) && k < 64; k++)
            fprintf(out, "      %s\n", json_string_value(json_array_get(names, k)));
        if (json_array_size(names) > 64)
            fprintf(out, "      ... %zu more (--json lists all)\n", json_array_size(names) - 64);
    }
}

void diff_print(const json_t *r, FILE *out)
{
    fprintf(out, "fp4forge diff: A %s (%s)  B %s (%s)\n", jsonio_str(r, "a", ""), jsonio_str(r, "class_a", ""),
            jsonio_str(r, "b", ""), jsonio_str(r, "class_b", ""));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "class_differences"), i, v)
        fprintf(out, "  class differs: %s\n", json_string_value(v));
    if (json_is_true(json_object_get(r, "refused"))) {
        fprintf(out, "  refused: a control of another architecture class cannot show what matters\n");
        return;
    }
    json_array_foreach(json_object_get(r, "tensor_table"), i, v)
        fprintf(out, "  table  %-10s %-8s %-22s A %lld  B %lld\n", jsonio_str(v, "family", ""),
                jsonio_str(v, "dtype", ""), jsonio_str(v, "suffix", ""), (long long)jsonio_int(v, "a", 0),
                (long long)jsonio_int(v, "b", 0));
    const json_t *sa = json_object_get(r, "schemes_a"), *sb = json_object_get(r, "schemes_b");
    if (sa && sb)
        fprintf(out, "  schemes  A %lld NVFP4A16, %lld FP8 weight-only | B %lld NVFP4A16, %lld FP8 weight-only\n",
                (long long)jsonio_int(sa, "nvfp4", 0), (long long)jsonio_int(sa, "fp8", 0),
                (long long)jsonio_int(sb, "nvfp4", 0), (long long)jsonio_int(sb, "fp8", 0));
    json_array_foreach(json_object_get(r, "scheme_differs"), i, v)
        print_groups(out, json_object_get(v, "groups"), jsonio_str(v, "what", ""));
    print_groups(out, json_object_get(r, "ignore_missing_in_b"), "missing from B's ignore list");
    print_groups(out, json_object_get(r, "ignore_extra_in_b"), "extra in B's ignore list");
    print_groups(out, json_object_get(r, "only_in_a"), "tensors only in A");
    print_groups(out, json_object_get(r, "only_in_b"), "tensors only in B");
    print_groups(out, json_object_get(r, "shape_or_dtype"), "shape/dtype differ");
    const json_t *vals = json_object_get(r, "values");
    if (vals) {
        fprintf(out, "  values: %lld tensors compared, %lld differ%s\n", (long long)jsonio_int(r, "values_compared", 0),
                (long long)jsonio_int(r, "values_differing", 0), json_array_size(vals) ? " (worst first):" : "");
        json_array_foreach(vals, i, v) {
            const json_t *rel = json_object_get(v, "relative_difference");
            fprintf(out, "    %-60s %lld of %lld bytes", jsonio_str(v, "tensor", ""),
                    (long long)jsonio_int(v, "bytes_differing", 0), (long long)jsonio_int(v, "bytes", 0));
            if (json_is_number(rel))
                fprintf(out, ", relative difference %.4g", json_number_value(rel));
            fputc('\n', out);
        }
    }
    const char *sk[] = {"shards_a", "shards_b"};
    for (int s = 0; s < 2; s++)
        json_array_foreach(json_object_get(r, sk[s]), i, v)
            fprintf(out, "  shard  %c %s  %lld bytes\n", 'A' + s, jsonio_str(v, "file", ""),
                    (long long)jsonio_int(v, "bytes", 0));
    fprintf(out, "  verdict: %s\n", json_is_true(json_object_get(r, "same")) ? "SAME" : "DIFFERENT");
}
