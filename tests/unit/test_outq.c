/* The output queue, over the public writer: rows from many threads land
 * at their place in the right shard whatever order they are queued in, and
 * a failed write comes back to the caller as one error naming the file. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "outq.h"
#include "threadpool.h"
#include "safetensors.h"
#include "unit.h"
#include "writer.h"

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

/* A writer staging into dir/<name>, its tensors laid out. */
static ckpt_writer *open_writer(const char *name, const st_out *outs, uint64_t shard_size)
{
    char path[96];
    ff_err e = {0};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ckpt_writer *w = ckpt_writer_begin(path, 0, NULL, &e);
    if (w && ckpt_writer_layout(w, outs, 3, shard_size, &e) != FF_OK) {
        ckpt_writer_free(w);
        return NULL;
    }
    return w;
}

static const st_out set_outs[3] = {
    {.name = "a", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_A}, .nbytes = TASKS * ROW_A},
    {.name = "b", .dtype = FF_DT_U8, .ndim = 1, .shape = {8}, .nbytes = 8},
    {.name = "c", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_B}, .nbytes = TASKS * ROW_B}};

/* shard size: a and b in the first file, c in the second */
static ckpt_writer *open_set(const char *name) { return open_writer(name, set_outs, TASKS * ROW_A + 8); }

/* Shard k's file in the staging folder (the writer names them as HF does). */
static const char *shard_path(const ckpt_writer *w, size_t k)
{
    static char path[256];
    size_t n = ckpt_writer_shard_count(w);
    if (n == 1)
        snprintf(path, sizeof path, "%s/model.safetensors", ckpt_writer_dir(w));
    else
        snprintf(path, sizeof path, "%s/model-%05zu-of-%05zu.safetensors", ckpt_writer_dir(w), k + 1, n);
    return path;
}

static int bytes_match(const ckpt_writer *w, const st_out *outs, size_t out)
{
    ckpt_place at;
    ff_err e = {0};
    uint64_t n = outs[out].nbytes;
    if (ckpt_writer_locate(w, out, 0, n, &at, &e) != FF_OK)
        return 0;
    int fd = open(shard_path(w, at.shard), O_RDONLY);
    uint8_t *got = malloc(n);
    int ok = fd >= 0 && got && pread(fd, got, n, (off_t)at.off) == (ssize_t)n;
    for (uint64_t i = 0; ok && i < n; i++)
        ok = got[i] == pattern(out, i);
    free(got);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Writes past `bytes` into any file fail with EFBIG (and no signal), as a
 * full disk fails them; 0 lifts the limit again. */
static void limit_file_size(rlim_t bytes)
{
    static struct rlimit saved;
    static int have;
    if (!have) {
        getrlimit(RLIMIT_FSIZE, &saved);
        have = 1;
    }
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit r = {.rlim_cur = bytes ? bytes : saved.rlim_cur, .rlim_max = saved.rlim_max};
    setrlimit(RLIMIT_FSIZE, &r);
}

/* Writes into shard 0 past its first 4 KB fail: the error names the file,
 * is reported once, and the buffers still come back to their thread. */
static void test_failed_write_is_reported(void)
{
    ckpt_writer *w = open_set("failed");
    ff_err e = {0};
    CHECK(w != NULL);
    outq *q = outq_create(w, NULL, 1);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    limit_file_size(4096);
    for (int t = 0; t < OUTQ_DEPTH + 2; t++) {
        uint8_t *buf = outq_buffer(q, 0);
        memset(buf, 1, ROW_A + ROW_B);
        outq_submit(q, 0, buf, 0, (uint64_t)t * ROW_A, ROW_A, 2, (uint64_t)t * ROW_B, ROW_B);
    }
    limit_file_size(0);
    CHECK(outq_error(q, &e) == FF_EIO);
    CHECK(strstr(e.msg, shard_path(w, 0)) && strstr(e.msg, "write failed"));
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    ckpt_writer_free(w);
}

/* Rows placed past their tensor (a caller's bug) are refused as the
 * mutex path refused them, reported once, and their buffer stays free. */
static void test_range_past_tensor_is_refused(void)
{
    ckpt_writer *w = open_set("past");
    ff_err e = {0};
    CHECK(w != NULL);
    outq *q = outq_create(w, NULL, 1);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    for (int t = 0; t < OUTQ_DEPTH + 2; t++) {
        uint8_t *buf = outq_buffer(q, 0);
        outq_submit(q, 0, buf, 0, (uint64_t)TASKS * ROW_A, ROW_A, 2, 0, ROW_B);
    }
    CHECK(outq_error(q, &e) == FF_EIO);
    CHECK(strstr(e.msg, "internal: tensor a") && strstr(e.msg, "past its"));
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    ckpt_writer_free(w);
}

/* Tensors a and c through the queue, tasks interleaved over WORKERS threads. */
static void run_workers(outq *q)
{
    pthread_t th[WORKERS];
    run r[WORKERS];
    for (int k = 0; k < WORKERS; k++) {
        r[k] = (run){q, k};
        pthread_create(&th[k], NULL, worker_main, &r[k]);
    }
    for (int k = 0; k < WORKERS; k++)
        pthread_join(th[k], NULL);
}

/* Tensors a and c through the queue, tasks interleaved over WORKERS
 * threads, then tensor b unless the caller leaves it out. */
static void write_all(ckpt_writer *w, int skip_b)
{
    outq *q = outq_create(w, NULL, WORKERS);
    CHECK(q && outq_reserve(q, ROW_A + ROW_B) == 0);
    run_workers(q);
    ff_err e = {0};
    CHECK(outq_error(q, &e) == FF_OK);
    outq_free(q);
    uint8_t b[8] = {0};
    if (!skip_b)
        CHECK(ckpt_writer_put(w, 1, b, sizeof b, &e) == FF_OK);
}

static void test_every_piece_lands_in_place(void)
{
    ckpt_writer *w = open_set("every");
    CHECK(w != NULL);
    CHECK_EQ_INT(ckpt_writer_shard_count(w), 2);
    uint64_t headers = ckpt_writer_bytes(w);
    write_all(w, 1);
    CHECK(ckpt_writer_bytes(w) == headers + TASKS * (ROW_A + ROW_B));
    CHECK(bytes_match(w, set_outs, 0));
    CHECK(bytes_match(w, set_outs, 2));
    ckpt_writer_free(w);
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
    ckpt_writer *w = open_set("reserved");
    ff_err e = {0};
    CHECK(w != NULL);
    CHECK(ckpt_writer_reserve(w, &e) == FF_OK);
    long long size[2] = {file_size(shard_path(w, 0)), file_size(shard_path(w, 1))};
    CHECK(size[0] > TASKS * ROW_A + 8 && size[1] > TASKS * ROW_B);
    write_all(w, 0);
    CHECK(ckpt_writer_close(w, NULL, NULL, 0, &e) == FF_OK);
    CHECK(file_size(shard_path(w, 0)) == size[0] && file_size(shard_path(w, 1)) == size[1]);
    CHECK(bytes_match(w, set_outs, 0) && bytes_match(w, set_outs, 2));
    ckpt_writer_free(w);
}

/* A reserved shard reads as zeros where nothing was written, so a tensor
 * never written is refused at close, naming the file. */
static void test_reserved_shard_missing_bytes_is_refused(void)
{
    ckpt_writer *w = open_set("missing");
    ff_err e = {0};
    CHECK(w != NULL);
    CHECK(ckpt_writer_reserve(w, &e) == FF_OK);
    write_all(w, 1);
    CHECK(ckpt_writer_close(w, NULL, NULL, 0, &e) == FF_EIO);
    CHECK(strstr(e.msg, shard_path(w, 0)) && strstr(e.msg, "bytes written of its"));
    ckpt_writer_free(w);
}

/* Tensor k of KEPT bytes (three pieces, the last one short) between the
 * queued rows of a and c: mapped from a file as quantize maps its input. */
#define KEPT ((2u << 20) + 4099)

static const st_out kept_outs[3] = {
    {.name = "a", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_A}, .nbytes = TASKS * ROW_A},
    {.name = "k", .dtype = FF_DT_U8, .ndim = 1, .shape = {KEPT}, .nbytes = KEPT},
    {.name = "c", .dtype = FF_DT_U8, .ndim = 1, .shape = {TASKS * ROW_B}, .nbytes = TASKS * ROW_B}};

static ckpt_writer *open_kept_set(const char *name) { return open_writer(name, kept_outs, TASKS * ROW_A + KEPT); }

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

/* The kept-tensor tests' set-up: the writer, tensor k's mapped source, and
 * a queue for `workers` threads. */
typedef struct kept_fixture {
    ckpt_writer *w;
    st_file kf;
    const uint8_t *src;
    outq *q;
} kept_fixture;

static void kept_open(kept_fixture *f, const char *name, int workers)
{
    f->w = open_kept_set(name);
    CHECK(f->w != NULL);
    f->src = map_kept_source(&f->kf);
    CHECK(f->src != NULL);
    f->q = outq_create(f->w, NULL, workers);
    CHECK(f->q && outq_reserve(f->q, ROW_A + ROW_B) == 0);
}

static void kept_close(kept_fixture *f)
{
    outq_free(f->q);
    st_close(&f->kf);
    ckpt_writer_free(f->w);
}

/* Kept bytes queued from a mapping land in place, some of them in the
 * writers' turns while rows are being queued (not all at the drain), and
 * the drain writes the rest; dropped from the mapping, they read back. */
static void test_mapped_pieces_land_between_rows(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, "mapped", WORKERS);
    uint64_t rows_only = ckpt_writer_bytes(f.w) + TASKS * (ROW_A + ROW_B);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    run_workers(f.q);
    CHECK(ckpt_writer_bytes(f.w) > rows_only);
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(ckpt_writer_bytes(f.w) == rows_only + KEPT);
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(bytes_match(f.w, kept_outs, 0) && bytes_match(f.w, kept_outs, 1) && bytes_match(f.w, kept_outs, 2));
    CHECK(f.src[KEPT - 1] == pattern(1, KEPT - 1));
    kept_close(&f);
}

/* A kept piece that cannot be written is the error the drain returns,
 * naming the file. */
static void test_mapped_write_failure_is_reported(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, "mapped-fail", 1);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    limit_file_size(4096);
    int rc = outq_drain(f.q, &e);
    limit_file_size(0);
    CHECK(rc == FF_EIO);
    CHECK(strstr(e.msg, shard_path(f.w, 0)) && strstr(e.msg, "write failed"));
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
    kept_open(&f, "checked", 1);
    seen s = {0};
    uint64_t before = ckpt_writer_bytes(f.w);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){.fn = check_fails_second, .ctx = &s, .tensor = "k"});
    CHECK(outq_drain(f.q, &e) == FF_EIO);
    CHECK(strstr(e.msg, "tensor k: bad element in piece at 1048576") != NULL);
    CHECK(s.n == 2 && s.at[0] == 0 && s.at[1] == (1u << 20));
    CHECK(ckpt_writer_bytes(f.w) == before + (1u << 20));
    kept_close(&f);
}

/* A task with no rows of its own takes the writer's turn for one mapped
 * piece when the queue has no pool to ask (or the pool has no tasks left). */
static void test_help_writes_one_mapped_piece(void)
{
    kept_fixture f;
    ff_err e = {0};
    kept_open(&f, "help", 2);
    uint64_t before = ckpt_writer_bytes(f.w);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    outq_help(f.q);
    CHECK(ckpt_writer_bytes(f.w) == before + (1u << 20));
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(ckpt_writer_bytes(f.w) == before + KEPT);
    CHECK(bytes_match(f.w, kept_outs, 1));
    kept_close(&f);
}

/* Task 0 helps the writer; the others take a while each. */
typedef struct help_run {
    outq *q;
    ckpt_writer *w;
    uint64_t written_by_help;   /* bytes written when task 0's turn ended */
} help_run;

static void help_task(void *ctx, size_t t)
{
    help_run *h = ctx;
    if (t == 0) {
        uint64_t before = ckpt_writer_bytes(h->w);
        outq_help(h->q);
        h->written_by_help = ckpt_writer_bytes(h->w) - before;
    } else
        usleep(20000);
}

/* With a pool whose other threads still have tasks, the writer's turn goes
 * on past one mapped piece: three pieces, written while the seven slow
 * tasks run, leave nothing for the drain. */
static void test_help_goes_on_while_the_pool_has_tasks(void)
{
    kept_fixture f;
    ff_err e = {0};
    f.w = open_kept_set("help-pool");
    CHECK(f.w != NULL);
    f.src = map_kept_source(&f.kf);
    CHECK(f.src != NULL);
    ff_pool *pool = pool_create(2);
    f.q = outq_create(f.w, pool, 2);
    CHECK(pool && f.q && outq_reserve(f.q, ROW_A + ROW_B) == 0);
    outq_queue_mapped(f.q, 1, f.src, KEPT, (outq_check){0});
    help_run h = {.q = f.q, .w = f.w};
    pool_run(pool, 8, help_task, &h);
    CHECK(h.written_by_help == KEPT);
    CHECK(pool_tasks_left(pool) == 0);
    CHECK(outq_drain(f.q, &e) == FF_OK);
    CHECK(bytes_match(f.w, kept_outs, 1));
    pool_destroy(pool);
    kept_close(&f);
}

/* Buffers that one write call cannot take whole (each call writes at most
 * 1 MB) land in place and are all counted: a shard short of bytes by the
 * count would be refused at close. */
static void test_writev_over_many_calls_counts_every_byte(void)
{
    ckpt_writer *w = open_kept_set("writev");
    ff_err e = {0};
    CHECK(w != NULL);
    uint8_t *b = kept_bytes();
    struct iovec iov[3] = {{b, 700000}, {b + 700000, 900000}, {b + 1600000, KEPT - 1600000}};
    uint64_t before = ckpt_writer_bytes(w);
    ckpt_place at;
    CHECK(ckpt_writer_locate(w, 1, 0, KEPT, &at, &e) == FF_OK);
    CHECK(ckpt_writer_writev(w, at, iov, 3, &e) == FF_OK);
    CHECK(ckpt_writer_bytes(w) == before + KEPT);
    CHECK(bytes_match(w, kept_outs, 1));
    free(b);
    ckpt_writer_free(w);
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
    RUN(test_writev_over_many_calls_counts_every_byte);
    RUN(test_help_writes_one_mapped_piece);
    RUN(test_help_goes_on_while_the_pool_has_tasks);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return UNIT_END();
}
