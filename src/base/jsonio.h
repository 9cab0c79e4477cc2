/* JSON files through jansson: load with a one-line error naming the file,
 * typed getters that tolerate absent keys, and atomic, stable-order writes. */
#ifndef FF_JSONIO_H
#define FF_JSONIO_H

#include <jansson.h>
#include <stdint.h>

#include "ff_err.h"

/* Loads a JSON file whose top level must be an object; anything but a
 * regular file (a FIFO, a device) is refused, never waited on. */
int jsonio_load(const char *path, json_t **out, ff_err *e);
/* The same with jansson's decoding flags (JSON_DECODE_INT_AS_REAL, ...)
 * instead of JSON_REJECT_DUPLICATES. */
int jsonio_load_flags(const char *path, size_t flags, json_t **out, ff_err *e);
/* Parses a buffer (for safetensors headers); `what` names it in errors. */
int jsonio_parse(const char *buf, size_t len, const char *what, json_t **out, ff_err *e);
/* Writes indented JSON (keys in insertion order) + newline to path. */
/* json_dumps, and NULL unless it ran without an allocation failure and the
 * text parses back to an equal value: jansson 2.14 can return a corrupt
 * text when an allocation inside the dump fails (a key lost from a
 * safetensors header, seen under tests/golden/t_faultsim.sh). */
/* How many allocations jansson has failed on this thread: a result built
 * while it grew may lack keys (jansson drops a value it could not make). */
unsigned long jsonio_alloc_failures(void);
char *jsonio_dumps_checked(const json_t *j, size_t flags);
int jsonio_save(const char *path, const json_t *j, ff_err *e);

/* Getters: return dflt when the key is absent or null or of another type. */
int64_t jsonio_int(const json_t *obj, const char *key, int64_t dflt);
int jsonio_bool(const json_t *obj, const char *key, int dflt);
const char *jsonio_str(const json_t *obj, const char *key, const char *dflt);
/* Follows a dotted path ("text_config.hidden_size"); NULL if missing. */
json_t *jsonio_path(const json_t *obj, const char *dotted);

/* Cuts a UTF-8 sequence left incomplete at the end of s (a message
 * truncated to a fixed buffer): jansson refuses invalid UTF-8, so a cut
 * message would otherwise vanish from JSON output. */
void jsonio_trim_utf8(char *s);
/* A JSON string of s, each byte that is not part of well-formed UTF-8
 * written as U+FFFD: json_string returns NULL for such text, so a path or a
 * name holding one vanished from the JSON report and the page built from
 * it. NULL only when out of memory. */
json_t *jsonio_string(const char *s);

#endif
