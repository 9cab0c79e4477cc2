#include "fit.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonio.h"
#include "plan.h"

#define GIB 1073741824.0

void fit_opts_default(fit_opts *o)
{
    memset(o, 0, sizeof *o);
    o->context = 262144;
    o->max_seqs = 1;        /* vLLM's start-up check: one request at max_model_len */
    o->kv_dtype_bytes = 2;
    o->batched_tokens = 8192; /* vLLM's API-server default on >= 70 GiB GPUs (arg_utils.py) */
    o->block_size = 16;     /* vLLM's CUDA default --block-size */
    o->act_reserve = -1;
    o->enc_reserve = -1;
}

/* ---- weights: classified by name, so input and planned output tally alike */

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Towers the text model does not need (--language-model-only skips them):
 * the family's rules say which tensors belong to one. */
static int is_tower(const ff_matcher *m, const char *name)
{
    const ff_rule *r = m ? ff_match(m, name) : NULL;
    return r && r->tower;
}

void fit_weights_add(fit_weights *w, const ff_matcher *m, const char *name, ff_dtype dtype, uint64_t bytes)
{
    w->total += bytes;
    if (is_tower(m, name))
        w->vision += bytes;
    else if (has_suffix(name, ".weight_packed"))
        w->packed += bytes;
    else if (dtype == FF_DT_F8_E4M3 && has_suffix(name, ".weight"))
        w->fp8 += bytes;
    else if (has_suffix(name, ".weight_scale") || has_suffix(name, "_global_scale"))
        w->scales += bytes;
    else
        w->other += bytes;
}

/* ---- KV: per layer, grouped into kinds ---------------------------------- */

/* vLLM keeps K and V for every attention layer, K=V ones included: the
 * checkpoint's k_proj is loaded into both slots and V (a norm of k) differs
 * from K (rope of a norm of k), so two tensors unless --k-eq-v-single. */
static int layer_tensors(const ff_layer *l, const fit_opts *o)
{
    if (!l->has_kv)
        return 0;           /* reads the KV of an earlier layer of its type */
    return (l->k_is_v && o->k_is_v_single) ? 1 : 2;
}

int fit_kv_kinds(const ff_geometry *g, const fit_opts *o, fit_kv_kind *kinds, int max, ff_err *e)
{
    int n = 0;
    for (int i = 0; i < g->layers; i++) {
        const ff_layer *l = &g->layer[i];
        if (l->state_bytes > 0)
            continue;       /* a recurrent layer: its state is counted apart */
        fit_kv_kind k = {.full = l->full, .kv_heads = l->kv_heads, .head_dim = l->head_dim,
                         .tensors = layer_tensors(l, o), .k_is_v = l->k_is_v, .count = 1};
        k.bytes_per_token = (uint64_t)k.tensors * (uint64_t)k.kv_heads * (uint64_t)k.head_dim *
                                (uint64_t)o->kv_dtype_bytes + (uint64_t)l->extra_per_token;
        int j = 0;
        while (j < n && !(kinds[j].full == k.full && kinds[j].kv_heads == k.kv_heads &&
                          kinds[j].head_dim == k.head_dim && kinds[j].tensors == k.tensors &&
                          kinds[j].bytes_per_token == k.bytes_per_token &&
                          kinds[j].k_is_v == k.k_is_v))
            j++;
        if (j < n) {
            kinds[j].count++;
            continue;
        }
        if (n == max) {
            ff_fail(e, FF_EIO, "fit: more than %d distinct layer kinds", max);
            return -1;
        }
        kinds[n++] = k;
    }
    return n;
}

static int64_t round_up(int64_t n, int64_t b)
{
    return b > 1 ? (n + b - 1) / b * b : n;
}

/* vLLM's SlidingWindowSpec holds the last window-1 tokens plus the tokens in
 * flight (max_num_batched_tokens), never more than the sequence itself, in
 * whole blocks plus one because the window need not start on a block edge
 * (kv_cache_interface.py, max_admission_blocks_per_request). */
int64_t fit_sliding_tokens(int64_t context, int64_t window, int64_t batched, int64_t block)
{
    if (window <= 0)
        return round_up(context, block);  /* no window stated: it holds everything */
    int64_t held = window - 1 + batched;
    held = held < context ? held : context;
    return round_up(held, block) + (block > 1 ? block : 0);
}

/* Full layers hold every token, in whole blocks (FullAttentionSpec). Each
 * kind has its own block size: vLLM gives every KV group the same page
 * bytes, so kinds with fewer bytes per token get proportionally longer
 * blocks (kv_cache_utils.py, "kv lcm block sizes"). */
uint64_t fit_kv_bytes(const fit_report *r, int64_t context)
{
    uint64_t one = 0;
    for (int i = 0; i < r->nkinds; i++) {
        const fit_kv_kind *k = &r->kinds[i];
        int64_t held = k->full ? round_up(context, k->block)
                               : fit_sliding_tokens(context, r->window, r->o.batched_tokens, k->block);
        one += k->bytes_per_token * (uint64_t)k->count * (uint64_t)held;
    }
    /* linear-attention layers hold one state a sequence, whatever its length */
    return (one + r->state_per_seq) * (uint64_t)r->o.max_seqs;
}

/* The kind with the most bytes per token keeps --block-size. */
static void kind_blocks(fit_kv_kind *kinds, int n, int64_t block)
{
    uint64_t most = 0;
    for (int i = 0; i < n; i++)
        most = kinds[i].bytes_per_token > most ? kinds[i].bytes_per_token : most;
    for (int i = 0; i < n; i++)
        kinds[i].block = kinds[i].bytes_per_token && block > 1
                             ? block * (int64_t)(most / kinds[i].bytes_per_token) : block;
}

/* ---- reserves: estimates, documented in docs/fit.md ---------------------- */

/* What vLLM's profiling forward pass peaks at beyond weights and KV: one
 * layer's transient tensors for max_num_batched_tokens tokens in bf16, the
 * MoE dispatch buffers, fp32 logits for max_num_seqs rows, and a fixed 1 GiB
 * for the CUDA context, cuBLAS workspaces and CUDA graphs that vLLM counts as
 * non-torch memory. */
uint64_t fit_activation_estimate(const ff_geometry *g, const fit_opts *o)
{
    int64_t qmax = 0, kvmax = 0, imax = 0;
    for (int i = 0; i < g->layers; i++) {
        const ff_layer *l = &g->layer[i];
        int64_t q = (int64_t)g->heads * l->head_dim, kv = (int64_t)l->kv_heads * l->head_dim;
        qmax = q > qmax ? q : qmax;
        kvmax = kv > kvmax ? kv : kvmax;
        imax = l->intermediate > imax ? l->intermediate : imax;
    }
    uint64_t T = (uint64_t)o->batched_tokens;
    uint64_t per_tok = (uint64_t)(3 * g->hidden + 2 * qmax + 2 * kvmax + 3 * imax) * 2;
    if (g->moe)
        per_tok += (uint64_t)g->top_k * (uint64_t)(3 * g->moe_intermediate + g->hidden) * 2 +
                   (uint64_t)g->experts * 4;
    uint64_t logits = (uint64_t)o->max_seqs * (uint64_t)g->vocab * 4 * 2;
    return T * per_tok + logits + (uint64_t)GIB;
}

/* The vision tower's share of vLLM's encoder profiling: the family's model
 * of its tower (none for a family without one, or --language-model-only). */
uint64_t fit_encoder_estimate(const ff_family *fam, const json_t *config, const ff_geometry *g, const fit_opts *o)
{
    if (o->text_only || !fam->encoder_bytes)
        return 0;
    return fam->encoder_bytes(config, g, o->batched_tokens);
}

/* ---- the verdict ---------------------------------------------------------- */

/* Largest context whose KV fits in `avail` bytes: KV only grows with the
 * context, so a binary search is exact under the block rounding. */
static int64_t max_context(const fit_report *r, double avail, int *capped)
{
    *capped = 0;
    if (avail < 0 || (double)fit_kv_bytes(r, 1) > avail)
        return 0;
    int64_t lo = 1, hi = r->max_positions > 0 ? r->max_positions : ((int64_t)1 << 40);
    if ((double)fit_kv_bytes(r, hi) <= avail) {
        *capped = r->max_positions > 0;
        return hi;
    }
    while (hi - lo > 1) {   /* kv(lo) fits, kv(hi) does not */
        int64_t mid = lo + (hi - lo) / 2;
        if ((double)fit_kv_bytes(r, mid) <= avail)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void verdict(fit_report *r, fit_verdict *v)
{
    v->weights = v->w.total - (r->o.text_only ? v->w.vision : 0);
    uint64_t fixed = v->weights + r->act_reserve + r->enc_reserve;
    v->need = fixed + r->kv_bytes;
    v->fits = r->budget > 0 && (double)v->need <= r->budget;
    v->max_context = r->budget > 0 ? max_context(r, r->budget - (double)fixed, &v->max_context_capped) : 0;
    v->util_needed = r->o.gpu_total > 0 ? (double)v->need / r->o.gpu_total : 0;
}

/* The seat's budget: utilization x total when both are given (what vLLM
 * allots), else what is free. vLLM refuses to start when utilization x
 * total exceeds the memory free at start-up (the admission check). */
static void budget(fit_report *r)
{
    const fit_opts *o = &r->o;
    if (o->gpu_total > 0 && o->utilization > 0) {
        r->budget = o->gpu_total * o->utilization;
        r->budget_from = "gpu-total x utilization";
        r->admission_refused = o->gpu_free > 0 && r->budget > o->gpu_free;
    } else if (o->gpu_free > 0) {
        r->budget = o->gpu_free;
        r->budget_from = "gpu-free";
    } else if (o->gpu_total > 0) {
        r->budget = o->gpu_total * 0.9;   /* vLLM's default --gpu-memory-utilization */
        r->budget_from = "gpu-total x 0.9 (vLLM default)";
    }
}

static int kv_from_config(fit_report *r, const ff_geometry *g, ff_err *e)
{
    int n = fit_kv_kinds(g, &r->o, r->kinds, FIT_MAX_KINDS, e);
    if (n < 0)
        return e->code;
    r->nkinds = n;
    kind_blocks(r->kinds, n, r->o.block_size);
    for (int i = 0; i < n; i++) {
        uint64_t b = r->kinds[i].bytes_per_token * (uint64_t)r->kinds[i].count;
        if (r->kinds[i].full)
            r->kv_full_per_token += b;
        else
            r->kv_sliding_per_token += b;
    }
    for (int i = 0; i < g->layers; i++)
        if (g->layer[i].state_bytes > 0) {
            r->state_layers++;
            r->state_per_seq += (uint64_t)g->layer[i].state_bytes;
        }
    r->window = g->sliding_window;
    for (int i = 0; i < n; i++)
        if (!r->kinds[i].full && !r->sliding_tokens)
            r->sliding_tokens = fit_sliding_tokens(r->o.context, r->window, r->o.batched_tokens, r->kinds[i].block);
    r->kv_bytes = fit_kv_bytes(r, r->o.context);
    return FF_OK;
}

/* bf16 input: the NVFP4A16 column from the plan quantize would execute. */
static void planned_column(fit_report *r, const ckpt *c, const ff_matcher *m)
{
    plan p;
    ff_err pe = {0};
    plan_opts po = {0};
    int rc = plan_build(&p, c, &po, &pe);
    if (rc == FF_OK) {
        fit_verdict *v = &r->col[r->ncols++];
        v->label = "nvfp4a16";
        for (size_t i = 0; i < p.nouts; i++)
            fit_weights_add(&v->w, m, p.outs[i].name, p.outs[i].dtype, p.outs[i].nbytes);
    } else {
        snprintf(r->plan_note, sizeof r->plan_note, "no NVFP4A16 column: %s", pe.msg);
    }
    plan_free(&p);
}

int fit_run(fit_report *r, const ckpt *c, const fit_opts *o, ff_err *e)
{
    memset(r, 0, sizeof *r);
    r->o = *o;
    if (o->context <= 0 || o->max_seqs <= 0 || o->kv_dtype_bytes <= 0 || o->block_size <= 0)
        return ff_fail(e, FF_EUSAGE, "context, max-seqs, block size and the KV dtype size must be positive");
    const ff_family *fam = c->config ? ff_family_detect(c->config) : NULL;
    if (!fam)
        return ff_fail(e, FF_EIO, "%s/config.json: model_type '%s' is not a family fp4forge knows", c->dir,
                       c->config ? jsonio_str(c->config, "model_type", "?") : "?");
    ff_geometry *g = ff_geometry_new(fam, c->config, e);
    if (!g)
        return e->code ? e->code : FF_EIO;
    ff_matcher m;
    int rc = ff_matcher_init(&m, fam, c->config, e);
    if (rc) {
        ff_matcher_free(&m);
        free(g);
        return rc;
    }
    rc = kv_from_config(r, g, e);
    if (rc) {
        ff_matcher_free(&m);
        free(g);
        return rc;
    }
    r->layers = g->layers;
    r->moe = g->moe;
    r->has_vision = g->has_vision;
    r->max_positions = jsonio_int(ckpt_text_config(c), "max_position_embeddings", 0);
    r->quantized = json_is_object(json_object_get(c->config, "quantization_config"));
    r->act_estimated = o->act_reserve < 0;
    r->enc_estimated = o->enc_reserve < 0;
    r->act_reserve = r->act_estimated ? fit_activation_estimate(g, o) : (uint64_t)o->act_reserve;
    r->enc_reserve = r->enc_estimated ? fit_encoder_estimate(fam, c->config, g, o) : (uint64_t)o->enc_reserve;
    free(g);
    fit_verdict *v = &r->col[r->ncols++];
    v->label = r->quantized ? "as given" : "bf16";
    for (size_t i = 0; i < c->ntensors; i++)
        fit_weights_add(&v->w, &m, c->tensors[i].st->name, c->tensors[i].st->dtype,
                        c->tensors[i].st->end - c->tensors[i].st->begin);
    if (!r->quantized)
        planned_column(r, c, &m);
    ff_matcher_free(&m);
    budget(r);
    for (int i = 0; i < r->ncols; i++)
        verdict(r, &r->col[i]);
    return FF_OK;
}

/* ---- output ---------------------------------------------------------------- */

static double gib(uint64_t b) { return (double)b / GIB; }

static void print_weights(const fit_report *r, FILE *out)
{
    fprintf(out, "weights as loaded (GiB)  ");
    for (int i = 0; i < r->ncols; i++)
        fprintf(out, "%14s", r->col[i].label);
    static const char *const rows[] = {"nvfp4 packed", "fp8 weights", "scales", "bf16/other", "vision/audio", "total"};
    for (int k = 0; k < 6; k++) {
        const fit_weights *w0 = &r->col[r->ncols - 1].w;
        if (k == 1 && !w0->fp8 && !r->col[0].w.fp8)
            continue;   /* printed only where there are FP8 weights, so other tables read as before */
        fprintf(out, "\n  %-22s ", rows[k]);
        for (int i = 0; i < r->ncols; i++) {
            const fit_weights *w = &r->col[i].w;
            const uint64_t by_row[6] = {w->packed, w->fp8, w->scales, w->other, w->vision, w->total};
            fprintf(out, "%14.3f", gib(by_row[k]));
        }
    }
    fprintf(out, "\n%s%s", r->o.text_only ? "  (--text-only: vision/audio not loaded)\n" : "",
            r->plan_note[0] ? "  " : "");
    if (r->plan_note[0])
        fprintf(out, "%s\n", r->plan_note);
}

static void print_kv(const fit_report *r, FILE *out)
{
    fprintf(out, "KV cache per token (%s KV; K=V layers store %s)\n", r->o.kv_dtype_bytes == 1 ? "fp8" : "bf16",
            r->o.k_is_v_single ? "one tensor (--k-eq-v-single)" : "K and V, as vLLM does");
    fprintf(out, "  layers  type     kv_heads  head_dim  tensors  B/token/layer  block  tokens held\n");
    for (int i = 0; i < r->nkinds; i++) {
        const fit_kv_kind *k = &r->kinds[i];
        fprintf(out, "  %6d  %-7s  %8d  %8d  %7d%s  %13llu  %5lld  %s\n", k->count, k->full ? "full" : "sliding",
                k->kv_heads, k->head_dim, k->tensors, k->k_is_v ? "*" : " ", (unsigned long long)k->bytes_per_token,
                (long long)k->block,
                k->tensors == 0 ? "shared (counted once, at its source)"
                : k->full        ? "context"
                                 : "min(context, window-1+batched)");
    }
    fprintf(out, "  per token: full %llu B + sliding %llu B (sliding layers hold %lld tokens at %lld; window %lld)\n",
            (unsigned long long)r->kv_full_per_token, (unsigned long long)r->kv_sliding_per_token,
            (long long)r->sliding_tokens, (long long)r->o.context, (long long)r->window);
    if (r->state_layers)
        fprintf(out, "  linear-attention layers: %d, a fixed state of %llu B a sequence for all of them (no KV per token)\n",
                r->state_layers, (unsigned long long)r->state_per_seq);
    fprintf(out, "  KV at %lld tokens x %d seq, in whole blocks: %llu B = %.3f GiB\n", (long long)r->o.context,
            r->o.max_seqs, (unsigned long long)r->kv_bytes, gib(r->kv_bytes));
}

static void print_verdict(const fit_report *r, FILE *out)
{
    fprintf(out, "reserves (estimates, docs/fit.md): activations %.3f GiB%s, encoder cache + vision profile %.3f GiB%s\n",
            gib(r->act_reserve), r->act_estimated ? "" : " (given)", gib(r->enc_reserve),
            r->enc_estimated ? "" : " (given)");
    if (r->budget > 0)
        fprintf(out, "budget: %.3f GiB (%s)\n", r->budget / GIB, r->budget_from);
    else
        fprintf(out, "budget: unknown (give --gpu-free or --gpu-total [--utilization])\n");
    if (r->admission_refused)
        fprintf(out, "  admission: vLLM refuses to start: utilization x total %.3f GiB > %.3f GiB free\n",
                r->budget / GIB, r->o.gpu_free / GIB);
    fprintf(out, "verdict at %lld tokens x %d seq", (long long)r->o.context, r->o.max_seqs);
    for (int i = 0; i < r->ncols; i++) {
        const fit_verdict *v = &r->col[i];
        fprintf(out, "\n  %-9s need %.3f GiB: %s", v->label, gib(v->need),
                r->budget <= 0 ? "no budget given" : v->fits ? "FITS" : "DOES NOT FIT");
        if (r->budget > 0)
            fprintf(out, "; max context %lld%s", (long long)v->max_context,
                    v->max_context_capped ? " (max_position_embeddings)" : "");
        if (v->util_needed > 0)
            fprintf(out, "; --gpu-memory-utilization %.3f", ceil(v->util_needed * 1000) / 1000);
    }
    fprintf(out, "\n");
}

void fit_print(const fit_report *r, const char *dir, FILE *out)
{
    fprintf(out, "fp4forge fit: %s (%d layers%s%s%s)\n", dir, r->layers, r->moe ? ", MoE" : ", dense",
            r->has_vision ? ", vision tower" : "", r->quantized ? ", quantized" : ", bf16");
    print_weights(r, out);
    print_kv(r, out);
    print_verdict(r, out);
}

static json_t *weights_json(const fit_weights *w)
{
    return json_pack("{sI sI sI sI sI sI}", "packed", (json_int_t)w->packed, "fp8", (json_int_t)w->fp8,
                     "scales", (json_int_t)w->scales,
                     "other", (json_int_t)w->other, "vision", (json_int_t)w->vision, "total", (json_int_t)w->total);
}

static json_t *kinds_json(const fit_report *r)
{
    json_t *a = json_array();
    for (int i = 0; i < r->nkinds; i++) {
        const fit_kv_kind *k = &r->kinds[i];
        json_array_append_new(a, json_pack("{si ss si si si sb sI sI}", "layers", k->count, "type",
                                           k->full ? "full" : "sliding", "kv_heads", k->kv_heads, "head_dim",
                                           k->head_dim, "tensors", k->tensors, FF_LAYER_K_IS_V_KEY, k->k_is_v,
                                           "bytes_per_token_per_layer", (json_int_t)k->bytes_per_token,
                                           "block", (json_int_t)k->block));
    }
    return a;
}

json_t *fit_to_json(const fit_report *r)
{
    json_t *j = json_object(), *cols = json_array();
    json_object_set_new(j, "layers", json_integer(r->layers));
    json_object_set_new(j, "moe", json_boolean(r->moe));
    json_object_set_new(j, "quantized", json_boolean(r->quantized));
    json_object_set_new(j, "context", json_integer(r->o.context));
    json_object_set_new(j, "max_seqs", json_integer(r->o.max_seqs));
    json_object_set_new(j, "kv_dtype_bytes", json_integer(r->o.kv_dtype_bytes));
    json_object_set_new(j, "block_size", json_integer(r->o.block_size));
    json_object_set_new(j, "batched_tokens", json_integer(r->o.batched_tokens));
    json_object_set_new(j, FF_LAYER_K_IS_V_KEY "_single", json_boolean(r->o.k_is_v_single));
    json_object_set_new(j, "kv_kinds", kinds_json(r));
    json_object_set_new(j, "kv_full_per_token", json_integer((json_int_t)r->kv_full_per_token));
    json_object_set_new(j, "kv_sliding_per_token", json_integer((json_int_t)r->kv_sliding_per_token));
    json_object_set_new(j, "sliding_window", json_integer(r->window));
    json_object_set_new(j, "sliding_tokens", json_integer(r->sliding_tokens));
    json_object_set_new(j, "kv_bytes", json_integer((json_int_t)r->kv_bytes));
    json_object_set_new(j, "linear_attention_layers", json_integer(r->state_layers));
    json_object_set_new(j, "state_bytes_per_seq", json_integer((json_int_t)r->state_per_seq));
    json_object_set_new(j, "activation_reserve", json_integer((json_int_t)r->act_reserve));
    json_object_set_new(j, "encoder_reserve", json_integer((json_int_t)r->enc_reserve));
    json_object_set_new(j, "budget", r->budget > 0 ? json_integer((json_int_t)r->budget) : json_null());
    json_object_set_new(j, "admission_refused", json_boolean(r->admission_refused));
    for (int i = 0; i < r->ncols; i++) {
        const fit_verdict *v = &r->col[i];
        json_t *c = json_pack("{ss so sI sI}", "label", v->label, "weights_by_kind", weights_json(&v->w), "weights",
                              (json_int_t)v->weights, "need", (json_int_t)v->need);
        json_object_set_new(c, "fits", r->budget > 0 ? json_boolean(v->fits) : json_null());
        json_object_set_new(c, "max_context", r->budget > 0 ? json_integer(v->max_context) : json_null());
        json_object_set_new(c, "max_context_capped", json_boolean(v->max_context_capped));
        json_object_set_new(c, "utilization_needed", v->util_needed > 0 ? json_real(v->util_needed) : json_null());
        json_array_append_new(cols, c);
    }
    json_object_set_new(j, "columns", cols);
    if (r->plan_note[0])
        json_object_set_new(j, "note", json_string(r->plan_note));
    return j;
}
