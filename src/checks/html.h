/* The shared frame of the self-contained report pages (verify --html,
 * diff --html): one stylesheet, escaping, no script, no network. */
#ifndef FF_HTML_H
#define FF_HTML_H

#include <jansson.h>
#include <stdio.h>

void html_esc(FILE *o, const char *s);
/* <!DOCTYPE> .. <body><h1>TITLE</h1><p class=verdict>verdict: WORD</p>, the
 * word the command prints (PASS|FAIL for verify, SAME|DIFFERENT for diff) */
void html_begin(FILE *o, const char *title, const char *verdict);
void html_end(FILE *o);
/* A JSON value as text: strings as they are, anything else compact JSON
 * (cut at 240 characters). */
void html_json_text(FILE *o, const json_t *v);

#endif
