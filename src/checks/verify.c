#include "verify.h"

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "decode.h"
#include "qsource.h"
#include "fsutil.h"
#include "inspect.h"
#include "jsonio.h"
#include "plan.h"
#include "progress.h"
#include "threadpool.h"
#include "decode_fp8.h"
#include "verify_minmax.h"

/* Files vLLM or the tokenizer need at serve time: present in the source means
 * required in the output. */
static const char *const serving_aux[] = {
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "generation_config.json", "processor_config.json",
    "preprocessor_config.json", "video_preprocessor_config.json", NULL,
};

typedef struct vctx {
    const verify_opts *o;
    ckpt q, s;
    int have_src;
    insp qi;
    plan p;
    int have_plan;
    json_t *checks;          /* name -> {ok, detail, items} */
    json_t *errors;          /* per-tensor error records (NVFP4) */
    json_t *fp8_errors;      /* the FP8 modules' records: their error is an
                              * order smaller, so they are summed apart */
    size_t nfp8;             /* FP8 weight-only modules in the output */
    char *mod;               /* a module name (or "<mod>.<part>") of either
                              * checkpoint fits: mod_cap is the longest name
                              * + 128, so no name is cut to a fixed size */
    size_t mod_cap;
    int out_of_memory;       /* a check could not finish: the verdict would
                              * be a guess, so verify fails instead */
    ff_pool *pool;           /* measures each module's rows in parallel */
    progress bar;            /* over the source's bytes (the output's alone) */
} vctx;

static json_t *check(vctx *v, const char *name)
{
    json_t *c = json_object_get(v->checks, name);
    if (!c) {
        c = json_object();
        json_object_set_new(c, "ok", json_true());
        json_object_set_new(c, "detail", json_string(""));
        json_object_set_new(c, "items", json_array());
        json_object_set_new(v->checks, name, c);
    }
    return c;
}

/* The text on the heap, whatever its length: a fixed buffer cut long module
 * names, and a cut inside a UTF-8 sequence made jansson refuse the string,
 * so the item vanished from the JSON and the page. NULL when out of memory. */
static char *vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

static void fail_item(vctx *v, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_item(vctx *v, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = vformat(fmt, ap);
    va_end(ap);
    v->out_of_memory |= !text;
    json_t *c = check(v, name);
    json_object_set_new(c, "ok", json_false());
    json_array_append_new(json_object_get(c, "items"), jsonio_string(text ? text : "out of memory formatting "
                                                                                  "this failure"));
    free(text);
}

static void detail(vctx *v, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void detail(vctx *v, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = vformat(fmt, ap);
    va_end(ap);
    v->out_of_memory |= !text;
    json_object_set_new(check(v, name), "detail", jsonio_string(text ? text : "out of memory"));
    free(text);
}

/* ---- decode: every module whole, its values finite and not lost ----------- */

static void check_module(vctx *v, const char *mod)
{
    dq_module m;
    dq_stats st;
    ff_err e2 = {0};
    float gs;
    uint64_t first, zero;
    if (dq_find(&v->q, mod, &m, &e2) != FF_OK)
        fail_item(v, "decode", "%s: %s", v->q.dir, e2.msg);
    else if (dq_check_global(&v->q, &m, &gs, &e2) != FF_OK || dq_decode(&v->q, &m, NULL, NULL, &st, &e2) != FF_OK)
        fail_item(v, "decode", "%s", e2.msg);
    else if (st.nonfinite)
        fail_item(v, "decode", "%s: %llu NaN/Inf values (first at %llu; global scale %g)", mod,
                  (unsigned long long)st.nonfinite, (unsigned long long)st.first_bad, (double)st.global_scale);
    else if ((zero = dq_zero_scale_blocks(&v->q, &m, &first)))
        fail_item(v, "decode", "%s: %llu blocks with non-zero codes have a zero block scale (first: block %llu of "
                               "%s), so their weights decode to 0", mod, (unsigned long long)zero,
                  (unsigned long long)first, m.scale->st->name);
    v->out_of_memory |= e2.oom;   /* a decode that could not run says nothing of the module */
    if (m.module) {
        dq_drop_whole(&v->q, m.packed);
        dq_drop_whole(&v->q, m.scale);
    }
    dq_module_free(&m);
}

/* An FP8 weight-only module: its tensors' dtypes and shapes, scales a
 * quantizer can write (positive, finite) and no NaN code. */
static void check_fp8_module(vctx *v, const char *mod)
{
    fp8_module m;
    ff_err e2 = {0};
    uint64_t first = 0, bad;
    float val = 0;
    if (fp8_find(&v->q, mod, &m, &e2) != FF_OK)
        fail_item(v, "decode", "%s", e2.msg);
    else if ((bad = fp8_bad_scales(&v->q, &m, &first, &val)))
        fail_item(v, "decode", "%s: tensor %s: %llu FP8 channel scales are zero, negative or not finite (first: row "
                               "%llu = %g), so those rows decode to 0 or NaN", ckpt_path(&v->q, m.scale),
                  m.scale->st->name, (unsigned long long)bad, (unsigned long long)first, (double)val);
    else if ((bad = fp8_nan_codes(&v->q, &m, &first)))
        fail_item(v, "decode", "%s: tensor %s: %llu FP8 codes are NaN (first at element %llu)",
                  ckpt_path(&v->q, m.weight), m.weight->st->name, (unsigned long long)bad, (unsigned long long)first);
    v->out_of_memory |= e2.oom;
    if (m.module) {
        dq_drop_whole(&v->q, m.weight);
        dq_drop_whole(&v->q, m.scale);
    }
    fp8_module_free(&m);
    v->nfp8++;
}

/* A module whose scales are there but whose weight_packed is not: readers
 * that pair by weight_packed would skip it. Named once, by its global scale
 * when it has one. */
static void check_orphan(vctx *v, const ckpt_tensor *t)
{
    char *mod = v->mod;
    const char *part = dq_orphan_part(&v->q, t->st->name, mod, v->mod_cap);
    if (!part)
        return;
    if (strcmp(part, DQ_GLOBAL) != 0 && ckpt_find_join(&v->q, mod, strlen(mod), "." DQ_GLOBAL))
        return;
    fail_item(v, "decode", "%s: %s has %s but no %s: the module's codes are missing", ckpt_path(&v->q, t), mod, part,
              DQ_PACKED);
}

static void check_decode(vctx *v)
{
    size_t n = 0;
    check(v, "decode");
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const char *name = v->q.tensors[i].st->name;
        if (!v->have_src)
            progress_add(&v->bar, v->q.tensors[i].st->end - v->q.tensors[i].st->begin, i + 1, v->q.ntensors);
        if (dq_module_of(name, v->mod, v->mod_cap)) {
            check_module(v, v->mod);
            n++;
        } else if (fp8_part(&v->q, name) == 1 && fp8_module_of(&v->q, name, v->mod, v->mod_cap)) {
            check_fp8_module(v, v->mod);
            n++;
        } else if (!fp8_part(&v->q, name)) {
            check_orphan(v, &v->q.tensors[i]);
        }
    }
    if (v->nfp8)
        detail(v, "decode", "%zu quantized modules decoded (%zu NVFP4, %zu FP8 weight-only)", n, n - v->nfp8, v->nfp8);
    else
        detail(v, "decode", "%zu quantized modules decoded", n);
}

/* ---- no scale of the source's quantization beside an NVFP4 module ----------- */

/* An FP8 source's input_scale (static activations) or weight_scale_inv carried
 * next to weight_packed: NVFP4A16 reads 16-bit activations and has its own
 * weight scales, so the tensor is a leftover a loader either rejects or
 * mistakes for this module's. */
/* "<m>.input_scale", "<m>.weight_zero_point" or "<m>.weight_scale_inv"
 * beside an FP8 module "<m>": its suffix (a W8A8 or FP8-block leftover that
 * a loader would take for this module's), else NULL. */
static const char *fp8_stray(vctx *v, const char *name)
{
    static const char *const sufs[] = {"input_scale", "weight_zero_point", "weight_scale_inv", NULL};
    size_t len = strlen(name);
    if (!v->nfp8)
        return NULL;
    for (int k = 0; sufs[k]; k++) {
        size_t sl = strlen(sufs[k]);
        if (len <= sl + 1 || name[len - sl - 1] != '.' || strcmp(name + len - sl, sufs[k]) != 0)
            continue;
        const ckpt_tensor *w = ckpt_find_join(&v->q, name, len - sl - 1, ".weight");
        return w && fp8_part(&v->q, w->st->name) == 1 ? sufs[k] : NULL;
    }
    return NULL;
}

static void check_stray(vctx *v)
{
    size_t n = 0;
    check(v, "stray_scales");
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const ckpt_tensor *t = &v->q.tensors[i];
        const char *stray = dq_stray_scale(&v->q, t->st->name);
        if (stray && ++n)
            fail_item(v, "stray_scales", "%s: %s: a scale of the source's FP8 quantization beside an NVFP4 "
                                         "module (NVFP4A16 has no %s)", ckpt_path(&v->q, t), t->st->name, stray);
        else if ((stray = fp8_stray(v, t->st->name)) && ++n)
            fail_item(v, "stray_scales", "%s: %s beside an FP8 weight-only module: W8A16 (symmetric, 16-bit "
                                         "activations) has no %s", ckpt_path(&v->q, t), t->st->name, stray);
    }
    detail(v, "stray_scales", "%zu input_scale or weight_scale_inv tensors beside NVFP4 modules", n);
}

/* Kept tensors are read this many bytes at a time and dropped from the
 * mapping behind the read, so an embedding never sits whole in RSS. */
#define KEPT_PIECE (8ull << 20)

/* A kept tensor's pieces on the pool: on one thread an embedding's scan and
 * comparison kept the other core idle for ~20 ms of a 2-thread verify
 * (bench/serial.sh, the 2-layer Gemma-4). */
typedef struct kept_pieces {
    const ckpt *c, *s;          /* s: the source, when comparing */
    const ckpt_tensor *t, *st;
    uint64_t bytes, esz;        /* esz: elements are scanned for NaN and Inf */
    int64_t *got;               /* per piece: its first non-finite element, or 1 where it differs; -1 / 0 if not */
} kept_pieces;

static void kept_piece_task(void *ctx, size_t k)
{
    const kept_pieces *j = ctx;
    uint64_t at = (uint64_t)k * KEPT_PIECE, n = j->bytes - at < KEPT_PIECE ? j->bytes - at : KEPT_PIECE;
    const uint8_t *p = ckpt_data(j->c, j->t) + at;
    if (j->s) {
        j->got[k] = memcmp(ckpt_data(j->s, j->st) + at, p, n) != 0;
        dq_drop(j->s, j->st, at, n);
    } else {
        j->got[k] = ff_first_nonfinite(j->t->st->dtype, p, n / j->esz);
    }
    dq_drop(j->c, j->t, at, n);
}

/* Every piece of j on the pool when the tensor has more than one, else on
 * this thread (pool runs cost more than a norm's check): got[] filled, the
 * piece count returned; 0 when out of memory (the caller goes piece by piece). */
static size_t run_kept_pieces(ff_pool *pool, kept_pieces *j)
{
    size_t n = (size_t)((j->bytes + KEPT_PIECE - 1) / KEPT_PIECE);
    if (n < 2 || !(j->got = malloc(n * sizeof *j->got)))
        return 0;
    pool_run(pool, n, kept_piece_task, j);
    return n;
}

static int64_t first_nonfinite_streamed(ff_pool *pool, const ckpt *c, const ckpt_tensor *t)
{
    size_t esz = ff_dtype_size(t->st->dtype);
    uint64_t numel = st_numel(t->st), step = esz ? KEPT_PIECE / esz : numel;
    kept_pieces j = {.c = c, .t = t, .bytes = numel * esz, .esz = esz};
    size_t pieces = esz && KEPT_PIECE % esz == 0 ? run_kept_pieces(pool, &j) : 0;
    int64_t bad = -1;
    for (size_t k = 0; k < pieces && bad < 0; k++)
        bad = j.got[k] < 0 ? -1 : (int64_t)(k * step) + j.got[k];
    free(j.got);
    if (pieces)
        return bad;
    for (uint64_t at = 0; at < numel; at += step) {
        uint64_t n = numel - at < step ? numel - at : step;
        bad = ff_first_nonfinite(t->st->dtype, ckpt_data(c, t) + at * esz, n);
        dq_drop(c, t, at * esz, n * esz);
        if (bad != -1 || !esz)
            return bad < 0 ? bad : (int64_t)at + bad;
    }
    return -1;
}

/* Kept tensors (norms, embeddings, routers, towers) serve NaN as surely as a
 * quantized weight: every float element is checked. */
static void check_kept_finite(vctx *v)
{
    size_t n = 0;
    check(v, "kept_finite");
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const ckpt_tensor *t = &v->q.tensors[i];
        if (dq_part(&v->q, t->st->name) != DQ_PART_NONE || fp8_part(&v->q, t->st->name))
            continue;   /* decode checks the quantized modules */
        int64_t bad = first_nonfinite_streamed(v->pool, &v->q, t);
        dq_drop_whole(&v->q, t);
        n++;
        if (bad >= 0)
            fail_item(v, "kept_finite", "%s: element %lld is NaN or infinite", t->st->name, (long long)bad);
    }
    detail(v, "kept_finite", "%zu kept tensors scanned", n);
}

/* ---- quantization_config ---------------------------------------------- */

/* ---- mixed output: each quantized module in exactly one group ------------ */

/* How a group's target names mod, as compressed-tensors ranks a match: 3 the
 * exact name, 2 a "re:" pattern (re.match: anchored at the start only), 1 the
 * class "Linear", 0 none; the best of the group's targets. Python's
 * non-capturing "(?:" is rewritten for POSIX regcomp. */
static int target_level(const json_t *targets, const char *mod, int *bad_regex)
{
    int best = 0;
    size_t i;
    json_t *x;
    json_array_foreach(targets, i, x) {
        const char *t = json_string_value(x);
        if (!t)
            continue;
        if (strcmp(t, mod) == 0)
            return 3;
        if (strcmp(t, "Linear") == 0) {
            best = best > 1 ? best : 1;
        } else if (strncmp(t, "re:", 3) == 0 && best < 2) {
            size_t n = strlen(t);
            char *pat = malloc(n + 8), *o = pat;
            regex_t re;
            if (!pat) {
                *bad_regex = -1;
                continue;
            }
            o += sprintf(o, "^(");
            for (const char *c = t + 3; *c; c++) {
                *o++ = *c;
                if (*c == '(' && (c == t + 3 || c[-1] != '\\') && c[1] == '?' && c[2] == ':')
                    c += 2;
            }
            sprintf(o, ")");
            if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) != 0) {
                *bad_regex = 1;
            } else {
                best = regexec(&re, mod, 0, NULL, 0) == 0 ? 2 : best;
                regfree(&re);
            }
            free(pat);
        }
    }
    return best;
}

/* The group compressed-tensors applies to mod (exact name > regex > class,
 * as its matcher ranks them) must exist, be the only one at its rank, and
 * have the format of the module's tensors, fmt. */
static void check_module_group(vctx *v, const json_t *groups, const char *mod, const char *tensor, const char *fmt)
{
    const char *k, *win = NULL;
    json_t *g, *wg = NULL;
    int best = 0, tie = 0, bad_regex = 0;
    json_object_foreach((json_t *)groups, k, g) {
        int lv = target_level(json_object_get(g, "targets"), mod, &bad_regex);
        if (lv > best) {
            best = lv, win = k, wg = g, tie = 0;
        } else if (lv && lv == best) {
            tie = 1;
        }
    }
    v->out_of_memory |= bad_regex < 0;
    if (bad_regex > 0)
        fail_item(v, "quant_config", "a config group's re: target does not compile (checking %s)", mod);
    else if (!win)
        fail_item(v, "quant_config", "%s is quantized (%s) but listed in no config group", tensor, fmt);
    else if (tie)
        fail_item(v, "quant_config", "%s is named by more than one config group equally (one is %s)", tensor, win);
    else if (strcmp(jsonio_str(wg, "format", ""), fmt) != 0 && best == 1)
        fail_item(v, "quant_config", "%s is %s but listed in no %s config group: compressed-tensors would apply %s "
                                     "('%s', its Linear target) to it", tensor, fmt, fmt, win, jsonio_str(wg, "format", ""));
    else if (strcmp(jsonio_str(wg, "format", ""), fmt) != 0)
        fail_item(v, "quant_config", "%s is %s but the config group naming it, %s, is '%s'", tensor, fmt, win,
                  jsonio_str(wg, "format", ""));
}

/* A group's scheme as quantize writes it for its format. */
static void check_group_scheme(vctx *v, const char *name, const json_t *g)
{
    const char *fmt = jsonio_str(g, "format", "");
    const json_t *w = json_object_get(g, "weights");
    int fp8 = strcmp(fmt, FP8_FORMAT) == 0, nv = strcmp(fmt, "nvfp4-pack-quantized") == 0;
    const char *strategy = fp8 ? "channel" : "tensor_group";
    if (!fp8 && !nv)
        fail_item(v, "quant_config", "config group %s has format '%s', expected %s or nvfp4-pack-quantized", name, fmt,
                  FP8_FORMAT);
    else if (!json_is_null(json_object_get(g, "input_activations")))
        fail_item(v, "quant_config", "config group %s quantizes input_activations (not A16)", name);
    else if (jsonio_int(w, "num_bits", 0) != (fp8 ? 8 : 4) || strcmp(jsonio_str(w, "type", ""), "float") != 0 ||
             strcmp(jsonio_str(w, "strategy", ""), strategy) != 0 || !json_is_true(json_object_get(w, "symmetric")))
        fail_item(v, "quant_config", "config group %s (%s): weights are %lld-bit %s %s, expected %d-bit float %s "
                                     "symmetric", name, fmt, (long long)jsonio_int(w, "num_bits", 0),
                  jsonio_str(w, "type", "?"), jsonio_str(w, "strategy", "?"), fp8 ? 8 : 4, strategy);
}

/* The mixed output's quantization_config: the global format its modules
 * call for, each group's scheme, and each module's group by its tensors. */
static void check_qconfig_mixed(vctx *v, const json_t *q)
{
    const json_t *groups = json_object_get(q, "config_groups");
    size_t nv = 0;
    const char *k;
    json_t *g;
    for (size_t i = 0; i < v->q.ntensors; i++)
        nv += dq_module_of(v->q.tensors[i].st->name, v->mod, v->mod_cap) != NULL;
    const char *want = nv && v->nfp8 ? "mixed-precision" : v->nfp8 ? FP8_FORMAT : "nvfp4-pack-quantized";
    if (strcmp(jsonio_str(q, "format", ""), want) != 0)
        fail_item(v, "quant_config", "format is '%s', expected %s (%zu NVFP4 and %zu FP8 modules)",
                  jsonio_str(q, "format", ""), want, nv, v->nfp8);
    const json_t *ia = json_object_get(q, "input_activations");   /* compressed-tensors keeps it per group */
    if (ia && !json_is_null(ia))
        fail_item(v, "quant_config", "input_activations are quantized (not A16)");
    if (!json_object_size(groups))
        fail_item(v, "quant_config", "no config_groups");
    json_object_foreach((json_t *)groups, k, g)
        check_group_scheme(v, k, g);
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const char *name = v->q.tensors[i].st->name;
        if (dq_module_of(name, v->mod, v->mod_cap))
            check_module_group(v, groups, v->mod, name, "nvfp4-pack-quantized");
        else if (fp8_part(&v->q, name) == 1 && fp8_module_of(&v->q, name, v->mod, v->mod_cap))
            check_module_group(v, groups, v->mod, name, FP8_FORMAT);
    }
    detail(v, "quant_config", "%s, %zu config groups (%zu NVFP4, %zu FP8 weight-only modules), %lld ignored",
           jsonio_str(q, "format", ""), json_object_size(groups), nv, v->nfp8, (long long)json_array_size(json_object_get(q, "ignore")));
}

static int output_mixed(const vctx *v, const json_t *q)
{
    const char *f = jsonio_str(q, "format", "");
    return v->nfp8 || strcmp(f, "mixed-precision") == 0 || strcmp(f, FP8_FORMAT) == 0;
}

static void check_qconfig(vctx *v)
{
    json_t *j = insp_to_json(&v->qi), *q = json_object_get(j, "quantization_config");
    check(v, "quant_config");
    if (!json_is_object(q)) {
        fail_item(v, "quant_config", "config.json has no quantization_config");
    } else if (output_mixed(v, json_object_get(v->q.config, "quantization_config"))) {
        check_qconfig_mixed(v, json_object_get(v->q.config, "quantization_config"));
    } else {
        if (strcmp(jsonio_str(q, "format", ""), "nvfp4-pack-quantized") != 0)
            fail_item(v, "quant_config", "format is '%s', expected nvfp4-pack-quantized", jsonio_str(q, "format", ""));
        if (!json_is_null(json_object_get(q, "input_activations")))
            fail_item(v, "quant_config", "input_activations are quantized (not A16)");
        detail(v, "quant_config", "%s, %lld ignored", jsonio_str(q, "format", ""), (long long)jsonio_int(q, "ignore", 0));
    }
    json_decref(j);
}

/* ---- fused groups share one global scale -------------------------------- */

typedef struct gs_rec {
    char *key, *module;      /* on the heap: module names of any length */
    float gs;
} gs_rec;

static int gs_cmp(const void *a, const void *b) { return strcmp(((const gs_rec *)a)->key, ((const gs_rec *)b)->key); }

/* The module's fused-group key and global scale into r: 1, or 0 when it
 * stands alone or is not whole (decode names it), -1 out of memory. */
static int gs_record(vctx *v, const char *mod, gs_rec *r)
{
    size_t klen = insp_tie_key(&v->qi, mod, NULL, 0);
    dq_module m;
    ff_err e2 = {0};
    if (!klen || dq_find(&v->q, mod, &m, &e2) != FF_OK)
        return 0;
    memcpy(&r->gs, ckpt_data(&v->q, m.global), sizeof r->gs);
    dq_module_free(&m);
    r->key = malloc(klen + 1);
    r->module = strdup(mod);
    if (!r->key || !r->module) {
        free(r->key);
        free(r->module);
        return -1;
    }
    insp_tie_key(&v->qi, mod, r->key, klen + 1);
    return 1;
}

/* One line per group that differs, every member with its scale. */
static void fail_group(vctx *v, const gs_rec *r, size_t n)
{
    size_t cap = 1;
    for (size_t k = 0; k < n; k++)
        cap += strlen(r[k].module) + 40;   /* ", " + " " + a %.9g float */
    char *buf = malloc(cap);
    for (size_t k = 0, o = 0; buf && k < n; k++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s %.9g", k ? ", " : "", r[k].module, (double)r[k].gs);
    fail_item(v, "fused_scales", "global scales differ in a fused group (one GEMM): %s",
              buf ? buf : "(out of memory listing its members)");
    v->out_of_memory |= !buf;
    free(buf);
}

static void check_fused(vctx *v)
{
    gs_rec *recs = calloc(v->q.ntensors + 1, sizeof *recs);
    size_t n = 0, groups = 0;
    int got = 0;
    check(v, "fused_scales");
    for (size_t i = 0; recs && got >= 0 && i < v->q.ntensors; i++)
        if (dq_module_of(v->q.tensors[i].st->name, v->mod, v->mod_cap) && (got = gs_record(v, v->mod, &recs[n])) > 0)
            n++;
    if (!recs || got < 0) {
        fail_item(v, "fused_scales", "out of memory grouping the global scales");
        v->out_of_memory = 1;
    }
    if (recs)
        qsort(recs, n, sizeof *recs, gs_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && strcmp(recs[j].key, recs[i].key) == 0)
            j++;
        groups++;
        int differ = 0;
        for (size_t k = i + 1; k < j; k++)
            differ |= memcmp(&recs[k].gs, &recs[i].gs, sizeof(float)) != 0;
        if (differ)
            fail_group(v, &recs[i], j - i);
        i = j;
    }
    detail(v, "fused_scales", "%zu fused groups, %zu members", groups, n);
    for (size_t i = 0; i < n; i++) {
        free(recs[i].key);
        free(recs[i].module);
    }
    free(recs);
}

/* ---- routers, vision, embeddings, norms, lm_head never quantized --------- */

static void check_guarded(vctx *v)
{
    char *mod = v->mod;
    size_t quantized = 0;
    check(v, "guarded_not_quantized");
    /* with no family nothing says which tensors are routers or towers: a
     * PASS here would be a check skipped, not passed */
    if (!v->qi.have_matcher && v->q.config)
        fail_item(v, "guarded_not_quantized", "model_type '%s' is no family fp4forge knows: routers, towers and norms "
                  "cannot be told apart (pass --family-file FILE; `fp4forge plan SRC --infer` proposes one)",
                  jsonio_str(v->q.config, "model_type", "?"));
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const char *name = v->q.tensors[i].st->name;
        int quant = dq_module_of(name, mod, v->mod_cap) ||
                    (fp8_part(&v->q, name) == 1 && fp8_module_of(&v->q, name, mod, v->mod_cap));
        const ff_rule *r = quant ? insp_rule(&v->qi, name) : NULL;
        quantized += r != NULL;
        if (r && r->guard != GUARD_NONE)
            fail_item(v, "guarded_not_quantized", "%s is quantized (%s must stay in its dtype)", mod, r->group);
    }
    detail(v, "guarded_not_quantized", "%zu quantized modules checked against the router, tower, embedding, norm "
                                       "and lm_head rules", quantized);
}

/* ---- ignore list == the Linears actually left unquantized ----------------- */

static int in_ignore(const json_t *ig, const char *mod)
{
    size_t i;
    json_t *x;
    json_array_foreach(ig, i, x) {
        const char *s = json_string_value(x);
        if (!s)
            continue;
        if (strncmp(s, "re:", 3) == 0) {
            regex_t re;
            if (regcomp(&re, s + 3, REG_EXTENDED | REG_NOSUB) != 0)
                continue;
            int hit = regexec(&re, mod, 0, NULL, 0) == 0;
            regfree(&re);
            if (hit)
                return 1;
        } else if (strcmp(s, mod) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A rule with ignore_parent (the MoE router) lists its parent module too,
 * as compressed-tensors does; such an entry names no tensor of its own. */
static int is_ignored_parent(const vctx *v, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const char *name = v->q.tensors[i].st->name;
        if (strncmp(name, s, n) || name[n] != '.')
            continue;
        const ff_rule *r = insp_rule(&v->qi, name);
        const char *dot = strchr(name + n + 1, '.');   /* s.<child>.weight */
        if (r && r->ignore_parent && dot && strcmp(dot, ".weight") == 0)
            return 1;
    }
    return 0;
}

/* "<parent>.<e>.<name>": one expert's Linear of a kept fused 3-D tensor
 * "<parent>.<fused>" whose rule splits it into <name>s (an MTP head's experts,
 * or experts the recipe ignored), listed in ignore by that per-expert name. */
static int is_kept_expert(const vctx *v, const char *s)
{
    size_t plen;
    long e;
    const char *out;
    if (!ff_expert_module_parse(s, &plen, &e, &out))
        return 0;
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const st_tensor *t = v->q.tensors[i].st;
        if (t->ndim != 3 || strncmp(t->name, s, plen) || t->name[plen] != '.' || e >= t->shape[0])
            continue;
        const ff_rule *r = insp_rule(&v->qi, t->name);
        for (int k = 0; r && r->role == ROLE_KEEP && k < 2 && r->expert_out[k]; k++)
            if (strcmp(r->expert_out[k], out) == 0)
                return 1;
    }
    return 0;
}

/* A kept fused 3-D expert tensor must have each expert's Linears in ignore. */
static size_t check_kept_experts(vctx *v, const json_t *ig, const st_tensor *t, const ff_rule *r)
{
    size_t n = 0;
    for (int64_t e = 0; e < t->shape[0]; e++)
        for (int k = 0; k < 2 && r->expert_out[k]; k++, n++) {
            char *mod = v->mod;
            ff_expert_module(mod, v->mod_cap, t->name, e, r->expert_out[k]);
            if (!in_ignore(ig, mod))
                fail_item(v, "ignore_list", "%s (of the kept %s) is left unquantized but not in the ignore list", mod,
                          t->name);
        }
    return n;
}

/* A Linear the family quantizes found as a plain weight: with --ignore it
 * stays in the source dtype and must be in ignore (else compressed-tensors
 * and vLLM look for its scales); that is the coverage of a mixed output. */
static void check_left_linear(vctx *v, const json_t *ig, const char *name, size_t stem)
{
    snprintf(v->mod, v->mod_cap, "%.*s", (int)stem, name);
    if (!in_ignore(ig, v->mod))
        fail_item(v, "ignore_list", "%s (%s) is neither NVFP4 nor FP8 and not in the ignore list", v->mod,
                  ff_dtype_name(ckpt_find(&v->q, name)->st->dtype));
}

static void check_ignore(vctx *v)
{
    const json_t *ig = insp_ignore(&v->qi);
    size_t kept = 0;
    char *mod = v->mod;
    check(v, "ignore_list");
    if (!ig)
        ig = json_array();  /* leaks nothing: a borrowed-looking empty array is freed below */
    for (size_t i = 0; i < v->q.ntensors; i++) {
        const char *name = v->q.tensors[i].st->name;
        const ff_rule *r = dq_part(&v->q, name) ? NULL : insp_rule(&v->qi, name);
        size_t len = strlen(name);
        if (r && r->linear && r->role == ROLE_KEEP && r->expert_out[0] && v->q.tensors[i].st->ndim == 3) {
            kept += check_kept_experts(v, ig, v->q.tensors[i].st, r);
            continue;
        }
        if (r && r->linear && r->role == ROLE_LINEAR && fp8_part(&v->q, name) == 0 && v->q.tensors[i].st->ndim == 2 &&
            len > 7 && strcmp(name + len - 7, ".weight") == 0) {
            check_left_linear(v, ig, name, len - 7);
            continue;
        }
        if (!r || !r->linear || r->role != ROLE_KEEP || len < 8 || strcmp(name + len - 7, ".weight") != 0)
            continue;
        snprintf(mod, v->mod_cap, "%.*s", (int)(len - 7), name);
        kept++;
        if (!in_ignore(ig, mod))
            fail_item(v, "ignore_list", "%s is left unquantized but not in the ignore list", mod);
    }
    size_t i;
    json_t *x;
    json_array_foreach(ig, i, x) {
        const char *s = json_string_value(x);
        if (!s || strncmp(s, "re:", 3) == 0)
            continue;
        if (ckpt_find_join(&v->q, s, strlen(s), "." DQ_PACKED)) {
            fail_item(v, "ignore_list", "%s is in the ignore list but quantized", s);
            continue;
        }
        const ckpt_tensor *w = ckpt_find_join(&v->q, s, strlen(s), ".weight");
        if (w && fp8_part(&v->q, w->st->name) == 1) {
            fail_item(v, "ignore_list", "%s is in the ignore list but quantized (FP8 weight-only)", s);
            continue;
        }
        /* a tied lm_head has no tensor of its own; the ignore entry is harmless */
        const ff_rule *r = insp_module_rule(&v->qi, s);
        int tied = r && strcmp(r->group, "lm_head") == 0 && v->qi.cls.tie_embeddings;
        if (!ckpt_find_join(&v->q, s, strlen(s), ".weight") && !tied && !is_ignored_parent(v, s) &&
            !is_kept_expert(v, s))
            fail_item(v, "ignore_list", "%s is in the ignore list but no such module exists", s);
    }
    detail(v, "ignore_list", "%zu entries, %zu Linears kept", json_array_size(ig), kept);
    if (!insp_ignore(&v->qi))
        json_decref((json_t *)ig);
}

/* ---- tokenizer and aux files ------------------------------------------------ */

static void check_tokenizer(vctx *v)
{
    char *p = fs_join(v->q.dir, "tokenizer.json");
    check(v, "tokenizer");
    if (!fs_exists(p)) {
        detail(v, "tokenizer", "no tokenizer.json");
    } else {
        json_t *t = NULL;
        ff_err e2 = {0};
        v->out_of_memory |= jsonio_load(p, &t, &e2) != FF_OK && e2.oom;
        if (e2.code)
            fail_item(v, "tokenizer", "%s", e2.msg);
        else if (!json_is_null(json_object_get(t, "truncation")) && json_object_get(t, "truncation"))
            fail_item(v, "tokenizer", "tokenizer.json has truncation set (prompts would be cut); run fp4forge doctor --fix");
        else
            detail(v, "tokenizer", "truncation null");
        json_decref(t);
    }
    free(p);
}

static void check_aux(vctx *v)
{
    int n = 0;
    check(v, "aux_files");
    for (int i = 0; serving_aux[i]; i++) {
        char *a = v->have_src ? fs_join(v->s.dir, serving_aux[i]) : NULL, *b = fs_join(v->q.dir, serving_aux[i]);
        v->out_of_memory |= !b || (v->have_src && !a);
        if (a && fs_exists(a) && !fs_exists(b))
            fail_item(v, "aux_files", "%s is in the source but missing from the output", serving_aux[i]);
        n += fs_exists(b);
        free(a);
        free(b);
    }
    detail(v, "aux_files", "%d serving files present%s", n, v->have_src ? "" : " (no source to compare)");
}

/* ---- against the source: coverage, kept bytes, error ---------------------- */

/* One module measured by the pool in blocks of rows: each block's sums
 * apart, added in block order, so the figures do not depend on the thread
 * count; each block's rows are dropped from both mappings once read. */
typedef struct mjob {
    const ckpt *q, *s;
    const dq_module *m;
    const dq_table *t;
    const ckpt_tensor *src;
    const uint8_t *rows;     /* the member's rows in the source dtype */
    int mapped;              /* rows lie in the source's mapping */
    double *se, *ss;
    dq_stats *st;
} mjob;

#define MEASURE_ROWS 64

static void measure_task(void *ctx, size_t k)
{
    mjob *j = ctx;
    uint64_t row = (uint64_t)k * MEASURE_ROWS, left = j->m->rows - row;
    uint64_t n = left < MEASURE_ROWS ? left : MEASURE_ROWS;
    uint64_t row_bytes = j->m->cols * ff_dtype_size(j->src->st->dtype);
    j->st[k].first_bad = UINT64_MAX;
    dq_error_rows(j->q, j->m, j->t, row, n, j->rows + row * row_bytes, j->src->st->dtype, &j->se[k], &j->ss[k],
                  &j->st[k]);
    if (j->mapped)
        dq_drop(j->s, j->src, (uint64_t)(j->rows - ckpt_data(j->s, j->src)) + row * row_bytes, n * row_bytes);
    dq_drop_rows(j->q, j->m, row, n);
}

static void add_record(vctx *v, const char *mod, const dq_module *m, double se, double ss)
{
    double rel = ss > 0 ? sqrt(se / ss) : (se > 0 ? INFINITY : 0);
    double snr = se > 0 ? 10 * log10(ss / se) : 99.0;
    json_t *r = json_object();
    json_object_set_new(r, "module", jsonio_string(mod));
    json_object_set_new(r, "family", json_string(insp_family(&v->qi, m->packed->st->name)));
    json_object_set_new(r, "rel_error", json_real(rel));
    json_object_set_new(r, "snr_db", json_real(snr));
    json_object_set_new(r, "numel", json_integer((json_int_t)(m->rows * m->cols)));
    json_array_append_new(v->errors, r);
}

/* Runs j over every block; 0 when no value decoded to NaN/Inf. */
static int measure_blocks(vctx *v, mjob *j, double *se, double *ss)
{
    size_t nb = (size_t)((j->m->rows + MEASURE_ROWS - 1) / MEASURE_ROWS);
    uint64_t bad = 0;
    pool_run(v->pool, nb, measure_task, j);
    *se = *ss = 0;
    for (size_t k = 0; k < nb; k++) {
        *se += j->se[k];
        *ss += j->ss[k];
        bad += j->st[k].nonfinite;
    }
    return bad != 0;
}

/* Relative error and SNR of the bf16 decode (what compressed-tensors hands
 * the model) against the source rows it came from. */
static void measure(vctx *v, const plan_member *pm)
{
    dq_module m;
    ff_err e2 = {0};
    if (dq_find(&v->q, pm->module, &m, &e2) != FF_OK)
        return;  /* the decode check names it */
    size_t nb = (size_t)((m.rows + MEASURE_ROWS - 1) / MEASURE_ROWS) + 1;
    mjob j = {.q = &v->q, .s = &v->s, .m = &m, .src = pm->src, .t = malloc(sizeof(dq_table)),
              .se = calloc(nb, sizeof(double)), .ss = calloc(nb, sizeof(double)), .st = calloc(nb, sizeof(dq_stats))};
    void *owned = NULL;
    float gs;
    v->out_of_memory |= !j.t || !j.se || !j.ss || !j.st;
    if (j.t && j.se && j.ss && j.st &&
        (j.rows = plan_member_rows(pm, ckpt_data(&v->s, pm->src), &owned, &e2)) != NULL) {
        double se, ss;
        memcpy(&gs, ckpt_data(&v->q, m.global), sizeof gs);
        dq_table_init((dq_table *)j.t, gs);
        j.mapped = owned == NULL;
        if (!measure_blocks(v, &j, &se, &ss))
            add_record(v, pm->module, &m, se, ss);
    }
    dq_drop_whole(&v->s, pm->src);
    dq_drop_whole(&v->q, m.packed);
    dq_drop_whole(&v->q, m.scale);
    free(owned);
    free((void *)j.t);
    free(j.se);
    free(j.ss);
    free(j.st);
    dq_module_free(&m);
}

/* An FP8 module measured like an NVFP4 one: blocks of rows on the pool, each
 * block's sums apart, added in block order. */
typedef struct fjob {
    const ckpt *q, *s;
    const fp8_module *m;
    const ckpt_tensor *src;
    double *se, *ss;
    uint64_t *bad;
} fjob;

static void measure_fp8_task(void *ctx, size_t k)
{
    fjob *j = ctx;
    uint64_t row = (uint64_t)k * MEASURE_ROWS, left = j->m->rows - row;
    uint64_t n = left < MEASURE_ROWS ? left : MEASURE_ROWS;
    uint64_t row_bytes = j->m->cols * ff_dtype_size(j->src->st->dtype);
    fp8_error_rows(j->q, j->m, row, n, ckpt_data(j->s, j->src) + row * row_bytes, j->src->st->dtype, &j->se[k],
                   &j->ss[k], &j->bad[k]);
    dq_drop(j->s, j->src, row * row_bytes, n * row_bytes);
    fp8_drop_rows(j->q, j->m, row, n);
}

static void add_fp8_record(vctx *v, const fp8_module *m, double se, double ss)
{
    double rel = ss > 0 ? sqrt(se / ss) : (se > 0 ? INFINITY : 0);
    double snr = se > 0 ? 10 * log10(ss / se) : 99.0;
    json_t *r = json_object();
    json_object_set_new(r, "module", jsonio_string(m->module));
    json_object_set_new(r, "family", json_string(insp_family(&v->qi, m->weight->st->name)));
    json_object_set_new(r, "scheme", json_string("fp8"));
    json_object_set_new(r, "rel_error", json_real(rel));
    json_object_set_new(r, "snr_db", json_real(snr));
    json_object_set_new(r, "numel", json_integer((json_int_t)(m->rows * m->cols)));
    json_array_append_new(v->fp8_errors, r);
}

/* Relative error and SNR of the FP8 module's decode (NaiveQuantizationCompressor's,
 * in the source dtype) against the source weight it came from. */
static void measure_fp8(vctx *v, const ckpt_tensor *src, const char *mod)
{
    fp8_module m;
    ff_err e2 = {0};
    if (fp8_find(&v->q, mod, &m, &e2) != FF_OK)
        return;   /* the decode check names it */
    if (src->st->ndim != 2 || (uint64_t)src->st->shape[0] != m.rows || (uint64_t)src->st->shape[1] != m.cols ||
        !ff_dtype_is_quantizable(src->st->dtype)) {
        fail_item(v, "coverage", "%s: FP8 weight [%llu, %llu] does not match the source's %s", m.weight->st->name,
                  (unsigned long long)m.rows, (unsigned long long)m.cols, ff_dtype_name(src->st->dtype));
        fp8_module_free(&m);
        return;
    }
    size_t nb = (size_t)((m.rows + MEASURE_ROWS - 1) / MEASURE_ROWS) + 1;
    fjob j = {.q = &v->q, .s = &v->s, .m = &m, .src = src, .se = calloc(nb, sizeof(double)),
              .ss = calloc(nb, sizeof(double)), .bad = calloc(nb, sizeof(uint64_t))};
    v->out_of_memory |= !j.se || !j.ss || !j.bad;
    if (j.se && j.ss && j.bad) {
        double se = 0, ss = 0;
        uint64_t bad = 0;
        pool_run(v->pool, nb - 1, measure_fp8_task, &j);
        for (size_t k = 0; k + 1 < nb; k++) {
            se += j.se[k];
            ss += j.ss[k];
            bad += j.bad[k];
        }
        if (!bad)
            add_fp8_record(v, &m, se, ss);
    }
    dq_drop_whole(&v->s, src);
    dq_drop_whole(&v->q, m.weight);
    dq_drop_whole(&v->q, m.scale);
    free(j.se);
    free(j.ss);
    free(j.bad);
    fp8_module_free(&m);
}

/* Marks a module's three output tensors as accounted for. */
static int claim_module(vctx *v, const char *mod, char *used)
{
    static const char *const parts[] = {"." DQ_PACKED, "." DQ_SCALE, "." DQ_GLOBAL};
    int found = 0;
    for (int k = 0; k < 3; k++) {
        const ckpt_tensor *t = ckpt_find_join(&v->q, mod, strlen(mod), parts[k]);
        if (t) {
            used[t - v->q.tensors] = 1;
            found += k == 0;
        }
    }
    return found;
}

/* Byte for byte, a piece at a time, each piece dropped from both mappings. */
static int same_bytes(vctx *v, const ckpt_tensor *st, const ckpt_tensor *qt, uint64_t n)
{
    kept_pieces j = {.c = &v->q, .s = &v->s, .t = qt, .st = st, .bytes = n};
    size_t pieces = run_kept_pieces(v->pool, &j);
    int differs = 0;
    for (size_t k = 0; k < pieces; k++)
        differs |= j.got[k] != 0;
    free(j.got);
    if (pieces)
        return !differs;
    for (uint64_t at = 0; at < n; at += KEPT_PIECE) {
        uint64_t k = n - at < KEPT_PIECE ? n - at : KEPT_PIECE;
        int same = memcmp(ckpt_data(&v->s, st) + at, ckpt_data(&v->q, qt) + at, k) == 0;
        dq_drop(&v->s, st, at, k);
        dq_drop(&v->q, qt, at, k);
        if (!same)
            return 0;
    }
    return 1;
}

static void compare_kept(vctx *v, const ckpt_tensor *st, const ckpt_tensor *qt)
{
    const st_tensor *a = st->st, *b = qt->st;
    uint64_t n = a->end - a->begin;
    int differs = a->dtype != b->dtype || a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof a->shape) != 0 ||
                  n != b->end - b->begin || !same_bytes(v, st, qt, n);
    dq_drop_whole(&v->s, st);
    dq_drop_whole(&v->q, qt);
    if (differs)
        fail_item(v, "kept_identical", "%s (%s) differs from the source", a->name, insp_family(&v->qi, a->name));
}

/* quantize drops a source's input_scale beside a Linear it quantizes
 * (NVFP4A16 activations are 16-bit): accounted for, not missing. */
static int dropped_input_scale(const vctx *v, const char *name)
{
    static const char suf[] = ".input_scale";
    size_t n = strlen(name), k = sizeof suf - 1;
    if (n <= k || strcmp(name + n - k, suf) != 0)
        return 0;
    return ckpt_find_join(&v->q, name, n - k, "." DQ_PACKED) != NULL;
}

/* Source tensors kept or quantized under their own name. */
static void cover_direct(vctx *v, char *used, char *needs, size_t *nkept, size_t *nquant)
{
    for (size_t i = 0; i < v->s.ntensors; i++) {
        const ckpt_tensor *st = &v->s.tensors[i];
        const char *name = st->st->name;
        const ckpt_tensor *qt = ckpt_find(&v->q, name);
        size_t len = strlen(name);
        char *mod = v->mod;
        progress_add(&v->bar, st->st->end - st->st->begin, i + 1, v->s.ntensors);
        if (qt && fp8_part(&v->q, name) == 1 && fp8_module_of(&v->q, name, mod, v->mod_cap)) {
            const ckpt_tensor *sc = ckpt_find_join(&v->q, mod, strlen(mod), ".weight_scale");
            used[qt - v->q.tensors] = 1;
            used[sc - v->q.tensors] = 1;
            measure_fp8(v, st, mod);
            (*nquant)++;
        } else if (qt) {
            used[qt - v->q.tensors] = 1;
            compare_kept(v, st, qt);
            (*nkept)++;
        } else if (len > 7 && strcmp(name + len - 7, ".weight") == 0 &&
                   (snprintf(mod, v->mod_cap, "%.*s", (int)(len - 7), name), claim_module(v, mod, used))) {
            plan_member whole = {.src = st, .rows = (uint64_t)st->st->shape[0],
                                 .cols = st->st->ndim > 1 ? (uint64_t)st->st->shape[1] : 1, .module = mod};
            measure(v, &whole);
            (*nquant)++;
        } else if (!dropped_input_scale(v, name)) {
            needs[i] = 1;
        }
    }
}

/* Fused 3-D experts: their plan members name the split modules. */
static void cover_members(vctx *v, char *used, char *needs, size_t *nquant)
{
    char *covered = calloc(v->s.ntensors + 1, 1);
    if (!covered)
        return;
    for (size_t k = 0; v->have_plan && k < v->p.nmembers; k++) {
        const plan_member *m = &v->p.members[k];
        size_t si = (size_t)(m->src - v->s.tensors);
        if (!needs[si])
            continue;
        if (claim_module(v, m->module, used)) {
            measure(v, m);
            (*nquant)++;
            covered[si] = 1;
        } else {
            fail_item(v, "coverage", "%s (from %s) is missing from the output", m->module, m->src->st->name);
            covered[si] = 2;
        }
    }
    for (size_t i = 0; i < v->s.ntensors; i++)
        if (needs[i] && !covered[i])
            fail_item(v, "coverage", "%s is in the source but not in the output", v->s.tensors[i].st->name);
    free(covered);
}

static void check_coverage(vctx *v)
{
    char *used = calloc(v->q.ntensors + 1, 1), *needs = calloc(v->s.ntensors + 1, 1);
    size_t nkept = 0, nquant = 0, extra = 0;
    check(v, "coverage");
    check(v, "kept_identical");
    if (!used || !needs) {
        free(used);
        free(needs);
        return;
    }
    cover_direct(v, used, needs, &nkept, &nquant);
    cover_members(v, used, needs, &nquant);
    for (size_t i = 0; i < v->q.ntensors; i++)
        if (!used[i] && ++extra)
            fail_item(v, "coverage", "%s is in the output but comes from no source tensor", v->q.tensors[i].st->name);
    detail(v, "coverage", "%zu source tensors: %zu kept, %zu modules quantized, %zu extra", v->s.ntensors,
           nkept, nquant, extra);
    detail(v, "kept_identical", "%zu kept tensors compared byte for byte", nkept);
    free(used);
    free(needs);
}

static int err_cmp(const void *a, const void *b)
{
    double x = json_real_value(json_object_get(*(json_t *const *)a, "rel_error"));
    double y = json_real_value(json_object_get(*(json_t *const *)b, "rel_error"));
    return (x < y) - (x > y);
}

/* Thresholds over the measured figures; the worst tensors are listed. */
static json_t *check_error(vctx *v)
{
    size_t n = json_array_size(v->errors);
    json_t **e = malloc((n ? n : 1) * sizeof *e), *sum = json_object(), *worst = json_array();
    double srel = 0, ssnr = 0, maxrel = 0, minsnr = n ? 1e9 : 0;
    check(v, "error");
    for (size_t i = 0; e && i < n; i++) {
        e[i] = json_array_get(v->errors, i);
        double rel = json_real_value(json_object_get(e[i], "rel_error"));
        double snr = json_real_value(json_object_get(e[i], "snr_db"));
        srel += rel;
        ssnr += snr;
        maxrel = rel > maxrel ? rel : maxrel;
        minsnr = snr < minsnr ? snr : minsnr;
        if (rel > v->o->max_rel || snr < v->o->min_snr)
            fail_item(v, "error", "%s: relative error %.4f, SNR %.2f dB (limits %.3f, %.1f dB)",
                      jsonio_str(e[i], "module", ""), rel, snr, v->o->max_rel, v->o->min_snr);
    }
    double mrel = n ? srel / (double)n : 0, msnr = n ? ssnr / (double)n : 0;
    if (n && mrel > v->o->max_mean_rel)
        fail_item(v, "error", "mean relative error %.4f over %zu tensors exceeds %.3f", mrel, n, v->o->max_mean_rel);
    if (e)
        qsort(e, n, sizeof *e, err_cmp);
    for (size_t i = 0; e && i < n && i < (size_t)v->o->worst; i++)
        json_array_append(worst, e[i]);
    free(e);
    json_object_set_new(sum, "tensors", json_integer((json_int_t)n));
    json_object_set_new(sum, "mean_rel_error", json_real(mrel));
    json_object_set_new(sum, "max_rel_error", json_real(maxrel));
    json_object_set_new(sum, "mean_snr_db", json_real(msnr));
    json_object_set_new(sum, "min_snr_db", json_real(minsnr));
    json_object_set_new(sum, "max_rel_limit", json_real(v->o->max_rel));
    json_object_set_new(sum, "worst", worst);
    detail(v, "error", "%zu tensors: mean rel %.4f, max rel %.4f, mean SNR %.2f dB, min SNR %.2f dB", n, mrel,
           maxrel, msnr, minsnr);
    return sum;
}

/* The FP8 modules' figures, apart from NVFP4's (their error is an order
 * smaller: one mean over both would hide an NVFP4 regression), under the
 * same per-tensor limits; sum gets "fp8", the error detail a clause. */
static void check_error_fp8(vctx *v, json_t *sum)
{
    size_t n = json_array_size(v->fp8_errors), i;
    json_t *r, *f;
    double srel = 0, ssnr = 0, maxrel = 0, minsnr = n ? 1e9 : 0;
    const char *wmod = "";
    if (!v->nfp8)
        return;
    f = json_object();
    json_array_foreach(v->fp8_errors, i, r) {
        double rel = json_real_value(json_object_get(r, "rel_error"));
        double snr = json_real_value(json_object_get(r, "snr_db"));
        srel += rel;
        ssnr += snr;
        if (rel >= maxrel)
            wmod = jsonio_str(r, "module", "");
        maxrel = rel > maxrel ? rel : maxrel;
        minsnr = snr < minsnr ? snr : minsnr;
        if (rel > v->o->max_rel || snr < v->o->min_snr)
            fail_item(v, "error", "%s (FP8): relative error %.4f, SNR %.2f dB (limits %.3f, %.1f dB)",
                      jsonio_str(r, "module", ""), rel, snr, v->o->max_rel, v->o->min_snr);
    }
    double mrel = n ? srel / (double)n : 0, msnr = n ? ssnr / (double)n : 0;
    json_object_set_new(f, "tensors", json_integer((json_int_t)n));
    json_object_set_new(f, "mean_rel_error", json_real(mrel));
    json_object_set_new(f, "max_rel_error", json_real(maxrel));
    json_object_set_new(f, "mean_snr_db", json_real(msnr));
    json_object_set_new(f, "min_snr_db", json_real(minsnr));
    json_object_set_new(f, "worst_module", jsonio_string(wmod));
    json_object_set_new(sum, "fp8", f);
    const char *was = json_string_value(json_object_get(check(v, "error"), "detail"));
    char *prev = strdup(was ? was : "");
    v->out_of_memory |= !prev;
    if (json_array_size(v->errors))
        detail(v, "error", "%s (NVFP4); FP8 weight-only %zu tensors: mean rel %.4f, max rel %.4f, mean SNR %.2f dB, "
                           "min SNR %.2f dB", prev ? prev : "", n, mrel, maxrel, msnr, minsnr);
    else   /* every quantized Linear FP8: no NVFP4 figures to put beside them */
        detail(v, "error", "no NVFP4 tensors; FP8 weight-only %zu tensors: mean rel %.4f, max rel %.4f, mean SNR "
                           "%.2f dB, min SNR %.2f dB", n, mrel, maxrel, msnr, minsnr);
    free(prev);
}

/* The weight observer the output records (llm-compressor's name). */
static const char *output_observer(const ckpt *q)
{
    const json_t *groups = json_object_get(json_object_get(q->config, "quantization_config"), "config_groups");
    const char *k;
    json_t *g;
    json_object_foreach((json_t *)groups, k, g) {
        const char *o = json_string_value(json_object_get(json_object_get(g, "weights"), "observer"));
        if (o)
            return o;
    }
    return "memoryless_minmax";
}

/* Beside each tensor's error, what min/max would have given: only for an
 * output made with a search observer (for min/max output they are equal). */
static void compare_minmax(vctx *v, json_t *sum)
{
    const char *obs = output_observer(&v->q);
    if (!v->have_plan || strcmp(obs, "memoryless_minmax") == 0 || strcmp(obs, "minmax") == 0)
        return;
    ff_err e2 = {0};
    json_t *mm = verify_minmax_errors(&v->p, &v->s, &e2), *r;
    size_t i, n = 0;
    double total = 0;
    json_array_foreach(v->errors, i, r) {
        json_t *x = mm ? json_object_get(mm, jsonio_str(r, "module", "")) : NULL;
        if (x) {
            json_object_set(r, "minmax_rel_error", x);
            total += json_real_value(x);
            n++;
        }
    }
    json_decref(mm);
    if (!n)
        return;
    json_object_set_new(sum, "observer", json_string(obs));
    json_object_set_new(sum, "mean_minmax_rel_error", json_real(total / (double)n));
    char was[600];
    snprintf(was, sizeof was, "%s", json_string_value(json_object_get(check(v, "error"), "detail")));
    detail(v, "error", "%s; observer %s, where min/max would give mean rel %.4f", was, obs, total / (double)n);
}

/* ---- driver ----------------------------------------------------------------- */

/* v->mod: room for any module name of either checkpoint with a part or a
 * split expert's ".<e>.<out>" added (out names are the family table's). */
static int alloc_names(vctx *v, ff_err *e)
{
    size_t longest = 0;
    for (size_t i = 0; i < v->q.ntensors; i++)
        longest = strlen(v->q.tensors[i].st->name) > longest ? strlen(v->q.tensors[i].st->name) : longest;
    for (size_t i = 0; v->have_src && i < v->s.ntensors; i++)
        longest = strlen(v->s.tensors[i].st->name) > longest ? strlen(v->s.tensors[i].st->name) : longest;
    v->mod_cap = longest + 128;
    v->mod = malloc(v->mod_cap);
    return v->mod ? FF_OK : ff_oom(e, "out of memory");
}

static int open_all(vctx *v, const char *out_dir, ff_err *e)
{
    int rc = ckpt_open(&v->q, out_dir, 1, e);
    if (!rc)
        rc = insp_build(&v->qi, &v->q, v->o->family, e);
    if (!rc && v->o->against) {
        rc = ckpt_open(&v->s, v->o->against, 1, e);
        qs_format qf;
        char why[400], name[96];
        if (rc == FF_OK && (qs_config(v->s.config, &qf, why, sizeof why) == 1 || qs_layout(&v->s, &qf))) {
            /* its plan reads a decoded view the checks below do not decode */
            ckpt_close(&v->s);
            rc = ff_fail(e, FF_EUSAGE, "%s: --against a %s source is not supported; verify against its decoded bf16 "
                                       "copy (fp4forge quantize SRC DEC --ignore '.*' --allow-partial)",
                         v->o->against, qs_format_name(&qf, name, sizeof name));
        }
        v->have_src = rc == FF_OK;
        if (v->have_src) {
            plan_opts po = {.family = v->o->family};
            ff_err e2 = {0};
            int prc = plan_build(&v->p, &v->s, &po, &e2);
            v->have_plan = 1;  /* a refused plan is still filled: its members are what we need */
            (void)prc;
        }
    }
    if (!rc && !(v->pool = pool_create(v->o->threads)))
        rc = ff_oom(e, "out of memory starting %d threads", v->o->threads);
    return rc ? rc : alloc_names(v, e);
}

static uint64_t data_bytes(const ckpt *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        n += c->tensors[i].st->end - c->tensors[i].st->begin;
    return n;
}

static void close_all(vctx *v)
{
    if (v->have_plan)
        plan_free(&v->p);
    pool_destroy(v->pool);
    insp_free(&v->qi);
    ckpt_close(&v->q);
    if (v->o->against)
        ckpt_close(&v->s);
    json_decref(v->checks);
    json_decref(v->errors);
    json_decref(v->fp8_errors);
    free(v->mod);
}

int verify_run(const char *out_dir, const verify_opts *o, json_t **result, ff_err *e)
{
    vctx v;
    memset(&v, 0, sizeof v);
    v.o = o;
    unsigned long json_failures = jsonio_alloc_failures();
    v.checks = json_object();
    v.errors = json_array();
    v.fp8_errors = json_array();
    *result = NULL;
    int rc = open_all(&v, out_dir, e);
    if (rc) {
        close_all(&v);
        return rc;
    }
    progress_begin(&v.bar, data_bytes(v.have_src ? &v.s : &v.q), o->progress);
    check_decode(&v);
    check_stray(&v);
    check_kept_finite(&v);
    check_qconfig(&v);
    check_fused(&v);
    check_guarded(&v);
    check_ignore(&v);
    check_tokenizer(&v);
    check_aux(&v);
    json_t *r = json_object(), *err = NULL;
    if (v.have_src) {
        check_coverage(&v);
        err = check_error(&v);
        check_error_fp8(&v, err);
        compare_minmax(&v, err);
    }
    progress_end(&v.bar);
    int ok = 1;
    const char *k;
    json_t *c;
    json_object_foreach(v.checks, k, c)
        ok &= json_is_true(json_object_get(c, "ok"));
    json_object_set_new(r, "output", jsonio_string(out_dir));
    json_object_set_new(r, "against", o->against ? jsonio_string(o->against) : json_null());
    json_object_set_new(r, "ok", json_boolean(ok));
    json_object_set_new(r, "class", json_string(insp_class_name(&v.qi.cls)));
    json_object_set(r, "checks", v.checks);
    if (err) {
        json_object_set_new(r, "error", err);
        json_object_set(r, "tensors", v.errors);
        if (v.nfp8)
            json_object_set(r, "fp8_tensors", v.fp8_errors);
    }
    close_all(&v);
    if (v.out_of_memory || jsonio_alloc_failures() != json_failures || !r) {
        json_decref(r);
        return ff_oom(e, "%s: out of memory while verifying (no verdict)", out_dir);
    }
    *result = r;
    return FF_OK;
}

#define PRINT_ITEMS 8

void verify_print(const json_t *r, FILE *out)
{
    fprintf(out, "fp4forge verify: %s%s%s\n", jsonio_str(r, "output", ""), json_is_string(json_object_get(r, "against")) ? " against " : "",
            jsonio_str(r, "against", ""));
    const char *k;
    json_t *c;
    json_object_foreach(json_object_get(r, "checks"), k, c) {
        int ok = json_is_true(json_object_get(c, "ok"));
        const json_t *items = json_object_get(c, "items");
        fprintf(out, "  %s %-22s %s\n", ok ? "ok  " : "FAIL", k, jsonio_str(c, "detail", ""));
        for (size_t i = 0; i < json_array_size(items) && i < PRINT_ITEMS; i++)
            fprintf(out, "         %s\n", json_string_value(json_array_get(items, i)));
        if (json_array_size(items) > PRINT_ITEMS)
            fprintf(out, "         ... %zu more (--json lists all)\n", json_array_size(items) - PRINT_ITEMS);
    }
    const json_t *worst = json_object_get(json_object_get(r, "error"), "worst");
    if (json_array_size(worst))
        fprintf(out, "  worst tensors (relative error, SNR):\n");
    for (size_t i = 0; i < json_array_size(worst); i++) {
        const json_t *w = json_array_get(worst, i);
        const json_t *mm = json_object_get(w, "minmax_rel_error");
        fprintf(out, "    %.4f  %6.2f dB  %s", json_real_value(json_object_get(w, "rel_error")),
                json_real_value(json_object_get(w, "snr_db")), jsonio_str(w, "module", ""));
        if (mm)
            fprintf(out, "  (min/max: %.4f)", json_real_value(mm));
        fputc('\n', out);
    }
    fprintf(out, "  verdict: %s\n", json_is_true(json_object_get(r, "ok")) ? "PASS" : "FAIL");
}
