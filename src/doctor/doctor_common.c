/* Doctor checks every family shares: the processor files a multimodal
 * checkpoint must carry, the chat template, and a tokenizer saved with
 * truncation or padding baked in. A family's check table lists these beside
 * its own; a family without doctor hooks gets doctor_default_checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor_int.h"
#include "fsutil.h"
#include "jsonio.h"

/* ---------- 4. auxiliary files of multimodal checkpoints ---------- */

static const struct aux_file {
    const char *code, *name, *consequence;
} aux_files[] = {
    {"AUX_PROCESSOR_MISSING", "processor_config.json",
     "AutoProcessor and vLLM cannot build the multimodal processor: serving fails at startup"},
    {"AUX_PREPROCESSOR_MISSING", "preprocessor_config.json",
     "the image processor cannot be loaded, so image inputs fail"},
};
#define NAUX (sizeof aux_files / sizeof aux_files[0])

static int multimodal(const dctx *c)
{
    return json_is_object(json_object_get(c->config, "vision_config")) ||
           json_is_object(json_object_get(c->config, "audio_config"));
}

static int file_in(const char *dir, const char *name)
{
    char *p = fs_join(dir, name);
    int ok = fs_exists(p);
    free(p);
    return ok;
}

static int has_template(const dctx *c)
{
    return file_in(c->dir, "chat_template.jinja") || file_in(c->dir, "chat_template.json") ||
           json_is_string(json_object_get(c->tokcfg, "chat_template"));
}

void doctor_check_aux(dctx *c, doctor_report *r)
{
    if (!multimodal(c))
        return;
    for (size_t i = 0; i < NAUX; i++)
        if (!file_in(c->dir, aux_files[i].name)) {
            doctor_add(r, aux_files[i].code, aux_files[i].name, -1, "missing: %s", aux_files[i].consequence);
            r->f[r->n - 1].arg = (int)i;
        }
    if (!has_template(c))
        doctor_add(r, "AUX_CHAT_TEMPLATE_MISSING", "chat_template.jinja", -1,
                   "no chat_template.jinja, chat_template.json or tokenizer_config chat_template: chat "
                   "requests to vLLM's OpenAI server fail");
}

/* The source must be the same model family: same model_type, same first
 * architecture and same text vocabulary (token ids in the processor files). */
static int same_family(const dctx *c, char *why, size_t n)
{
    const char *src = c->o ? c->o->aux_from : NULL;
    if (!src)
        return snprintf(why, n, "give --aux-from CANONICAL_DIR to copy it from"), 0;
    char *p = fs_join(src, "config.json");
    json_t *ac = NULL;
    ff_err e = {0};
    int rc = jsonio_load(p, &ac, &e);
    free(p);
    if (rc)   /* -1: no memory to tell, which is no reason to refuse */
        return e.oom ? -1 : (snprintf(why, n, "--aux-from: %.300s", e.msg), 0);
    const json_t *at = json_object_get(ac, "text_config");
    if (!json_is_object(at))
        at = ac;
    const char *mt = jsonio_str(c->config, "model_type", ""), *amt = jsonio_str(ac, "model_type", "");
    const char *ar = json_string_value(json_array_get(json_object_get(c->config, "architectures"), 0));
    const char *aar = json_string_value(json_array_get(json_object_get(ac, "architectures"), 0));
    int64_t v = jsonio_int(c->text, "vocab_size", -1), av = jsonio_int(at, "vocab_size", -2);
    int ok = 1;
    if (strcmp(mt, amt))
        ok = 0, snprintf(why, n, "--aux-from is model_type \"%s\", this checkpoint \"%s\"", amt, mt);
    else if (!ar || !aar || strcmp(ar, aar))
        ok = 0, snprintf(why, n, "--aux-from architecture %s differs from %s", aar ? aar : "(none)", ar ? ar : "(none)");
    else if (v != av)
        ok = 0, snprintf(why, n, "--aux-from vocab_size %lld differs from %lld", (long long)av, (long long)v);
    json_decref(ac);
    return ok;
}

static int copy_from_aux(dctx *c, doctor_finding *f, const char *name, ff_err *e)
{
    char *src = fs_join(c->o->aux_from, name), *dst = fs_join(c->dir, name);
    int rc = FF_OK;
    if (!fs_exists(src))
        doctor_note(f, 0, "refused: %s has no %s either", c->o->aux_from, name);
    else if ((rc = fs_copy_file(src, dst, e)) == FF_OK)
        doctor_note(f, 1, "copied %s from %s (same model family)", name, c->o->aux_from);
    free(src);
    free(dst);
    return rc;
}

int doctor_fix_aux(dctx *c, doctor_finding *f, ff_err *e)
{
    char why[400];
    int same = same_family(c, why, sizeof why);
    if (same < 0)
        return ff_oom(e, "out of memory reading --aux-from");
    if (!same) {
        doctor_note(f, 0, "refused: %s", why);
        return FF_OK;
    }
    return copy_from_aux(c, f, aux_files[f->arg].name, e);
}

/* The template may live as a file or inside tokenizer_config.json; either
 * way the copy lands as chat_template.jinja, the form transformers 5 writes. */
int doctor_fix_template(dctx *c, doctor_finding *f, ff_err *e)
{
    char why[400];
    int same = same_family(c, why, sizeof why);
    if (same < 0)
        return ff_oom(e, "out of memory reading --aux-from");
    if (!same) {
        doctor_note(f, 0, "refused: %s", why);
        return FF_OK;
    }
    if (file_in(c->o->aux_from, "chat_template.jinja"))
        return copy_from_aux(c, f, "chat_template.jinja", e);
    if (file_in(c->o->aux_from, "chat_template.json"))
        return copy_from_aux(c, f, "chat_template.json", e);
    char *p = fs_join(c->o->aux_from, "tokenizer_config.json");
    json_t *tc = NULL;
    ff_err le = {0};
    const char *tpl = NULL;
    if (fs_exists(p) && jsonio_load(p, &tc, &le) == FF_OK)
        tpl = json_string_value(json_object_get(tc, "chat_template"));
    free(p);
    int rc = FF_OK;
    if (!tpl) {
        doctor_note(f, 0, "refused: %s has no chat template either", c->o->aux_from);
    } else {
        char *dst = fs_join(c->dir, "chat_template.jinja");
        FILE *out = fopen(dst, "w");
        if (!out || fputs(tpl, out) == EOF || fclose(out) != 0)
            rc = ff_fail(e, FF_EIO, "%s: cannot write", dst);
        else
            doctor_note(f, 1, "wrote chat_template.jinja from %s/tokenizer_config.json", c->o->aux_from);
        free(dst);
    }
    json_decref(tc);
    return rc;
}

/* ---------- 5. tokenizer truncation baked in ---------- */

void doctor_check_tokenizer(dctx *c, doctor_report *r)
{
    json_t *t = json_object_get(c->tok, "truncation");
    if (t && !json_is_null(t))
        doctor_add(r, "TOKENIZER_TRUNCATION", "tokenizer.json", -1,
                   "truncation is baked in (max_length %lld, strategy %s): every prompt is silently cut "
                   "to %lld tokens", (long long)jsonio_int(t, "max_length", -1),
                   jsonio_str(t, "strategy", "?"), (long long)jsonio_int(t, "max_length", -1));
    json_t *p = json_object_get(c->tok, "padding");
    if (p && !json_is_null(p)) {
        char *s = json_dumps(json_object_get(p, "strategy"), JSON_ENCODE_ANY | JSON_COMPACT);
        doctor_add(r, "TOKENIZER_PADDING", "tokenizer.json", -1,
                   "padding is baked in (strategy %s): every encoding is padded, so single prompts carry "
                   "pad tokens", s ? s : "?");
        free(s);
    }
    json_t *m = json_object_get(c->tokcfg, "model_max_length");
    int64_t maxpos = jsonio_int(c->text, "max_position_embeddings", 0);
    if (json_is_number(m)) {
        double v = json_number_value(m);
        if (v <= 0 || (maxpos > 0 && v < (double)maxpos))
            doctor_add(r, "TOKENIZER_MAX_LENGTH", "tokenizer_config.json", -1,
                       "model_max_length %.0f is below the model's max_position_embeddings %lld: tokenizers "
                       "truncate (or warn) at %.0f tokens", v, (long long)maxpos, v);
    }
}

int doctor_fix_tokenizer(dctx *c, doctor_finding *f, ff_err *e)
{
    if (!strcmp(f->code, "TOKENIZER_MAX_LENGTH")) {
        if (c->tokcfg_lossy) {
            doctor_note(f, 0, "refused: tokenizer_config.json holds integers too large to rewrite exactly");
            return FF_OK;
        }
        double v = json_number_value(json_object_get(c->tokcfg, "model_max_length"));
        json_object_set_new(c->tokcfg, "model_max_length", json_null());
        c->dirty_tokcfg = 1;
        doctor_note(f, 1, "set model_max_length to null (no cap); the cap was %.0f", v);
        return FF_OK;
    }
    const char *key = !strcmp(f->code, "TOKENIZER_TRUNCATION") ? "truncation" : "padding";
    json_t *b = json_object_get(c->tok, key);
    char *s = json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT);
    json_object_set_new(c->tok, key, json_null());
    c->dirty_tok = 1;
    doctor_note(f, 1, "set %s to null; it was %s", key, s ? s : "?");
    free(s);
    return FF_OK;
}

/* ---------- 6. unreadable tensors (families without a shape check) ---------- */

static void check_readable(dctx *c, doctor_report *r)
{
    if (!c->has_ck)
        doctor_add(r, "TENSORS_UNREADABLE", "model.safetensors", -1, "%s", c->ck_why);
}

const ff_doctor_check doctor_default_checks[] = {
    doctor_check_aux, doctor_check_tokenizer, check_readable, NULL,
};

const ff_doctor_code doctor_default_codes[] = {
    DOCTOR_COMMON_CODES,
    {NULL, NULL},
};
