/* plan --infer, part one: every tensor name generalized to a template (the
 * decoder layer index and the expert index become placeholders) and each
 * template placed by its name and shape against the config's sizes. What
 * the templates say about the layers (counts, which carry experts) is
 * infer_text.c's. */
#include "infer_int.h"

#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "jsonio.h"

/* The layer index after "layers." (at the start or after a '.'): its
 * offset and length, or 0 when the name has none. */
static int find_index(const char *name, const char *word, size_t *at, size_t *len, long *value)
{
    size_t wl = strlen(word);
    for (const char *s = strstr(name, word); s; s = strstr(s + 1, word)) {
        if (s != name && s[-1] != '.')
            continue;
        const char *d = s + wl, *x = d;
        while (*x >= '0' && *x <= '9')
            x++;
        if (x == d || *x != '.' || x - d > 9)
            continue;
        *at = (size_t)(d - name), *len = (size_t)(x - d), *value = strtol(d, NULL, 10);
        return 1;
    }
    return 0;
}

/* name with the layer index as '#' and the expert index as '@'. */
static char *generalize(const char *name, long *layer, long *expert)
{
    char *t = strdup(name);
    if (!t)
        return NULL;
    size_t at, len;
    *layer = *expert = -1;
    if (find_index(t, "layers.", &at, &len, layer)) {
        t[at] = '#';
        memmove(t + at + 1, t + at + len, strlen(t + at + len) + 1);
    }
    if (find_index(t, "experts.", &at, &len, expert)) {
        t[at] = '@';
        memmove(t + at + 1, t + at + len, strlen(t + at + len) + 1);
    }
    return t;
}

static infer_tmpl *find_or_add(infer_scan *s, char *tname, const st_tensor *st, ff_err *e)
{
    for (size_t i = 0; i < s->ntmpl; i++)
        if (strcmp(s->tmpl[i].name, tname) == 0) {
            free(tname);
            return &s->tmpl[i];
        }
    if (s->ntmpl == s->cap_tmpl) {
        size_t cap = s->cap_tmpl ? 2 * s->cap_tmpl : 64;
        infer_tmpl *n = realloc(s->tmpl, cap * sizeof *n);
        if (!n) {
            free(tname);
            return ff_oom(e, "out of memory"), NULL;
        }
        s->tmpl = n, s->cap_tmpl = cap;
    }
    infer_tmpl *t = &s->tmpl[s->ntmpl++];
    memset(t, 0, sizeof *t);
    t->name = tname;
    t->st = st;
    return t;
}

/* ---- placing one template ---- */

static int has(const char *s, const char *w) { return strstr(s, w) != NULL; }

/* Where a tensor name's leaf starts, and its length without ".weight". */
static size_t leaf_offset(const char *name, size_t *len)
{
    *len = strlen(name);
    if (*len > 7 && strcmp(name + *len - 7, ".weight") == 0)
        *len -= 7;
    size_t start = 0;
    for (size_t i = 0; i < *len; i++)
        if (name[i] == '.')
            start = i + 1;
    *len -= start;
    return start;
}

static const char *leaf_of(const char *name, char *buf, size_t n)
{
    size_t len, start = leaf_offset(name, &len);
    snprintf(buf, n, "%.*s", (int)len, name + start);
    return buf;
}

static const char *fuse_key(const char *leaf)
{
    return ff_fused_group(leaf, strlen(leaf));
}

static const char *linear_group(const char *name)
{
    if (has(name, "shared_expert"))
        return "shared_expert";
    if (has(name, "attn") || has(name, "attention"))
        return "attention";
    if (has(name, "mlp") || has(name, "ffn") || has(name, "feed_forward"))
        return "mlp";
    return "linear";
}

static int is_tower(const char *name)
{
    static const char *const words[] = {"visual", "vision", "audio", "mm_projector", "multi_modal_projector",
                                        "image_newline", NULL};
    for (int i = 0; words[i]; i++)
        if (has(name, words[i]))
            return 1;
    return 0;
}

/* Fused 3-D experts [E, a, b]: a down projection is [E, H, I] as
 * transformers stores it, the others [E, out, H]; transposed otherwise. */
static void place_fused(infer_scan *s, infer_tmpl *t, const char *leaf)
{
    const int64_t *sh = t->st->shape, h = s->hidden;
    int down = has(leaf, "down") || strcmp(leaf, "w2") == 0;
    int two = has(leaf, "gate_up") || has(leaf, "w13");
    int plain = down ? sh[1] == h : sh[2] == h, trans = down ? sh[2] == h : sh[1] == h;
    if (plain && trans)
        t->ambiguous = 1;
    t->kind = two ? (plain || !trans ? K_FUSED2 : K_FUSED2_T) : (plain || !trans ? K_ONE : K_ONE_T);
    if (!plain && !trans)
        t->kind = K_UNPLACED;
    t->out = two ? "gate_proj,up_proj" : NULL;
    s->fused_width = down ? (plain ? sh[2] : sh[1]) : s->fused_width;
}

static void place_kept(infer_tmpl *t)
{
    const char *n = t->name;
    t->kind = K_KEEP;
    if (has(n, "embed")) {
        t->group = "embedding", t->fixed = 1;
    } else if (has(n, "norm")) {
        t->group = "norm", t->fixed = 1;
    } else if (has(n, "correction_bias")) {
        t->group = "router", t->fixed = 1;
    } else if (t->st->ndim == 1 && fs_ends_with(n, ".bias")) {
        t->group = "bias";
    } else if (t->st->ndim <= 1 || !fs_ends_with(n, ".weight")) {
        t->group = "other";
    } else if (t->st->ndim == 3 && has(n, "conv")) {
        t->group = "other";   /* a short convolution's kernel (KDA's, Mamba's): not a Linear */
    } else {
        t->kind = K_UNPLACED;
        t->linear = 1;      /* likely a Linear: listed in ignore, so vLLM keeps it as it is */
    }
}

/* A multi-token-prediction head outside the decoder layers (Qwen3-Next's
 * and Qwen3.5's mtp.*): transformers drops it, so llm-compressor writes
 * none; vLLM's drafter reads it in bf16. Kept whole, its Linears (fused
 * experts by their per-expert names) in ignore. */
static void place_mtp_head(infer_tmpl *t, const char *leaf, int two_d)
{
    t->kind = K_KEEP, t->group = "mtp", t->fixed = 1;
    t->linear = two_d && !has(leaf, "norm");
    if (t->st->ndim == 3 && fs_ends_with(t->name, "experts.gate_up_proj"))
        t->linear = 1, t->out = "gate_proj,up_proj";
    else if (t->st->ndim == 3 && fs_ends_with(t->name, "experts.down_proj"))
        t->linear = 1, t->out = "down_proj";
}

/* A router Linear inside a module named gate or router (Hunyuan's
 * mlp.gate.wg): compressed-tensors counts a class named so as a Linear
 * too, so the parent goes in the ignore list beside it. */
static int router_parent(const char *name, const char *leaf)
{
    size_t n = strlen(name) - strlen(".weight") - strlen(leaf);
    if (strcmp(leaf, "gate") == 0 || strcmp(leaf, "router") == 0 || n < 2)
        return 0;
    size_t start = n - 1;
    while (start > 0 && name[start - 1] != '.')
        start--;
    size_t len = n - 1 - start;
    return (len == 4 && strncmp(name + start, "gate", 4) == 0) || (len == 6 && strncmp(name + start, "router", 6) == 0);
}

/* Kimi Delta Attention's projections (Kimi-Linear, Kimi-K3) and an MLA
 * output gate: vLLM builds each with the quant config (kda.py, mla.py). */
static const char *const gated_attention_leaves[] = {"g_proj", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj",
                                                     "g_b_proj", NULL};

static int gated_attention_leaf(const char *leaf)
{
    for (int i = 0; gated_attention_leaves[i]; i++)
        if (strcmp(leaf, gated_attention_leaves[i]) == 0)
            return 1;
    return 0;
}

static void place(infer_scan *s, infer_tmpl *t)
{
    char lb[128];
    const char *leaf = leaf_of(t->name, lb, sizeof lb), *n = t->name;
    const st_tensor *st = t->st;
    int weight = fs_ends_with(n, ".weight"), two_d = st->ndim == 2 && weight;
    int64_t experts = s->experts;
    if (strpbrk(n, "()[]{}*+?|^$\\ ")) {
        t->kind = K_UNPLACED;     /* a name a pattern cannot say plainly */
        t->linear = two_d;
    } else if (is_tower(n)) {
        /* a position or patch embedding table is not a Linear, nor is a patch
         * embedding's projection (a convolution's kernel, flattened in Kimi-K3's
         * MoonViT-3D) */
        t->kind = K_TOWER, t->linear = two_d && !fs_ends_with(leaf, "embed") && !fs_ends_with(leaf, "embedding") &&
                                       !fs_ends_with(leaf, "embeddings") && !has(n, "patch_embed.");
    } else if (strncmp(n, "mtp.", 4) == 0) {
        place_mtp_head(t, leaf, two_d);
    } else if (has(n, ".linear_attn.")) {
        /* llm-compressor's Qwen3-Next and Qwen3.5 examples ignore
         * re:.*linear_attn.*: vLLM's gated-delta-net kernels read bf16 */
        t->kind = K_KEEP, t->group = "linear_attn", t->linear = two_d && !has(leaf, "norm");
    } else if (st->ndim == 3 && experts > 0 && st->shape[0] == experts && t->layered) {
        place_fused(s, t, leaf);
    } else if (t->per_expert && two_d) {
        /* w1/w3/w2 experts are written under the names llm-compressor's
         * linearized experts use and vLLM's expert mapping reads */
        static const char *const renamed[][2] = {{"w1", "gate_proj"}, {"w3", "up_proj"}, {"w2", "down_proj"}};
        t->kind = K_EXPERT, t->fuse = fuse_key(leaf);
        for (size_t r = 0; r < 3; r++)
            if (strcmp(leaf, renamed[r][0]) == 0)
                t->out = renamed[r][1];
    } else if (fs_ends_with(n, "lm_head.weight") && (n == strstr(n, "lm_head") || n[strlen(n) - 15] == '.')) {
        t->kind = K_KEEP, t->group = "lm_head", t->fixed = 1, t->linear = 1;
    } else if (two_d && t->layered && ((experts > 0 && st->shape[0] == experts) || (st->shape[0] == 1 && has(n, "gate")))) {
        t->kind = K_ROUTER;       /* a router's width is the expert count; a shared expert's gate is 1 */
        t->parent = router_parent(n, leaf);
    } else if (two_d && t->layered && (ff_linear_leaf(leaf, strlen(leaf)) || gated_attention_leaf(leaf)) &&
               st->shape[1] % 16 == 0) {
        t->kind = K_QUANT, t->group = linear_group(n), t->fuse = fuse_key(leaf);
    } else {
        place_kept(t);
    }
}

/* An attention with a gate beside its input projections is one fused input
 * GEMM in vLLM: MLA's q_a, kv_a and g (fused_qkv_a_g_proj), KDA's q, k, v,
 * g, f_a and b (in_proj_qkvgfab; kimi_k3 mla.py, kda.py). One tie key for
 * them all ("in_proj"), as a layer is one kind or the other. Tying more
 * than vLLM fuses costs a little precision; tying less serves wrong
 * weights, so a module with such a gate ties the whole set. */
static void tie_gated_inputs(infer_scan *s)
{
    static const char *const inputs[] = {"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa", "g_proj",
                                         "f_a_proj", "b_proj", NULL};
    for (size_t i = 0; i < s->ntmpl; i++) {
        const infer_tmpl *g = &s->tmpl[i];
        char lb[128];
        const char *leaf = leaf_of(g->name, lb, sizeof lb);
        if (g->kind != K_QUANT || (strcmp(leaf, "g_proj") != 0 && strcmp(leaf, "f_a_proj") != 0))
            continue;
        size_t leaf_len, module = leaf_offset(g->name, &leaf_len);
        for (size_t j = 0; j < s->ntmpl; j++) {
            infer_tmpl *t = &s->tmpl[j];
            char ob[128];
            const char *other = leaf_of(t->name, ob, sizeof ob);
            if (t->kind != K_QUANT || strncmp(t->name, g->name, module) != 0 || strchr(t->name + module, '.') !=
                                                                                     t->name + module + strlen(other))
                continue;
            for (int k = 0; inputs[k]; k++)
                if (strcmp(other, inputs[k]) == 0)
                    t->fuse = "in_proj";
        }
    }
}

/* A fused gate/up whose shape fits both layouts (2I == H) takes the one of
 * its module's down projection when that one's shape tells: every expert
 * layout known stores the two the same way (transformers' [E, 2I, H] with
 * [E, H, I], Llama-4's and gpt-oss's [E, H, 2I] with [E, I, H]). */
static void orient_by_sibling(infer_scan *s, infer_tmpl *t)
{
    const char *dot = strrchr(t->name, '.');
    size_t module = dot ? (size_t)(dot - t->name) + 1 : 0;
    for (size_t i = 0; i < s->ntmpl; i++) {
        const infer_tmpl *o = &s->tmpl[i];
        if (o == t || o->ambiguous || (o->kind != K_ONE && o->kind != K_ONE_T) ||
            strncmp(o->name, t->name, module) != 0 || strchr(o->name + module, '.'))
            continue;
        int trans = o->kind == K_ONE_T, two = t->kind == K_FUSED2 || t->kind == K_FUSED2_T;
        t->kind = two ? (trans ? K_FUSED2_T : K_FUSED2) : (trans ? K_ONE_T : K_ONE);
        t->ambiguous = 0, t->oriented_by = o->name;
        return;
    }
}

/* The config object the sizes are in: text_config for a multimodal config
 * that nests them. */
static const json_t *text_config(const json_t *config, const char **section)
{
    const json_t *tc = json_object_get(config, "text_config");
    *section = NULL;
    if (json_is_object(tc) && json_object_get(tc, "num_hidden_layers") && !json_object_get(config, "num_hidden_layers")) {
        *section = "text_config";
        return tc;
    }
    return config;
}

int infer_first_key(const json_t *c, const char *const *keys, int64_t want, const char **key)
{
    for (int i = 0; keys[i]; i++) {
        const json_t *v = json_object_get(c, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) > 0 && (want < 0 || json_integer_value(v) == want)) {
            *key = keys[i];
            return 1;
        }
    }
    *key = NULL;
    return 0;
}

int infer_scan_build(infer_scan *s, const ckpt *c, ff_err *e)
{
    memset(s, 0, sizeof *s);
    s->cfg = text_config(c->config, &s->section);
    s->layers = jsonio_int(s->cfg, "num_hidden_layers", 0);
    s->hidden = jsonio_int(s->cfg, "hidden_size", 0);
    if (s->layers <= 0 || s->layers > FF_MAX_LAYERS || s->hidden <= 0)
        return ff_fail(e, FF_EIO, "%s/config.json: lacks num_hidden_layers or hidden_size: nothing to infer a family from",
                       c->dir);
    const char *key;
    s->experts = infer_first_key(s->cfg, ff_expert_count_keys, -1, &key) ? jsonio_int(s->cfg, key, 0) : 0;
    s->ntensors = c->ntensors;
    s->tmpl_of = malloc((c->ntensors ? c->ntensors : 1) * sizeof *s->tmpl_of);
    s->layer_of = malloc((c->ntensors ? c->ntensors : 1) * sizeof *s->layer_of);
    if (!s->tmpl_of || !s->layer_of)
        return ff_oom(e, "out of memory");
    for (size_t i = 0; i < c->ntensors; i++) {
        const st_tensor *st = c->tensors[i].st;
        s->tmpl_of[i] = SIZE_MAX;
        if (fs_ends_with(st->name, "_scale_inv"))
            continue;            /* an FP8-block scale belongs to its weight */
        long layer, expert;
        char *tn = generalize(st->name, &layer, &expert);
        infer_tmpl *t = tn ? find_or_add(s, tn, st, e) : NULL;
        if (!t)
            return tn ? e->code : ff_oom(e, "out of memory");
        s->tmpl_of[i] = (size_t)(t - s->tmpl);
        s->layer_of[i] = strncmp(st->name, "mtp.", 4) == 0 ? -1 : layer;
        t->layered |= layer >= 0, t->per_expert |= expert >= 0;
        t->main |= layer < s->layers;
        t->count++;
        if (layer >= s->layers)
            s->mtp = 1;
        if (expert >= s->seen_experts)
            s->seen_experts = expert + 1;
    }
    for (size_t i = 0; i < s->ntmpl; i++)
        if (s->tmpl[i].main)
            place(s, &s->tmpl[i]);
        else
            s->tmpl[i].kind = K_MTP;     /* the mtp directive keeps these */
    for (size_t i = 0; i < s->ntmpl; i++)
        if (s->tmpl[i].ambiguous)
            orient_by_sibling(s, &s->tmpl[i]);
    tie_gated_inputs(s);
    return FF_OK;
}

void infer_scan_free(infer_scan *s)
{
    for (size_t i = 0; i < s->ntmpl; i++)
        free(s->tmpl[i].name);
    free(s->tmpl);
    free(s->tmpl_of);
    free(s->layer_of);
    memset(s, 0, sizeof *s);
}
