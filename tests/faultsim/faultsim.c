/* Allocation-failure injection for the sanitizer build (SQLite's
 * test_malloc "faultsim"): the binary is linked with --wrap for each
 * allocator, so every allocation the library and the CLI make (and
 * jansson's, through json_set_alloc_funcs) passes here. FF_FAULTSIM=N fails
 * the Nth one, once; the run must then end in a clean error. At exit the
 * count of allocations made, and the caller of the failed one, are written
 * to FF_FAULTSIM_REPORT, so the driver knows when a countdown has passed
 * every allocation and how many distinct sites it reached. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

/* The countdown is the process's, by nature: it counts every allocation
 * whichever module makes it (this file is the test binary's only state). */
static long fail_at, made;
static void *failed_site;

static int should_fail(void *site)
{
    if (++made != fail_at)
        return 0;
    failed_site = site;
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_strndup(s, n);
}

static void *json_malloc(size_t n)
{
    return should_fail(__builtin_return_address(0)) ? NULL : __real_malloc(n);
}

static void report(void)
{
    const char *path = getenv("FF_FAULTSIM_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    fprintf(f, "allocations %ld\nfailed_site %p\n", made, failed_site);
    fclose(f);
}

__attribute__((constructor)) static void faultsim_start(void)
{
    const char *n = getenv("FF_FAULTSIM");
    fail_at = n ? atol(n) : 0;
    json_set_alloc_funcs(json_malloc, free);
    atexit(report);
}
