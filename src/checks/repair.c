/* repair-scales: one global scale per fused group of an existing NVFP4
 * checkpoint. Pass 1 reads headers and the F32 global scales only, groups
 * the modules by the family's tie key and finds the groups that disagree;
 * pass 2 writes every tensor in the input's order, byte for byte except the
 * scales (and, with a source, the codes) of those groups. */
#include "repair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "decode.h"
#include "fsutil.h"
#include "inspect.h"
#include "jsonio.h"
#include "nvfp4.h"
#include "plan.h"
#include "writer.h"

/* ---- the arithmetic ------------------------------------------------------ */

/* f lies exactly on a rounding boundary between two E4M3 values: its two f32
 * neighbours round to different codes. */
static int e4m3_midpoint(float f)
{
    return ff_f32_to_e4m3(nextafterf(f, -INFINITY)) != ff_f32_to_e4m3(nextafterf(f, INFINITY));
}

uint8_t repair_rescale(uint8_t s8, float g_piece, float g_common)
{
    /* s8 has 4 significant bits and g_common 24, so the product is exact in
     * double; the division is the one rounding before E4M3's. */
    double x = (double)ff_e4m3_to_f32(s8) * (double)g_common / (double)g_piece;
    float f = (float)x;
    /* (float) rounds a second time: if it lands exactly on an E4M3 midpoint
     * while x lies off it, the tie-to-even that follows may pick the wrong
     * side. One f32 step toward x puts it on x's side; midpoints are 2^20
     * f32 steps apart, so the step cannot reach another one. */
    if ((double)f != x && e4m3_midpoint(f))
        f = nextafterf(f, x > (double)f ? INFINITY : -INFINITY);
    /* ff_f32_to_e4m3 is the quantizer's own conversion (round to nearest
     * even); no clamp is needed since |x| <= |s8| <= 448 when g_common <= g_piece */
    return ff_f32_to_e4m3(f);
}

static int block_has_codes(const uint8_t *packed8)
{
    for (int i = 0; i < NVFP4_GROUP / 2; i++)
        if (packed8[i] & 0x77)   /* a nonzero magnitude in either nibble */
            return 1;
    return 0;
}

/* The block's decoded bf16 values before and after, exactly as
 * compressed-tensors' decompressor computes them (code * (s8 / gs) in f32,
 * then bf16), into the stats; returns the block's worst relative change. */
static double block_error(const uint8_t *packed8, uint8_t s_old, float g_old, uint8_t s_new, float g_new,
                          repair_stats *st)
{
    float vo[NVFP4_GROUP], vn[NVFP4_GROUP];
    double worst = 0;
    nvfp4_dequantize_rows(packed8, &s_old, g_old, NVFP4_GROUP, 1, vo);
    nvfp4_dequantize_rows(packed8, &s_new, g_new, NVFP4_GROUP, 1, vn);
    for (int i = 0; i < NVFP4_GROUP; i++) {
        double o = ff_round_bf16(vo[i]), n = ff_round_bf16(vn[i]);
        if (o == 0.0)
            continue;   /* a zero code stays zero whatever the scale */
        double d = n - o, rel = fabs(d) / fabs(o);
        worst = rel > worst ? rel : worst;
        st->se += d * d;
        st->ss += o * o;
    }
    st->worst_rel = worst > st->worst_rel ? worst : st->worst_rel;
    return worst;
}

static int e4m3_is_subnormal(uint8_t b) { return (b & 0x78) == 0 && (b & 7) != 0; }

void repair_rescale_rows(const uint8_t *packed, const uint8_t *scales, uint64_t rows, uint64_t cols,
                         float g_piece, float g_common, uint8_t *out, repair_stats *st)
{
    uint64_t groups = cols / NVFP4_GROUP;
    for (uint64_t b = 0; b < rows * groups; b++) {
        const uint8_t *p8 = packed + b * (NVFP4_GROUP / 2);
        uint8_t s = scales[b], n = repair_rescale(s, g_piece, g_common);
        int codes = block_has_codes(p8);
        st->blocks++;
        if (isnan(ff_e4m3_to_f32(s))) {
            st->nan++;
            out[b] = s;
            continue;
        }
        if ((n & 0x7f) == 0 && !codes)
            n = ff_f32_to_e4m3(NVFP4_ZERO_SCALE);   /* an all-zero group, stored as CT stores one */
        /* a scale over nonzero codes that rounds to zero stays zero: the
         * smallest subnormal (2^-9) would be further from the true value */
        st->zero += (n & 0x7f) == 0 && (s & 0x7f) != 0 && codes;
        st->subnormal += e4m3_is_subnormal(n) && !e4m3_is_subnormal(s) && (s & 0x7f) != 0;
        st->changed += n != s;
        /* only a normal scale promises E4M3's rounding: one already
         * subnormal in the input was coarse before the repair */
        if (codes && block_error(p8, s, g_piece, n, g_common, st) > REPAIR_MAX_REL && (s & 0x78))
            st->lossy++;
        out[b] = n;
    }
}

/* ---- pass 1: the fused groups of the input -------------------------------- */

typedef struct rp_piece {
    dq_module m;
    float gs;                 /* its stored global scale */
    char key[1100];           /* tie key; "" when it stands alone */
    size_t group;             /* into rp_ctx.groups, SIZE_MAX when alone */
    size_t member;            /* --against: its member in the source's plan */
    uint8_t *packed, *scales; /* --against: re-quantized, while its group is written */
} rp_piece;

typedef struct rp_group {
    size_t first, count;      /* into rp_ctx.order */
    float common;             /* the one global scale every member gets */
    int affected;             /* members' global scales differ */
    int ready;                /* --against: members re-quantized */
    size_t left;              /* tensors of the group not yet written */
    repair_stats st;          /* re-expressed: change of the decoded weights */
    double se_before, se_after, ss_src;   /* --against: against the source */
} rp_group;

typedef struct rp_ctx {
    const repair_opts *o;
    ckpt c, s;
    int have_c, have_s, have_plan;
    insp qi;
    plan p;
    size_t *unit_of;          /* --against: plan member -> its unit */
    size_t *by_module;        /* --against: plan members sorted by module name */
    nvfp4_rows_fn kernel;
    const char *kernel_name;
    rp_piece *pieces;
    size_t npieces;
    size_t *order;            /* grouped pieces, sorted by tie key */
    size_t norder;
    rp_group *groups;
    size_t ngroups, naffected;
    size_t *piece_of;         /* tensor index -> piece, SIZE_MAX for others */
    st_out *outs;
} rp_ctx;

static int collect_pieces(rp_ctx *x, ff_err *e)
{
    size_t nt = x->c.ntensors;
    x->pieces = calloc(nt + 1, sizeof *x->pieces);
    x->piece_of = malloc((nt + 1) * sizeof *x->piece_of);
    if (!x->pieces || !x->piece_of)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < nt; i++)
        x->piece_of[i] = SIZE_MAX;
    char mod[1024];
    for (size_t i = 0; i < nt; i++) {
        if (!dq_module_of(x->c.tensors[i].st->name, mod, sizeof mod))
            continue;
        rp_piece *p = &x->pieces[x->npieces];
        int rc = dq_find(&x->c, mod, &p->m, e);
        if (rc)
            return ff_wrap(e, "%s: ", x->c.dir);
        x->npieces++;
        memcpy(&p->gs, ckpt_data(&x->c, p->m.global), sizeof p->gs);
        insp_tie_key(&x->qi, mod, p->key, sizeof p->key);
        p->group = p->member = SIZE_MAX;
        size_t k = (size_t)(x->npieces - 1);
        x->piece_of[p->m.packed - x->c.tensors] = k;
        x->piece_of[p->m.scale - x->c.tensors] = k;
        x->piece_of[p->m.global - x->c.tensors] = k;
    }
    return FF_OK;
}

/* Ties keep file order, so a group's members are listed as they are stored. */
static int cmp_key(const void *a, const void *b, void *ctx)
{
    const rp_piece *ps = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = strcmp(ps[i].key, ps[j].key);
    return c ? c : (i > j) - (i < j);
}

/* One global scale for the group: the MIN of the members'. Re-expressing a
 * piece then multiplies its block scales by g_common / g_piece <= 1, so no
 * scale can pass E4M3's 448 (the max would overflow the largest blocks and
 * saturating them would clip the weights). The min is also what
 * llm-compressor's fused observer gives (2688 / the union's amax). */
static int settle_group(rp_ctx *x, rp_group *g, ff_err *e)
{
    const rp_piece *p0 = &x->pieces[x->order[g->first]];
    g->common = p0->gs;
    for (size_t k = g->first; k < g->first + g->count; k++) {
        const rp_piece *p = &x->pieces[x->order[k]];
        g->affected |= memcmp(&p->gs, &p0->gs, sizeof p->gs) != 0;
        g->common = p->gs < g->common ? p->gs : g->common;
    }
    for (size_t k = g->first; g->affected && k < g->first + g->count; k++) {
        const rp_piece *p = &x->pieces[x->order[k]];
        if (!(isnormal(p->gs) && p->gs > 0.0f))
            return ff_fail(e, FF_EIO, "%s: %s: global scale %g is not a positive, finite, normal number; cannot repair "
                                      "its group %s", ckpt_path(&x->c, p->m.global), p->m.global->st->name,
                           (double)p->gs, p0->key);
    }
    g->left = 3 * g->count;
    return FF_OK;
}

static int build_groups(rp_ctx *x, ff_err *e)
{
    x->order = malloc((x->npieces + 1) * sizeof *x->order);
    x->groups = calloc(x->npieces + 1, sizeof *x->groups);
    if (!x->order || !x->groups)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < x->npieces; i++)
        if (x->pieces[i].key[0])
            x->order[x->norder++] = i;
    qsort_r(x->order, x->norder, sizeof *x->order, cmp_key, x->pieces);
    for (size_t i = 0; i < x->norder;) {
        size_t j = i + 1;
        while (j < x->norder && strcmp(x->pieces[x->order[j]].key, x->pieces[x->order[i]].key) == 0)
            j++;
        rp_group *g = &x->groups[x->ngroups];
        g->first = i;
        g->count = j - i;
        for (size_t k = i; k < j; k++)
            x->pieces[x->order[k]].group = x->ngroups;
        int rc = settle_group(x, g, e);
        if (rc)
            return rc;
        x->naffected += g->affected;
        x->ngroups++;
        i = j;
    }
    return FF_OK;
}

/* ---- --against: the source's plan ------------------------------------------ */

static int cmp_member(const void *a, const void *b, void *ctx)
{
    const plan *p = ctx;
    return strcmp(p->members[*(const size_t *)a].module, p->members[*(const size_t *)b].module);
}

static size_t find_member(const rp_ctx *x, const char *module)
{
    size_t lo = 0, hi = x->p.nmembers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(x->p.members[x->by_module[mid]].module, module);
        if (c == 0)
            return x->by_module[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

static int open_source(rp_ctx *x, ff_err *e)
{
    int rc = ckpt_open(&x->s, x->o->against, 1, e);
    if (rc)
        return rc;
    x->have_s = 1;
    plan_opts po = {0};
    rc = plan_build(&x->p, &x->s, &po, e);
    x->have_plan = 1;
    /* a plan refused for its invariants still lists its members, which is
     * all this needs (the checkpoint may come from another recipe) */
    if (rc && rc != FF_EPLAN)
        return ff_wrap(e, "%s: ", x->o->against);
    x->unit_of = malloc((x->p.nmembers + 1) * sizeof *x->unit_of);
    x->by_module = malloc((x->p.nmembers + 1) * sizeof *x->by_module);
    if (!x->unit_of || !x->by_module)
        return ff_oom(e, "out of memory");
    for (size_t u = 0; u < x->p.nunits; u++)
        for (size_t k = 0; k < x->p.units[u].count; k++)
            x->unit_of[x->p.units[u].first + k] = u;
    for (size_t k = 0; k < x->p.nmembers; k++)
        x->by_module[k] = k;
    qsort_r(x->by_module, x->p.nmembers, sizeof *x->by_module, cmp_member, &x->p);
    x->kernel = nvfp4_best_kernel(&x->kernel_name);
    return FF_OK;
}

/* Each member of an affected group matched to the source Linear it came
 * from, and the group must be one unit of the source's plan (quantize ties
 * exactly those), before anything is written. */
static int match_sources(rp_ctx *x, ff_err *e)
{
    for (size_t gi = 0; gi < x->ngroups; gi++) {
        const rp_group *g = &x->groups[gi];
        size_t unit = SIZE_MAX;
        for (size_t k = g->first; g->affected && k < g->first + g->count; k++) {
            rp_piece *p = &x->pieces[x->order[k]];
            p->member = find_member(x, p->m.module);
            const plan_member *pm = p->member == SIZE_MAX ? NULL : &x->p.members[p->member];
            if (!pm)
                return ff_fail(e, FF_EIO, "%s: %s is not a quantized Linear of this source (is it the model %s was made from?)",
                               x->o->against, p->m.module, x->c.dir);
            if (pm->rows != p->m.rows || pm->cols != p->m.cols)
                return ff_fail(e, FF_EIO, "%s: %s is [%llu, %llu] in the source but [%llu, %llu] in %s", x->o->against,
                               p->m.module, (unsigned long long)pm->rows, (unsigned long long)pm->cols,
                               (unsigned long long)p->m.rows, (unsigned long long)p->m.cols, x->c.dir);
            if (unit == SIZE_MAX)
                unit = x->unit_of[p->member];
            if (x->unit_of[p->member] != unit || x->p.units[unit].count != g->count)
                return ff_fail(e, FF_EIO, "%s: the source ties %s with other modules than %s does", x->o->against,
                               p->m.module, x->c.dir);
        }
    }
    return FF_OK;
}

/* Relative error against the source of one piece, decoded row by row (what
 * compressed-tensors hands the model, in bf16), before and after. */
static int measure_piece(const rp_piece *p, const uint8_t *src, ff_dtype t, const ckpt *c, float g_new,
                         rp_group *g, ff_err *e)
{
    uint64_t cols = p->m.cols;
    float *o = malloc(cols * sizeof *o), *n = malloc(cols * sizeof *n);
    const uint8_t *op = ckpt_data(c, p->m.packed), *os = ckpt_data(c, p->m.scale);
    if (!o || !n) {
        free(o);
        free(n);
        return ff_oom(e, "out of memory measuring %s", p->m.module);
    }
    for (uint64_t r = 0; r < p->m.rows; r++) {
        nvfp4_dequantize_rows(op + r * cols / 2, os + r * cols / NVFP4_GROUP, p->gs, cols, 1, o);
        nvfp4_dequantize_rows(p->packed + r * cols / 2, p->scales + r * cols / NVFP4_GROUP, g_new, cols, 1, n);
        for (uint64_t i = 0; i < cols; i++) {
            double s = ff_load_f32(src, t, r * cols + i), a = ff_round_bf16(o[i]), b = ff_round_bf16(n[i]);
            g->se_before += (a - s) * (a - s);
            g->se_after += (b - s) * (b - s);
            g->ss_src += s * s;
        }
    }
    free(o);
    free(n);
    return FF_OK;
}

static void release_group(rp_ctx *x, rp_group *g)
{
    for (size_t k = g->first; k < g->first + g->count; k++) {
        rp_piece *p = &x->pieces[x->order[k]];
        free(p->packed);
        free(p->scales);
        p->packed = p->scales = NULL;
    }
}

/* The group's rows from the source: amax over every member, one global scale
 * as quantize computes it, then the same kernel (byte-identical to quantize). */
static int requantize_group(rp_ctx *x, rp_group *g, ff_err *e)
{
    const uint8_t **rows = calloc(g->count, sizeof *rows);
    void **owned = calloc(g->count, sizeof *owned);
    float amax = 0.0f;
    int rc = rows && owned ? FF_OK : ff_oom(e, "out of memory");
    for (size_t k = 0; rc == FF_OK && k < g->count; k++) {
        const plan_member *pm = &x->p.members[x->pieces[x->order[g->first + k]].member];
        float a;
        uint64_t bad;
        rows[k] = plan_member_rows(pm, ckpt_data(&x->s, pm->src), &owned[k], e);
        if (!rows[k])
            rc = e->code;
        else if (nvfp4_absmax(rows[k], pm->src->st->dtype, pm->rows * pm->cols, &a, &bad))
            rc = ff_fail(e, FF_EIO, "%s: tensor %s: element %llu of %s is NaN or Inf; refusing to quantize it",
                         ckpt_path(&x->s, pm->src), pm->src->st->name, (unsigned long long)bad, pm->module);
        else
            amax = a > amax ? a : amax;
    }
    if (rc == FF_OK) {
        const plan_member *p0 = &x->p.members[x->pieces[x->order[g->first]].member];
        const plan_unit *u = &x->p.units[x->unit_of[p0 - x->p.members]];
        g->common = nvfp4_global_scale(amax, x->p.members[u->first].src->st->dtype);
    }
    for (size_t k = 0; rc == FF_OK && k < g->count; k++) {
        rp_piece *p = &x->pieces[x->order[g->first + k]];
        const plan_member *pm = &x->p.members[p->member];
        p->packed = malloc(p->m.rows * p->m.cols / 2 + 1);
        p->scales = malloc(p->m.rows * p->m.cols / NVFP4_GROUP + 1);
        if (!p->packed || !p->scales) {
            rc = ff_oom(e, "out of memory quantizing %s", p->m.module);
            break;
        }
        x->kernel(rows[k], pm->src->st->dtype, p->m.cols, 0, p->m.rows, g->common, p->packed, p->scales);
        rc = measure_piece(p, rows[k], pm->src->st->dtype, &x->c, g->common, g, e);
    }
    for (size_t k = 0; owned && k < g->count; k++)
        free(owned[k]);
    free(owned);
    free(rows);
    g->ready = rc == FF_OK;
    return rc;
}

/* ---- pass 1, without a source: would re-expressing lose the weights? ------- */

static const rp_piece *smallest(const rp_ctx *x, const rp_group *g)
{
    const rp_piece *m = &x->pieces[x->order[g->first]];
    for (size_t k = g->first; k < g->first + g->count; k++)
        if (x->pieces[x->order[k]].gs == g->common)
            m = &x->pieces[x->order[k]];
    return m;
}

/* One member re-expressed as pass 2 will, its output thrown away. */
static int check_member(const rp_ctx *x, const rp_group *g, const rp_piece *p, ff_err *e)
{
    uint64_t n = p->m.rows * p->m.cols / NVFP4_GROUP;
    uint8_t *buf = malloc(n + 1);
    repair_stats st = {0};
    if (!buf)
        return ff_oom(e, "out of memory re-expressing %s", p->m.module);
    repair_rescale_rows(ckpt_data(&x->c, p->m.packed), ckpt_data(&x->c, p->m.scale), p->m.rows, p->m.cols, p->gs,
                        g->common, buf, &st);
    free(buf);
    if (st.nan)
        return ff_fail(e, FF_EIO, "%s: %s holds NaN block scales; it cannot be re-expressed",
                       ckpt_path(&x->c, p->m.scale), p->m.scale->st->name);
    if (!st.zero && !st.lossy)
        return FF_OK;
    const rp_piece *m = smallest(x, g);
    char what[160];
    if (st.zero)
        snprintf(what, sizeof what, "zero %llu of its block scales over non-zero codes (their weights would vanish)",
                 (unsigned long long)st.zero);
    else
        snprintf(what, sizeof what, "move %llu of its blocks by more than E4M3's rounding (worst relative error %.3g: "
                                    "their scales fall among E4M3's subnormals)", (unsigned long long)st.lossy,
                 st.worst_rel);
    return ff_fail(e, FF_EIO, "%s: group %s: re-expressing %s (global scale %g) under the group's smallest, %g (%s), "
                              "would %s; repair it --against its bf16 source, or mend %s's global scale",
                   ckpt_path(&x->c, p->m.scale), x->pieces[x->order[g->first]].key, p->m.module, (double)p->gs,
                   (double)g->common, m->m.module, what, m->m.module);
}

/* Before anything is written: a repair that zeroes a block scale over
 * non-zero codes or moves a value by more than E4M3's rounding is refused.
 * One member's tiny global scale (1e-30, say) is the group's smallest, and
 * would otherwise zero every block of the others, with exit 0. */
static int check_rescale(const rp_ctx *x, ff_err *e)
{
    for (size_t gi = 0; gi < x->ngroups; gi++) {
        const rp_group *g = &x->groups[gi];
        for (size_t k = g->first; g->affected && k < g->first + g->count; k++) {
            const rp_piece *p = &x->pieces[x->order[k]];
            int rc = p->gs == g->common ? FF_OK : check_member(x, g, p, e);
            if (rc)
                return rc;
        }
    }
    return FF_OK;
}

/* ---- pass 2: writing ------------------------------------------------------- */

static int build_outs(rp_ctx *x, ff_err *e)
{
    x->outs = calloc(x->c.ntensors + 1, sizeof *x->outs);
    if (!x->outs)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < x->c.ntensors; i++) {
        const st_tensor *t = x->c.tensors[i].st;
        st_out *o = &x->outs[i];
        o->name = t->name;
        o->dtype = t->dtype;
        o->ndim = t->ndim;
        memcpy(o->shape, t->shape, sizeof o->shape);
        o->nbytes = t->end - t->begin;
    }
    return FF_OK;
}

/* A tensor copied byte for byte from the input's mapping, in pieces dropped
 * from the mapping behind the copy: copied whole and kept mapped, a 712 MB
 * input left repair-scales at a 733 MB peak RSS, growing with the model. */
#define COPY_PIECE (8ull << 20)

static int put_copied(rp_ctx *x, ckpt_writer *w, size_t i, ff_err *e)
{
    const ckpt_tensor *t = &x->c.tensors[i];
    const uint8_t *src = ckpt_data(&x->c, t);
    uint64_t n = x->outs[i].nbytes;
    int rc = FF_OK;
    if (n <= COPY_PIECE)
        rc = ckpt_writer_put(w, i, src, n, e);
    else
        for (uint64_t at = 0; at < n && rc == FF_OK; at += COPY_PIECE) {
            uint64_t len = n - at < COPY_PIECE ? n - at : COPY_PIECE;
            rc = ckpt_writer_put_at(w, i, at, src + at, len, e);
            dq_drop(&x->c, t, at, len);
        }
    dq_drop_whole(&x->c, t);   /* the pieces' drops stop short of the block the end shares */
    return rc;
}

static int put_rescaled(rp_ctx *x, ckpt_writer *w, size_t i, rp_piece *p, rp_group *g, ff_err *e)
{
    uint64_t n = p->m.rows * p->m.cols / NVFP4_GROUP;
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        return ff_oom(e, "out of memory re-expressing %s", p->m.module);
    uint64_t nan_before = g->st.nan;
    repair_rescale_rows(ckpt_data(&x->c, p->m.packed), ckpt_data(&x->c, p->m.scale), p->m.rows, p->m.cols, p->gs,
                        g->common, buf, &g->st);
    int rc = g->st.nan != nan_before
                 ? ff_fail(e, FF_EIO, "%s: %s holds NaN block scales; it cannot be re-expressed",
                           ckpt_path(&x->c, p->m.scale), p->m.scale->st->name)
                 : ckpt_writer_put(w, i, buf, n, e);
    free(buf);
    return rc;
}

/* A tensor of an affected group: the common global scale, the re-expressed
 * (or re-quantized) block scales, the codes as stored (or re-quantized). */
static int put_repaired(rp_ctx *x, ckpt_writer *w, size_t i, rp_piece *p, rp_group *g, ff_err *e)
{
    const ckpt_tensor *t = &x->c.tensors[i];
    int rc = FF_OK;
    if (x->have_s && !g->ready)
        rc = requantize_group(x, g, e);
    if (rc)
        return rc;
    if (t == p->m.global)
        rc = ckpt_writer_put(w, i, &g->common, sizeof g->common, e);
    else if (x->have_s)
        rc = ckpt_writer_put(w, i, t == p->m.packed ? p->packed : p->scales, x->outs[i].nbytes, e);
    else if (t == p->m.scale)
        rc = put_rescaled(x, w, i, p, g, e);
    else
        rc = put_copied(x, w, i, e);
    if (rc == FF_OK && --g->left == 0)
        release_group(x, g);
    return rc;
}

static int write_tensors(rp_ctx *x, ckpt_writer *w, ff_err *e)
{
    int rc = FF_OK;
    for (size_t i = 0; i < x->c.ntensors && rc == FF_OK; i++) {
        size_t pi = x->piece_of[i];
        rp_piece *p = pi == SIZE_MAX ? NULL : &x->pieces[pi];
        rp_group *g = p && p->group != SIZE_MAX ? &x->groups[p->group] : NULL;
        if (g && g->affected)
            rc = put_repaired(x, w, i, p, g, e);
        else  /* everything else, unaffected groups included: byte for byte */
            rc = put_copied(x, w, i, e);
    }
    return rc;
}

/* ---- the report ------------------------------------------------------------ */

static double frob(double se, double ss) { return ss > 0 ? sqrt(se / ss) : (se > 0 ? INFINITY : 0); }

static json_t *group_json(const rp_ctx *x, const rp_group *g)
{
    json_t *j = json_object(), *mods = json_array();
    const rp_piece *p0 = &x->pieces[x->order[g->first]];
    json_object_set_new(j, "group", jsonio_string(p0->key));
    for (size_t k = g->first; k < g->first + g->count; k++) {
        const rp_piece *p = &x->pieces[x->order[k]];
        json_t *m = json_object();
        json_object_set_new(m, "module", jsonio_string(p->m.module));
        json_object_set_new(m, "global_scale", json_real(p->gs));
        json_array_append_new(mods, m);
    }
    json_object_set_new(j, "modules", mods);
    json_object_set_new(j, "global_scale", json_real(g->common));
    if (x->have_s) {
        json_object_set_new(j, "rel_error_before", json_real(frob(g->se_before, g->ss_src)));
        json_object_set_new(j, "rel_error_after", json_real(frob(g->se_after, g->ss_src)));
    } else {
        json_object_set_new(j, "scales_changed", json_integer((json_int_t)g->st.changed));
        json_object_set_new(j, "worst_rel_error", json_real(g->st.worst_rel));
        json_object_set_new(j, "rel_error", json_real(frob(g->st.se, g->st.ss)));
        json_object_set_new(j, "underflow_subnormal", json_integer((json_int_t)g->st.subnormal));
        json_object_set_new(j, "underflow_zero", json_integer((json_int_t)g->st.zero));
    }
    return j;
}

static json_t *build_report(const rp_ctx *x, const char *in, const char *out)
{
    json_t *r = json_object(), *groups = json_array();
    double worst = 0, worst_after = 0, worst_metric = 0;
    uint64_t sub = 0, zero = 0;
    size_t modules = 0;
    const char *worst_group = NULL;
    for (size_t gi = 0; gi < x->ngroups; gi++) {
        const rp_group *g = &x->groups[gi];
        if (!g->affected)
            continue;
        modules += g->count;
        sub += g->st.subnormal;
        zero += g->st.zero;
        double after = frob(g->se_after, g->ss_src), metric = x->have_s ? after : g->st.worst_rel;
        if (!worst_group || metric > worst_metric) {
            worst_metric = metric;
            worst_group = x->pieces[x->order[g->first]].key;
        }
        worst = g->st.worst_rel > worst ? g->st.worst_rel : worst;
        worst_after = after > worst_after ? after : worst_after;
        json_array_append_new(groups, group_json(x, g));
    }
    json_object_set_new(r, "input", jsonio_string(in));
    json_object_set_new(r, "output", jsonio_string(out));
    json_object_set_new(r, "against", x->o->against ? jsonio_string(x->o->against) : json_null());
    json_object_set_new(r, "mode", json_string(!x->naffected ? "none" : x->have_s ? "requantize" : "rescale"));
    json_object_set_new(r, "nothing_to_repair", json_boolean(x->naffected == 0));
    json_object_set_new(r, "fused_groups", json_integer((json_int_t)x->ngroups));
    json_object_set_new(r, "repaired_groups", json_integer((json_int_t)x->naffected));
    json_object_set_new(r, "repaired_modules", json_integer((json_int_t)modules));
    if (x->have_s) {
        json_object_set_new(r, "worst_rel_error_vs_source", json_real(worst_after));
        json_object_set_new(r, "kernel", json_string(x->kernel_name ? x->kernel_name : ""));
    } else {
        json_object_set_new(r, "worst_rel_error", json_real(worst));
        json_object_set_new(r, "underflow_subnormal", json_integer((json_int_t)sub));
        json_object_set_new(r, "underflow_zero", json_integer((json_int_t)zero));
    }
    json_object_set_new(r, "worst_group", worst_group ? jsonio_string(worst_group) : json_null());
    json_object_set_new(r, "groups", groups);
    return r;
}

/* ---- driver ----------------------------------------------------------------- */

/* An NVFP4 checkpoint: quantized modules present, and a quantization_config
 * (when there is one) that does not name another format. */
static int check_nvfp4(const rp_ctx *x, ff_err *e)
{
    const json_t *q = x->c.config ? json_object_get(x->c.config, "quantization_config") : NULL;
    const char *fmt = json_string_value(json_object_get(q, "format"));
    if (fmt && strcmp(fmt, "nvfp4-pack-quantized") != 0)
        return ff_fail(e, FF_EIO, "%s: quantization_config format is '%s', not nvfp4-pack-quantized", x->c.dir, fmt);
    if (!x->npieces)
        return ff_fail(e, FF_EIO, "%s: no NVFP4 modules (weight_packed + weight_scale + weight_global_scale): not an NVFP4 checkpoint",
                       x->c.dir);
    if (!x->qi.have_matcher)
        return ff_fail(e, FF_EIO, "%s: no known model family claims this config, so which modules are fused is unknown",
                       x->c.dir);
    return FF_OK;
}

/* A module without codes would drop out of its group, and the group be
 * repaired without it. */
static int check_whole(const rp_ctx *x, ff_err *e)
{
    char mod[1024];
    for (size_t i = 0; i < x->c.ntensors; i++) {
        const ckpt_tensor *t = &x->c.tensors[i];
        const char *orphan = dq_orphan_part(&x->c, t->st->name, mod, sizeof mod);
        if (orphan)
            return ff_fail(e, FF_EIO, "%s: tensor %s: module %s has a %s but no %s: its codes are missing",
                           ckpt_path(&x->c, t), t->st->name, mod, orphan, DQ_PACKED);
    }
    return FF_OK;
}

static int prepare(rp_ctx *x, const char *in, const char *out, ff_err *e)
{
    int rc = ckpt_open(&x->c, in, 1, e);
    x->have_c = rc == FF_OK;
    if (!rc && (fs_same(in, out) || (x->o->against && fs_same(x->o->against, out))))
        rc = ff_fail(e, FF_EUSAGE, "%s: output folder is an input folder", out);
    if (!rc)
        rc = insp_build(&x->qi, &x->c, NULL, e);
    if (!rc)
        rc = collect_pieces(x, e);
    if (!rc)
        rc = check_nvfp4(x, e);
    if (!rc)
        rc = check_whole(x, e);
    if (!rc)
        rc = build_groups(x, e);
    if (!rc && !x->o->against)
        rc = check_rescale(x, e);
    if (!rc && x->o->against && x->naffected)
        rc = open_source(x, e);
    if (!rc && x->have_s)
        rc = match_sources(x, e);
    if (!rc)
        rc = build_outs(x, e);
    return rc;
}

static int write_all(rp_ctx *x, const char *in, const char *out, ff_err *e)
{
    const char *inputs[] = {in, x->o->against, NULL};
    ckpt_writer *w = ckpt_writer_begin(out, x->o->force, inputs, e);
    if (!w)
        return e->code;
    int rc = ckpt_writer_layout(w, x->outs, x->c.ntensors, x->o->shard_size, e);
    if (!rc)   /* blocks allocated first: the writes then only fill the cache */
        rc = ckpt_writer_reserve(w, e);
    if (!rc)
        rc = write_tensors(x, w, e);
    /* config.json travels as it is: the format and the ignore list do not change */
    if (!rc)
        rc = ckpt_writer_close(w, NULL, x->c.dir, 1, e);
    if (!rc)
        rc = ckpt_writer_commit(w, e);
    ckpt_writer_free(w);
    return rc;
}

static void free_ctx(rp_ctx *x)
{
    for (size_t i = 0; i < x->npieces; i++) {
        dq_module_free(&x->pieces[i].m);
        free(x->pieces[i].packed);
        free(x->pieces[i].scales);
    }
    free(x->pieces);
    free(x->piece_of);
    free(x->order);
    free(x->groups);
    free(x->outs);
    free(x->unit_of);
    free(x->by_module);
    if (x->have_plan)
        plan_free(&x->p);
    if (x->have_s)
        ckpt_close(&x->s);
    insp_free(&x->qi);
    if (x->have_c)
        ckpt_close(&x->c);
}

int repair_run(const char *in, const char *out, const repair_opts *o, json_t **report, ff_err *e)
{
    rp_ctx x;
    memset(&x, 0, sizeof x);
    x.o = o;
    *report = NULL;
    int rc = prepare(&x, in, out, e);
    if (!rc)
        rc = write_all(&x, in, out, e);
    if (!rc)
        *report = build_report(&x, in, out);
    free_ctx(&x);
    return rc;
}

#define PRINT_GROUPS 8

static int cmp_worst(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    const char *k = json_object_get(x, "rel_error_after") ? "rel_error_after" : "worst_rel_error";
    double u = json_real_value(json_object_get(x, k)), v = json_real_value(json_object_get(y, k));
    return (u < v) - (u > v);
}

static void print_group(const json_t *g, FILE *out)
{
    const json_t *mods = json_object_get(g, "modules");
    fprintf(out, "    %s:", json_string_value(json_object_get(g, "group")));
    for (size_t i = 0; i < json_array_size(mods); i++) {
        const json_t *m = json_array_get(mods, i);
        const char *name = json_string_value(json_object_get(m, "module")), *dot = strrchr(name, '.');
        fprintf(out, "%s %s %.9g", i ? "," : "", dot ? dot + 1 : name, json_real_value(json_object_get(m, "global_scale")));
    }
    fprintf(out, " -> %.9g\n", json_real_value(json_object_get(g, "global_scale")));
    if (json_object_get(g, "rel_error_after"))
        fprintf(out, "      relative error vs source: %.6g before, %.6g after\n",
                json_real_value(json_object_get(g, "rel_error_before")), json_real_value(json_object_get(g, "rel_error_after")));
    else
        fprintf(out, "      %lld scales changed, worst relative error %.6g, overall %.6g, %lld underflowed to subnormal, %lld to zero\n",
                (long long)json_integer_value(json_object_get(g, "scales_changed")),
                json_real_value(json_object_get(g, "worst_rel_error")), json_real_value(json_object_get(g, "rel_error")),
                (long long)json_integer_value(json_object_get(g, "underflow_subnormal")),
                (long long)json_integer_value(json_object_get(g, "underflow_zero")));
}

void repair_print(const json_t *r, FILE *out)
{
    const json_t *groups = json_object_get(r, "groups");
    size_t n = json_array_size(groups);
    fprintf(out, "fp4forge repair-scales: %s -> %s%s%s\n", json_string_value(json_object_get(r, "input")),
            json_string_value(json_object_get(r, "output")), json_is_string(json_object_get(r, "against")) ? " against " : "",
            json_is_string(json_object_get(r, "against")) ? json_string_value(json_object_get(r, "against")) : "");
    if (json_is_true(json_object_get(r, "nothing_to_repair"))) {
        fprintf(out, "  nothing to repair: %lld fused groups, each with one global scale; the output is a copy\n",
                (long long)json_integer_value(json_object_get(r, "fused_groups")));
        return;
    }
    fprintf(out, "  %lld of %lld fused groups had different global scales (%lld modules), %s\n",
            (long long)json_integer_value(json_object_get(r, "repaired_groups")),
            (long long)json_integer_value(json_object_get(r, "fused_groups")),
            (long long)json_integer_value(json_object_get(r, "repaired_modules")),
            json_object_get(r, "worst_rel_error_vs_source") ? "re-quantized from the source" : "block scales re-expressed under the smallest");
    const json_t **sorted = malloc((n ? n : 1) * sizeof *sorted);
    for (size_t i = 0; sorted && i < n; i++)
        sorted[i] = json_array_get(groups, i);
    if (sorted)
        qsort(sorted, n, sizeof *sorted, cmp_worst);
    for (size_t i = 0; sorted && i < n && i < PRINT_GROUPS; i++)
        print_group(sorted[i], out);
    if (n > PRINT_GROUPS)
        fprintf(out, "    ... %zu more (--json lists all)\n", n - PRINT_GROUPS);
    free(sorted);
    if (json_object_get(r, "worst_rel_error_vs_source"))
        fprintf(out, "  worst relative error vs source: %.6g (%s)\n",
                json_real_value(json_object_get(r, "worst_rel_error_vs_source")),
                json_string_value(json_object_get(r, "worst_group")));
    else
        fprintf(out, "  worst relative error introduced: %.9g (%s); scales underflowed: %lld to subnormal, %lld to zero\n",
                json_real_value(json_object_get(r, "worst_rel_error")), json_string_value(json_object_get(r, "worst_group")),
                (long long)json_integer_value(json_object_get(r, "underflow_subnormal")),
                (long long)json_integer_value(json_object_get(r, "underflow_zero")));
}
