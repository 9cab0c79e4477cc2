/* The output queue: rows from many threads land at their place in the
 * right shard whatever order they are queued in, and a failed write comes
 * back to the caller as one error naming the file. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "outq.h"
#include "safetensors.h"
#include "shards.h"
#include "unit.h"

#define WORKERS 4
#define TASKS 203          /* not a multiple of WORKERS: uneven last round */
#define ROW_A 1000         /* bytes a task writes into tensor 0 (shard 0) */
#define ROW_B 24           /* and into tensor 2 (shard 1) */

static char dir[] = "/tmp/ff-outq-XXXXXX";

static uint8_t pattern(size_t out, uint64_t at)
{
    return (uint8_t)(out * 131 + at * 7 + (at >> 9));
}

typedef struct run {
    outq *q;
    int worker;
} run;

/* Tasks interleaved over the workers, as the pool hands them out. */
static void *worker_main(void *arg)
{
    run *r = arg;
    for (size_t t = (size_t)r->worker; t < TASKS; t += WORKERS) {
        uint8_t *buf = outq_buffer(r->q, r->worker);
        for (uint64_t i = 0; i < ROW_A; i++)
            buf[i] = pattern(0, t * ROW_A + i);
        for (uint64_t i = 0; i < ROW_B; i++)
            buf[ROW_A + i] = pattern(2, t * ROW_B + i);
        outq_submit(r->q, r->worker, buf, 0, t * ROW_A, ROW_A, 2, t * ROW_B, ROW_B);
    }
    return NULL;
}

static int open_set(shard_set *ss, st_out *outs, ff_err *e)
{
    st_out o[3] = {{.name = "a", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_A}, .nbytes = TASKS * ROW_A},
                   {.name = "b", .dtype = FF_DT_U8, .ndim = 1, .shape = {8}, .nbytes = 8},
                   {.name = "c", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_B}, .nbytes = TASKS * ROW_B}};
    memcpy(outs, o, sizeof o);
    /* shard size: a and b in the first file, c in the second */
    return shards_open(ss, outs, 3, TASKS * ROW_A + 8, dir, e);
}

static int bytes_match(const shard_set *ss, size_t out)
{
    int fd = open(ss->paths[ss->out_shard[out]], O_RDONLY);
    uint64_t n = ss->outs[out].nbytes;
    uint8_t *got = malloc(n);
    int ok = fd >= 0 && got && pread(fd, got, n, (off_t)ss->out_abs[out]) == (ssize_t)n;
    for (uint64_t i = 0; ok && i < n; i++)
        ok = got[i] == pattern(out, i);
    free(got);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A shard whose descriptor cannot be written: the error names the file,
 * is reported once, and the buffers still come back to their thread. */
static void test_failed_write_is_reported(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_set(&ss, outs, &e) == FF_OK);
    close(ss.fds[1]);
    ss.fds[1] = open(ss.paths[1], O_RDONLY);
    outq *q = outq_create(&ss, 1);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    for (int t = 0; t < OUTQ_DEPTH + 2; t++) {
        uint8_t *buf = outq_buffer(q, 0);
        memset(buf, 1, ROW_A + ROW_B);
        outq_submit(q, 0, buf, 0, (uint64_t)t * ROW_A, ROW_A, 2, (uint64_t)t * ROW_B, ROW_B);
    }
    CHECK(outq_error(q, &e) == FF_EIO);
    CHECK(strstr(e.msg, ss.paths[1]) && strstr(e.msg, "write failed"));
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    shards_free(&ss);
}

/* Rows placed past their tensor (a caller's bug) are refused as the
 * mutex path refused them, reported once, and their buffer stays free. */
static void test_range_past_tensor_is_refused(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_set(&ss, outs, &e) == FF_OK);
    outq *q = outq_create(&ss, 1);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    for (int t = 0; t < OUTQ_DEPTH + 2; t++) {
        uint8_t *buf = outq_buffer(q, 0);
        outq_submit(q, 0, buf, 0, (uint64_t)TASKS * ROW_A, ROW_A, 2, 0, ROW_B);
    }
    CHECK(outq_error(q, &e) == FF_EIO);
    CHECK(strstr(e.msg, "internal: tensor a") && strstr(e.msg, "past its"));
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    shards_free(&ss);
}

/* Tensors a and c through the queue, tasks interleaved over WORKERS threads. */
static void run_workers(outq *q)
{
    pthread_t th[WORKERS];
    run r[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        r[w] = (run){q, w};
        pthread_create(&th[w], NULL, worker_main, &r[w]);
    }
    for (int w = 0; w < WORKERS; w++)
        pthread_join(th[w], NULL);
}

/* Tensors a and c through the queue, tasks interleaved over WORKERS
 * threads, then tensor b unless the caller leaves it out. */
static void write_all(shard_set *ss, int skip_b)
{
    outq *q = outq_create(ss, WORKERS);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    run_workers(q);
    ff_err e = {0};
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    uint8_t b[8] = {0};
    if (!skip_b)
        CHECK(shards_write(ss, 1, b, sizeof b, &e) == FF_OK);
}

static void test_every_piece_lands_in_place(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_set(&ss, outs, &e) == FF_OK);
    CHECK_EQ_INT(ss.nshards, 2);
    write_all(&ss, 1);
    CHECK(bytes_match(&ss, 0));
    CHECK(bytes_match(&ss, 2));
    shards_free(&ss);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Reserved shards are their full size before anything is written, and
 * close when every byte has landed. */
static void test_reserved_shards_close_when_complete(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_set(&ss, outs, &e) == FF_OK);
    CHECK(shards_reserve(&ss, &e) == FF_OK);
    for (size_t k = 0; k < ss.nshards; k++)
        CHECK(file_size(ss.paths[k]) == (long long)ss.shard_bytes[k]);
    write_all(&ss, 0);
    CHECK(shards_close(&ss, dir, &e) == FF_OK);
    CHECK(bytes_match(&ss, 0) && bytes_match(&ss, 2));
    shards_free(&ss);
}

/* A reserved shard reads as zeros where nothing was written, so a tensor
 * never written is refused at close, naming the file. */
static void test_reserved_shard_missing_bytes_is_refused(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_set(&ss, outs, &e) == FF_OK);
    CHECK(shards_reserve(&ss, &e) == FF_OK);
    write_all(&ss, 1);
    CHECK(shards_close(&ss, dir, &e) == FF_EIO);
    CHECK(strstr(e.msg, ss.paths[0]) && strstr(e.msg, "bytes written of its"));
    shards_free(&ss);
}

/* Tensor k of KEPT bytes (three pieces, the last one short) between the
 * queued rows of a and c: mapped from a file as quantize maps its input. */
#define KEPT ((2u << 20) + 4099)

static int open_kept_set(shard_set *ss, st_out *outs, ff_err *e)
{
    st_out o[3] = {{.name = "a", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_A}, .nbytes = TASKS * ROW_A},
                   {.name = "k", .dtype = FF_DT_U8, .ndim = 1, .shape = {KEPT}, .nbytes = KEPT},
                   {.name = "c", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_B}, .nbytes = TASKS * ROW_B}};
    memcpy(outs, o, sizeof o);
    return shards_open(ss, outs, 3, TASKS * ROW_A + KEPT, dir, e);
}

/* Tensor k's bytes, in a buffer the caller frees. */
static uint8_t *kept_bytes(void)
{
    uint8_t *b = malloc(KEPT);
    for (uint64_t i = 0; b && i < KEPT; i++)
        b[i] = pattern(1, i);
    return b;
}

/* Tensor k's bytes in a one-tensor safetensors file, opened as quantize
 * opens its input: the queue drops written pieces in whole 2 MB blocks of
 * the mapping, which only st_open's 2 MB-aligned mappings allow. NULL when
 * the file could not be made. */
static const uint8_t *map_kept_source(st_file *f)
{
    char path[64], hdr[128];
    snprintf(path, sizeof path, "%s/kept.safetensors", dir);
    int n = snprintf(hdr, sizeof hdr, "{\"k\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[0,%u]}}",
                     KEPT, KEPT);
    while (n % 8)
        hdr[n++] = ' ';
    uint64_t len = (uint64_t)n;
    uint8_t *b = kept_bytes();
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int ok = b && fd >= 0 && write(fd, &len, 8) == 8 && write(fd, hdr, (size_t)n) == n &&
             write(fd, b, KEPT) == (ssize_t)KEPT;
    free(b);
    if (fd >= 0)
        close(fd);
    ff_err e = {0};
    if (st_open(f, path, &e) != FF_OK || !ok)   /* opened first: f can be closed either way */
        return NULL;
    return st_data(f, &f->tensors[0]);
}

/* The kept-tensor tests' set-up: the shards, tensor k's mapped source, and
 * a queue for `workers` threads. */
typedef struct kept_fixture {
    shard_set ss;
    st_out outs[3];
    st_file kf;
    const uint8_t *src;
    outq *q;
} kept_fixture;

static void kept_open(kept_fixture *f, int workers)
{
    ff_err e = {0};
    CHECK(open_kept_set(&f->ss, f->outs, &e) == FF_OK);
    f->src = map_kept_source(&f->kf);
    CHECK(f->src != NULL);
    f->q = outq_create(&f->ss, workers);
    CHECK(f->q && outq_reserve(f->q, ROW_A + ROW_B) == 0);
}

static void kept_close(kept_fixture *f)
{
    outq_free(f->q);
    st_close(&f->kf);
    shards_free(&f->ss);
}

/* Kept bytes queued from a mapping land in place, some of them in the
 * writers' turns while rows are being queued (not all at the drain), and
 * the drain writes the rest; dropped from the mapping, they read back. */
static void test_mapped_pieces_land_between_rows(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, WORKERS);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    run_workers(f.q);
    uint64_t rows_only = f.ss.out_abs[0] + TASKS * ROW_A;
    CHECK(atomic_load(&f.ss.landed[0]) > rows_only);
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(atomic_load(&f.ss.landed[0]) == rows_only + KEPT);
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(bytes_match(&f.ss, 0) && bytes_match(&f.ss, 1) && bytes_match(&f.ss, 2));
    CHECK(f.src[KEPT - 1] == pattern(1, KEPT - 1));
    kept_close(&f);
}

/* A kept piece that cannot be written is the error the drain returns,
 * naming the file. */
static void test_mapped_write_failure_is_reported(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, 1);
    close(f.ss.fds[0]);
    f.ss.fds[0] = open(f.ss.paths[0], O_RDONLY);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    CHECK(outq_drain(f.q, &e) == FF_EIO);
    CHECK(strstr(e.msg, f.ss.paths[0]) && strstr(e.msg, "write failed"));
    CHECK(outq_error(f.q, &e) == FF_OK);
    kept_close(&f);
}

/* What a piece check saw: where each piece began, in order. */
typedef struct seen {
    uint64_t at[8];
    int n;
} seen;

/* Fails the second piece, as a NaN found there would. */
static int check_fails_second(const void *ctx, const void *tensor, const uint8_t *p, uint64_t at, uint64_t len,
                              ff_err *e)
{
    seen *s = (seen *)ctx;
    if (s->n < 8)
        s->at[s->n++] = at;
    if (p[0] != pattern(1, at) || p[len - 1] != pattern(1, at + len - 1))
        return ff_fail(e, FF_EIO, "piece at %llu is not tensor %s's bytes", (unsigned long long)at, (const char *)tensor);
    return at == (1u << 20) ? ff_fail(e, FF_EIO, "tensor %s: bad element in piece at %llu", (const char *)tensor,
                                      (unsigned long long)at)
                            : FF_OK;
}

/* Each kept piece is checked, with its place in the tensor, just before its
 * write; a failed check is the drain's error, and neither that piece nor
 * any after it is written. */
static void test_mapped_piece_check_stops_its_write(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, 1);
    seen s = {0};
    uint64_t before = atomic_load(&f.ss.landed[0]);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){.fn = check_fails_second, .ctx = &s, .tensor = "k"});
    CHECK(outq_drain(f.q, &e) == FF_EIO);
    CHECK(strstr(e.msg, "tensor k: bad element in piece at 1048576") != NULL);
    CHECK(s.n == 2 && s.at[0] == 0 && s.at[1] == (1u << 20));
    CHECK(atomic_load(&f.ss.landed[0]) == before + (1u << 20));
    kept_close(&f);
}

/* Buffers that one write call cannot take whole (each call writes at most
 * 1 MB) land in place and are all counted: a shard short of bytes by the
 * count would be refused at close. */
static void test_pwritev_over_many_calls_counts_every_byte(void)
{
    shard_set ss;
    st_out outs[3];
    ff_err e = {0};
    CHECK(open_kept_set(&ss, outs, &e) == FF_OK);
    uint8_t *b = kept_bytes();
    struct iovec iov[3] = {{b, 700000}, {b + 700000, 900000}, {b + 1600000, KEPT - 1600000}};
    uint64_t before = atomic_load(&ss.landed[0]);
    CHECK(shards_pwritev(&ss, 0, ss.out_abs[1], iov, 3, &e) == FF_OK);
    CHECK(atomic_load(&ss.landed[0]) == before + KEPT);
    CHECK(bytes_match(&ss, 1));
    free(b);
    shards_free(&ss);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(test_every_piece_lands_in_place);
    RUN(test_failed_write_is_reported);
    RUN(test_range_past_tensor_is_refused);
    RUN(test_reserved_shards_close_when_complete);
    RUN(test_reserved_shard_missing_bytes_is_refused);
    RUN(test_mapped_pieces_land_between_rows);
    RUN(test_mapped_write_failure_is_reported);
    RUN(test_mapped_piece_check_stops_its_write);
    RUN(test_pwritev_over_many_calls_counts_every_byte);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return UNIT_END();
}
