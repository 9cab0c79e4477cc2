#include "card.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsutil.h"
#include "hfcache.h"
#include "jsonio.h"
#include "version.h"

/* A base card larger than this is not a model card; it is not carried. */
#define BASE_CARD_MAX (16u << 20)

/* The whole file as a string (malloc'd), or NULL when absent or too large. */
static char *read_text(const char *path)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return NULL;
    char *buf = malloc(BASE_CARD_MAX + 1);
    size_t n = buf ? fread(buf, 1, BASE_CARD_MAX + 1, f) : 0;
    int too_big = n > BASE_CARD_MAX || ferror(f);
    fclose(f);
    if (!buf || too_big) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* The base card split at its YAML front matter ("---" line, keys, "---"
 * line): *fm and *body point into text (fm NULL when it has none). */
typedef struct base_card {
    char *text;
    const char *fm, *body;
    size_t fm_len;
} base_card;

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

/* The base's license keys travel into the new front matter: the Hub shows
 * and filters by them, and the weights are still under those terms. Only
 * one-line top-level `license*:` keys; anything nested stays in the base
 * card below. */
static void print_license_keys(const base_card *b, FILE *out)
{
    static const char *const keys[] = {"license:", "license_name:", "license_link:", NULL};
    for (const char *line = b->fm; line && line < b->fm + b->fm_len;) {
        const char *nl = memchr(line, '\n', (size_t)(b->fm + b->fm_len - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(b->fm + b->fm_len - line);
        for (int k = 0; keys[k]; k++)
            if (strncmp(line, keys[k], strlen(keys[k])) == 0 && len > strlen(keys[k]) + 1)
                fprintf(out, "%.*s\n", (int)len, line);
        line = nl ? nl + 1 : b->fm + b->fm_len;
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

static void print_front_matter(const char *base, const base_card *b, FILE *out)
{
    fprintf(out, "---\n");
    if (base)
        fprintf(out, "base_model: %s\nbase_model_relation: quantized\n", base);
    else
        fprintf(out, "base_model_relation: quantized\n");
    fprintf(out, "tags:\n- nvfp4\n- compressed-tensors\n- vllm\n- fp4forge\n");
    /* transformers (with compressed-tensors) loads this format; the Hub
     * offers its "use this model" snippets, vLLM's among them, by it. */
    fprintf(out, "library_name: transformers\n");
    print_license_keys(b, out);
    fprintf(out, "---\n\n");
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
    fprintf(out, "\nKept tensors are copied byte for byte, and the kept Linears are listed by module in "
                 "`quantization_config.ignore`; q/k/v share one global scale, and so do gate/up%s.\n\n",
            p->experts ? " (each expert's gate/up too)" : "");
}

/* The serve line names no path of this machine unless told to: the same
 * input then gives the same bytes wherever OUT is (outputs are compared
 * byte for byte across runs), and the card travels to other machines. */
static void print_serve(const char *base, const card_info *ci, FILE *out)
{
    fprintf(out, "## Serve it\n\n");
    if (ci->serve_path)
        fprintf(out, "```\nvllm serve %s\n```\n", ci->serve_path);
    else if (base)
        fprintf(out, "From the folder that holds this one (named as fp4forge names it by default):\n\n"
                     "```\nvllm serve ./%s-NVFP4A16\n```\n", strchr(base, '/') + 1);
    else
        fprintf(out, "```\nvllm serve /path/to/this/folder\n```\n");
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

static void print_body(const plan *p, const char *base, const card_info *ci, FILE *out)
{
    fprintf(out, "# %s NVFP4A16\n\n", base ? base : "NVFP4A16 checkpoint");
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
    print_serve(base, ci, out);
}

/* The base model's own card goes beneath, unchanged: it holds the license
 * and usage terms that must travel with the weights (and the model's
 * documentation). Its front matter is shown as a yaml block, since a card
 * has one front matter and it is ours. */
static void print_base_card(const base_card *b, FILE *out)
{
    fprintf(out, "\n<!-- fp4forge: the base model's own card (the input's README.md) follows. -->\n\n"
                 "***\n\n# Base model card\n\n");
    if (b->fm)
        fprintf(out, "```yaml\n%.*s```\n\n", (int)b->fm_len, b->fm);
    fputs(b->body, out);
}

int card_print(const plan *p, const ckpt *c, const card_info *ci, FILE *out, ff_err *e)
{
    base_card b = {read_text(ci->base_card), NULL, NULL, 0};
    if (b.text)
        split_front_matter(&b);
    const char *base = base_model_of(c, ci);
    print_front_matter(base, &b, out);
    print_body(p, base, ci, out);
    if (b.text)
        print_base_card(&b, out);
    free(b.text);
    if (ferror(out))
        return ff_fail(e, FF_EIO, "model card: write failed");
    return FF_OK;
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
