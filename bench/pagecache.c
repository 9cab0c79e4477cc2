/* What the page cache holds of a file, and what a first pass over it costs.
 *
 *   build/bench-pagecache folios FILE     folio sizes of the first 256 MB of FILE's cached
 *                                         pages (/proc/kpageflags: needs root)
 *   build/bench-pagecache scan FILE N     N threads read every byte of FILE through a
 *                                         mapping, as fp4forge's amax pass does; seconds
 *
 * Why: how the cache was filled (forced read-ahead leaves 4 KB pages, a plain
 * read 2 MB folios) decides what mapping it costs (docs/bench.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KPF_COMPOUND_HEAD (1ull << 15)
#define KPF_COMPOUND_TAIL (1ull << 16)
#define PROBE_PAGES 65536

static const uint8_t *map_file(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "%s: cannot open or empty\n", path);
        exit(2);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "%s: cannot map\n", path);
        exit(2);
    }
    *size = (size_t)st.st_size;
    return m;
}

static uint64_t page_flags(int pagemap, int kpageflags, const uint8_t *p)
{
    uint64_t entry = 0, flags = 0;
    if (pread(pagemap, &entry, 8, (off_t)((uintptr_t)p / 4096 * 8)) != 8)
        return 0;
    uint64_t pfn = entry & ((1ull << 55) - 1);
    if (pread(kpageflags, &flags, 8, (off_t)(pfn * 8)) != 8)
        return 0;
    return flags;
}

static int folios(const char *path)
{
    size_t size;
    const uint8_t *p = map_file(path, &size);
    int pagemap = open("/proc/self/pagemap", O_RDONLY), kpageflags = open("/proc/kpageflags", O_RDONLY);
    if (pagemap < 0 || kpageflags < 0) {
        fprintf(stderr, "cannot read /proc/self/pagemap or /proc/kpageflags (root needed)\n");
        return 2;
    }
    size_t n = size / 4096 < PROBE_PAGES ? size / 4096 : PROBE_PAGES;
    long single = 0, in_folios = 0, run = 0, largest = 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        sink ^= p[i * 4096];   /* mapped, so pagemap names its frame */
        uint64_t f = page_flags(pagemap, kpageflags, p + i * 4096);
        if (f & KPF_COMPOUND_HEAD)
            run = 1;
        else if (f & KPF_COMPOUND_TAIL)
            run++;
        else
            run = 0, single++;
        in_folios += run > 0;
        largest = run > largest ? run : largest;
    }
    printf("%s: first %zu pages: %ld single, %ld in folios (largest %ld pages)\n", path, n, single, in_folios,
           largest);
    return 0;
}

typedef struct scan_part {
    const uint8_t *p;
    size_t n;
    uint16_t max;
} scan_part;

static void *scan_main(void *arg)
{
    scan_part *s = arg;
    /* signed 16-bit max: SSE2 has it, so the loop runs at memory speed on any x86-64 */
    const int16_t *v = (const int16_t *)s->p;
    int16_t m = 0;
    for (size_t i = 0; i < s->n / 2; i++) {
        int16_t a = (int16_t)(v[i] & 0x7fff);
        m = a > m ? a : m;
    }
    s->max = (uint16_t)m;
    return NULL;
}

static int scan(const char *path, int threads)
{
    size_t size;
    const uint8_t *p = map_file(path, &size);
    pthread_t th[64];
    scan_part part[64];
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    size_t per = size / (size_t)threads & ~(size_t)4095;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int t = 0; t < threads; t++) {
        part[t] = (scan_part){.p = p + (size_t)t * per, .n = t == threads - 1 ? size - (size_t)t * per : per};
        pthread_create(&th[t], NULL, scan_main, &part[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%s: scanned %.2f GB in %.3f s on %d threads (%.2f GB/s)\n", path, (double)size / 1e9, s, threads,
           (double)size / 1e9 / s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "folios") == 0)
        return folios(argv[2]);
    if (argc == 4 && strcmp(argv[1], "scan") == 0)
        return scan(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: bench-pagecache folios FILE | scan FILE THREADS\n");
    return 2;
}
