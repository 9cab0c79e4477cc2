#include "gptoss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxfp4.h"

enum { PART_GATE_UP_BLOCKS, PART_DOWN_BLOCKS, PART_GATE_UP_BIAS, PART_DOWN_BIAS, PART_SCALES, NPARTS };
static const char *const parts[NPARTS] = {"experts.gate_up_proj_blocks", "experts.down_proj_blocks",
                                          "experts.gate_up_proj_bias", "experts.down_proj_bias", "_scales"};

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

int64_t gptoss_entries(const ckpt *c, const ckpt_tensor *t)
{
    size_t stem;
    int p = part_of(t->st->name, &stem);
    (void)c;
    if (p < 0)
        return -1;
    if (p == PART_SCALES)
        return 0;
    return experts_of(t) * (p == PART_GATE_UP_BLOCKS || p == PART_GATE_UP_BIAS ? 2 : 1);
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

static int fill_blocks(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, size_t stem, int gate_up,
                       ff_err *e)
{
    const ckpt_tensor *scales = NULL;
    int rc = check_blocks(c, t, stem, gate_up, &scales, e);
    int64_t E = t->st->shape[0], R = t->st->shape[1], K = t->st->shape[2] * 32;
    for (int64_t x = 0; x < E && !rc; x++) {
        qs_weight w = {.data = t, .scale = scales, .row0 = (uint64_t)(x * R), .row_step = gate_up ? 2 : 1};
        if (!gate_up) {
            rc = entry(v, t, k++, stem, x, "down_proj", "weight", w, R, K, e);
            continue;
        }
        rc = entry(v, t, k++, stem, x, "gate_proj", "weight", w, R / 2, K, e);
        w.row0++;
        if (!rc)
            rc = entry(v, t, k++, stem, x, "up_proj", "weight", w, R / 2, K, e);
    }
    return rc;
}

static int fill_bias(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, size_t stem, int gate_up, ff_err *e)
{
    if (t->st->dtype != FF_DT_BF16 || t->st->ndim != 2 || (gate_up && t->st->shape[1] % 2))
        return bad(e, c, t, gate_up ? "is not BF16 [experts, 2 x intermediate]" : "is not BF16 [experts, hidden]");
    int64_t E = t->st->shape[0], R = t->st->shape[1];
    int rc = FF_OK;
    for (int64_t x = 0; x < E && !rc; x++) {
        qs_weight w = {.data = t, .row0 = (uint64_t)(x * R), .row_step = gate_up ? 2 : 1, .gather = 1};
        if (!gate_up) {
            rc = entry(v, t, k++, stem, x, "down_proj", "bias", w, R, 0, e);
            continue;
        }
        rc = entry(v, t, k++, stem, x, "gate_proj", "bias", w, R / 2, 0, e);
        w.row0++;
        if (!rc)
            rc = entry(v, t, k++, stem, x, "up_proj", "bias", w, R / 2, 0, e);
    }
    return rc;
}

int gptoss_fill(qs_view *v, const ckpt *c, const ckpt_tensor *t, size_t k, ff_err *e)
{
    size_t stem;
    switch (part_of(t->st->name, &stem)) {
    case PART_GATE_UP_BLOCKS: return fill_blocks(v, c, t, k, stem, 1, e);
    case PART_DOWN_BLOCKS: return fill_blocks(v, c, t, k, stem, 0, e);
    case PART_GATE_UP_BIAS: return fill_bias(v, c, t, k, stem, 1, e);
    case PART_DOWN_BIAS: return fill_bias(v, c, t, k, stem, 0, e);
    default: return FF_OK;
    }
}

int gptoss_decode(const ckpt *c, const qs_weight *w, const ckpt_tensor *t, uint16_t *out, ff_err *e)
{
    uint64_t rows = (uint64_t)t->st->shape[0], cols = t->st->ndim == 2 ? (uint64_t)t->st->shape[1] : 1;
    const uint8_t *data = ckpt_data(c, w->data);
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
