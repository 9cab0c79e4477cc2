/* How fast this machine's page cache takes a job's output, written the ways a
 * writer could: one thread into one file, two threads into one file (each
 * buffered write holds the file's lock, so they take turns), two threads into
 * two files, and two threads through a shared mapping of one file; and one
 * thread in the smaller writes a quantize job makes (one task's rows: 8 KB to
 * 256 KB). Every file is allocated first (fallocate), as fp4forge's writers do.
 *   make build/bench-write-files
 *   build/bench-write-files GB DIR     (the files go to DIR and are removed) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_clock.h"

#define CHUNK (1u << 20)   /* fp4forge's largest write call */

enum way { ONE_FILE, TWO_FILES, MAPPED };

typedef struct run {
    enum way way;
    int threads, fd[2];
    size_t total, chunk;
    char *map;
} run;

typedef struct worker {
    run *r;
    int id;
} worker;

/* chunks id, id + threads, ... of the output; with two files, worker id
 * writes file id's chunks 0, 1, 2, ... */
static void *write_share(void *arg)
{
    const worker *w = arg;
    const run *r = w->r;
    size_t chunk = r->chunk;
    char *buf = aligned_alloc(4096, chunk);
    if (!buf)
        abort();
    memset(buf, w->id + 1, chunk);
    for (size_t off = (size_t)w->id * chunk; off < r->total; off += (size_t)r->threads * chunk) {
        if (r->way == MAPPED)
            memcpy(r->map + off, buf, chunk);
        else if (pwrite(r->fd[r->way == TWO_FILES ? w->id : 0], buf, chunk,
                        (off_t)(r->way == TWO_FILES ? (off - (size_t)w->id * chunk) / 2 : off)) != (ssize_t)chunk)
            abort();
    }
    free(buf);
    return NULL;
}

static double sys_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void time_way(const char *label, enum way way, int threads, size_t chunk, size_t total, const char *dir)
{
    run r = {.way = way, .threads = threads, .total = total, .chunk = chunk};
    int files = way == TWO_FILES ? 2 : 1;
    for (int i = 0; i < files; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/write_files.%d", dir, i);
        r.fd[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (r.fd[i] < 0 || fallocate(r.fd[i], 0, 0, (off_t)(total / files)) != 0) {
            perror(path);
            exit(1);
        }
    }
    if (way == MAPPED && (r.map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd[0], 0)) == MAP_FAILED)
        abort();
    pthread_t th[2];
    worker w[2];
    double t0 = bench_now(), sys0 = sys_seconds();
    for (int i = 0; i < threads; i++) {
        w[i] = (worker){.r = &r, .id = i};
        pthread_create(&th[i], NULL, write_share, &w[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    if (way == MAPPED)
        munmap(r.map, total);
    double s = bench_now() - t0, sys = sys_seconds() - sys0;
    /* dropping the written pages is not the write's cost */
    for (int i = 0; i < files; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/write_files.%d", dir, i);
        close(r.fd[i]);
        unlink(path);
    }
    if (label)
        printf("%-34s %.3f s  %.2f GB/s  sys %.2f s\n", label, s, total / s / 1e9, sys);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: write_files GB DIR\n");
        return 2;
    }
    size_t total = (size_t)(atof(argv[1]) * (1 << 30)) / (2 * CHUNK) * (2 * CHUNK);
    /* untimed first: a VM's first touch of memory it had given back stalls */
    time_way(NULL, ONE_FILE, 1, CHUNK, total, argv[2]);
    time_way("1 thread, 1 file", ONE_FILE, 1, CHUNK, total, argv[2]);
    time_way("1 thread, 1 file, 64 KB writes", ONE_FILE, 1, 64 << 10, total, argv[2]);
    time_way("1 thread, 1 file, 8 KB writes", ONE_FILE, 1, 8 << 10, total, argv[2]);
    time_way("2 threads, 1 file", ONE_FILE, 2, CHUNK, total, argv[2]);
    time_way("2 threads, 2 files", TWO_FILES, 2, CHUNK, total, argv[2]);
    time_way("2 threads, 1 mapped file", MAPPED, 2, CHUNK, total, argv[2]);
    return 0;
}
