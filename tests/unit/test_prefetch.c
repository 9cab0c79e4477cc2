/* The read-ahead thread: what it is asked for ends up in the page cache,
 * unchanged, without staying mapped into the process; asked more than its
 * queue holds, the caller waits instead of losing ranges. And st_map_drop,
 * which unmaps what was read in whole 2 MB blocks. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ff_err.h"
#include "prefetch.h"
#include "safetensors.h"
#include "unit.h"

#define DATA_BYTES ((9u << 20) + 123)   /* over four 2 MB blocks and a ragged end */

static char path[] = "/tmp/ff-prefetch-XXXXXX";

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)(at * 131 + (at >> 12));
}

/* A one-tensor safetensors file, written, synced and dropped from the cache
 * where the filesystem allows, so the thread has something to read. */
static int write_model(void)
{
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[0,%u]}}",
                     DATA_BYTES, DATA_BYTES);
    while (n % 8)
        hdr[n++] = ' ';
    uint64_t len = (uint64_t)n;
    uint8_t *data = malloc(DATA_BYTES);
    int fd = mkstemp(path);
    if (!data || fd < 0)
        return -1;
    for (uint64_t i = 0; i < DATA_BYTES; i++)
        data[i] = pattern(i);
    int ok = write(fd, &len, 8) == 8 && write(fd, hdr, (size_t)n) == n &&
             write(fd, data, DATA_BYTES) == (ssize_t)DATA_BYTES && fsync(fd) == 0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    free(data);
    return ok ? 0 : -1;
}

/* A fresh model, dropped from the cache, opened; -1 (and a failed check) when not. */
static int open_model(st_file *f)
{
    ff_err e = {0};
    CHECK(write_model() == 0);
    CHECK_EQ_INT(st_open(f, path, &e), FF_OK);
    return f->map ? 0 : -1;
}

static void remove_model(st_file *f)
{
    st_close(f);
    unlink(path);
    memcpy(path + strlen(path) - 6, "XXXXXX", 6);   /* the next mkstemp's template */
}

static long resident_pages_of_process(void)
{
    long size = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss;
}

static int all_cached(const st_file *f)
{
    long pg = sysconf(_SC_PAGESIZE);
    for (uint64_t at = 0; at < f->file_size; at += (uint64_t)pg)
        if (!prefetch_resident(f->map + at))
            return 0;
    return 1;
}

static int data_intact(const st_file *f)
{
    const uint8_t *d = st_data(f, &f->tensors[0]);
    for (uint64_t i = 0; i < DATA_BYTES; i++)
        if (d[i] != pattern(i))
            return 0;
    return 1;
}

/* mode, and how many pieces the data is asked for in */
static void read_ahead_and_check(prefetch_mode mode, int pieces)
{
    st_file f;
    if (open_model(&f) != 0)
        return;
    CHECK_EQ_INT((uintptr_t)f.map % (2u << 20), 0);
    long rss_before = resident_pages_of_process();
    CHECK(prefetch_prepare(f.map, f.file_size));
    CHECK(prefetch_prepare(NULL, 0));
    prefetch *pf = prefetch_start(mode);
    CHECK(pf != NULL);
    uint64_t step = DATA_BYTES / (uint64_t)pieces + 1;
    for (uint64_t a = 0; a < DATA_BYTES; a += step)
        prefetch_range(pf, f.map, f.file_size, f.data_off + a, f.data_off + a + step);
    prefetch_stop(pf);
    if (mode == PREFETCH_FOLIOS) {
        CHECK(all_cached(&f));
        /* read, then unmapped again: the pages stay in the cache, not in us */
        CHECK(resident_pages_of_process() - rss_before < (long)((4u << 20) / sysconf(_SC_PAGESIZE)));
    }
    CHECK(data_intact(&f));
    remove_model(&f);
}

static void test_folios_whole_file(void)
{
    read_ahead_and_check(PREFETCH_FOLIOS, 1);
}

/* more ranges than the queue holds: the caller waits, nothing is lost */
static void test_folios_many_small_ranges(void)
{
    read_ahead_and_check(PREFETCH_FOLIOS, 1000);
}

static void test_willneed_mode(void)
{
    read_ahead_and_check(PREFETCH_WILLNEED, 3);
}

/* no thread: the caller advises; ranges past the end are clipped */
static void test_without_thread_and_past_end(void)
{
    st_file f;
    if (open_model(&f) != 0)
        return;
    prefetch_range(NULL, f.map, f.file_size, 0, f.file_size + (8u << 20));
    prefetch *pf = prefetch_start(PREFETCH_FOLIOS);
    prefetch_range(pf, f.map, f.file_size, f.file_size - 10, f.file_size + (8u << 20));
    prefetch_range(pf, f.map, f.file_size, 5, 5);
    prefetch_stop(pf);
    prefetch_stop(NULL);
    CHECK(data_intact(&f));
    remove_model(&f);
}

/* 1 when the page at p is mapped into this process (pagemap's bit 63). */
static int page_mapped(const uint8_t *p)
{
    uint64_t entry = 0;
    long pg = sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0)
        return -1;
    off_t at = (off_t)((uintptr_t)p / (uintptr_t)pg * sizeof entry);
    ssize_t n = pread(fd, &entry, sizeof entry, at);
    close(fd);
    return n == (ssize_t)sizeof entry ? (int)(entry >> 63) : -1;
}

/* Both ends round down to 2 MB: [2 MB + 100, 6 MB + 100) drops the blocks
 * at 2 and 4 MB, and a range inside one block drops nothing, so no 2 MB
 * folio's mapping is ever split. */
static void test_map_drop_takes_whole_blocks(void)
{
    st_file f;
    if (open_model(&f) != 0)
        return;
    CHECK(data_intact(&f));   /* maps every page */
    const uint64_t mb = 1u << 20;
    st_map_drop(f.map + 2 * mb + 100, 4 * mb);
    st_map_drop(f.map + 7 * mb, mb / 2);
    CHECK_EQ_INT(page_mapped(f.map + 2 * mb - 1), 1);
    CHECK_EQ_INT(page_mapped(f.map + 2 * mb), 0);
    CHECK_EQ_INT(page_mapped(f.map + 6 * mb - 1), 0);
    CHECK_EQ_INT(page_mapped(f.map + 6 * mb), 1);
    CHECK_EQ_INT(page_mapped(f.map + 7 * mb), 1);
    CHECK(data_intact(&f));   /* dropped pages map again from the cache */
    remove_model(&f);
}

int main(void)
{
    RUN(test_folios_whole_file);
    RUN(test_folios_many_small_ranges);
    RUN(test_willneed_mode);
    RUN(test_without_thread_and_past_end);
    RUN(test_map_drop_takes_whole_blocks);
    return UNIT_END();
}
