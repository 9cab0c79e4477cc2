#include "jsonio.h"

#include <string.h>

#include "fsutil.h"

int jsonio_load(const char *path, json_t **out, ff_err *e)
{
    return jsonio_load_flags(path, JSON_REJECT_DUPLICATES, out, e);
}

int jsonio_load_flags(const char *path, size_t flags, json_t **out, ff_err *e)
{
    FILE *f = fs_fopen_regular(path, e);
    if (!f)
        return e ? e->code : FF_EIO;
    json_error_t je;
    json_t *j = json_loadf(f, flags, &je);
    fclose(f);
    if (!j && json_error_code(&je) == json_error_out_of_memory)
        return ff_fail(e, FF_EIO, "%s: out of memory reading its JSON", path);
    if (!j)
        return ff_fail(e, FF_EIO, "%s: bad JSON at line %d: %s", path, je.line, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return ff_fail(e, FF_EIO, "%s: top level is not a JSON object", path);
    }
    *out = j;
    return FF_OK;
}

int jsonio_parse(const char *buf, size_t len, const char *what, json_t **out, ff_err *e)
{
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!j && json_error_code(&je) == json_error_out_of_memory)
        return ff_fail(e, FF_EIO, "%s: out of memory reading its JSON", what);
    if (!j)
        return ff_fail(e, FF_EIO, "%s: bad JSON at byte %d: %s", what, je.position, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return ff_fail(e, FF_EIO, "%s: JSON is not an object", what);
    }
    *out = j;
    return FF_OK;
}

int jsonio_save(const char *path, const json_t *j, ff_err *e)
{
    /* JSON_REAL_PRECISION(17) keeps every double exact on reload. */
    if (json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0)
        return ff_fail(e, FF_EIO, "%s: cannot write JSON", path);
    FILE *f = fopen(path, "a");
    if (!f || fputc('\n', f) == EOF || fclose(f) != 0)
        return ff_fail(e, FF_EIO, "%s: cannot write JSON", path);
    return FF_OK;
}

int64_t jsonio_int(const json_t *obj, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v))
        return json_integer_value(v);
    return dflt;
}

int jsonio_bool(const json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

const char *jsonio_str(const json_t *obj, const char *key, const char *dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

json_t *jsonio_path(const json_t *obj, const char *dotted)
{
    char key[256];
    const json_t *cur = obj;
    while (cur && *dotted) {
        const char *dot = strchr(dotted, '.');
        size_t n = dot ? (size_t)(dot - dotted) : strlen(dotted);
        if (n >= sizeof key)
            return NULL;
        memcpy(key, dotted, n);
        key[n] = 0;
        cur = json_object_get(cur, key);
        dotted += n + (dot ? 1 : 0);
    }
    return (json_t *)cur;
}

void jsonio_trim_utf8(char *s)
{
    size_t n = strlen(s), i = n;
    size_t back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--, back++;                       /* continuation bytes at the end */
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (lead >= 0xc0 && back + 1 < need)
        s[i - 1] = 0;                      /* the lead byte's sequence is cut */
    else if (lead < 0x80 && back)
        s[i] = 0;                          /* stray continuation bytes */
}
