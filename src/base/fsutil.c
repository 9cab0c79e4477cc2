#include "fsutil.h"

#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_exists(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0;
}

int fs_is_dir(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_same(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int fs_mkdir_p(const char *path, ff_err *e)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return ff_fail(e, FF_EIO, "%s: path too long", path);
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return ff_fail(e, FF_EIO, "%s: cannot create folder: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return ff_fail(e, FF_EIO, "%s: cannot create folder: %s", buf, strerror(errno));
    return FF_OK;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

int fs_rm_rf(const char *path)
{
    if (!fs_exists(path))
        return 0;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fs_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFDIR: return "a folder";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

static int not_regular(const char *path, unsigned mode, ff_err *e)
{
    return ff_fail(e, FF_EIO, "%s: %s, not a regular file; fp4forge reads only regular files", path,
                   fs_kind(mode));
}

int fs_open_regular(const char *path, ff_err *e)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        ff_fail(e, FF_EIO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        not_regular(path, st.st_mode, e);
        return -1;
    }
    /* O_NONBLOCK: a FIFO put in its place after the stat must not block
     * the open either; the fstat below then refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        ff_fail(e, FF_EIO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        not_regular(path, st.st_mode, e);
        close(fd);
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        ff_fail(e, FF_EIO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

FILE *fs_fopen_regular(const char *path, ff_err *e)
{
    int fd = fs_open_regular(path, e);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (fd >= 0 && !f) {
        ff_fail(e, FF_EIO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int fs_copy_file(const char *src, const char *dst, ff_err *e)
{
    int in = fs_open_regular(src, e);
    if (in < 0)
        return e ? e->code : FF_EIO;
    /* O_NONBLOCK: a FIFO at dst fails (no reader) instead of waiting */
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return ff_fail(e, FF_EIO, "%s: cannot create: %s", dst, strerror(errno));
    }
    char buf[1 << 16];
    ssize_t r;
    int rc = FF_OK;
    while ((r = read(in, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0) {
                rc = ff_fail(e, FF_EIO, "%s: write failed: %s", dst, strerror(errno));
                goto done;
            }
            off += w;
        }
    }
    if (r < 0)
        rc = ff_fail(e, FF_EIO, "%s: read failed: %s", src, strerror(errno));
done:
    close(in);
    if (close(out) != 0 && rc == FF_OK)
        rc = ff_fail(e, FF_EIO, "%s: close failed: %s", dst, strerror(errno));
    return rc;
}

int fs_ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

char *fs_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s)
        return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **fs_list_files(const char *dir, size_t *n, ff_err *e)
{
    DIR *d = opendir(dir);
    if (!d) {
        ff_fail(e, FF_EIO, "%s: cannot open folder: %s", dir, strerror(errno));
        return NULL;
    }
    size_t cap = 16, len = 0;
    char **list = malloc(cap * sizeof *list);
    struct dirent *de;
    /* out of memory anywhere drops the whole list: a file skipped instead
     * would be a file silently missing from OUT */
    while (list && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char *p = fs_join(dir, de->d_name);
        struct stat st;
        int ok = p != NULL, is_file = ok && stat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
        if (ok && !is_file)
            continue;
        if (ok && len + 2 > cap) {
            char **nl = realloc(list, (cap * 2) * sizeof *list);
            ok = nl != NULL;
            list = ok ? nl : list;
            cap = ok ? cap * 2 : cap;
        }
        char *name = ok ? strdup(de->d_name) : NULL;
        if (!name) {
            fs_free_list(list, len);
            list = NULL;
            break;
        }
        list[len++] = name;
    }
    closedir(d);
    if (!list) {
        ff_oom(e, "%s: out of memory listing folder", dir);
        return NULL;
    }
    qsort(list, len, sizeof *list, cmp_str);
    list[len] = NULL;
    *n = len;
    return list;
}

void fs_free_list(char **list, size_t n)
{
    if (!list)
        return;
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* OUT without trailing slashes, malloc'd. */
static char *trim_slashes(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    return strndup(path, n);
}

char *fs_stage_path(const char *out_dir)
{
    char *out = trim_slashes(out_dir);
    if (!out)
        return NULL;
    size_t n = strlen(out) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.partial-%ld", out, (long)getpid());
    free(out);
    return p;
}

char *fs_shadow_path(const char *out_dir)
{
    char *out = trim_slashes(out_dir);
    if (!out)
        return NULL;
    size_t n = strlen(out) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.doctor-%ld", out, (long)getpid());
    free(out);
    return p;
}

/* The canonical absolute form of a path that may not exist yet: the
 * realpath of its deepest existing ancestor plus the rest, as written. */
static char *canonical(const char *path)
{
    char *r = realpath(path, NULL);
    if (r)
        return r;
    char *copy = trim_slashes(path);
    if (!copy)
        return NULL;
    size_t cut = strlen(copy);
    char *base = NULL;
    while (!base) {
        while (cut > 0 && copy[cut - 1] != '/')
            cut--;              /* back to the previous component */
        if (cut == 0) {
            base = realpath(".", NULL);
            break;
        }
        char keep = copy[cut - 1];
        copy[cut - 1] = 0;
        base = realpath(cut == 1 ? "/" : copy, NULL);
        copy[cut - 1] = keep;
        if (!base)
            cut--;
    }
    char *out = NULL;
    if (base) {
        const char *rest = copy + cut;
        size_t n = strlen(base) + strlen(rest) + 2;
        out = malloc(n);
        if (out)
            snprintf(out, n, "%s%s%s", base, strcmp(base, "/") ? "/" : "", rest);
    }
    free(base);
    free(copy);
    return out;
}

int fs_path_within(const char *outer, const char *inner)
{
    size_t n = strlen(outer);
    return strncmp(outer, inner, n) == 0 && (inner[n] == 0 || inner[n] == '/' || strcmp(outer, "/") == 0);
}

/* The folder a path would be written in, canonical (malloc'd). */
static char *canonical_parent(const char *path)
{
    char *copy = trim_slashes(path);
    char *slash = copy ? strrchr(copy, '/') : NULL;
    char *out;
    if (!copy)
        return NULL;
    if (!slash)
        out = canonical(".");
    else {
        slash[slash == copy] = 0;   /* "/x" keeps its "/" */
        out = canonical(copy);
    }
    free(copy);
    return out;
}

int fs_writes_inside(const char *path, const char *dir)
{
    char *d = realpath(dir, NULL);
    if (!d)
        return 0;
    char *self = canonical(path), *parent = canonical_parent(path);
    /* both: a link named path leads elsewhere, and a link elsewhere may lead into dir */
    int in = (self && fs_path_within(d, self)) || (parent && fs_path_within(d, parent));
    free(self);
    free(parent);
    free(d);
    return in;
}

static int check_not_input(const char *out_dir, const char *const *inputs, ff_err *e)
{
    char *out = canonical(out_dir);
    if (!out)
        return ff_fail(e, FF_EIO, "%s: cannot resolve the output folder: %s", out_dir, strerror(errno));
    int rc = FF_OK;
    for (size_t i = 0; inputs && inputs[i] && rc == FF_OK; i++) {
        char *in = canonical(inputs[i]);
        if (in && fs_path_within(out, in))
            rc = ff_fail(e, FF_EUSAGE, "%s: the output folder %s the input folder %s; refusing (the input is "
                         "never written or replaced)", out_dir, strcmp(out, in) ? "contains" : "is", inputs[i]);
        else if (in && fs_path_within(in, out))
            rc = ff_fail(e, FF_EUSAGE, "%s: the output folder lies inside the input folder %s; refusing (the input "
                         "is never written)", out_dir, inputs[i]);
        free(in);
    }
    free(out);
    return rc;
}

int fs_stage_collect_stale(const char *out_dir)
{
    char *out = trim_slashes(out_dir);
    if (!out)
        return 0;
    char *slash = strrchr(out, '/');
    const char *name = slash ? slash + 1 : out;
    char *dir = slash ? strndup(out, (size_t)(slash - out + (slash == out))) : strdup(".");
    DIR *d = dir ? opendir(dir) : NULL;
    size_t nl = strlen(name);
    int removed = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *s = de->d_name;
        if (strncmp(s, name, nl) || strncmp(s + nl, ".partial-", 9))
            continue;
        char *end;
        long pid = strtol(s + nl + 9, &end, 10);
        if (*end || end == s + nl + 9 || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;   /* alive (or not ours to judge): a concurrent run */
        char *p = fs_join(dir, s);
        if (p && fs_rm_rf(p) == 0)
            removed++;
        free(p);
    }
    if (d)
        closedir(d);
    free(dir);
    free(out);
    return removed;
}

static int check_out(const char *final_dir, int force, const char *const *inputs, ff_err *e)
{
    int rc = check_not_input(final_dir, inputs, e);
    if (rc)
        return rc;
    if (fs_exists(final_dir) && !force)
        return ff_fail(e, FF_EIO, "%s: already exists (refusing to overwrite; pass --force)", final_dir);
    return FF_OK;
}

int fs_stage_check(const char *out_dir, int force, const char *const *inputs, ff_err *e)
{
    char *final_dir = trim_slashes(out_dir);
    int rc = final_dir ? check_out(final_dir, force, inputs, e) : ff_oom(e, "out of memory");
    free(final_dir);
    return rc;
}

int fs_stage_begin(fs_stage *s, const char *out_dir, int force, const char *const *inputs, ff_err *e)
{
    memset(s, 0, sizeof *s);
    s->force = force;
    s->final_dir = trim_slashes(out_dir);
    s->tmp_dir = fs_stage_path(out_dir);
    if (!s->final_dir || !s->tmp_dir)
        return ff_oom(e, "out of memory");
    int rc = check_out(s->final_dir, force, inputs, e);
    if (rc)
        return rc;
    fs_stage_collect_stale(s->final_dir);
    fs_rm_rf(s->tmp_dir);
    return fs_mkdir_p(s->tmp_dir, e);
}

int fs_stage_commit(fs_stage *s, ff_err *e)
{
    if (renameat2(AT_FDCWD, s->tmp_dir, AT_FDCWD, s->final_dir, RENAME_NOREPLACE) == 0)
        return FF_OK;
    if (errno == EEXIST && !s->force)
        return ff_fail(e, FF_EIO, "%s: appeared while this run was in progress (another run into the same "
                       "folder?); it was left as it is and this output discarded", s->final_dir);
    if (errno == EEXIST) {
        /* one step: the new output in place, the old one in the staging name */
        if (renameat2(AT_FDCWD, s->tmp_dir, AT_FDCWD, s->final_dir, RENAME_EXCHANGE) != 0)
            return ff_fail(e, FF_EIO, "%s: cannot replace: %s", s->final_dir, strerror(errno));
        fs_rm_rf(s->tmp_dir);
        return FF_OK;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return ff_fail(e, FF_EIO, "%s: cannot rename into place: %s", s->final_dir, strerror(errno));
    /* a file system without renameat2 flags: check, then rename */
    if (fs_exists(s->final_dir) && !s->force)
        return ff_fail(e, FF_EIO, "%s: appeared while this run was in progress; it was left as it is", s->final_dir);
    if (fs_exists(s->final_dir) && fs_rm_rf(s->final_dir) != 0)
        return ff_fail(e, FF_EIO, "%s: cannot replace: %s", s->final_dir, strerror(errno));
    if (rename(s->tmp_dir, s->final_dir) != 0)
        return ff_fail(e, FF_EIO, "%s: cannot rename into place: %s", s->final_dir, strerror(errno));
    return FF_OK;
}

void fs_stage_abort(fs_stage *s)
{
    if (s->tmp_dir)
        fs_rm_rf(s->tmp_dir);
}

void fs_stage_free(fs_stage *s)
{
    free(s->final_dir);
    free(s->tmp_dir);
    memset(s, 0, sizeof *s);
}

/* The whole file: json_loadf reads a character at a time through getc,
 * which was a third of a 497,220-tensor plan's index read. */
char *fs_read_all(const char *path, size_t *len, ff_err *e)
{
    FILE *f = fs_fopen_regular(path, e);
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || ferror(f))
            break;
        char *more = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
        if (!more)
            free(buf);
        buf = more;
    }
    int unread = buf && ferror(f);
    fclose(f);
    if (buf && !unread) {
        *len = n;
        return buf;
    }
    free(buf);
    if (unread)
        ff_fail(e, FF_EIO, "%s: cannot read: %s", path, strerror(errno));
    else
        ff_oom(e, "%s: out of memory reading it", path);
    return NULL;
}
