/* The one checkpoint writer, through its public calls alone: what it
 * commits reads back byte for byte, and every refusal (a short tensor, a
 * tensor never written, an existing or nested output) leaves neither the
 * output nor its staging folder behind. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fsutil.h"
#include "unit.h"
#include "writer.h"

static char root[] = "/tmp/ff-writer-XXXXXX";

enum { N0 = 3000, N1 = 5000, N2 = 64 };

static st_out outs[3] = {
    {.name = "a.weight", .dtype = FF_DT_U8, .ndim = 1, .shape = {N0}, .nbytes = N0},
    {.name = "b.weight", .dtype = FF_DT_U8, .ndim = 1, .shape = {N1}, .nbytes = N1},
    {.name = "c.bias", .dtype = FF_DT_U8, .ndim = 1, .shape = {N2}, .nbytes = N2},
};

static uint8_t byte_of(size_t t, uint64_t i) { return (uint8_t)(t * 77 + i * 13 + (i >> 8)); }

static uint8_t *tensor_bytes(size_t t)
{
    uint8_t *b = malloc(outs[t].nbytes);
    for (uint64_t i = 0; b && i < outs[t].nbytes; i++)
        b[i] = byte_of(t, i);
    return b;
}

static int exists(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0;
}

/* Entries of root whose name starts with prefix: a staging folder left
 * behind is "<out>.partial-<pid>". */
static int count_prefixed(const char *prefix)
{
    int n = 0;
    DIR *d = opendir(root);
    for (struct dirent *de; d && (de = readdir(d));)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Tensor 1 in two pieces, the second first: put_at places each. */
static int write_all(ckpt_writer *w, ff_err *e)
{
    uint8_t *b[3] = {tensor_bytes(0), tensor_bytes(1), tensor_bytes(2)};
    int rc = ckpt_writer_put(w, 0, b[0], N0, e);
    if (!rc)
        rc = ckpt_writer_put_at(w, 1, 2000, b[1] + 2000, N1 - 2000, e);
    if (!rc)
        rc = ckpt_writer_put_at(w, 1, 0, b[1], 2000, e);
    if (!rc)
        rc = ckpt_writer_put(w, 2, b[2], N2, e);
    for (int i = 0; i < 3; i++)
        free(b[i]);
    return rc;
}

static void round_trip(void)
{
    char out[256];
    snprintf(out, sizeof out, "%s/ok", root);
    ff_err e = {0};
    ckpt_writer *w = ckpt_writer_begin(out, 0, NULL, &e);
    CHECK(w != NULL);
    json_t *cfg = json_pack("{s:s}", "model_type", "llama");
    /* 4 KB shards: a tensor never splits, so three shards */
    CHECK(ckpt_writer_layout(w, outs, 3, 4096, &e) == FF_OK);
    CHECK(write_all(w, &e) == FF_OK);
    CHECK(ckpt_writer_close(w, cfg, NULL, 0, &e) == FF_OK);
    CHECK(ckpt_writer_bytes(w) >= N0 + N1 + N2);   /* and the headers */
    CHECK(ckpt_writer_shard_count(w) >= 2);
    CHECK(ckpt_writer_commit(w, &e) == FF_OK);
    ckpt_writer_free(w);
    json_decref(cfg);
    CHECK(count_prefixed("ok.partial") == 0);
    ckpt c;
    CHECK(ckpt_open(&c, out, 1, &e) == FF_OK);
    for (size_t t = 0; t < 3; t++) {
        const ckpt_tensor *ct = ckpt_find(&c, outs[t].name);
        CHECK(ct != NULL);
        uint8_t *want = tensor_bytes(t);
        CHECK(ct && memcmp(ckpt_data(&c, ct), want, outs[t].nbytes) == 0);
        free(want);
    }
    ckpt_close(&c);
}

/* A failure at any step: freeing the uncommitted writer removes what it staged. */
static void refused_leaves_nothing(const char *name, int step)
{
    char out[256];
    snprintf(out, sizeof out, "%s/%s", root, name);
    ff_err e = {0};
    ckpt_writer *w = ckpt_writer_begin(out, 0, NULL, &e);
    CHECK(w != NULL && ckpt_writer_layout(w, outs, 3, 4096, &e) == FF_OK);
    uint8_t *b = tensor_bytes(1);
    if (step == 0) {          /* a tensor handed over short */
        CHECK(ckpt_writer_put(w, 1, b, N1 - 1, &e) != FF_OK);
    } else {                  /* one tensor never written: close counts every byte */
        CHECK(ckpt_writer_put(w, 1, b, N1, &e) == FF_OK);
        CHECK(ckpt_writer_close(w, NULL, NULL, 0, &e) != FF_OK);
    }
    CHECK(e.msg[0] != '\0');
    free(b);
    ckpt_writer_free(w);
    CHECK(!exists(out));
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.partial", name);
    CHECK(count_prefixed(prefix) == 0);
}

static void short_tensor_refused(void) { refused_leaves_nothing("short", 0); }
static void missing_tensor_refused(void) { refused_leaves_nothing("missing", 1); }

/* synth --sparse: what was not written reads as zeros, and close accepts it. */
static void holes_read_as_zeros(void)
{
    char out[256];
    snprintf(out, sizeof out, "%s/holes", root);
    ff_err e = {0};
    ckpt_writer *w = ckpt_writer_begin(out, 0, NULL, &e);
    CHECK(w && ckpt_writer_layout(w, outs, 3, 1 << 20, &e) == FF_OK);
    CHECK(ckpt_writer_holes(w, &e) == FF_OK);
    CHECK(ckpt_writer_close(w, NULL, NULL, 0, &e) == FF_OK && ckpt_writer_commit(w, &e) == FF_OK);
    ckpt_writer_free(w);
    ckpt c;
    CHECK(ckpt_open(&c, out, 0, &e) == FF_OK);
    const ckpt_tensor *t = ckpt_find(&c, "b.weight");
    uint8_t zero[N1] = {0};
    CHECK(t && memcmp(ckpt_data(&c, t), zero, N1) == 0);
    ckpt_close(&c);
}

static void existing_or_nested_output_refused(void)
{
    char out[256], in[256], nested[300];
    snprintf(out, sizeof out, "%s/ok", root);   /* round_trip's output */
    ff_err e = {0};
    CHECK(ckpt_writer_check(out, 0, NULL, &e) != FF_OK);
    CHECK(ckpt_writer_begin(out, 0, NULL, &e) == NULL);
    CHECK(exists(out));                          /* refused, not replaced */
    snprintf(in, sizeof in, "%s/ok", root);
    snprintf(nested, sizeof nested, "%s/ok/inside", root);
    const char *inputs[] = {in, NULL};
    CHECK(ckpt_writer_check(nested, 0, inputs, &e) != FF_OK);
    CHECK(ckpt_writer_check(in, 1, inputs, &e) != FF_OK);   /* --force never replaces the input */
}

int main(void)
{
    if (!mkdtemp(root))
        return 1;
    RUN(round_trip);
    RUN(short_tensor_refused);
    RUN(missing_tensor_refused);
    RUN(holes_read_as_zeros);
    RUN(existing_or_nested_output_refused);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        return 1;
    return UNIT_END();
}
