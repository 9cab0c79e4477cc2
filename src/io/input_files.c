#include "input_files.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"
#include "hfcache.h"

/* quantize names two (the input and doctor's shadow), merge and
 * repair-scales two; each may add its cache repo folder */
#define MAX_ROOTS 16

/* The real paths a link may lead into. */
typedef struct roots {
    char *dir[MAX_ROOTS];
    size_t n;
} roots;

static void roots_free(roots *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->dir[i]);
    r->n = 0;
}

static int roots_of(const char *const *inputs, roots *r, ff_err *e)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; inputs && inputs[i]; i++) {
        if (r->n + 2 > MAX_ROOTS)
            return ff_fail(e, FF_EIO, "%s: more than %d input folders", inputs[i], MAX_ROOTS / 2);
        /* an input that does not resolve has nothing to check; its reader says so */
        char *real = realpath(inputs[i], NULL), *repo = hfcache_snapshot_repo(inputs[i]);
        if (real)
            r->dir[r->n++] = real;
        if (repo)
            r->dir[r->n++] = repo;
    }
    return FF_OK;
}

static int allowed(const roots *r, const char *real)
{
    for (size_t i = 0; i < r->n; i++)
        if (fs_path_within(r->dir[i], real))
            return 1;
    return 0;
}

/* One entry of an input folder: what is not a file (a folder, a dangling
 * link) is neither read nor copied and passes. */
static int check_entry(const roots *r, const char *path, ff_err *e)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return FF_OK;
    int link = S_ISLNK(st.st_mode);
    if ((link && stat(path, &st) != 0) || S_ISDIR(st.st_mode))
        return FF_OK;
    /* a shard may live on another disk (a folder of links to shards is how
     * many keep models): it is parsed as safetensors, never carried as text */
    size_t len = strlen(path);
    int shard = len > 12 && strcmp(path + len - 12, ".safetensors") == 0;
    if (link && !shard) {
        char *real = realpath(path, NULL);
        int rc = !real || allowed(r, real)
                     ? FF_OK
                     : ff_fail(e, FF_EIO, "%s: a link to %s, outside the input folder; fp4forge reads and copies only "
                                          "the input's own files (copy the file in to carry it)", path, real);
        free(real);
        if (rc)
            return rc;
    }
    if (!S_ISREG(st.st_mode))
        return ff_fail(e, FF_EIO, "%s: %s, not a regular file; fp4forge reads and copies only regular files", path,
                       fs_kind(st.st_mode));
    return FF_OK;
}

static int check_folder(const roots *r, const char *dir, ff_err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return FF_OK;   /* the reader reports an unreadable input */
    int rc = FF_OK;
    for (struct dirent *de; rc == FF_OK && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char *p = fs_join(dir, de->d_name);
        rc = p ? check_entry(r, p, e) : ff_oom(e, "out of memory");
        free(p);
    }
    closedir(d);
    return rc;
}

int input_files_check(const char *const *inputs, ff_err *e)
{
    roots r;
    int rc = roots_of(inputs, &r, e);
    for (size_t i = 0; rc == FF_OK && inputs && inputs[i]; i++)
        rc = check_folder(&r, inputs[i], e);
    roots_free(&r);
    return rc;
}
