/* Doctor report, context loading, the fix pass (backups, then atomic
 * rewrites) and the quantize gate. The checks themselves are table entries
 * in doctor_rules.c. */
#include "doctor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doctor_int.h"
#include "fsutil.h"
#include "jsonio.h"

void doctor_add(doctor_report *r, const char *code, const char *file, int layer,
                const char *fmt, ...)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        doctor_finding *grown = realloc(r->f, cap * sizeof *r->f);
        if (!grown) {
            r->lost++;    /* reported: a report that silently lost a finding would read clean */
            return;
        }
        r->f = grown;
        r->cap = cap;
    }
    doctor_finding *f = &r->f[r->n++];
    memset(f, 0, sizeof *f);
    f->code = code;
    snprintf(f->file, sizeof f->file, "%s", file);
    f->layer = layer;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    jsonio_trim_utf8(f->msg);
}

void doctor_note(doctor_finding *f, int fixed, const char *fmt, ...)
{
    f->fixed = fixed;
    f->refused = !fixed;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->note, sizeof f->note, fmt, ap);
    va_end(ap);
    jsonio_trim_utf8(f->note);
}

/* tokenizer_config.json often stores transformers' "no limit" sentinel
 * 1e30 as an integer jansson cannot hold; read such a file with ints as
 * reals so it can still be checked, and never write it back. */
static int load_optional(const char *dir, const char *name, json_t **out, int *lossy, ff_err *e)
{
    *out = NULL;
    char *p = fs_join(dir, name);
    int rc = p ? FF_OK : ff_oom(e, "%s: out of memory", dir);
    if (fs_exists(p)) {
        rc = jsonio_load(p, out, e);
        ff_err le = {0};   /* when this fails too, the first reason stands */
        if (rc && lossy && jsonio_load_flags(p, JSON_DECODE_INT_AS_REAL, out, &le) == FF_OK) {
            *lossy = 1;
            rc = FF_OK;
        }
    }
    free(p);
    return rc;
}

int dctx_open(dctx *c, const char *dir, const doctor_opts *o, ff_err *e)
{
    memset(c, 0, sizeof *c);
    c->dir = dir;
    c->o = o;
    if (!fs_is_dir(dir))
        return ckpt_not_a_folder(dir, e);
    char *cp = fs_join(dir, "config.json");
    int rc = fs_exists(cp) ? jsonio_load(cp, &c->config, e)
                           : ff_fail(e, FF_EIO, "%s: missing config.json", dir);
    free(cp);
    if (rc == FF_OK)
        rc = load_optional(dir, "tokenizer.json", &c->tok, NULL, e);
    if (rc == FF_OK)
        rc = load_optional(dir, "tokenizer_config.json", &c->tokcfg, &c->tokcfg_lossy, e);
    if (rc)
        return rc;
    c->text = json_object_get(c->config, "text_config");
    if (!json_is_object(c->text))
        c->text = c->config;
    ff_err ce = {0};
    c->has_ck = ckpt_open_headers(&c->ck, dir, 0, &ce) == FF_OK;   /* its checks read shapes, never data */
    if (!c->has_ck) {
        ckpt_close(&c->ck);
        memset(&c->ck, 0, sizeof c->ck);
        snprintf(c->ck_why, sizeof c->ck_why, "%s", ce.msg);
        c->oom |= ce.oom;
    }
    c->fam = ff_family_detect(c->config);
    if (c->fam && c->fam->doctor_open)
        return c->fam->doctor_open(c, e);
    return FF_OK;
}

void dctx_close(dctx *c)
{
    json_decref(c->config);
    json_decref(c->tok);
    json_decref(c->tokcfg);
    if (c->fam && c->fam->doctor_close)
        c->fam->doctor_close(c);
    if (c->has_ck)
        ckpt_close(&c->ck);
    memset(c, 0, sizeof *c);
}

static const ff_doctor_check *checks_of(const dctx *c)
{
    return c->fam && c->fam->doctor_checks ? c->fam->doctor_checks : doctor_default_checks;
}

int doctor_check(const char *dir, const doctor_opts *o, doctor_report *r, ff_err *e)
{
    memset(r, 0, sizeof *r);
    r->dir = strdup(dir);
    dctx c;
    int rc = dctx_open(&c, dir, o, e);
    if (rc == FF_OK)
        for (const ff_doctor_check *chk = checks_of(&c); *chk; chk++)
            (*chk)(&c, r);
    int oom = c.oom;
    dctx_close(&c);
    if (rc == FF_OK && r->lost)
        rc = ff_oom(e, "out of memory: %zu findings could not be recorded", r->lost);
    /* a check that ran out of memory found nothing about the folder: its
     * "finding" would send the user to fix a file that is fine */
    if (rc == FF_OK && oom)
        rc = ff_oom(e, "%s: out of memory while checking", dir);
    if (rc) /* a report that could not be made holds nothing to free */
        doctor_report_free(r);
    return rc;
}

static const ff_doctor_code *code_entry(const dctx *c, const char *code)
{
    const ff_doctor_code *t = c->fam && c->fam->doctor_codes ? c->fam->doctor_codes : doctor_default_codes;
    for (; t->code; t++)
        if (strcmp(t->code, code) == 0)
            return t;
    return NULL;
}

static void make_stamp(const doctor_opts *o, char *buf, size_t n)
{
    if (o && o->stamp) {
        snprintf(buf, n, "%s", o->stamp);
        return;
    }
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, n, "%Y%m%d-%H%M%S", &tm);
}

/* FILE.bak-fp4forge-STAMP, byte for byte; a second backup within the same
 * second gets "-2", "-3" so no backup is ever overwritten. */
static int backup(doctor_report *r, const char *dir, const char *name, const char *stamp,
                  ff_err *e)
{
    char *src = fs_join(dir, name);
    char bname[512], *dst = NULL;
    for (int k = 1; k < 100; k++) {
        if (k == 1)
            snprintf(bname, sizeof bname, "%s.bak-fp4forge-%s", name, stamp);
        else
            snprintf(bname, sizeof bname, "%s.bak-fp4forge-%s-%d", name, stamp, k);
        free(dst);
        dst = fs_join(dir, bname);
        if (!fs_exists(dst))
            break;
    }
    int rc = fs_copy_file(src, dst, e);
    free(src);
    if (rc) {
        free(dst);
        return rc;
    }
    r->backups = realloc(r->backups, (r->nbackups + 1) * sizeof *r->backups);
    r->backups[r->nbackups++] = dst;
    return FF_OK;
}

/* Writes beside the file and renames, so a crash leaves old or new, never half. */
static int save_atomic(const char *dir, const char *name, const json_t *j, ff_err *e)
{
    char *p = fs_join(dir, name);
    size_t n = strlen(p) + 32;
    char *tmp = malloc(n);
    snprintf(tmp, n, "%s.tmp-fp4forge", p);
    int rc = jsonio_save(tmp, j, e);
    if (rc == FF_OK && rename(tmp, p) != 0)
        rc = ff_fail(e, FF_EIO, "%s: cannot rename into place", p);
    if (rc)
        remove(tmp);
    free(tmp);
    free(p);
    return rc;
}

static int write_back(dctx *c, doctor_report *r, ff_err *e)
{
    char stamp[64];
    make_stamp(c->o, stamp, sizeof stamp);
    struct { int dirty; const char *name; json_t *j; } files[] = {
        {c->dirty_config, "config.json", c->config},
        {c->dirty_tok, "tokenizer.json", c->tok},
        {c->dirty_tokcfg, "tokenizer_config.json", c->tokcfg},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!files[i].dirty)
            continue;
        int rc = backup(r, c->dir, files[i].name, stamp, e);
        if (rc == FF_OK)
            rc = save_atomic(c->dir, files[i].name, files[i].j, e);
        if (rc)
            return rc;
    }
    return FF_OK;
}

int doctor_fix(const char *dir, const doctor_opts *o, doctor_report *r, ff_err *e)
{
    dctx c;
    int rc = dctx_open(&c, dir, o, e);
    for (size_t i = 0; rc == FF_OK && i < r->n; i++) {
        doctor_finding *f = &r->f[i];
        const ff_doctor_code *dc = code_entry(&c, f->code);
        if (!dc || !dc->fix)
            doctor_note(f, 0, "no repair in place: the upload itself is broken; re-export or re-download it");
        else
            rc = dc->fix(&c, f, e);
    }
    if (rc == FF_OK)
        rc = write_back(&c, r, e);
    dctx_close(&c);
    return rc;
}

size_t doctor_remaining(const doctor_report *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        k += !r->f[i].fixed;
    return k;
}

json_t *doctor_report_json(const doctor_report *r)
{
    json_t *fs = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const doctor_finding *f = &r->f[i];
        json_t *o = json_pack("{s:s, s:s, s:s}", "code", f->code, "file", f->file, "message", f->msg);
        json_object_set_new(o, "layer", f->layer >= 0 ? json_integer(f->layer) : json_null());
        if (f->fixed || f->refused) {
            json_object_set_new(o, "fixed", json_boolean(f->fixed));
            json_object_set_new(o, "note", json_string(f->note));
        }
        json_array_append_new(fs, o);
    }
    json_t *bk = json_array();
    for (size_t i = 0; i < r->nbackups; i++)
        json_array_append_new(bk, json_string(r->backups[i]));
    return json_pack("{s:s, s:b, s:o, s:o}", "dir", r->dir ? r->dir : "", "clean",
                     doctor_remaining(r) == 0, "findings", fs, "backups", bk);
}

void doctor_print(const doctor_report *r, int json, FILE *out)
{
    if (json) {
        json_t *j = doctor_report_json(r);
        json_dumpf(j, out, JSON_INDENT(2));
        fputc('\n', out);
        json_decref(j);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        const doctor_finding *f = &r->f[i];
        fprintf(out, "%s %s: %s\n", f->code, f->file, f->msg);
        if (f->fixed || f->refused)
            fprintf(out, "  %s: %s\n", f->fixed ? "fixed" : "NOT fixed", f->note);
    }
    for (size_t i = 0; i < r->nbackups; i++)
        fprintf(out, "backup %s\n", r->backups[i]);
    size_t left = doctor_remaining(r);
    if (r->n == 0)
        fprintf(out, "doctor: %s: clean\n", r->dir);
    else
        fprintf(out, "doctor: %s: %zu finding(s), %zu fixed, %zu remain\n", r->dir, r->n,
                r->n - left, left);
}

void doctor_report_free(doctor_report *r)
{
    free(r->dir);
    free(r->f);
    for (size_t i = 0; i < r->nbackups; i++)
        free(r->backups[i]);
    free(r->backups);
    memset(r, 0, sizeof *r);
}

static int gate_fail(const doctor_report *r, ff_err *e)
{
    for (size_t i = 0; i < r->n; i++)
        if (!r->f[i].fixed)
            return ff_fail(e, FF_EDOCTOR, "doctor: %s %s: %s (%zu finding(s); run `fp4forge doctor "
                           "%s`, or pass --fix or --no-doctor)", r->f[i].code, r->f[i].file,
                           r->f[i].msg, doctor_remaining(r), r->dir);
    return FF_OK;
}

int doctor_gate(const char *dir, int fix, const char *aux_from, FILE *out, ff_err *e)
{
    doctor_opts o = {.aux_from = aux_from};
    doctor_report r;
    int rc = doctor_check(dir, &o, &r, e);
    if (rc == FF_OK && r.n && fix) {
        rc = doctor_fix(dir, &o, &r, e);
        if (rc == FF_OK && out)
            doctor_print(&r, 0, out);
        doctor_report_free(&r);
        if (rc == FF_OK)
            rc = doctor_check(dir, &o, &r, e);  /* the proof: re-check from disk */
    }
    if (rc == FF_OK && r.n) {
        if (out)
            doctor_print(&r, 0, out);
        rc = gate_fail(&r, e);
    }
    doctor_report_free(&r);
    return rc;
}
