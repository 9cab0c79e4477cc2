/* Hugging Face cache names as inputs: `org/name[@revision]` is resolved to a
 * snapshot folder of the local hub cache, offline and read-only (nothing is
 * ever written into the cache). The environment is a parameter, not read
 * here, so the resolution is a pure function of its inputs and testable. */
#ifndef FF_HFCACHE_H
#define FF_HFCACHE_H

#include "ff_err.h"

/* The environment values that decide where the cache is (NULL when unset),
 * in huggingface_hub's order: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (its
 * older name), else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
 * HOME/.cache/huggingface/hub. */
typedef struct hf_env {
    const char *hub_cache;       /* HF_HUB_CACHE */
    const char *legacy_cache;    /* HUGGINGFACE_HUB_CACHE */
    const char *hf_home;         /* HF_HOME */
    const char *xdg_cache;       /* XDG_CACHE_HOME */
    const char *home;            /* HOME */
} hf_env;

/* A resolved name (strings malloc'd; hf_ref_free releases them). */
typedef struct hf_ref {
    char *repo;       /* "org/name" */
    char *name;       /* "name": the default output's stem */
    char *revision;   /* "main", a branch or tag, or a commit */
    char *dir;        /* the snapshot folder: .../models--org--name/snapshots/<commit> */
} hf_ref;

/* Is arg shaped like a repo id, `org/name` or `org/name@revision`? */
int hfcache_is_name(const char *arg);
/* The hub cache folder the environment names (malloc'd), or NULL with e
 * filled when none can be formed (no variable set, not even HOME). */
char *hfcache_root(const hf_env *env, ff_err *e);
/* Resolves arg when it is not an existing path and looks like a repo id:
 * FF_OK with r filled (r->dir the snapshot). An existing path or any other
 * shape: FF_OK with r->dir NULL (the caller uses arg as a path). A name not in
 * the cache: FF_EIO, one line naming the folder looked in and the command
 * that downloads it. */
int hfcache_lookup(const char *arg, const hf_env *env, hf_ref *r, ff_err *e);
/* Does path (an existing file or folder) lie inside the hub cache, or inside
 * a repo folder's snapshots/ or blobs/ of a cache wherever it is (by its
 * `models--*` name, or by its layout: it holds snapshots/ and blobs/)? As
 * named and as resolved, so a repo or snapshot folder that is a link to
 * somewhere else is still the cache. A command about to write into its
 * input refuses such a path. */
int hfcache_contains(const char *path, const hf_env *env);
/* When dir is a snapshot, ".../REPO/snapshots/REV" as named or as resolved
 * with REPO holding snapshots/ and blobs/: REPO's real path (malloc'd), the
 * folder its files may link into (../../blobs/). NULL otherwise. */
char *hfcache_snapshot_repo(const char *dir);
/* Would writing path touch checkpoint folder dir, or the cache repo dir is a
 * snapshot of (a report written there replaces weights or changes the
 * cache)? Real paths; path need not exist yet. */
int hfcache_writes_into_input(const char *path, const char *dir);
void hf_ref_free(hf_ref *r);

#endif
