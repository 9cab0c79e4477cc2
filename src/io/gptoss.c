#include "gptoss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonio.h"
#include "mxfp4.h"

enum {
    PART_GATE_UP_BLOCKS, PART_DOWN_BLOCKS, PART_GATE_UP_BIAS, PART_DOWN_BIAS, PART_GATE_UP_BF16, PART_DOWN_BF16,
    PART_SCALES, NPARTS
};
static const char *const parts[NPARTS] = {"experts.gate_up_proj_blocks", "experts.down_proj_blocks",
                                          "experts.gate_up_proj_bias", "experts.down_proj_bias",
                                          "experts.gate_up_proj", "experts.down_proj", "_scales"};

/* Which part t is, with the length of "<P>." before it; -1 for none. */
static int part_of(const char *name, size_t *stem)
{
    size_t n = strlen(name);
    for (int i = 0; i < PART_SCALES; i++) {
        size_t k = strlen(parts[i]);
        if (n > k && name[n - k - 1] == '.' && strcmp(name + n - k, parts[i]) == 0) {
            *stem = n - k;
            return i;
        }
    }
    if (n > 21 && strcmp(name + n - 7, "_scales") == 0 && strstr(name, ".experts.") != NULL)
        return PART_SCALES;
    return -1;
}

static int64_t experts_of(const ckpt_tensor *t) { return t->st->ndim >= 2 ? t->st->shape[0] : 0; }

static int is_gate_up(int part)
{
    return part == PART_GATE_UP_BLOCKS || part == PART_GATE_UP_BIAS || part == PART_GATE_UP_BF16;
}

int gptoss_bf16_layout(const ckpt *c)
{
    if (strcmp(jsonio_str(c->config, "model_type", ""), "gpt_oss") != 0)
        return 0;
    size_t stem;
    for (size_t i = 0; i < c->ntensors; i++) {
        int p = part_of(c->tensors[i].st->name, &stem);
        if ((p == PART_GATE_UP_BF16 || p == PART_DOWN_BF16) && c->tensors[i].st->ndim == 3)
            return 1;
    }
    return 0;
}

int64_t gptoss_entries(const ckpt *c, const ckpt_tensor *t)
{
    size_t stem;
    int p = part_of(t->st->name, &stem);
    (void)c;
    if (p < 0)
        return -1;
    if (p == PART_SCALES)
        return 0;
    return experts_of(t) * (is_gate_up(p) ? 2 : 1);
}

static int bad(ff_err *e, const ckpt *c, const ckpt_tensor *t, const char *what)
{
    char got[ST_MAX_DIMS * 24 + 4];
    return ff_fail(e, FF_EIO, "%s: tensor %s: %s %s %s", ckpt_path(c, t), t->st->name, ff_dtype_name(t->st->dtype),
                   st_shape_str(t->st->shape, t->st->ndim, got, sizeof got), what);
}

/* blocks [E, R, G, 16] U8 and its scales [E, R, G] U8 beside it. */
static int check_blocks(const ckpt *c, const ckpt_tensor *t, size_t stem, int gate_up, const ckpt_tensor **scales,
                        ff_err *e)
{
    const st_tensor *b = t->st;
    if (b->dtype != FF_DT_U8 || b->ndim != 4 || b->shape[3] != 16 || b->shape[0] < 1 || b->shape[1] < 1 ||
        (gate_up && b->shape[1] % 2))
        return bad(e, c, t, gate_up ? "is not U8 [experts, 2 x intermediate, groups, 16]"
                                    : "is not U8 [experts, hidden, groups, 16]");
    *scales = ckpt_find_join(c, t->st->name, strlen(t->st->name) - strlen("blocks"), "scales");
    if (!*scales)
        return ff_fail(e, FF_EIO, "%s: tensor %s: no %.*sscales beside it", ckpt_path(c, t), t->st->name,
                       (int)(strlen(t->st->name) - strlen("blocks")), t->st->name);
    const st_tensor *s = (*scales)->st;
    if (s->dtype != FF_DT_U8 || s->ndim != 3 || s->shape[0] != b->shape[0] || s->shape[1] != b->shape[1] ||
        s->shape[2] != b->shape[2])
        return bad(e, c, *scales, "does not match its blocks (U8 [experts, rows, groups])");
    (void)stem;
    return FF_OK;
}

/* One entry: name "<P>.experts.<e>.<proj>.<kind>", its header and slice. */
static int entry(qs_view *v, const ckpt_tensor *t, size_t k, size_t stem, int64_t e_idx, const char *proj,
                 const char *kind, qs_weight w, int64_t rows, int64_t cols, ff_err *e)
{
    st_tensor *st = &v->st[k];
    *st = *t->st;
    size_t n = stem + 64;
    if (!(st->name = malloc(n)))
        return ff_oom(e, "out of memory");
    snprintf(st->name, n, "%.*sexperts.%lld.%s.%s", (int)stem, t->st->name, (long long)e_idx, proj, kind);
    st->dtype = FF_DT_BF16;
    st->ndim = cols ? 2 : 1;
    st->shape[0] = rows;
    st->shape[1] = cols;
    /* the expert's whole slab of the stored tensor: what read-ahead advises */
    uint64_t slab = (t->st->end - t->st->begin) / (uint64_t)t->st->shape[0];
    st->begin = t->st->begin + (uint64_t)e_idx * slab;
    st->end = st->begin + slab;
    v->ck.tensors[k] = (ckpt_tensor){.st = st, .file = t->file};
    v->w[k] = w;
    v->nweights++;
    return FF_OK;
}

/* Expert x's entries for x in [0, E), from w with its row0 advanced by
 * per_expert each: one down_proj (rows), or gate_proj and up_proj
 * (rows / 2 each), up one stored row or column after gate. */
static int split_experts(qs_view *v, const ckpt_tensor *t, size_t k, size_t stem, int gate_up, const char *kind,
                         qs_weight w, uint64_t per_expert, int64_t rows, int64_t cols, ff_err *e)
{
    uint64_t first = w.row0;
    int rc = FF_OK;
    for (int64_t x = 0; x < t->st->shape[0] && !rc; x++) {
        w.row0 = first + (uint64_t)x * per_expert;
        if (!gate_up) {
            rc = entry(v, t, k++, stem, x, "down_proj", kind, w, rows, cols, e);
            continue;
        }
        rc = entry(v, t, k++, stem, x, "gate_proj", kind, w, rows / 2, cols, e);
        w.row0++;
        if (!rc)
            rc = entry(v, t, k++, stem, x, "up_proj", kind, w, rows / 2, cols, e);
    }
    return rc;
}

static int fill_blocks(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, size_t stem, int gate_up,
                       ff_err *e)
{
    const ckpt_tensor *scales = NULL;
    int rc = check_blocks(c, t, stem, gate_up, &scales, e);
    if (rc)
        return rc;
    int64_t R = t->st->shape[1], K = t->st->shape[2] * 32;
    qs_weight w = {.data = t, .scale = scales, .row_step = gate_up ? 2 : 1};
    return split_experts(v, t, k, stem, gate_up, "weight", w, (uint64_t)R, R, K, e);
}

static int fill_bias(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, size_t stem, int gate_up, ff_err *e)
{
    if (t->st->dtype != FF_DT_BF16 || t->st->ndim != 2 || (gate_up && t->st->shape[1] % 2))
        return bad(e, c, t, gate_up ? "is not BF16 [experts, 2 x intermediate]" : "is not BF16 [experts, hidden]");
    int64_t R = t->st->shape[1];
    qs_weight w = {.data = t, .row_step = gate_up ? 2 : 1, .gather = 1};
    return split_experts(v, t, k, stem, gate_up, "bias", w, (uint64_t)R, R, 0, e);
}

/* The shape config.json implies: a down_proj stored [E, H, I] (as a Linear
 * would be) reads as a Linear of the wrong orientation without it. Real
 * gpt-oss has H == I, where only the config's own sizes can be checked. */
static int shape_agrees(const ckpt *c, const ckpt_tensor *t, int gate_up, ff_err *e)
{
    int64_t E = jsonio_int(c->config, "num_local_experts", 0), H = jsonio_int(c->config, "hidden_size", 0);
    int64_t I = jsonio_int(c->config, "intermediate_size", 0);
    int64_t want[3] = {E, gate_up ? H : I, gate_up ? 2 * I : H};
    const int64_t *s = t->st->shape;
    if (!E || !H || !I || (s[0] == want[0] && s[1] == want[1] && s[2] == want[2]))
        return FF_OK;
    char msg[200], w[80];
    snprintf(msg, sizeof msg, "disagrees with config.json (num_local_experts %lld, hidden_size %lld, intermediate_size "
             "%lld): expected %s", (long long)E, (long long)H, (long long)I, st_shape_str(want, 3, w, sizeof w));
    return bad(e, c, t, msg);
}

/* [E, H, 2I] or [E, I, H] BF16, x @ W: each expert's Linear is a
 * transposed slice, gate and up interleaved by column. */
static int fill_bf16(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, size_t stem, int gate_up, ff_err *e)
{
    const st_tensor *s = t->st;
    if (s->dtype != FF_DT_BF16 || s->ndim != 3 || s->shape[0] < 1 || s->shape[1] < 1 || s->shape[2] < 1 ||
        (gate_up && s->shape[2] % 2))
        return bad(e, c, t, gate_up ? "is not BF16 [experts, hidden, 2 x intermediate]"
                                    : "is not BF16 [experts, intermediate, hidden]");
    int rc = shape_agrees(c, t, gate_up, e);
    if (rc)
        return rc;
    int64_t in = s->shape[1], out = s->shape[2];
    qs_weight w = {.data = t, .row_step = gate_up ? 2 : 1, .stride = (uint64_t)out, .transposed = 1};
    return split_experts(v, t, k, stem, gate_up, "weight", w, (uint64_t)(in * out), out, in, e);
}

int gptoss_fill(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, ff_err *e)
{
    size_t stem;
    switch (part_of(t->st->name, &stem)) {
    case PART_GATE_UP_BF16: return fill_bf16(v, c, t, k, stem, 1, e);
    case PART_DOWN_BF16: return fill_bf16(v, c, t, k, stem, 0, e);
    case PART_GATE_UP_BLOCKS: return fill_blocks(v, c, t, k, stem, 1, e);
    case PART_DOWN_BLOCKS: return fill_blocks(v, c, t, k, stem, 0, e);
    case PART_GATE_UP_BIAS: return fill_bias(v, c, t, k, stem, 1, e);
    case PART_DOWN_BIAS: return fill_bias(v, c, t, k, stem, 0, e);
    default: return FF_OK;
    }
}

/* Tiles keep both the stored rows read and the decoded rows written in
 * cache: an expert of gpt-oss-120b is 2880 x 5760, 33 MB. */
#define TILE 32

/* The stored bytes need not be 2-aligned (a header's length is any number). */
static void transpose_slice(const uint8_t *src, const qs_weight *w, uint64_t from, uint64_t rows, uint64_t cols,
                            uint16_t *out)
{
    const uint64_t pitch = 2 * w->stride, step = 2 * w->row_step;   /* locals: out might alias w */
    for (uint64_t r0 = from; r0 < rows; r0 += TILE)
        for (uint64_t c0 = 0; c0 < cols; c0 += TILE) {
            uint64_t rz = r0 + TILE < rows ? r0 + TILE : rows, cz = c0 + TILE < cols ? c0 + TILE : cols;
            for (uint64_t c = c0; c < cz; c++) {
                const uint8_t *row = src + 2 * w->row0 + c * pitch;
                for (uint64_t r = r0; r < rz; r++)
                    memcpy(&out[r * cols + c], row + r * step, 2);
            }
        }
}

void gptoss_transpose_rows(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint64_t r0, uint64_t n,
                           uint16_t *out)
{
    transpose_slice(ckpt_data(c, w->data), w, r0, r0 + n, (uint64_t)t->st->shape[1], out);
}

int gptoss_decode(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint16_t *out, ff_err *e)
{
    uint64_t rows = (uint64_t)t->st->shape[0], cols = t->st->ndim == 2 ? (uint64_t)t->st->shape[1] : 1;
    const uint8_t *data = ckpt_data(c, w->data);
    if (w->transposed) {
        transpose_slice(data, w, 0, rows, cols, out);
        return FF_OK;
    }
    if (w->gather) {
        for (uint64_t r = 0; r < rows; r++)
            memcpy(out + r, data + (w->row0 + r * w->row_step) * 2, 2);
        return FF_OK;
    }
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *s = qs_mx_scales_row(c, w, t, r), *hit = memchr(s, MXFP4_SCALE_NAN, cols / MXFP4_GROUP);
        if (hit)
            return ff_fail(e, FF_EIO, "%s: tensor %s: element %llu is E8M0 255, which MX defines as NaN",
                           ckpt_path(c, w->scale), w->scale->st->name,
                           (unsigned long long)((w->row0 + r * w->row_step) * (cols / MXFP4_GROUP) + (uint64_t)(hit - s)));
        mxfp4_decode_rows(qs_mx_codes_row(c, w, t, r), s, cols, 0, 1, out + r * cols);
    }
    return FF_OK;
}
