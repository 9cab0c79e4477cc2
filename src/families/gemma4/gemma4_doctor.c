/* Gemma-4's doctor: the full-attention globals (global_head_dim,
 * num_global_key_value_heads under attention_k_eq_v), the per_layer_config
 * schema drift, stale or conflicting keys, and config.json against the
 * tensors' shapes. Each finding has a stable code (docs/doctor.md); fixes
 * edit the in-memory JSON only after proving their answer from the
 * checkpoint itself and refuse, saying why, when the proof fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor_check.h"
#include "fsutil.h"
#include "gemma4.h"
#include "jsonio.h"

/* What every Gemma-4 check reads: the geometry (when the config parses),
 * why it did not, and the text model's tensor prefix. */
typedef struct g4_doctor {
    g4_geometry g;
    int ok;
    char why[2200];
    const char *prefix;      /* "model.language_model." or "model." */
} g4_doctor;

static g4_doctor *g4d(const dctx *c) { return c->fam_state; }

static void find_prefix(const dctx *c, g4_doctor *d)
{
    d->prefix = "model.";
    for (size_t i = 0; c->has_ck && i < c->ck.ntensors; i++)
        if (strncmp(c->ck.tensors[i].st->name, "model.language_model.", 21) == 0) {
            d->prefix = "model.language_model.";
            return;
        }
}

int gemma4_doctor_open(dctx *c, ff_err *e)
{
    g4_doctor *d = calloc(1, sizeof *d);
    if (!d)
        return ff_oom(e, "out of memory");
    ff_err ge = {0};
    d->ok = g4_read(c->config, &d->g, 0, &ge) == FF_OK;
    snprintf(d->why, sizeof d->why, "%s", ge.msg);
    c->oom |= ge.oom;
    if (!c->has_ck)
        snprintf(d->why + strlen(d->why), sizeof d->why - strlen(d->why), "%s%s", d->why[0] ? "; " : "",
                 c->ck_why);
    find_prefix(c, d);
    c->fam_state = d;
    return FF_OK;
}

void gemma4_doctor_close(dctx *c)
{
    free(c->fam_state);
    c->fam_state = NULL;
}

/* ---------- tensor helpers ---------- */

static const st_tensor *layer_tensor(const dctx *c, int layer, const char *suffix)
{
    char name[512];
    snprintf(name, sizeof name, "%slayers.%d.%s", g4d(c)->prefix, layer, suffix);
    const ckpt_tensor *t = ckpt_find(&c->ck, name);
    return t ? t->st : NULL;
}

/* The legacy schema with a global field absent: transformers defaults
 * global_head_dim to 512 and full-layer KV heads to num_key_value_heads. */
static int globals_missing(const dctx *c)
{
    const g4_geometry *g = &g4d(c)->g;
    if (!g4d(c)->ok || g->per_layer_schema)
        return 0;
    return !g->global_head_dim || (g->k_eq_v && !g->global_kv_heads);
}

/* head_dim and KV heads of the full-attention layers, from their shapes:
 * k_proj rows = kv_heads x head_dim has many answers, so head_dim must be
 * stated by q_norm / k_norm [hd], q_proj rows / heads or o_proj cols / heads,
 * every witness must agree, and every full layer must give the same pair. */
static int derive_full_dims(const dctx *c, int *hd_out, int *kvh_out, char *why, size_t n)
{
    const g4_geometry *g = &g4d(c)->g;
    int hd0 = 0, kv0 = 0, first = -1;
    static const char *norms[] = {"self_attn.k_norm.weight", "self_attn.q_norm.weight"};
    for (int i = 0; i < g->layers; i++) {
        if (!g->layer[i].full || !g->layer[i].has_kv)
            continue;
        const st_tensor *k = layer_tensor(c, i, "self_attn.k_proj.weight");
        if (!k || k->ndim != 2)
            return snprintf(why, n, "layer %d has no 2-D k_proj to read", i), -1;
        int hd = 0;
        const char *src = NULL;
        for (size_t w = 0; w < 4; w++) {
            int cand = 0;
            const st_tensor *t;
            if (w < 2) {
                t = layer_tensor(c, i, norms[w]);
                cand = t && t->ndim == 1 ? (int)t->shape[0] : 0;
            } else {
                t = layer_tensor(c, i, w == 2 ? "self_attn.q_proj.weight" : "self_attn.o_proj.weight");
                int64_t q = t && t->ndim == 2 ? t->shape[w == 2 ? 0 : 1] : 0;
                cand = q && q % g->heads == 0 ? (int)(q / g->heads) : 0;
            }
            const char *names[] = {"k_norm", "q_norm", "q_proj rows / heads", "o_proj cols / heads"};
            if (cand && hd && cand != hd)
                return snprintf(why, n, "layer %d: %s says head_dim %d but %s says %d", i, src, hd,
                                names[w], cand), -1;
            if (cand && !hd) {
                hd = cand;
                src = names[w];
            }
        }
        if (!hd)
            return snprintf(why, n, "layer %d: k_proj rows %lld = kv_heads x head_dim has more than one "
                            "answer and no q_proj, q_norm or k_norm states head_dim", i,
                            (long long)k->shape[0]), -1;
        if (k->shape[0] % hd || g->heads % (k->shape[0] / hd))
            return snprintf(why, n, "layer %d: k_proj rows %lld are not a whole number of KV heads of "
                            "head_dim %d dividing %d query heads", i, (long long)k->shape[0], hd,
                            g->heads), -1;
        int kv = (int)(k->shape[0] / hd);
        if (first >= 0 && (hd != hd0 || kv != kv0))
            return snprintf(why, n, "layer %d gives head_dim %d x %d KV heads but layer %d gives %d x %d: "
                            "no single global value fits", i, hd, kv, first, hd0, kv0), -1;
        if (first < 0) {
            first = i;
            hd0 = hd;
            kv0 = kv;
        }
    }
    if (first < 0)
        return snprintf(why, n, "no full-attention layer with k_proj to derive from"), -1;
    *hd_out = hd0;
    *kvh_out = kv0;
    return 0;
}

/* ---------- 1. Gemma-4 full-attention globals ---------- */

static void check_g4_config(dctx *c, doctor_report *r)
{
    if (!g4d(c)->ok)
        doctor_add(r, "G4_CONFIG_INVALID", "config.json", -1, "%s", g4d(c)->why);
}

static void check_globals(dctx *c, doctor_report *r)
{
    if (!globals_missing(c))
        return;
    const g4_geometry *g = &g4d(c)->g;
    if (g->k_eq_v)
        doctor_add(r, "G4_KEQV_GLOBALS_MISSING", "config.json", -1,
                   "attention_k_eq_v is true but %s%s%s missing and there is no per_layer_config: "
                   "transformers silently uses global_head_dim 512%s on full-attention layers, so the "
                   "load fails on shape or builds the wrong attention",
                   !g->global_head_dim ? "global_head_dim" : "",
                   !g->global_head_dim && !g->global_kv_heads ? " and " : "",
                   !g->global_kv_heads ? "num_global_key_value_heads" : "",
                   !g->global_kv_heads ? " and num_key_value_heads KV heads" : "");
    else
        doctor_add(r, "G4_GLOBAL_HEAD_DIM_MISSING", "config.json", -1,
                   "global_head_dim is missing and there is no per_layer_config: transformers silently "
                   "uses head_dim 512 on full-attention layers");
}

static int fix_globals(dctx *c, doctor_finding *f, ff_err *e)
{
    int hd, kv;
    char why[400];
    if (derive_full_dims(c, &hd, &kv, why, sizeof why)) {
        doctor_note(f, 0, "refused: the shapes do not prove one answer: %s", why);
        return FF_OK;
    }
    const g4_geometry *g = &g4d(c)->g;
    if (g->global_head_dim && g->global_head_dim != hd) {
        doctor_note(f, 0, "refused: global_head_dim %d contradicts the tensors (head_dim %d)",
                    g->global_head_dim, hd);
        return FF_OK;
    }
    if (g->k_eq_v && g->global_kv_heads && g->global_kv_heads != kv) {
        doctor_note(f, 0, "refused: num_global_key_value_heads %d contradicts the tensors (%d)",
                    g->global_kv_heads, kv);
        return FF_OK;
    }
    if (!g->k_eq_v && kv != g->kv_heads) {
        doctor_note(f, 0, "refused: full layers have %d KV heads but attention_k_eq_v is false, so "
                    "num_key_value_heads %d must hold; the upload is inconsistent", kv, g->kv_heads);
        return FF_OK;
    }
    json_object_set_new(c->text, "global_head_dim", json_integer(hd));
    if (g->k_eq_v)
        json_object_set_new(c->text, "num_global_key_value_heads", json_integer(kv));
    c->dirty_config = 1;
    if (g->k_eq_v)
        doctor_note(f, 1, "set global_head_dim %d and num_global_key_value_heads %d, read from the "
                    "full-attention k_proj shapes (rows %d = %d x %d)", hd, kv, hd * kv, kv, hd);
    else
        doctor_note(f, 1, "set global_head_dim %d, read from the full-attention q/k shapes", hd);
    return FF_OK;
}

/* ---------- 2. schema drift: per_layer_config vs flat globals ---------- */

static json_t *plc_entry(json_t *plc, int layer)
{
    const char *k;
    json_t *v;
    json_object_foreach(plc, k, v) {
        char *end;
        long idx = strtol(k, &end, 10);
        if (*k && *end == 0 && idx == layer)
            return v;
    }
    return NULL;
}

static int has_flat(const json_t *t)
{
    return json_is_integer(json_object_get(t, "global_head_dim")) ||
           json_is_integer(json_object_get(t, "num_global_key_value_heads"));
}

/* First full layer where the flat fields and the map disagree, or -1. */
static int flat_vs_map(const dctx *c, json_t *plc, char *why, size_t n)
{
    const g4_geometry *g = &g4d(c)->g;
    int64_t gh = jsonio_int(c->text, "global_head_dim", 0);
    int64_t gk = jsonio_int(c->text, "num_global_key_value_heads", 0);
    for (int i = 0; i < g->layers; i++) {
        if (!g->layer[i].full)
            continue;
        json_t *pl = plc_entry(plc, i);
        int64_t hd = jsonio_int(pl, "head_dim", g->head_dim);
        int64_t kv = jsonio_int(pl, "num_key_value_heads", g->kv_heads);
        if (gh && hd != gh)
            return snprintf(why, n, "layer %d: per_layer_config head_dim %lld, global_head_dim %lld",
                            i, (long long)hd, (long long)gh), i;
        if (g->k_eq_v && gk && kv != gk)
            return snprintf(why, n, "layer %d: per_layer_config num_key_value_heads %lld, "
                            "num_global_key_value_heads %lld", i, (long long)kv, (long long)gk), i;
    }
    return -1;
}

static void check_schema(dctx *c, doctor_report *r)
{
    if (!g4d(c)->ok)
        return;
    json_t *plc = json_object_get(c->text, "per_layer_config");
    int map = json_is_object(plc), flat = has_flat(c->text);
    doctor_schema want = c->o ? c->o->schema : DOCTOR_SCHEMA_KEEP;
    char why[300] = "";
    if (map && flat) {
        int bad = flat_vs_map(c, plc, why, sizeof why);
        doctor_add(r, "SCHEMA_PER_LAYER_DRIFT", "config.json", bad,
                   "per_layer_config sits next to the flat global_head_dim/num_global_key_value_heads: "
                   "transformers >= 5.15 drops the flat fields, older loaders read only them%s%s",
                   bad >= 0 ? ", and they disagree: " : " (they agree)", why);
    } else if (map && want == DOCTOR_SCHEMA_LEGACY) {
        doctor_add(r, "SCHEMA_PER_LAYER_DRIFT", "config.json", -1,
                   "config uses per_layer_config; the legacy flat schema was asked for (--schema legacy): "
                   "loaders older than transformers 5.15 ignore the map");
    } else if (flat && !map && want == DOCTOR_SCHEMA_PER_LAYER) {
        doctor_add(r, "SCHEMA_PER_LAYER_DRIFT", "config.json", -1,
                   "config uses the flat global fields; per_layer_config was asked for (--schema per-layer)");
    }
}

/* The map may become flat fields only if it says nothing they cannot: its
 * keys are exactly the full-attention layers, each entry holds only
 * head_dim / num_key_value_heads, every entry is the same, and any flat
 * field already present agrees. */
static int prove_redundant(const dctx *c, json_t *plc, int64_t *hd, int64_t *kv, char *why, size_t n)
{
    const g4_geometry *g = &g4d(c)->g;
    const char *k;
    json_t *v;
    json_object_foreach(plc, k, v) {
        char *end;
        long idx = strtol(k, &end, 10);
        if (!*k || *end || idx < 0 || idx >= g->layers || !g->layer[idx].full)
            return snprintf(why, n, "per_layer_config key \"%s\" is not a full-attention layer index", k), -1;
        const char *kk;
        json_t *vv;
        json_object_foreach(v, kk, vv)
            if (strcmp(kk, "head_dim") && strcmp(kk, "num_key_value_heads"))
                return snprintf(why, n, "layer %ld sets %s, which the legacy schema cannot express", idx, kk),
                       (int)idx;
    }
    int first = -1;
    for (int i = 0; i < g->layers; i++) {
        if (!g->layer[i].full)
            continue;
        json_t *pl = plc_entry(plc, i);
        if (!pl)
            return snprintf(why, n, "layer %d is full_attention but has no per_layer_config entry", i), i;
        int64_t h = jsonio_int(pl, "head_dim", g->head_dim), q = jsonio_int(pl, "num_key_value_heads", g->kv_heads);
        if (first >= 0 && (h != *hd || q != *kv))
            return snprintf(why, n, "layer %d differs: head_dim %lld, num_key_value_heads %lld, where layer %d "
                            "has %lld, %lld", i, (long long)h, (long long)q, first, (long long)*hd,
                            (long long)*kv), i;
        if (first < 0) {
            first = i;
            *hd = h;
            *kv = q;
        }
    }
    if (first < 0)
        return snprintf(why, n, "no full-attention layers"), -1;
    if (!g->k_eq_v && *kv != g->kv_heads)
        return snprintf(why, n, "full layers use %lld KV heads but attention_k_eq_v is false, so the legacy "
                        "schema can only give them num_key_value_heads %d", (long long)*kv, g->kv_heads), first;
    return flat_vs_map(c, plc, why, n) >= 0 ? first : -2;
}

static int to_legacy(dctx *c, doctor_finding *f, json_t *plc)
{
    int64_t hd = 0, kv = 0;
    char why[300];
    int bad = prove_redundant(c, plc, &hd, &kv, why, sizeof why);
    if (bad != -2) {
        f->layer = bad;
        doctor_note(f, 0, "refused: per_layer_config is not exactly redundant with one global value: %s", why);
        return FF_OK;
    }
    json_object_set_new(c->text, "global_head_dim", json_integer(hd));
    if (g4d(c)->g.k_eq_v)
        json_object_set_new(c->text, "num_global_key_value_heads", json_integer(kv));
    json_object_del(c->text, "per_layer_config");
    c->dirty_config = 1;
    doctor_note(f, 1, "proved per_layer_config redundant (keys = the full-attention layers, one value "
                "head_dim %lld%s); wrote the legacy fields and removed the map", (long long)hd,
                g4d(c)->g.k_eq_v ? ", KV heads as num_global_key_value_heads" : "");
    return FF_OK;
}

/* Do the tensors of every full layer match the geometry g4_read took from
 * the map (per-layer wins)? Used to decide between a map and flat fields. */
static int map_matches_tensors(const dctx *c)
{
    const g4_geometry *g = &g4d(c)->g;
    for (int i = 0; i < g->layers; i++) {
        const g4_layer *l = &g->layer[i];
        if (!l->full || !l->has_kv)
            continue;
        const st_tensor *k = layer_tensor(c, i, "self_attn.k_proj.weight");
        const st_tensor *q = layer_tensor(c, i, "self_attn.q_proj.weight");
        if (!k || !q || k->shape[0] != (int64_t)l->kv_heads * l->head_dim ||
            q->shape[0] != (int64_t)g->heads * l->head_dim)
            return 0;
    }
    return 1;
}

static int to_per_layer(dctx *c, doctor_finding *f, json_t *plc)
{
    const g4_geometry *g = &g4d(c)->g;
    char why[300];
    if (plc) {
        if (flat_vs_map(c, plc, why, sizeof why) >= 0 && !(c->has_ck && map_matches_tensors(c))) {
            doctor_note(f, 0, "refused: the flat fields and per_layer_config disagree (%s) and the tensors "
                        "do not prove the map right", why);
            return FF_OK;
        }
        json_object_del(c->text, "global_head_dim");
        json_object_del(c->text, "num_global_key_value_heads");
        c->dirty_config = 1;
        doctor_note(f, 1, "kept per_layer_config%s and removed the flat global fields",
                    why[0] ? " (the tensors prove it)" : " (the flat fields agreed with it)");
        return FF_OK;
    }
    int64_t gh = jsonio_int(c->text, "global_head_dim", 0), gk = jsonio_int(c->text, "num_global_key_value_heads", 0);
    if (!gh || (g->k_eq_v && !gk)) {
        doctor_note(f, 0, "refused: global fields incomplete (transformers would default head_dim to 512); "
                    "fix G4_KEQV_GLOBALS_MISSING first");
        return FF_OK;
    }
    int maxfull = 0;
    for (int i = 0; i < g->layers; i++)
        if (g->layer[i].full)
            maxfull = i;
    int width = snprintf(NULL, 0, "%d", maxfull);
    json_t *map = json_object();
    for (int i = 0; i < g->layers; i++) {
        if (!g->layer[i].full)
            continue;
        char key[32];
        snprintf(key, sizeof key, "%0*d", width, i);
        json_t *ent = json_pack("{s:I}", "head_dim", (json_int_t)gh);
        if (g->k_eq_v)
            json_object_set_new(ent, "num_key_value_heads", json_integer(gk));
        json_object_set_new(map, key, ent);
    }
    json_object_set_new(c->text, "per_layer_config", map);
    json_object_del(c->text, "global_head_dim");
    json_object_del(c->text, "num_global_key_value_heads");
    c->dirty_config = 1;
    doctor_note(f, 1, "wrote per_layer_config for the full-attention layers (head_dim %lld) and removed the "
                "flat fields", (long long)gh);
    return FF_OK;
}

static int fix_schema(dctx *c, doctor_finding *f, ff_err *e)
{
    json_t *plc = json_object_get(c->text, "per_layer_config");
    doctor_schema want = c->o ? c->o->schema : DOCTOR_SCHEMA_KEEP;
    /* Without --schema, settle on what transformers 5.17 writes. */
    if (want == DOCTOR_SCHEMA_LEGACY && json_is_object(plc))
        return to_legacy(c, f, plc);
    return to_per_layer(c, f, json_is_object(plc) ? plc : NULL);
}

/* ---------- 3. stale or conflicting keys ---------- */

static const struct key_pair {
    const char *stale, *current;
    int rename_ok;           /* stale alone may be renamed (same meaning, same format) */
    const char *consequence;
} key_pairs[] = {
    {"torch_dtype", "dtype", 1,
     "transformers 5 reads dtype and only warns about torch_dtype; tools that still read torch_dtype "
     "take the other value when they differ"},
    {"rope_scaling", "rope_parameters", 0,
     "transformers 5 reads rope_parameters; older loaders convert rope_scaling over it, so the two "
     "can give different RoPE"},
    {"enable_moe", "enable_moe_block", 1,
     "Gemma-4 reads enable_moe_block only: enable_moe is ignored, so the MoE block follows the other key"},
    {"top_k", "top_k_experts", 1, "Gemma-4 reads top_k_experts only: top_k is ignored"},
};
#define NPAIRS (sizeof key_pairs / sizeof key_pairs[0])

static json_t *key_level(dctx *c, int level)
{
    return level == 0 ? c->config : (c->text != c->config ? c->text : NULL);
}

static void check_keys(dctx *c, doctor_report *r)
{
    for (int level = 0; level < 2; level++) {
        json_t *o = key_level(c, level);
        const char *where = level ? "text_config." : "";
        for (size_t i = 0; o && i < NPAIRS; i++) {
            const struct key_pair *p = &key_pairs[i];
            json_t *s = json_object_get(o, p->stale), *cur = json_object_get(o, p->current);
            if (!s || json_is_null(s))
                continue;
            char *sv = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
            if (cur && !json_is_null(cur)) {
                char *cv = json_dumps(cur, JSON_ENCODE_ANY | JSON_COMPACT);
                doctor_add(r, "CONFIG_CONFLICTING_KEYS", "config.json", -1,
                           "%s%s=%s next to %s%s=%s (%s): %s", where, p->stale, sv, where, p->current, cv,
                           json_equal(s, cur) ? "same value" : "DIFFERENT values", p->consequence);
                free(cv);
                r->f[r->n - 1].arg = level * 100 + (int)i;
            } else if (p->rename_ok) {
                doctor_add(r, "CONFIG_STALE_KEY", "config.json", -1, "%s%s=%s is a stale name for %s: %s",
                           where, p->stale, sv, p->current, p->consequence);
                r->f[r->n - 1].arg = level * 100 + (int)i;
            }
            free(sv);
        }
    }
}

static int fix_keys(dctx *c, doctor_finding *f, ff_err *e)
{
    json_t *o = key_level(c, f->arg / 100);
    const struct key_pair *p = &key_pairs[f->arg % 100];
    json_t *s = json_object_get(o, p->stale);
    if (!json_object_get(o, p->current) || json_is_null(json_object_get(o, p->current))) {
        json_object_set(o, p->current, s);
        doctor_note(f, 1, "renamed %s to %s", p->stale, p->current);
    } else {
        doctor_note(f, 1, "removed the stale %s; kept %s, the key current loaders read", p->stale, p->current);
    }
    json_object_del(o, p->stale);
    c->dirty_config = 1;
    return FF_OK;
}

/* ---------- 6. config.json vs tensors ---------- */

enum { D_HIDDEN, D_Q, D_KV, D_HD, D_INTER, D_E, D_MI2, D_MI };
enum { W_ALL, W_KV, W_V, W_MOE };
static const struct shape_rule {
    const char *suffix;
    int when, ndim, d[3];
} layer_shapes[] = {
    {"self_attn.q_proj.weight", W_ALL, 2, {D_Q, D_HIDDEN}},
    {"self_attn.q_norm.weight", W_ALL, 1, {D_HD}},
    {"self_attn.o_proj.weight", W_ALL, 2, {D_HIDDEN, D_Q}},
    {"self_attn.k_proj.weight", W_KV, 2, {D_KV, D_HIDDEN}},
    {"self_attn.k_norm.weight", W_KV, 1, {D_HD}},
    {"self_attn.v_proj.weight", W_V, 2, {D_KV, D_HIDDEN}},
    {"mlp.gate_proj.weight", W_ALL, 2, {D_INTER, D_HIDDEN}},
    {"mlp.up_proj.weight", W_ALL, 2, {D_INTER, D_HIDDEN}},
    {"mlp.down_proj.weight", W_ALL, 2, {D_HIDDEN, D_INTER}},
    {"input_layernorm.weight", W_ALL, 1, {D_HIDDEN}},
    {"router.proj.weight", W_MOE, 2, {D_E, D_HIDDEN}},
    {"experts.gate_up_proj", W_MOE, 3, {D_E, D_MI2, D_HIDDEN}},
    {"experts.down_proj", W_MOE, 3, {D_E, D_HIDDEN, D_MI}},
};
#define MAX_SHAPE_FINDINGS 24

static int64_t dim_value(const g4_geometry *g, const g4_layer *l, int d)
{
    switch (d) {
    case D_HIDDEN: return g->hidden;
    case D_Q: return (int64_t)g->heads * l->head_dim;
    case D_KV: return (int64_t)l->kv_heads * l->head_dim;
    case D_HD: return l->head_dim;
    case D_INTER: return l->intermediate;
    case D_E: return g->experts;
    case D_MI2: return 2 * g->moe_intermediate;
    default: return g->moe_intermediate;
    }
}

static int applies(const g4_geometry *g, const g4_layer *l, int when)
{
    return when == W_ALL || (when == W_KV && l->has_kv) || (when == W_V && l->has_v) ||
           (when == W_MOE && g->moe);
}

/* A quantized output stores <mod>.weight as <mod>.weight_packed [out, in/2]
 * and fused experts as experts.N.{gate,up,down}_proj: check the shape they
 * stand for, so doctor judges a quantized checkpoint's config the same way. */
static const st_tensor *logical_tensor(const dctx *c, int layer, const char *suffix, st_tensor *tmp)
{
    const st_tensor *t = layer_tensor(c, layer, suffix);
    if (t)
        return t;
    char name[400];
    const char *cut = strstr(suffix, ".weight");
    int fused = strcmp(suffix, "experts.gate_up_proj") == 0, down = strcmp(suffix, "experts.down_proj") == 0;
    if (cut && cut[7] == 0)
        snprintf(name, sizeof name, "%.*s.weight_packed", (int)(cut - suffix), suffix);
    else if (fused || down)
        snprintf(name, sizeof name, "experts.%d.%s.weight_packed", g4d(c)->g.experts - 1, fused ? "up_proj" : "down_proj");
    else
        return NULL;
    const st_tensor *p = layer_tensor(c, layer, name);
    if (!p || p->ndim != 2)
        return NULL;
    *tmp = *p;
    if (fused || down) {
        tmp->ndim = 3;
        tmp->shape[0] = g4d(c)->g.experts;
        tmp->shape[1] = p->shape[0] * (fused ? 2 : 1);
        tmp->shape[2] = p->shape[1] * 2;
    } else {
        tmp->shape[1] = p->shape[1] * 2;
    }
    return tmp;
}

static void check_one(dctx *c, doctor_report *r, int i, const struct shape_rule *s, int *budget)
{
    const g4_geometry *g = &g4d(c)->g;
    const g4_layer *l = &g->layer[i];
    st_tensor tmp;
    const st_tensor *t = logical_tensor(c, i, s->suffix, &tmp);
    if (!applies(g, l, s->when)) {
        if (t && s->when == W_V && l->has_kv && (*budget)-- > 0)
            doctor_add(r, "SHAPE_UNEXPECTED_TENSOR", "model.safetensors", i,
                       "layer %d is a k_eq_v full-attention layer but has %s: config and weights disagree "
                       "on attention_k_eq_v", i, s->suffix);
        return;
    }
    if (!t) {
        if ((*budget)-- > 0)
            doctor_add(r, "SHAPE_MISSING_TENSOR", "model.safetensors", i, "layer %d: %slayers.%d.%s is missing",
                       i, g4d(c)->prefix, i, s->suffix);
        return;
    }
    int64_t want[3];
    int ok = t->ndim == s->ndim;
    for (int k = 0; k < s->ndim; k++) {
        want[k] = dim_value(g, l, s->d[k]);
        ok = ok && t->shape[k] == want[k];
    }
    if (!ok && (*budget)-- > 0) {
        char a[96], b[96];
        const char *path = ckpt_path(&c->ck, ckpt_find(&c->ck, t->name));
        const char *base = strrchr(path, '/');
        doctor_add(r, "SHAPE_MISMATCH", base ? base + 1 : path, i,
                   "%s is %s but config.json implies %s (%s layer: head_dim %d, kv heads %d)", t->name,
                   st_shape_str(t->shape, t->ndim, a, sizeof a), st_shape_str(want, s->ndim, b, sizeof b),
                   l->full ? "full-attention" : "sliding", l->head_dim, l->kv_heads);
    }
}

static void check_extra_layers(dctx *c, doctor_report *r, int *budget)
{
    size_t plen = strlen(g4d(c)->prefix);
    int last = -1;
    for (size_t i = 0; i < c->ck.ntensors; i++) {
        const char *n = c->ck.tensors[i].st->name;
        if (strncmp(n, g4d(c)->prefix, plen) || strncmp(n + plen, "layers.", 7))
            continue;
        int idx = atoi(n + plen + 7);
        if (idx >= g4d(c)->g.layers && idx != last && (*budget)-- > 0)
            doctor_add(r, "SHAPE_EXTRA_LAYER", "model.safetensors", idx, "%s belongs to layer %d but "
                       "num_hidden_layers is %d", n, idx, g4d(c)->g.layers);
        last = idx;
    }
}

static void check_tensors(dctx *c, doctor_report *r)
{
    if (!c->has_ck) {
        doctor_add(r, "TENSORS_UNREADABLE", "model.safetensors", -1, "%s", g4d(c)->why);
        return;
    }
    if (!g4d(c)->ok)
        return;
    const g4_geometry *g = &g4d(c)->g;
    int budget = MAX_SHAPE_FINDINGS, deferred = globals_missing(c);
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", g4d(c)->prefix);
    const ckpt_tensor *emb = ckpt_find(&c->ck, name);
    if (emb && (emb->st->ndim != 2 || emb->st->shape[0] != g->vocab || emb->st->shape[1] != g->hidden)) {
        char got[ST_MAX_DIMS * 24 + 4];   /* every dimension, so a 3-D table does not read as 2-D */
        doctor_add(r, "SHAPE_MISMATCH", "model.safetensors", -1, "%s is %s but config.json has "
                   "vocab_size %lld, hidden_size %lld", name, st_shape_str(emb->st->shape, emb->st->ndim, got, sizeof got),
                   (long long)g->vocab, (long long)g->hidden);
    }
    for (int i = 0; i < g->layers; i++)
        for (size_t s = 0; s < sizeof layer_shapes / sizeof layer_shapes[0]; s++) {
            /* full-layer attention waits for G4_*_MISSING: its dims are unknown */
            if (deferred && g->layer[i].full && !strncmp(layer_shapes[s].suffix, "self_attn.", 10))
                continue;
            check_one(c, r, i, &layer_shapes[s], &budget);
        }
    check_extra_layers(c, r, &budget);
    if (budget < 0)
        doctor_add(r, "SHAPE_MISMATCH", "model.safetensors", -1, "%d more shape findings not listed", -budget);
}


/* ---------- tables ---------- */

const ff_doctor_check gemma4_doctor_checks[] = {
    check_g4_config, check_globals, check_schema, check_keys, doctor_check_aux, doctor_check_tokenizer,
    check_tensors, NULL,
};

const ff_doctor_code gemma4_doctor_codes[] = {
    {"G4_CONFIG_INVALID", NULL},
    {"G4_KEQV_GLOBALS_MISSING", fix_globals},
    {"G4_GLOBAL_HEAD_DIM_MISSING", fix_globals},
    {"SCHEMA_PER_LAYER_DRIFT", fix_schema},
    {"CONFIG_CONFLICTING_KEYS", fix_keys},
    {"CONFIG_STALE_KEY", fix_keys},
    DOCTOR_COMMON_CODES,
    {"SHAPE_MISMATCH", NULL},
    {"SHAPE_MISSING_TENSOR", NULL},
    {"SHAPE_UNEXPECTED_TENSOR", NULL},
    {"SHAPE_EXTRA_LAYER", NULL},
    {NULL, NULL},
};
