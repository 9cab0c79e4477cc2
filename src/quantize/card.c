#include "card.h"
#include "card_front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "budget.h"
#include "fsutil.h"
#include "hfcache.h"
#include "jsonio.h"
#include "version.h"

/* A base card larger than this is not a model card: its text is not carried. */
#define BASE_CARD_MAX (16u << 20)
/* Of one that large, the front matter is still read from this much of its
 * start: the license keys must travel with the weights even when the text
 * cannot. */
#define BASE_FRONT_MAX (64u << 10)

/* The base card split at its YAML front matter ("---" line, keys, "---"
 * line): *fm and *body point into text (fm NULL when it has none). */
typedef struct base_card {
    char *text;
    const char *fm, *body;
    size_t fm_len;
    long long too_big;   /* the file's size when over BASE_CARD_MAX (text is
                          * then its first BASE_FRONT_MAX bytes), else 0 */
    size_t nuls;         /* NUL bytes, each now U+FFFD */
} base_card;

/* NULs replaced by U+FFFD, as CommonMark has a renderer do with them: the
 * text after one is carried instead of cut there (a C string ends at the
 * first), and the card reads as the Hub would render the original. Takes
 * buf (n bytes); NULL when out of memory. */
static char *replace_nuls(char *buf, size_t n, size_t *nuls)
{
    *nuls = 0;
    for (size_t i = 0; i < n; i++)
        *nuls += buf[i] == 0;
    if (!*nuls)
        return buf;
    char *t = malloc(n + 2 * *nuls + 1), *o = t;
    for (size_t i = 0; t && i < n; i++) {
        if (buf[i]) {
            *o++ = buf[i];
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
        }
    }
    if (t)
        *o = 0;
    free(buf);
    return t;
}

/* The card's text (malloc'd) into b->text; NULL when there is none. Over
 * BASE_CARD_MAX only its start is read, for the front matter. */
static int read_base_card(base_card *b, const char *path, ff_err *e)
{
    /* regular files only: a FIFO would block the run after OUT is in place
     * (the writer refuses one before; this keeps a swapped-in one harmless) */
    FILE *f = path ? fs_fopen_regular(path, NULL) : NULL;
    if (!f)
        return FF_OK;
    struct stat st;
    long long size = fstat(fileno(f), &st) == 0 ? (long long)st.st_size : 0;
    size_t want = size > BASE_CARD_MAX ? BASE_FRONT_MAX : BASE_CARD_MAX + 1;
    char *buf = malloc(want + 1);
    size_t n = buf ? fread(buf, 1, want, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (n > BASE_CARD_MAX) {   /* it grew since the fstat */
        n = BASE_FRONT_MAX;
        size = size > BASE_CARD_MAX ? size : BASE_CARD_MAX + 1ll;
    }
    b->too_big = size > BASE_CARD_MAX ? size : 0;
    if (!buf || bad) {
        free(buf);
        return bad ? ff_fail(e, FF_EIO, "%s: read failed", path) : ff_oom(e, "%s: out of memory", path);
    }
    buf[n] = 0;
    b->text = replace_nuls(buf, n, &b->nuls);
    return b->text ? FF_OK : ff_oom(e, "%s: out of memory", path);
}

static void split_front_matter(base_card *b)
{
    b->fm = NULL;
    b->body = b->text;
    if (strncmp(b->text, "---\n", 4) != 0 && strncmp(b->text, "---\r\n", 5) != 0)
        return;
    const char *start = strchr(b->text, '\n') + 1;
    for (const char *line = start; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len && line[len - 1] == '\r')
            len--;
        if (len == 3 && strncmp(line, "---", 3) == 0) {
            b->fm = start;
            b->fm_len = (size_t)(line - start);
            b->body = nl ? nl + 1 : line + 3;
            return;
        }
        if (!nl)
            return;
        line = nl + 1;
    }
}

/* The name the Hub links the card to: the cache name given, else the
 * config's _name_or_path when it is a repo id (a local path says nothing). */
static const char *base_model_of(const ckpt *c, const card_info *ci)
{
    if (ci->base_model)
        return ci->base_model;
    const char *n = jsonio_str(c->config, "_name_or_path", NULL);
    return n && !strchr(n, '@') && hfcache_is_name(n) ? n : NULL;
}

/* With --fp8: the scheme of each module class's Linears. */
static void print_schemes(const plan *p, FILE *out)
{
    fprintf(out, "\nSchemes per module class (`--fp8`: FP8 weight-only is compressed-tensors `naive-quantized`, "
                 "8-bit float weights with one scale per output channel, served by vLLM's W8A16 FP8 scheme):\n\n"
                 "| family | NVFP4A16 | FP8 weight-only | kept in their dtype |\n|---|---:|---:|---:|\n");
    for (int i = 0; i < p->nfam; i++) {
        const plan_family_stat *f = &p->fam_stats[i];
        if (f->quantized || f->kept_linears)
            fprintf(out, "| %s | %lld | %lld | %lld |\n", f->family, (long long)(f->quantized - f->fp8),
                    (long long)f->fp8, (long long)f->kept_linears);
    }
}

/* With a budget: what it bought, per module class of the dense units. */
static void print_budget(const plan_budget *b, FILE *out)
{
    budget_class *cls;
    size_t n;
    if (budget_classes(b, &cls, &n))
        return;
    fprintf(out, "\nChosen for a weight budget of %llu bytes%s%s%s: %llu bytes written (all NVFP4A16 would be "
                 "%llu). The dense units whose NVFP4 error per byte saved was largest went FP8 weight-only or "
                 "stayed in their dtype (`fp4forge plan --budget` shows each unit's figures):\n\n"
                 "| module class | NVFP4A16 | FP8 weight-only | kept in their dtype |\n|---|---:|---:|---:|\n",
            (unsigned long long)b->budget, b->from[0] ? " (" : "", b->from, b->from[0] ? ")" : "",
            (unsigned long long)b->chosen, (unsigned long long)b->floor);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "| `%s` | %zu | %zu | %zu |\n", cls[i].name, cls[i].count[SCHEME_NVFP4], cls[i].count[SCHEME_FP8],
                cls[i].count[SCHEME_KEEP]);
    budget_classes_free(cls, n);
}

static void print_counts(const plan *p, FILE *out)
{
    fprintf(out, "## What was quantized and what was kept\n\n"
                 "Architecture: %s, %s, %d layers%s%s.\n\n",
            p->fam->name, p->arch_class ? p->arch_class : "?", p->layers, p->experts ? ", MoE" : "",
            p->has_vision ? ", vision tower" : "");
    fprintf(out, "| | count |\n|---|---:|\n");
    fprintf(out, "| dense Linears quantized | %lld |\n", (long long)p->q_dense);
    fprintf(out, "| expert Linears quantized | %lld |\n", (long long)p->q_experts);
    fprintf(out, "| modules kept in their dtype (`quantization_config.ignore`) | %zu |\n", p->nignore);
    if (p->experts)
        fprintf(out, "| MoE routers kept | %lld |\n", (long long)p->kept_routers);
    fprintf(out, "\n| family | Linears quantized | Linears kept | tensors kept |\n|---|---:|---:|---:|\n");
    for (int i = 0; i < p->nfam; i++) {
        const plan_family_stat *f = &p->fam_stats[i];
        fprintf(out, "| %s | %lld | %lld | %lld |\n", f->family, (long long)f->quantized,
                (long long)f->kept_linears, (long long)f->kept);
    }
    if (p->q_fp8)
        print_schemes(p, out);
    if (p->budget && !p->budget->holds_source)
        print_budget(p->budget, out);
    fprintf(out, "\nKept tensors are copied byte for byte, and the kept Linears are listed by module in "
                 "`quantization_config.ignore`; q/k/v share one global scale, and so do gate/up%s.\n\n",
            p->experts ? " (each expert's gate/up too)" : "");
}

/* prefix and path as one word a shell reads back: quoted when it holds
 * anything a shell would split or expand. */
static void print_shell_word(const char *prefix, const char *w, FILE *out)
{
    static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/-+=:@,";
    if (*w && strspn(w, plain) == strlen(w)) {
        fprintf(out, "%s%s", prefix, w);
        return;
    }
    fprintf(out, "'%s", prefix);
    for (; *w; w++) {
        if (*w == '\'')
            fputs("'\\'", out);
        fputc(*w, out);
    }
    fputc('\'', out);
}

/* The serve line names the output as it was named to quantize (the path
 * the user typed, run from where they typed it) and, when it is going to
 * the Hub, the repo id vLLM then downloads it by. */
static void print_serve(const card_info *ci, FILE *out)
{
    fprintf(out, "## Serve it\n\n");
    if (ci->hub_id)
        fprintf(out, "From the Hub:\n\n```\nvllm serve %s\n```\n\n", ci->hub_id);
    if (ci->serve_path) {
        /* './' before a bare relative name: vLLM reads a name that is not
         * a folder here as a Hub repo id */
        int bare = ci->serve_path[0] != '/' && ci->serve_path[0] != '.';
        fprintf(out, "%s```\nvllm serve ", ci->hub_id ? "From the folder it was written to:\n\n" : "");
        print_shell_word(bare ? "./" : "", ci->serve_path, out);
        fprintf(out, "\n```\n");
    } else if (!ci->hub_id) {
        fprintf(out, "```\nvllm serve /path/to/this/folder\n```\n");
    }
}

/* How a reader would say the observer llm-compressor's name stands for. */
static const char *observer_words(const char *llmc_name)
{
    if (!llmc_name || strcmp(llmc_name, "memoryless_minmax") == 0)
        return "min-max";
    if (strcmp(llmc_name, "nvfp4_expanded_mse") == 0)
        return "expanded-range MSE grid search";
    return "MSE grid search";
}

/* The model's own name when no Hub repo is known: the last part of the
 * config's _name_or_path (where transformers loaded it from), else of the
 * input folder. Points into its argument. */
static const char *last_part(const char *path, size_t *len)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *start = path + n;
    while (start > path && start[-1] != '/')
        start--;
    *len = (size_t)(path + n - start);
    return start;
}

static void print_title(const ckpt *c, const char *base, const card_info *ci, FILE *out)
{
    if (base) {
        fprintf(out, "# %s NVFP4A16\n\n", base);
        return;
    }
    const char *from = jsonio_str(c->config, "_name_or_path", NULL);
    size_t len = 0;
    const char *name = from && *from ? last_part(from, &len) : NULL;
    if (!len && ci->model_name)
        name = last_part(ci->model_name, &len);
    if (len && !(len == 1 && *name == '.'))
        fprintf(out, "# %.*s NVFP4A16\n\n", (int)len, name);
    else
        fprintf(out, "# NVFP4A16 checkpoint\n\n");
}

static void print_body(const plan *p, const ckpt *c, const char *base, const card_info *ci, FILE *out)
{
    print_title(c, base, ci, out);
    fprintf(out, "NVFP4A16 weights%s%s%s in compressed-tensors' `nvfp4-pack-quantized` format: 4-bit E2M1 "
                 "weights, one FP8 E4M3 scale per 16 weights, one FP32 global scale per tensor; "
                 "activations stay 16-bit.\n\n",
            base ? " of [" : "", base ? base : "", base ? "]" : "");
    if (base)
        fprintf(out, "[%s]: https://huggingface.co/%s\n\n", base, base);
    print_counts(p, out);
    fprintf(out, "## How it was made\n\n"
                 "- tool: fp4forge %s (`fp4forge quantize`)\n"
                 "- observer: %s on the weights (`%s`), no calibration data\n"
                 "- scheme: weights FP4 (E2M1), group size 16, FP8 E4M3 group scales, FP32 global scale; "
                 "input activations not quantized\n\n",
            FP4FORGE_VERSION, observer_words(ci->observer), ci->observer ? ci->observer : "memoryless_minmax");
    print_serve(ci, out);
}

/* A base card over BASE_CARD_MAX: what was carried of it, said where its
 * text would be, so a missing text or license is not silent. */
static void print_too_big(const base_card *b, const card_front *cf, FILE *out)
{
    fprintf(out, "<!-- fp4forge: it is %lld bytes, over the %u MiB a base card is carried up to, so its text is not "
                 "included here; read it with the base model. ", b->too_big, BASE_CARD_MAX >> 20);
    if (!b->fm)
        fprintf(out, "No front matter closes within its first %u KiB, so none of its keys (license, pipeline_tag, "
                     "language) were carried into this card's. -->\n\n", BASE_FRONT_MAX >> 10);
    else
        fprintf(out, "Its front matter is shown below%s. -->\n\n",
                cf->loaded ? ", and its keys (license, pipeline_tag, language) were carried into this card's" : "");
}

/* The caller's one line for a base card not carried as it is. */
static void note_base_card(const base_card *b, const card_front *cf, const card_info *ci)
{
    if (!ci->note || !ci->note_size)
        return;
    ci->note[0] = 0;
    if (b->too_big)
        snprintf(ci->note, ci->note_size, "the input's README.md is %lld bytes, over %u MiB: the model card carries "
                 "%s", b->too_big, BASE_CARD_MAX >> 20,
                 b->fm && cf->loaded ? "its front matter's keys (license, pipeline_tag, language) but not its text"
                                     : "neither its text nor its keys (license, pipeline_tag, language)");
    else if (b->nuls)
        snprintf(ci->note, ci->note_size, "the input's README.md holds %zu NUL byte%s: the model card shows %s as "
                 "U+FFFD and carries the text after %s", b->nuls, b->nuls == 1 ? "" : "s",
                 b->nuls == 1 ? "it" : "each", b->nuls == 1 ? "it" : "them");
}

/* The base model's own card goes beneath, unchanged: it holds the license
 * and usage terms that must travel with the weights (and the model's
 * documentation). Its front matter is shown as a yaml block, since a card
 * has one front matter and it is ours. Front matter that is not YAML
 * carries nothing; the card says so where the base card begins, so a
 * dropped license is not silent. */
static void print_base_card(const base_card *b, const card_front *cf, FILE *out)
{
    fprintf(out, "\n<!-- fp4forge: the base model's own card (the input's README.md) follows. -->\n\n");
    if (b->fm && !cf->loaded)
        fprintf(out, "<!-- fp4forge: its front matter is not valid YAML (line %ld: %s), so none of its keys "
                     "(license, pipeline_tag, language) were carried into this card's. -->\n\n",
                cf->problem_line, cf->problem);
    if (b->too_big)
        print_too_big(b, cf, out);
    if (b->nuls)
        fprintf(out, "<!-- fp4forge: it holds %zu NUL byte%s, shown as U+FFFD (as a Markdown renderer shows "
                     "one); the text after %s is carried. -->\n\n", b->nuls, b->nuls == 1 ? "" : "s",
                b->nuls == 1 ? "it" : "them");
    fprintf(out, "***\n\n# Base model card\n\n");
    if (b->fm)
        fprintf(out, "```yaml\n%.*s```\n\n", (int)b->fm_len, b->fm);
    if (!b->too_big)
        fputs(b->body, out);
}

int card_print(const plan *p, const ckpt *c, const card_info *ci, FILE *out, ff_err *e)
{
    base_card b = {0};
    card_front cf = {0};
    if (read_base_card(&b, ci->base_card, e))
        return e ? e->code : FF_EIO;
    if (b.text)
        split_front_matter(&b);
    if (b.fm)
        card_front_parse(&cf, b.fm, b.fm_len);
    note_base_card(&b, &cf, ci);
    const char *base = base_model_of(c, ci);
    int rc = card_front_write(out, base, &cf) ? ff_oom(e, "model card: YAML front matter: out of memory")
                                              : FF_OK;
    if (!rc) {
        fputc('\n', out);
        print_body(p, c, base, ci, out);
        if (b.text)
            print_base_card(&b, &cf, out);
    }
    card_front_free(&cf);
    free(b.text);
    if (!rc && ferror(out))
        rc = ff_fail(e, FF_EIO, "model card: write failed");
    return rc;
}

int card_write(const char *out_dir, const plan *p, const ckpt *c, const card_info *ci, ff_err *e)
{
    char *path = fs_join(out_dir, "README.md"), *tmp = fs_join(out_dir, ".README.md.fp4forge-tmp");
    FILE *f = tmp ? fopen(tmp, "w") : NULL;
    int rc = f ? FF_OK : ff_fail(e, FF_EIO, "%s: cannot create: %s", tmp ? tmp : out_dir, strerror(errno));
    if (!rc)
        rc = card_print(p, c, ci, f, e);
    if (f && fclose(f) != 0 && !rc)
        rc = ff_fail(e, FF_EIO, "%s: close failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = ff_fail(e, FF_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (rc && tmp)
        unlink(tmp);
    free(path);
    free(tmp);
    return rc;
}
