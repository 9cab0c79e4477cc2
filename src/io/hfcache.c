#include "hfcache.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

/* huggingface_hub caps a repo id part at 96 characters. */
#define PART_MAX 96

/* One part of a repo id: letters, digits, '.', '_', '-', not starting with
 * '.' or '-' and without "..", so a name can never climb out of the cache. */
static int valid_part(const char *s, size_t n)
{
    if (n == 0 || n > PART_MAX || s[0] == '.' || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
            return 0;
        if (i + 1 < n && s[i] == '.' && s[i + 1] == '.')
            return 0;
    }
    return 1;
}

/* A branch, tag or commit; branches may hold '/' (refs/pr/1), never "..". */
static int valid_revision(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '/' || s[n - 1] == '/' || strstr(s, ".."))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-/", s[i]))
            return 0;
    return 1;
}

int hfcache_is_name(const char *arg)
{
    const char *at = strchr(arg, '@');
    size_t len = at ? (size_t)(at - arg) : strlen(arg);
    const char *slash = memchr(arg, '/', len);
    if (!slash || memchr(slash + 1, '/', len - (size_t)(slash - arg) - 1))
        return 0;
    if (!valid_part(arg, (size_t)(slash - arg)) || !valid_part(slash + 1, len - (size_t)(slash - arg) - 1))
        return 0;
    return !at || valid_revision(at + 1);
}

static int is_commit(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]) || isupper((unsigned char)s[n]))
            return 0;
    return n == 40;
}

/* dir + "/" + a + "/" + b ... (NULL-terminated parts), malloc'd. */
static char *path_of(const char *dir, ...)
{
    va_list ap;
    size_t n = strlen(dir) + 1;
    va_start(ap, dir);
    for (const char *p; (p = va_arg(ap, const char *));)
        n += strlen(p) + 1;
    va_end(ap);
    char *s = malloc(n);
    if (!s)
        return NULL;
    strcpy(s, dir);
    va_start(ap, dir);
    for (const char *p; (p = va_arg(ap, const char *));) {
        strcat(s, "/");
        strcat(s, p);
    }
    va_end(ap);
    return s;
}

/* huggingface_hub expands a leading "~" in these variables; so do we. */
static char *expand_home(const char *v, const char *home)
{
    if (v[0] == '~' && (v[1] == '/' || !v[1]) && home)
        return path_of(home, v[1] ? v + 2 : NULL, NULL);
    return strdup(v);
}

char *hfcache_root(const hf_env *env, ff_err *e)
{
    char *r = NULL;
    if (env->hub_cache && *env->hub_cache)
        r = expand_home(env->hub_cache, env->home);
    else if (env->legacy_cache && *env->legacy_cache)
        r = expand_home(env->legacy_cache, env->home);
    else if (env->hf_home && *env->hf_home) {
        char *h = expand_home(env->hf_home, env->home);
        r = h ? path_of(h, "hub", NULL) : NULL;
        free(h);
    } else if (env->xdg_cache && *env->xdg_cache) {
        char *x = expand_home(env->xdg_cache, env->home);
        r = x ? path_of(x, "huggingface", "hub", NULL) : NULL;
        free(x);
    } else if (env->home && *env->home) {
        r = path_of(env->home, ".cache", "huggingface", "hub", NULL);
    } else {
        ff_fail(e, FF_EIO, "cannot locate the Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, HOME is set");
        return NULL;
    }
    if (!r)
        ff_oom(e, "out of memory");
    return r;
}

/* The commit a ref file holds (refs/<revision>: 40 hex digits, maybe a
 * newline), into out[41]: 0, or 1 when absent or not a commit, or -1 with e
 * filled when it is not a regular file (a FIFO there would block the read). */
static int read_ref(const char *path, char out[41], ff_err *e)
{
    if (!fs_exists(path))
        return 1;
    FILE *f = fs_fopen_regular(path, e);
    if (!f)
        return -1;
    char buf[128];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = 0;
    if (!is_commit(buf))
        return 1;
    memcpy(out, buf, 41);
    return 0;
}

/* The one line for a name the cache does not hold: where we looked and how
 * to fetch it (fp4forge itself never goes online). */
static int not_cached(ff_err *e, const char *arg, const char *repo, const char *rev, const char *looked,
                      const char *why)
{
    /* a link that leads back to itself is a damaged cache, not a missing
     * model: downloading again would not help */
    struct stat st;
    if (stat(looked, &st) != 0 && errno == ELOOP)
        return ff_fail(e, FF_EIO, "%s: %s in the Hugging Face cache is a loop of symbolic links (%s); remove it "
                                  "and download again", arg, looked, strerror(ELOOP));
    char revopt[300] = "";
    if (strcmp(rev, "main") != 0)
        snprintf(revopt, sizeof revopt, " --revision %s", rev);
    return ff_fail(e, FF_EIO,
                   "%s: no such folder, and %s in the Hugging Face cache (looked in %s); "
                   "download it with `hf download %s%s` (an older huggingface_hub: "
                   "`huggingface-cli download %s%s`)",
                   arg, why, looked, repo, revopt, repo, revopt);
}

/* Splits "org/name[@rev]" into r->repo, r->name, r->revision. */
static int split_name(const char *arg, hf_ref *r, ff_err *e)
{
    const char *at = strchr(arg, '@');
    r->repo = at ? strndup(arg, (size_t)(at - arg)) : strdup(arg);
    r->revision = strdup(at ? at + 1 : "main");
    r->name = r->repo ? strdup(strchr(r->repo, '/') + 1) : NULL;
    return r->repo && r->revision && r->name ? FF_OK : ff_oom(e, "out of memory");
}

/* The cache folder of a repo: "models--org--name" (huggingface_hub's
 * repo_folder_name: '/' becomes "--"). */
static char *model_folder(const char *root, const char *repo)
{
    const char *slash = strchr(repo, '/');
    char name[2 * PART_MAX + 16];
    snprintf(name, sizeof name, "models--%.*s--%s", (int)(slash - repo), repo, slash + 1);
    return path_of(root, name, NULL);
}

static int find_snapshot(const char *arg, const char *root, hf_ref *r, ff_err *e)
{
    char *model = model_folder(root, r->repo), *ref = NULL, commit[41];
    int rc = FF_OK, got;
    if (!model)
        return ff_oom(e, "out of memory");
    if (!fs_is_dir(model)) {
        rc = not_cached(e, arg, r->repo, r->revision, model, "not");
    } else if (is_commit(r->revision)) {
        /* a full commit hash names the snapshot itself, no ref needed */
        memcpy(commit, r->revision, 41);
    } else if (!(ref = path_of(model, "refs", r->revision, NULL))) {
        rc = ff_oom(e, "out of memory");
    } else if ((got = read_ref(ref, commit, e)) < 0) {
        rc = e ? e->code : FF_EIO;
    } else if (got > 0) {
        rc = not_cached(e, arg, r->repo, r->revision, ref, "its revision is not");
    }
    if (!rc && !(r->dir = path_of(model, "snapshots", commit, NULL)))
        rc = ff_oom(e, "out of memory");
    if (!rc && !fs_is_dir(r->dir))
        rc = not_cached(e, arg, r->repo, r->revision, r->dir, "its snapshot is not");
    free(model);
    free(ref);
    return rc;
}

int hfcache_lookup(const char *arg, const hf_env *env, hf_ref *r, ff_err *e)
{
    memset(r, 0, sizeof *r);
    /* an existing path always wins: a folder named like a repo id is a folder */
    if (fs_exists(arg) || !hfcache_is_name(arg))
        return FF_OK;
    char *root = hfcache_root(env, e);
    int rc = root ? split_name(arg, r, e) : e->code;
    if (!rc)
        rc = find_snapshot(arg, root, r, e);
    free(root);
    if (rc)
        hf_ref_free(r);
    return rc;
}

/* Is a inside b (or b itself)? Both absolute. */
static int path_within(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/' || (n == 1 && b[0] == '/'));
}

/* path made absolute as named: links not followed (malloc'd). */
static char *absolute(const char *path)
{
    char cwd[PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
        return strdup(path);
    return path_of(cwd, path, NULL);
}

/* Does dir hold what every hub repo folder holds, snapshots/ and blobs/? */
static int is_repo_folder(const char *dir)
{
    char *s = path_of(dir, "snapshots", NULL), *b = path_of(dir, "blobs", NULL);
    int yes = s && b && fs_is_dir(s) && fs_is_dir(b);
    free(s);
    free(b);
    return yes;
}

/* Does abs pass through a repo folder's snapshots/ or blobs/? By the name
 * "models--", or by the layout: a repo folder linked elsewhere (or a copied
 * cache) keeps its layout, not its name. */
static int through_repo_folder(const char *abs)
{
    const char *m = strstr(abs, "/models--");
    if (m && (strstr(m, "/snapshots/") || strstr(m, "/blobs/")))
        return 1;
    char *copy = strdup(abs);
    int in = 0;
    for (size_t i = 1; copy && abs[i] && !in; i++) {
        size_t len = strcspn(abs + i, "/");
        if (abs[i - 1] != '/' || !((len == 9 && !strncmp(abs + i, "snapshots", 9)) ||
                                   (len == 5 && !strncmp(abs + i, "blobs", 5))))
            continue;
        copy[i - 1] = 0;
        in = is_repo_folder(i == 1 ? "/" : copy);
        copy[i - 1] = '/';
    }
    free(copy);
    return in;
}

int hfcache_contains(const char *path, const hf_env *env)
{
    char *real = realpath(path, NULL);
    if (!real)
        return 0;
    char *named = absolute(path), *root = hfcache_root(env, NULL);
    char *root_real = root ? realpath(root, NULL) : NULL;
    /* as named and as resolved: either way in is enough, whatever links
     * the repo folder, the snapshot or the path itself goes through */
    const char *forms[] = {real, named};
    int in = 0;
    for (size_t i = 0; i < 2 && !in; i++)
        in = forms[i] && ((root && path_within(forms[i], root)) || (root_real && path_within(forms[i], root_real)) ||
                          through_repo_folder(forms[i]));
    free(real);
    free(named);
    free(root);
    free(root_real);
    return in;
}

/* The repo folder of a snapshot path ".../REPO/snapshots/REV", or NULL. */
static char *repo_of(const char *snapshot)
{
    char *p = strdup(snapshot);
    size_t n = p ? strlen(p) : 0;
    while (n > 1 && p[n - 1] == '/')
        p[--n] = 0;
    char *rev = p ? strrchr(p, '/') : NULL, *snaps = NULL;
    if (rev && rev > p) {
        *rev = 0;
        snaps = strrchr(p, '/');
    }
    char *repo = NULL;
    if (snaps && !strcmp(snaps + 1, "snapshots")) {
        *snaps = 0;
        repo = *p && is_repo_folder(p) ? realpath(p, NULL) : NULL;
    }
    free(p);
    return repo;
}

char *hfcache_snapshot_repo(const char *dir)
{
    char *real = realpath(dir, NULL), *named = real ? absolute(dir) : NULL;
    char *repo = named ? repo_of(named) : NULL;
    if (!repo && real)
        repo = repo_of(real);
    free(real);
    free(named);
    return repo;
}

void hf_ref_free(hf_ref *r)
{
    if (!r)
        return;
    free(r->repo);
    free(r->name);
    free(r->revision);
    free(r->dir);
    memset(r, 0, sizeof *r);
}

int hfcache_writes_into_input(const char *path, const char *dir)
{
    char *repo = hfcache_snapshot_repo(dir);
    int inside = fs_writes_inside(path, dir) || (repo && fs_writes_inside(path, repo));
    free(repo);
    return inside;
}
