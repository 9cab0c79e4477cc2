#include "html.h"

#include <stdlib.h>
#include <string.h>

void html_esc(FILE *o, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '&': fputs("&amp;", o); break;
        case '"': fputs("&quot;", o); break;
        default: fputc(*s, o);
        }
    }
}

void html_begin(FILE *o, const char *title, const char *verdict)
{
    fputs("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>", o);
    html_esc(o, title);
    fputs("</title>\n<style>"
          "body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px;text-align:left}"
          ".fail td{background:#fdd}.pass td{background:#efe}.verdict{font-size:22px}"
          "</style></head><body>\n<h1>", o);
    html_esc(o, title);
    fputs("</h1>\n<p class='verdict'>verdict: ", o);
    html_esc(o, verdict);
    fputs("</p>\n", o);
}

void html_end(FILE *o)
{
    fputs("</body></html>\n", o);
}

void html_json_text(FILE *o, const json_t *v)
{
    if (json_is_string(v)) {
        html_esc(o, json_string_value(v));
        return;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    if (s && strlen(s) > 240) /* a long list stays readable; the JSON has it all */
        strcpy(s + 236, " ...");
    html_esc(o, s);
    free(s);
}
