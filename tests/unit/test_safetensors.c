/* safetensors header validation: every malformed input is refused with a
 * one-line error naming the file (and the tensor, where there is one). */
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "unit.h"

static char dir[] = "/tmp/ff-test-st-XXXXXX";

/* Writes a file: 8-byte length (or `lie` if nonzero), header, `data` bytes. */
static const char *write_st(const char *name, const char *header, uint64_t lie, size_t data)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint64_t n = lie ? lie : strlen(header);
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i)) & 0xff, f);
    fputs(header, f);
    for (size_t i = 0; i < data; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

static int open_fails_with(const char *path, const char *needle1, const char *needle2)
{
    st_file f;
    ff_err e = {0};
    int rc = st_open(&f, path, &e);
    st_close(&f);
    if (rc == 0)
        return 0;
    if (strchr(e.msg, '\n'))
        return 0;                                   /* one line */
    if (!strstr(e.msg, path) || (needle1 && !strstr(e.msg, needle1)) || (needle2 && !strstr(e.msg, needle2))) {
        fprintf(stderr, "  message was: %s\n", e.msg);
        return 0;
    }
    return 1;
}

static void test_valid(void)
{
    const char *p = write_st("ok.safetensors",
                             "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                             "\"__metadata__\":{\"format\":\"pt\"}}", 0, 8);
    st_file f;
    ff_err e = {0};
    CHECK(st_open(&f, p, &e) == 0);
    CHECK_EQ_INT(f.ntensors, 1);
    CHECK(f.ntensors == 1 && f.tensors[0].dtype == FF_DT_BF16 && f.tensors[0].shape[1] == 2);
    st_close(&f);
}

static void test_truncated(void)
{
    const char *p = write_st("trunc.safetensors",
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 10);
    CHECK(open_fails_with(p, "w", "truncated"));
    p = write_st("tiny.safetensors", "", 0, 0);
    truncate(p, 3);
    CHECK(open_fails_with(p, "too short", NULL));
}

static void test_header_lies(void)
{
    const char *p = write_st("lie.safetensors", "{}", 1u << 20, 0);
    CHECK(open_fails_with(p, "runs past the end", NULL));
    p = write_st("huge.safetensors", "{}", 1ull << 40, 0);
    CHECK(open_fails_with(p, "not sane", NULL));
}

static void test_overlap(void)
{
    const char *p = write_st("overlap.safetensors",
                             "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 0, 12);
    CHECK(open_fails_with(p, "overlaps", NULL));
}

/* A [0,100), empty B [10,10), C [50,60): sorted neighbours are A-B and B-C,
 * neither overlapping, so only a running maximum end sees C inside A. */
static void test_overlap_hidden_by_empty_tensor(void)
{
    const char *p = write_st("overlap-empty.safetensors",
                             "{\"A\":{\"dtype\":\"U8\",\"shape\":[100],\"data_offsets\":[0,100]},"
                             "\"B\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[10,10]},"
                             "\"C\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[50,60]}}", 0, 100);
    CHECK(open_fails_with(p, "C overlaps tensor A", NULL));
    /* the same layout without the overlap (C after A) still opens */
    p = write_st("empty-ok.safetensors",
                 "{\"A\":{\"dtype\":\"U8\",\"shape\":[100],\"data_offsets\":[0,100]},"
                 "\"B\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[10,10]},"
                 "\"C\":{\"dtype\":\"U8\",\"shape\":[10],\"data_offsets\":[100,110]}}", 0, 110);
    st_file f;
    ff_err e = {0};
    CHECK(st_open(&f, p, &e) == FF_OK);
    st_close(&f);
}

static void test_bad_json_and_fields(void)
{
    CHECK(open_fails_with(write_st("json.safetensors", "{\"a\": [1,", 0, 0), "bad JSON", NULL));
    CHECK(open_fails_with(write_st("arr.safetensors", "[1,2]", 0, 0), "not an object", NULL));
    CHECK(open_fails_with(write_st("dt.safetensors",
                                   "{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1),
                          "w", "unknown dtype"));
    CHECK(open_fails_with(write_st("sz.safetensors",
                                   "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 0, 4),
                          "w", "needs 6 bytes"));
    CHECK(open_fails_with(write_st("rev.safetensors",
                                   "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 0, 4),
                          "w", "reversed"));
    CHECK(open_fails_with(write_st("dup.safetensors",
                                   "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                   "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1),
                          "bad JSON", NULL));
}

/* Found by tests/fuzz: a refused file or folder kept its path, tensor table,
 * metadata and map until the caller closed it, and callers that return on
 * the error leaked them. Refused now means nothing held (LeakSanitizer checks
 * this binary at exit too). */
static void test_refused_open_holds_nothing(void)
{
    const char *p = write_st("meta-then-bad.safetensors",
                             "{\"__metadata__\":{\"format\":\"pt\"},"
                             "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                             "\"b\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[4,5]}}", 0, 5);
    st_file f;
    ff_err e = {0};
    CHECK(st_open(&f, p, &e) != FF_OK);
    CHECK(!f.path && !f.tensors && !f.metadata && !f.map && f.ntensors == 0 && f.fd == -1);
    ckpt c;
    CHECK(ckpt_open(&c, dir, 0, &e) != FF_OK);
    CHECK(!c.dir && !c.files && !c.config && !c.tensors && c.nfiles == 0);
    unlink(p);
}

static void test_write_read_back(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    FILE *f = fopen(path, "wb");
    st_out o[2] = {{.name = "x", .dtype = FF_DT_F32, .ndim = 1, .shape = {3}, .nbytes = 12},
                   {.name = "y.weight_packed", .dtype = FF_DT_U8, .ndim = 2, .shape = {2, 2}, .nbytes = 4}};
    uint64_t off;
    ff_err e = {0};
    CHECK(st_write_header(fileno(f), path, o, 2, &off, &e) == 0);
    CHECK_EQ_INT(off % 8, 0);
    float xs[3] = {1, 2, 3};
    uint8_t ys[4] = {9, 8, 7, 6};
    CHECK(st_pwrite_all(fileno(f), path, xs, 12, off + o[0].offset, &e) == 0);
    CHECK(st_pwrite_all(fileno(f), path, ys, 4, off + o[1].offset, &e) == 0);
    fclose(f);
    st_file r;
    CHECK(st_open(&r, path, &e) == 0);
    CHECK_EQ_INT(r.ntensors, 2);
    if (r.ntensors == 2) {
        CHECK(((const float *)st_data(&r, &r.tensors[0]))[2] == 3.0f);
        CHECK(st_data(&r, &r.tensors[1])[3] == 6);
        CHECK(strcmp(r.tensors[1].name, "y.weight_packed") == 0);
    }
    st_close(&r);
}

/* A stale index (tensor listed in no shard) is a broken upload. */
static void test_index_mismatch(void)
{
    char sub[300], p[400];
    snprintf(sub, sizeof sub, "%s/ck", dir);
    mkdir(sub, 0755);
    snprintf(p, sizeof p, "%s/model-1.safetensors", sub);
    FILE *f = fopen(p, "wb");
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    uint64_t n = strlen(h);
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i)) & 0xff, f);
    fputs(h, f);
    fputc(0, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sub);
    f = fopen(p, "w");
    fputs("{\"weight_map\":{\"a\":\"model-1.safetensors\",\"b\":\"model-1.safetensors\"}}", f);
    fclose(f);
    ckpt c;
    ff_err e = {0};
    CHECK(ckpt_open(&c, sub, 0, &e) != 0);
    CHECK(strstr(e.msg, "tensor b") != NULL);
    ckpt_close(&c);
}

/* A checkpoint read from memory is the caller's: dropping a consumed tensor
 * must not madvise it away. Placed across a 2 MB boundary, where the old
 * rounding zeroed a whole block of the caller's bytes (fuzz_sources). */
static void test_memory_file_never_dropped(void)
{
    const uint64_t two_mb = 2ull << 20, data = 3ull << 20;
    uint8_t *span = mmap(NULL, 4 * two_mb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(span != MAP_FAILED);
    if (span == MAP_FAILED)
        return;
    uint8_t *boundary = (uint8_t *)(((uintptr_t)span + 2 * two_mb - 1) & ~(uintptr_t)(two_mb - 1));
    char header[128];
    int hn = snprintf(header, sizeof header, "{\"w\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                      (unsigned long long)data, (unsigned long long)data);
    uint8_t *file = boundary - 8 - hn - 64;
    for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(file + 8, header, (size_t)hn);
    memset(file + 8 + hn, 0x55, data);
    st_file f;
    ff_err e = {0};
    CHECK(st_open_memory(&f, "mem", file, 8 + (uint64_t)hn + data, &e) == 0);
    st_drop_tensor(&f, &f.tensors[0]);
    size_t kept = 0;
    for (uint64_t i = 0; i < data; i++)
        kept += file[8 + hn + i] == 0x55;
    CHECK_EQ_INT(kept, data);
    st_close(&f);
    munmap(span, 4 * two_mb);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(test_valid);
    RUN(test_truncated);
    RUN(test_header_lies);
    RUN(test_overlap);
    RUN(test_overlap_hidden_by_empty_tensor);
    RUN(test_bad_json_and_fields);
    RUN(test_refused_open_holds_nothing);
    RUN(test_write_read_back);
    RUN(test_index_mismatch);
    RUN(test_memory_file_never_dropped);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return UNIT_END();
}
