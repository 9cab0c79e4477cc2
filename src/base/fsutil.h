/* File-system chores with errors as values: output goes to a temp folder
 * beside the destination and is renamed into place only when complete. */
#ifndef FF_FSUTIL_H
#define FF_FSUTIL_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#include "ff_err.h"

int fs_exists(const char *path);
int fs_is_dir(const char *path);
int fs_mkdir_p(const char *path, ff_err *e);
/* Removes a tree; used only on folders this program created. */
int fs_rm_rf(const char *path);
/* Copies a regular file (src is opened with fs_open_regular: a FIFO or a
 * device is refused, never waited on). */
int fs_copy_file(const char *src, const char *dst, ff_err *e);
/* "a FIFO", "a socket", "a character device", ...: what a non-regular file
 * is, for the one line that refuses it. */
const char *fs_kind(unsigned mode);
/* Opens path (links followed) for reading only when it is a regular file:
 * a FIFO, device or socket is refused with one line naming it, and is never
 * opened in a way that blocks (a FIFO has no writer; reading it would wait
 * forever). The descriptor, or -1 with e filled. */
int fs_open_regular(const char *path, ff_err *e);
/* A regular file's whole content (malloc'd, *len bytes), or NULL with e filled. */
char *fs_read_all(const char *path, size_t *len, ff_err *e);
/* The same as a stdio stream ("rb"), or NULL with e filled. */
FILE *fs_fopen_regular(const char *path, ff_err *e);
/* Would writing `path` touch `dir`: is path (followed, when it exists) or
 * the folder it would be written in the same as dir or inside it? Real
 * paths; path need not exist yet. 0 when dir does not resolve. */
int fs_writes_inside(const char *path, const char *dir);
/* Is the real path `inner` the same as or below the real path `outer`? */
int fs_path_within(const char *outer, const char *inner);
/* Does the name end with suf (".safetensors")? */
int fs_ends_with(const char *s, const char *suf);
/* Joins into a fresh malloc'd string. */
char *fs_join(const char *dir, const char *name);
/* Sorted file names (not folders, no dot entries) of dir; NULL-terminated. */
char **fs_list_files(const char *dir, size_t *n, ff_err *e);
void fs_free_list(char **list, size_t n);

/* The staging folder for OUT: "OUT.partial-<pid>" next to it. Refuses if OUT
 * exists already (never overwrite) unless `force`, and refuses an OUT that is,
 * contains or lies inside one of `inputs` (NULL-terminated, may be NULL): the
 * input is never written or replaced. Stale staging folders of OUT left by
 * dead processes (kill -9, power loss) are removed first. */
typedef struct fs_stage {
    char *final_dir;
    char *tmp_dir;
    int force;
} fs_stage;
int fs_stage_begin(fs_stage *s, const char *out_dir, int force, const char *const *inputs, ff_err *e);
/* fs_stage_begin's refusals (OUT is or holds an input, OUT exists without
 * force), with nothing created or removed: a dry run's. */
int fs_stage_check(const char *out_dir, int force, const char *const *inputs, ff_err *e);
/* Moves tmp into place atomically: without force it never replaces an OUT
 * that appeared meanwhile (another run: this one fails and says so); with
 * force the old OUT is swapped out in one step, then removed. */
int fs_stage_commit(fs_stage *s, ff_err *e);
/* "OUT.partial-<pid>" for this process (malloc'd): what a signal handler
 * removes. */
char *fs_stage_path(const char *out_dir);
/* "OUT.doctor-<pid>": the shadow input quantize --fix repairs (malloc'd). */
char *fs_shadow_path(const char *out_dir);
/* Removes "OUT.partial-<pid>" folders whose process is gone; returns how many. */
int fs_stage_collect_stale(const char *out_dir);
/* Removes the temp folder: nothing half-written is left behind. */
void fs_stage_abort(fs_stage *s);
void fs_stage_free(fs_stage *s);

/* Same file or folder (device+inode), for refusing OUT == IN. */
int fs_same(const char *a, const char *b);

#endif
