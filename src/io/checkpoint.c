#include "checkpoint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "jsonio.h"
#include "siphash.h"
#include "threadpool.h"

/* Keyed per checkpoint: names come from the file, and a fixed hash let a
 * header make every lookup walk one long chain. */
static uint64_t hash_str(const ckpt *c, const char *s)
{
    return ff_siphash(c->hash_key, s, strlen(s));
}

static int build_hash(ckpt *c, ff_err *e)
{
    ff_sipkey_random(c->hash_key);
    c->hash_cap = 16;
    while (c->hash_cap < c->ntensors * 2)
        c->hash_cap *= 2;
    c->hash = malloc(c->hash_cap * sizeof *c->hash);
    c->hash_tag = malloc(c->hash_cap * sizeof *c->hash_tag);
    if (!c->hash || !c->hash_tag)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < c->hash_cap; i++)
        c->hash[i] = SIZE_MAX;
    for (size_t i = 0; i < c->ntensors; i++) {
        const char *name = c->tensors[i].st->name;
        uint64_t tag = hash_str(c, name);
        size_t h = tag & (c->hash_cap - 1);
        while (c->hash[h] != SIZE_MAX) {
            const ckpt_tensor *o = &c->tensors[c->hash[h]];
            if (c->hash_tag[h] == tag && strcmp(o->st->name, name) == 0)
                return ff_fail(e, FF_EIO, "%s: tensor %s is also in %s", c->files[c->tensors[i].file].path,
                               name, c->files[o->file].path);
            h = (h + 1) & (c->hash_cap - 1);
        }
        c->hash[h] = i;
        c->hash_tag[h] = tag;
    }
    return FF_OK;
}

const ckpt_tensor *ckpt_find(const ckpt *c, const char *name)
{
    return ckpt_find_join(c, name, strlen(name), "");
}

const ckpt_tensor *ckpt_find_join(const ckpt *c, const char *stem, size_t stem_len, const char *suffix)
{
    if (!c->hash)
        return NULL;
    uint64_t tag = ff_siphash2(c->hash_key, stem, stem_len, suffix, strlen(suffix));
    size_t h = tag & (c->hash_cap - 1);
    while (c->hash[h] != SIZE_MAX) {
        if (c->hash_tag[h] == tag) {
            const ckpt_tensor *t = &c->tensors[c->hash[h]];
            const char *n = t->st->name;
            if (strncmp(n, stem, stem_len) == 0 && strcmp(n + stem_len, suffix) == 0)
                return t;
        }
        h = (h + 1) & (c->hash_cap - 1);
    }
    return NULL;
}

/* Releases a half-read index so a failed open leaks nothing; returns NULL
 * for the caller's error return. */
static char **drop_index(json_t **index)
{
    json_decref(*index);
    *index = NULL;
    return NULL;
}

/* Distinct names in order of first mention, in a table keyed like the
 * tensor table's: a 497,220-entry index named its 320 shards through
 * 75 million strcmp calls, and one naming as many shards as tensors would
 * be quadratic. */
typedef struct name_set {
    char **names;
    size_t n, cap, *slot;
    uint64_t key[2];
} name_set;

static int set_init(name_set *s, size_t most)
{
    memset(s, 0, sizeof *s);
    ff_sipkey_random(s->key);
    s->cap = 16;
    while (s->cap < 2 * most)
        s->cap *= 2;
    s->names = calloc(most + 1, sizeof *s->names);
    s->slot = malloc(s->cap * sizeof *s->slot);
    for (size_t i = 0; s->slot && i < s->cap; i++)
        s->slot[i] = SIZE_MAX;
    return s->names && s->slot ? FF_OK : FF_EIO;
}

/* The slot that holds name, or the empty one where it would go. */
static size_t set_slot(const name_set *s, const char *name)
{
    size_t h = ff_siphash(s->key, name, strlen(name)) & (s->cap - 1);
    while (s->slot[h] != SIZE_MAX && strcmp(s->names[s->slot[h]], name) != 0)
        h = (h + 1) & (s->cap - 1);
    return h;
}

static int set_add(name_set *s, const char *name)
{
    size_t h = set_slot(s, name);
    if (s->slot[h] != SIZE_MAX)
        return FF_OK;
    if (!(s->names[s->n] = strdup(name)))
        return FF_EIO;
    s->slot[h] = s->n++;
    return FF_OK;
}

/* The index's shards: each entry's file a plain name in the folder. */
static char **index_shards(const char *dir, const char *ip, json_t **index, size_t *n, ff_err *e)
{
    int rc = jsonio_load(ip, index, e);
    json_t *wm = rc ? NULL : json_object_get(*index, "weight_map");
    if (!rc && !json_is_object(wm))
        ff_fail(e, FF_EIO, "%s: no weight_map object", ip);
    if (!json_is_object(wm))
        return drop_index(index);
    name_set set;
    rc = set_init(&set, json_object_size(wm)) ? ff_oom(e, "out of memory") : FF_OK;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        if (rc)
            break;
        else if (!f)
            rc = ff_fail(e, FF_EIO, "%s/model.safetensors.index.json: tensor %s: file is not a string", dir, k);
        else if (strchr(f, '/'))
            rc = ff_fail(e, FF_EIO, "%s/model.safetensors.index.json: tensor %s: shard %s is outside the folder", dir,
                         k, f);
        else if (set_add(&set, f))
            rc = ff_oom(e, "out of memory");
    }
    free(set.slot);
    if (rc) {
        fs_free_list(set.names, set.n);
        return drop_index(index);
    }
    *n = set.n;
    return set.names;
}

/* The folder's *.safetensors files (NULL-terminated; NULL: why in e). */
static char **list_shards(const char *dir, size_t *n, ff_err *e)
{
    size_t nf;
    char **all = fs_list_files(dir, &nf, e);
    if (!all)
        return NULL;
    size_t len = 0;
    for (size_t i = 0; i < nf; i++) {
        if (fs_ends_with(all[i], ".safetensors"))
            all[len++] = all[i];
        else
            free(all[i]);
    }
    all[len] = NULL;
    *n = len;
    return all;
}

/* Shard names from the index (unique, in order of first mention), or every
 * *.safetensors file of the folder when there is no index. */
static char **shard_names(const char *dir, json_t **index, size_t *n, ff_err *e)
{
    char *ip = fs_join(dir, "model.safetensors.index.json");
    *index = NULL;
    if (ip && fs_exists(ip)) {
        char **names = index_shards(dir, ip, index, n, e);
        free(ip);
        return names;
    }
    free(ip);
    return list_shards(dir, n, e);
}

/* Every tensor the index names must be in the shard it names, and every
 * tensor of a shard must be in the index: a stale index is a broken upload. */
static int check_index(const ckpt *c, const json_t *index, ff_err *e)
{
    json_t *wm = json_object_get(index, "weight_map");
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const ckpt_tensor *t = ckpt_find(c, k);
        if (!t)
            return ff_fail(e, FF_EIO, "%s/model.safetensors.index.json: tensor %s is in the index but in no shard (%s)",
                           c->dir, k, json_string_value(v));
        const char *base = strrchr(c->files[t->file].path, '/');
        if (strcmp(base ? base + 1 : c->files[t->file].path, json_string_value(v)) != 0)
            return ff_fail(e, FF_EIO, "%s/model.safetensors.index.json: tensor %s: index says %s, found in %s",
                           c->dir, k, json_string_value(v), c->files[t->file].path);
    }
    if (json_object_size(wm) != c->ntensors)
        for (size_t i = 0; i < c->ntensors; i++)
            if (!json_object_get(wm, c->tensors[i].st->name))
                return ff_fail(e, FF_EIO, "%s: tensor %s is missing from model.safetensors.index.json",
                               c->files[c->tensors[i].file].path, c->tensors[i].st->name);
    return FF_OK;
}

#define GGUF_HINT                                                                                         \
    "fp4forge reads a Hugging Face folder (config.json + *.safetensors); transformers converts a GGUF "   \
    "file into one: AutoModelForCausalLM.from_pretrained(DIR, gguf_file=FILE, dtype=torch.bfloat16)"    \
    ".save_pretrained(OUT)"

static int is_gguf(const char *path)
{
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".gguf") == 0)
        return 1;
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    int got = f && fread(magic, 1, 4, f) == 4;
    if (f)
        fclose(f);
    return got && memcmp(magic, "GGUF", 4) == 0;
}

int ckpt_not_a_folder(const char *path, ff_err *e)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ff_fail(e, FF_EIO, "%s: no such file or folder", path);
    if (S_ISREG(st.st_mode) && is_gguf(path))
        return ff_fail(e, FF_EIO, "%s: a GGUF file; " GGUF_HINT, path);
    if (S_ISREG(st.st_mode))
        return ff_fail(e, FF_EIO, "%s: a file, not a checkpoint folder (config.json + *.safetensors)", path);
    return ff_fail(e, FF_EIO, "%s: not a folder", path);
}

/* A folder with no .safetensors: say what it holds instead, and how to get
 * safetensors from it. */
static int no_safetensors(const char *dir, ff_err *e)
{
    DIR *d = opendir(dir);
    int bin = 0, gguf = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        bin |= n > 4 && (strcmp(de->d_name + n - 4, ".bin") == 0 || strcmp(de->d_name + n - 3, ".pt") == 0);
        gguf |= n > 5 && strcmp(de->d_name + n - 5, ".gguf") == 0;
    }
    if (d)
        closedir(d);
    if (bin)
        return ff_fail(e, FF_EIO, "%s: no .safetensors files, only PyTorch pickles (*.bin / *.pt), which fp4forge "
                                  "does not read; transformers writes safetensors: AutoModelForCausalLM."
                                  "from_pretrained(DIR, dtype=torch.bfloat16).save_pretrained(OUT)", dir);
    if (gguf)
        return ff_fail(e, FF_EIO, "%s: no .safetensors files, a GGUF file; " GGUF_HINT, dir);
    return ff_fail(e, FF_EIO, "%s: no .safetensors files", dir);
}

/* The tensors of every file in one list, in file order, and their table. */
static int index_tensors(ckpt *c, ff_err *e)
{
    c->tensors = calloc(c->ntensors ? c->ntensors : 1, sizeof *c->tensors);
    if (!c->tensors)
        return ff_oom(e, "out of memory");
    size_t k = 0;
    for (size_t f = 0; f < c->nfiles; f++)
        for (size_t i = 0; i < c->files[f].ntensors; i++) {
            c->tensors[k].st = &c->files[f].tensors[i];
            c->tensors[k++].file = (int)f;
            c->total_bytes += c->files[f].tensors[i].end - c->files[f].tensors[i].begin;
        }
    return build_hash(c, e);
}

/* Headers are read while the index is parsed: jansson reads ~40 MB/s, and
 * a 497,220-tensor release has a 59 MB index and 120 MB of headers. The
 * folder's *.safetensors are opened ahead on the pool, then taken in the
 * index's order; one it does not name is closed, one that failed or was not
 * listed is opened again in order, so the error names the first bad shard
 * in index order, as one thread would. */
typedef struct ahead {
    const char *dir;
    int map;
    char **listed;
    size_t nlisted;
    st_file *files;
    int *rcs;          /* per listed file: its open's result; -1 once taken */
    json_t *index;     /* shard_names' results */
    char **names;
    size_t nnames;
    ff_err ierr;
} ahead;

static int open_shard(const char *dir, const char *name, int map, st_file *f, ff_err *e)
{
    char *p = fs_join(dir, name);
    int rc = !p ? ff_oom(e, "%s: out of memory", dir) : map ? st_open(f, p, e) : st_open_header(f, p, e);
    free(p);
    return rc;
}

static void ahead_task(void *ctx, size_t t)
{
    ahead *a = ctx;
    ff_err ignored = {0};
    if (t == 0)
        a->names = shard_names(a->dir, &a->index, &a->nnames, &a->ierr);
    else
        a->rcs[t - 1] = open_shard(a->dir, a->listed[t - 1], a->map, &a->files[t - 1], &ignored);
}

/* The folder's *.safetensors, opened on the pool while task 0 parses the
 * index; a->names NULL (a->ierr says why) when the index is bad. */
static void open_ahead(ahead *a, ff_pool *pool)
{
    a->files = calloc(a->nlisted, sizeof *a->files);
    a->rcs = calloc(a->nlisted, sizeof *a->rcs);
    if (!a->files || !a->rcs) {   /* then each is opened in order */
        free(a->files);
        free(a->rcs);
        a->files = NULL;
        a->rcs = NULL;
        ahead_task(a, 0);
        return;
    }
    for (size_t i = 0; i < a->nlisted; i++)
        a->files[i].fd = -1;
    pool_run(pool, 1 + a->nlisted, ahead_task, a);
}

/* c->files in the index's order, from the files opened ahead. */
static int take_shards(ckpt *c, ahead *a, ff_err *e)
{
    name_set listed;
    int rc = set_init(&listed, a->nlisted) ? ff_oom(e, "out of memory") : FF_OK;
    for (size_t i = 0; !rc && i < a->nlisted; i++)
        rc = set_add(&listed, a->listed[i]) ? ff_oom(e, "out of memory") : FF_OK;
    for (size_t i = 0; !rc && i < a->nnames; i++) {
        size_t h = set_slot(&listed, a->names[i]), j = listed.slot[h];
        c->nfiles = i + 1;
        if (j != SIZE_MAX && a->rcs[j] == 0) {
            c->files[i] = a->files[j];
            a->rcs[j] = -1;
        } else
            rc = open_shard(c->dir, a->names[i], a->map, &c->files[i], e);
        c->ntensors += c->files[i].ntensors;
    }
    fs_free_list(listed.names, listed.n);
    free(listed.slot);
    return rc;
}

/* The ordinary case: the shards opened in order on this thread. */
static int open_in_order(ckpt *c, char **names, size_t n, int map, ff_err *e)
{
    int rc = FF_OK;
    for (size_t i = 0; i < n && rc == FF_OK; i++) {
        rc = open_shard(c->dir, names[i], map, &c->files[i], e);
        c->nfiles = i + 1;
        c->ntensors += c->files[i].ntensors;
    }
    return rc;
}

/* The folder's *.safetensors and a pool to open them on while the index is
 * parsed, when there are enough to gain from it; NULL: read in order. */
static ff_pool *ahead_pool(ahead *a, ff_err *e)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 2)
        return NULL;
    a->listed = list_shards(a->dir, &a->nlisted, e);   /* NULL: shard_names lists again and says why */
    return a->listed && a->nlisted >= 8 ? pool_create(cpus < 4 ? (int)cpus : 4) : NULL;
}

static void ahead_free(ahead *a)
{
    for (size_t i = 0; a->rcs && i < a->nlisted; i++)
        if (a->rcs[i] == 0)
            st_close(&a->files[i]);
    free(a->files);
    free(a->rcs);
    fs_free_list(a->listed, a->nlisted);
    fs_free_list(a->names, a->nnames);
    json_decref(a->index);
}

static int read_shards(ckpt *c, const char *dir, int map, ff_err *e)
{
    ahead a = {.dir = dir, .map = map};
    ff_pool *pool = ahead_pool(&a, e);
    if (pool) {
        open_ahead(&a, pool);
        pool_destroy(pool);
        if (!a.names && e)
            *e = a.ierr;
    } else
        a.names = shard_names(dir, &a.index, &a.nnames, e);
    int rc = !a.names ? (e && e->code ? e->code : FF_EIO) : a.nnames == 0 ? no_safetensors(dir, e) : FF_OK;
    if (!rc && !(c->files = calloc(a.nnames, sizeof *c->files)))
        rc = ff_oom(e, "out of memory");
    for (size_t i = 0; !rc && i < a.nnames; i++)
        c->files[i].fd = -1;
    if (!rc)
        rc = a.rcs ? take_shards(c, &a, e) : open_in_order(c, a.names, a.nnames, map, e);
    if (!rc)
        rc = index_tensors(c, e);
    if (!rc && a.index)
        rc = check_index(c, a.index, e);
    ahead_free(&a);
    return rc;
}

static int open_folder(ckpt *c, const char *dir, int need_config, int map, ff_err *e)
{
    c->dir = strdup(dir);
    if (!c->dir)
        return ff_oom(e, "out of memory");
    if (!fs_is_dir(dir))
        return ckpt_not_a_folder(dir, e);
    char *cp = fs_join(dir, "config.json");
    int rc = cp ? FF_OK : ff_oom(e, "%s: out of memory", dir);
    if (!rc && fs_exists(cp))
        rc = jsonio_load(cp, &c->config, e);
    else if (!rc && need_config)
        rc = ff_fail(e, FF_EIO, "%s: missing config.json", dir);
    free(cp);
    if (rc)
        return rc;
    return read_shards(c, dir, map, e);
}

int ckpt_open_memory(ckpt *c, const char *name, const char *config, size_t config_len, const uint8_t *shard,
                     size_t shard_len, ff_err *e)
{
    memset(c, 0, sizeof *c);
    c->dir = strdup(name);
    c->files = calloc(1, sizeof *c->files);
    int rc = c->dir && c->files ? FF_OK : ff_oom(e, "out of memory");
    if (!rc && config)
        rc = jsonio_parse(config, config_len, "config.json", &c->config, e);
    if (!rc)
        rc = st_open_memory(&c->files[0], "model.safetensors", shard, shard_len, e);
    if (!rc) {
        c->nfiles = 1;
        c->ntensors = c->files[0].ntensors;
        rc = index_tensors(c, e);
    }
    if (rc)
        ckpt_close(c);
    return rc;
}

static int open_ckpt(ckpt *c, const char *dir, int need_config, int map, ff_err *e)
{
    memset(c, 0, sizeof *c);
    int rc = open_folder(c, dir, need_config, map, e);
    if (rc) /* a refused folder holds nothing: callers need not close it */
        ckpt_close(c);
    return rc;
}

int ckpt_open(ckpt *c, const char *dir, int need_config, ff_err *e)
{
    return open_ckpt(c, dir, need_config, 1, e);
}

int ckpt_open_headers(ckpt *c, const char *dir, int need_config, ff_err *e)
{
    return open_ckpt(c, dir, need_config, 0, e);
}

void ckpt_close(ckpt *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nfiles; i++)
        st_close(&c->files[i]);
    free(c->files);
    free(c->tensors);
    free(c->hash);
    free(c->hash_tag);
    json_decref(c->config);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

int ckpt_view_open(ckpt *view, const ckpt *c, ff_err *e)
{
    view->dir = c->dir;
    view->config = c->config;
    view->files = c->files;
    view->nfiles = c->nfiles;
    view->total_bytes = 0;
    for (size_t i = 0; i < view->ntensors; i++)
        view->total_bytes += view->tensors[i].st->end - view->tensors[i].st->begin;
    return build_hash(view, e);
}

void ckpt_view_close(ckpt *view)
{
    free(view->tensors);
    free(view->hash);
    free(view->hash_tag);
    memset(view, 0, sizeof *view);
}

const json_t *ckpt_text_config(const ckpt *c)
{
    json_t *t = json_object_get(c->config, "text_config");
    return json_is_object(t) ? t : c->config;
}

int ckpt_copy_aux(const char *in_dir, const char *out_dir, int with_config, ff_err *e)
{
    size_t n;
    char **files = fs_list_files(in_dir, &n, e);
    if (!files)
        return e ? e->code : FF_EIO;
    int rc = FF_OK;
    for (size_t i = 0; i < n && rc == FF_OK; i++) {
        const char *f = files[i];
        if (fs_ends_with(f, ".safetensors") || strcmp(f, "model.safetensors.index.json") == 0 ||
            (!with_config && strcmp(f, "config.json") == 0) || strstr(f, ".bak-fp4forge-"))
            continue;
        char *a = fs_join(in_dir, f), *b = fs_join(out_dir, f);
        rc = a && b ? fs_copy_file(a, b, e) : ff_oom(e, "%s: out of memory", f);
        free(a);
        free(b);
    }
    fs_free_list(files, n);
    return rc;
}
