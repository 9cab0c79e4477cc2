/* Shared by the libFuzzer harnesses: the parsers under test read folders and
 * files, so an input is written to a private scratch folder first. An input
 * holding several files separates them with FZ_SEP; part i goes to names[i],
 * and a file a shorter input does not give is removed, so no state leaks from
 * one input to the next. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FZ_SEP "\n=====\n"

/* One scratch folder per process (libFuzzer forks workers with -jobs). */
static inline const char *fz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fp4forge-fuzz-XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

static inline void fz_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", fz_dir(), name);
}

static inline void fz_write(const char *name, const uint8_t *data, size_t size)
{
    char path[256];
    fz_path(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
}

/* The FZ_SEP-separated parts of data, in place: part i is
 * [part[i], part[i] + len[i]); parts the input does not give are empty.
 * For the harnesses that read from memory. */
static inline void fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, size_t n)
{
    const size_t seplen = strlen(FZ_SEP);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *end = data ? memmem(data, size, FZ_SEP, seplen) : NULL;
        part[i] = data;
        len[i] = data ? (end ? (size_t)(end - data) : size) : 0;
        if (end) {
            size -= len[i] + seplen;
            data = end + seplen;
        } else {
            data = NULL;
            size = 0;
        }
    }
}

/* Writes the FZ_SEP-separated parts of data to names[0..n-1]. */
static inline void fz_write_parts(const uint8_t *data, size_t size, const char *const *names, size_t n)
{
    const size_t seplen = strlen(FZ_SEP);
    size_t i = 0;
    for (; i < n && data; i++) {
        const uint8_t *end = memmem(data, size, FZ_SEP, seplen);
        size_t len = end ? (size_t)(end - data) : size;
        fz_write(names[i], data, len);
        if (!end) {
            i++;
            break;
        }
        size -= len + seplen;
        data = end + seplen;
    }
    for (; i < n; i++) {
        char path[256];
        fz_path(path, sizeof path, names[i]);
        unlink(path);
    }
}

#endif
