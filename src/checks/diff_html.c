/* diff --html: the comparison as one self-contained page: the verdict and
 * the architecture classes first, then every list that holds a difference
 * (the lists diff's JSON carries), with --values the heatmaps of each
 * module's difference, then the shard tables. */
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "heatmap.h"
#include "html.h"

/* Objects become rows under their first item's keys; anything else one cell. */
static void item_row(FILE *o, const json_t *it, const json_t *first)
{
    fputs("<tr>", o);
    if (json_is_object(it) && json_is_object(first)) {
        const char *k;
        const json_t *unused;
        json_object_foreach((json_t *)first, k, unused) {
            fputs("<td>", o);
            html_json_text(o, json_object_get(it, k));
            fputs("</td>", o);
        }
    } else {
        fputs("<td>", o);
        html_json_text(o, it);
        fputs("</td>", o);
    }
    fputs("</tr>\n", o);
}

/* The heading a reader needs for each list diff's JSON carries. */
static const char *heading(const char *key)
{
    static const char *const names[][2] = {
        {"class_differences", "Architecture class differences"},
        {"tensor_table", "Tensor counts that differ, family by family"},
        {"only_in_a", "Tensors only in A"},
        {"only_in_b", "Tensors only in B"},
        {"shape_or_dtype", "Tensors whose shape or dtype differ"},
        {"ignore_missing_in_b", "Ignore-list modules missing from B"},
        {"ignore_extra_in_b", "Ignore-list modules only in B"},
        {"values", "Tensors whose values differ, worst first"},
        {"shards_a", "Shards of A"},
        {"shards_b", "Shards of B"},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(names[i][0], key) == 0)
            return names[i][1];
    return key;
}

static void list_section(FILE *o, const char *key, const json_t *items)
{
    const json_t *first = json_array_get(items, 0);
    fputs("<h2>", o);
    html_esc(o, heading(key));
    fprintf(o, " (%zu)</h2>\n<table>\n", json_array_size(items));
    if (json_is_object(first)) {
        fputs("<tr>", o);
        const char *k;
        const json_t *unused;
        json_object_foreach((json_t *)first, k, unused) {
            fputs("<th>", o);
            html_esc(o, k);
            fputs("</th>", o);
        }
        fputs("</tr>\n", o);
    }
    size_t i;
    const json_t *it;
    json_array_foreach(items, i, it)
        item_row(o, it, first);
    fputs("</table>\n", o);
}

/* diff --values: each module's worst difference as verify's heatmaps, on a
 * scale where only identical is green: between two outputs of one model
 * any difference is news (a float tensor's relative difference, else the
 * share of a quantized module's bytes that differ). */
static int values_heatmap(FILE *o, const json_t *modules)
{
    size_t n = json_object_size(modules), i = 0;
    if (!n)
        return 0;
    heat_value *v = malloc(n * sizeof *v);
    if (!v)
        return -1;
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)modules, k, x)
        v[i++] = (heat_value){k, json_number_value(x)};
    fputs("<p>colour: green = identical; any difference red, darker the larger (log scale up to 1: all bytes "
          "differ, or a relative difference of 1); grey: not compared</p>\n", o);
    heat_style s = {"Difference", "difference", 1.0, "not compared", 1};
    int rc = heat_sections(o, v, n, &s);
    free(v);
    return rc;
}

static int is_shard_table(const char *key)
{
    return strncmp(key, "shards_", 7) == 0;
}

int diff_write_html(const json_t *res, FILE *o)
{
    html_begin(o, "fp4forge diff", json_is_true(json_object_get(res, "refused")) ? "REFUSED"
                                   : json_is_true(json_object_get(res, "same"))  ? "SAME" : "DIFFERENT");
    fputs("<p>A: ", o);
    html_esc(o, json_string_value(json_object_get(res, "a")));
    fputs(" (", o);
    html_esc(o, json_string_value(json_object_get(res, "class_a")));
    fputs(")<br>B: ", o);
    html_esc(o, json_string_value(json_object_get(res, "b")));
    fputs(" (", o);
    html_esc(o, json_string_value(json_object_get(res, "class_b")));
    fprintf(o, ")%s</p>\n", json_is_true(json_object_get(res, "refused"))
                                 ? "<br><b>refused: the architecture classes differ</b>" : "");
    const char *key;
    const json_t *v;
    int any = 0;
    json_object_foreach((json_t *)res, key, v)
        if (json_is_array(v) && json_array_size(v) && !is_shard_table(key)) {
            list_section(o, key, v);
            any = 1;
        }
    if (!any)
        fputs("<p>No differences.</p>\n", o);
    if (values_heatmap(o, json_object_get(res, "values_by_module")))
        return -1;
    json_object_foreach((json_t *)res, key, v)
        if (json_is_array(v) && is_shard_table(key))
            list_section(o, key, v);
    html_end(o);
    return ferror(o) ? -1 : 0;
}
