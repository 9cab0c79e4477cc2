/* Allocation-failure injection for the sanitizer build (SQLite's
 * test_malloc "faultsim"): the binary is linked with --wrap for each
 * allocator, so every allocation the library and the CLI make (and
 * jansson's, through the allocator src/base/jsonio.c gives it) passes here. FF_FAULTSIM=N fails
 * the Nth one, once; the run must then end in a clean error. At exit the
 * count of allocations made, and the caller of the failed one, are written
 * to FF_FAULTSIM_REPORT, so the driver knows when a countdown has passed
 * every allocation and how many distinct sites it reached. */
#include <dlfcn.h>
/* __builtin_return_address(1) below: the test build keeps frame pointers
 * (-fno-omit-frame-pointer), so one level up is sound */
#pragma GCC diagnostic ignored "-Wframe-address"
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
static int spare_jansson;

/* jansson 2.14 crashes inside json_loadf under some failures of its own
 * allocations (a SEGV writing past a buffer), which no caller can defend
 * against: by default those are not failed (FF_FAULTSIM_JANSSON=1 fails
 * them too). What fp4forge defends (a lexer that drops a character, a dump
 * that returns corrupt text) is still exercised through that mode. An
 * allocation is jansson's when the allocator src/base/jsonio.c gives
 * jansson was called from inside libjansson. */
static int in_jansson(void *caller)
{
    Dl_info info;
    return caller && dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libjansson");
}

/* site: who called the allocator; outer: who called site (for malloc only,
 * where jansson's allocator is the site), NULL elsewhere */
static int should_fail(void *site, void *outer)
{
    if (spare_jansson && in_jansson(outer))
        return 0;
    if (++made != fail_at)
        return 0;
    failed_site = site;
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return should_fail(__builtin_return_address(0), __builtin_return_address(1)) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return should_fail(__builtin_return_address(0), NULL) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return should_fail(__builtin_return_address(0), NULL) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return should_fail(__builtin_return_address(0), NULL) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return should_fail(__builtin_return_address(0), NULL) ? NULL : __real_strndup(s, n);
}

static void report(void)
{
    const char *path = getenv("FF_FAULTSIM_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        return;
    /* the site as module+offset: addresses move from run to run (PIE, ASLR) */
    Dl_info info;
    if (failed_site && dladdr(failed_site, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        fprintf(f, "allocations %ld\nfailed_site %s+%#lx\n", made, base ? base + 1 : info.dli_fname,
                (unsigned long)((char *)failed_site - (char *)info.dli_fbase));
    } else {
        fprintf(f, "allocations %ld\nfailed_site (nil)\n", made);
    }
    fclose(f);
}

__attribute__((constructor)) static void faultsim_start(void)
{
    const char *n = getenv("FF_FAULTSIM");
    fail_at = n ? atol(n) : 0;
    const char *j = getenv("FF_FAULTSIM_JANSSON");
    spare_jansson = !(j && strcmp(j, "1") == 0);
    atexit(report);
}
