/* The model card's YAML front matter (libyaml): the base card's parsed, and
 * ours written with the base's license, task and language keys carried. */
#ifndef FF_CARD_FRONT_H
#define FF_CARD_FRONT_H

#include <stddef.h>
#include <stdio.h>
#include <yaml.h>

typedef struct card_front {
    yaml_document_t doc;
    int loaded;
    const char *problem;  /* libyaml's words when the text is not YAML */
    long problem_line;    /* 1-based, within the front matter */
} card_front;

/* Parses the text between the base card's '---' lines; -1 with problem set
 * when it is not YAML (nothing is carried then). */
int card_front_parse(card_front *cf, const char *text, size_t len);
void card_front_free(card_front *cf);
/* Writes '---', our keys (base_model when known, base_model_relation,
 * tags, library_name), the base's carried keys, '---'. base may be NULL. */
int card_front_write(FILE *out, const char *base_model, card_front *base);

#endif
