#include "jsonio.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"

/* jansson's loader drops a character when growing a buffer fails (its
 * lexer ignores the append's result) and still returns a value, and its
 * dumper can return a corrupt text: a config value or a tensor name
 * silently altered (both seen under tests/golden/t_faultsim.sh). Its
 * allocator hook is process-wide by jansson's design; ours counts the
 * failures on the calling thread, and a load or dump that saw one fails. */
static _Thread_local unsigned long json_alloc_failures;

static void *counted_malloc(size_t n)
{
    void *p = malloc(n);
    json_alloc_failures += p == NULL;
    return p;
}

static void install_allocator(void)
{
    json_set_alloc_funcs(counted_malloc, free);
}

unsigned long jsonio_alloc_failures(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_allocator);
    return json_alloc_failures;
}

int jsonio_load(const char *path, json_t **out, ff_err *e)
{
    return jsonio_load_flags(path, JSON_REJECT_DUPLICATES, out, e);
}

int jsonio_load_flags(const char *path, size_t flags, json_t **out, ff_err *e)
{
    size_t len;
    char *text = fs_read_all(path, &len, e);
    if (!text)
        return e ? e->code : FF_EIO;
    json_error_t je;
    unsigned long failures = jsonio_alloc_failures();
    json_t *j = json_loadb(text, len, flags, &je);
    free(text);
    if (jsonio_alloc_failures() != failures) {
        json_decref(j);
        return ff_oom(e, "%s: out of memory reading its JSON", path);
    }
    if (!j && json_error_code(&je) == json_error_out_of_memory)
        return ff_oom(e, "%s: out of memory reading its JSON", path);
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
    unsigned long failures = jsonio_alloc_failures();
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (jsonio_alloc_failures() != failures) {
        json_decref(j);
        return ff_oom(e, "%s: out of memory reading its JSON", what);
    }
    if (!j && json_error_code(&je) == json_error_out_of_memory)
        return ff_oom(e, "%s: out of memory reading its JSON", what);
    if (!j)
        return ff_fail(e, FF_EIO, "%s: bad JSON at byte %d: %s", what, je.position, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return ff_fail(e, FF_EIO, "%s: JSON is not an object", what);
    }
    *out = j;
    return FF_OK;
}

char *jsonio_dumps_checked(const json_t *j, size_t flags)
{
    unsigned long failures = jsonio_alloc_failures();
    char *s = json_dumps(j, flags);
    json_error_t je;
    json_t *back = s ? json_loads(s, JSON_DECODE_ANY, &je) : NULL;
    int same = back && json_equal(back, (json_t *)j) && jsonio_alloc_failures() == failures;
    json_decref(back);
    if (!same) {
        free(s);
        return NULL;
    }
    return s;
}

int jsonio_save(const char *path, const json_t *j, ff_err *e)
{
    /* JSON_REAL_PRECISION(17) keeps every double exact on reload. */
    char *s = jsonio_dumps_checked(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!s)
        return ff_oom(e, "%s: out of memory writing JSON", path);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(s, f) != EOF && fputc('\n', f) != EOF;
    ok = (f ? fclose(f) == 0 : 0) && ok;
    free(s);
    return ok ? FF_OK : ff_fail(e, FF_EIO, "%s: cannot write JSON: %s", path, strerror(errno));
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

/* The length of the well-formed UTF-8 sequence at p (jansson's rules: no
 * overlong form, no surrogate, nothing past U+10FFFF), 0 when there is none. */
static size_t utf8_seq(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    unsigned long cp = p[0] & (0x3fu >> (n ? n - 1 : 0));
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;   /* the terminating NUL stops here too */
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

json_t *jsonio_string(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), bad = 0;
    for (size_t i = 0, k; i < len; i += k ? k : 1)
        bad += (k = utf8_seq(p + i)) == 0;
    if (!bad)
        return json_string(s);
    /* counted as jansson's own allocations are: a caller watching
     * jsonio_alloc_failures sees this string lost too */
    char *t = counted_malloc(len + 2 * bad + 1), *o = t;
    for (size_t i = 0, k; t && i < len; i += k ? k : 1) {
        k = utf8_seq(p + i);
        memcpy(o, k ? s + i : "\xef\xbf\xbd", k ? k : 3);
        o += k ? k : 3;
    }
    json_t *j = t ? (*o = 0, json_string(t)) : NULL;
    free(t);
    return j;
}
