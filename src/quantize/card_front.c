/* The card's YAML front matter, read from the base card and written for
 * ours with libyaml: front matter is YAML, and a hand parser turned valid
 * YAML (quoted keys over two lines, aliases, folded scalars, flow lists)
 * into altered or invalid cards. */
#include "card_front.h"

#include <string.h>
#include <yaml.h>

/* The base card's keys that travel into ours: the license keys (the
 * weights are still under those terms; the Hub shows and filters by them)
 * and what the model does and speaks (the Hub's task and language filters). */
static const char *const carried_keys[] = {
    "license", "license_name", "license_link", "pipeline_tag", "language", NULL,
};

/* Deeper than any of those keys' values is: an alias cycle (&a [*a]), or
 * not a value worth carrying. */
#define CARRY_DEPTH_MAX 4

int card_front_parse(card_front *cf, const char *text, size_t len)
{
    memset(cf, 0, sizeof *cf);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return -1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int ok = yaml_parser_load(&parser, &cf->doc);
    if (!ok) {
        cf->problem = parser.problem ? parser.problem : "invalid YAML";
        cf->problem_line = (long)parser.problem_mark.line + 1;
    }
    cf->loaded = ok;
    yaml_parser_delete(&parser);
    return ok ? 0 : -1;
}

void card_front_free(card_front *cf)
{
    if (cf->loaded)
        yaml_document_delete(&cf->doc);
    cf->loaded = 0;
}

static int scalar_is(const yaml_node_t *n, const char *s)
{
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == strlen(s) &&
           memcmp(n->data.scalar.value, s, n->data.scalar.length) == 0;
}

/* The value of the first top-level key named key, or NULL. */
static yaml_node_t *top_value(yaml_document_t *doc, const char *key)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++)
        if (scalar_is(yaml_document_get_node(doc, p->key), key))
            return yaml_document_get_node(doc, p->value);
    return NULL;
}

/* A value is carried only when it is finite: checked before any event is
 * emitted, so a refused value leaves no half-written key. */
static int carriable(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > CARRY_DEPTH_MAX)
        return 0;
    if (n->type == YAML_SCALAR_NODE)
        return 1;
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++)
            if (!carriable(doc, yaml_document_get_node(doc, *i), depth + 1))
                return 0;
        return 1;
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++)
        if (!carriable(doc, yaml_document_get_node(doc, p->key), depth + 1) ||
            !carriable(doc, yaml_document_get_node(doc, p->value), depth + 1))
            return 0;
    return 1;
}

static int emit_scalar(yaml_emitter_t *em, const char *s, size_t len, yaml_scalar_style_t style)
{
    yaml_event_t ev;
    return yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)len, 1, 1, style) &&
           yaml_emitter_emit(em, &ev);
}

static int emit_str(yaml_emitter_t *em, const char *s)
{
    return emit_scalar(em, s, strlen(s), YAML_ANY_SCALAR_STYLE);
}

/* A carried value as the base wrote it: each scalar in its own style, so a
 * reader types it as before ('yes' stays a string where it was quoted). */
static int emit_node(yaml_emitter_t *em, yaml_document_t *doc, yaml_node_t *n)
{
    yaml_event_t ev;
    if (n->type == YAML_SCALAR_NODE)
        return emit_scalar(em, (const char *)n->data.scalar.value, n->data.scalar.length, n->data.scalar.style);
    int ok;
    if (n->type == YAML_SEQUENCE_NODE) {
        ok = yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE) &&
             yaml_emitter_emit(em, &ev);
        for (yaml_node_item_t *i = n->data.sequence.items.start; ok && i < n->data.sequence.items.top; i++)
            ok = emit_node(em, doc, yaml_document_get_node(doc, *i));
        return ok && yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
    }
    ok = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) &&
         yaml_emitter_emit(em, &ev);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; ok && p < n->data.mapping.pairs.top; p++)
        ok = emit_node(em, doc, yaml_document_get_node(doc, p->key)) &&
             emit_node(em, doc, yaml_document_get_node(doc, p->value));
    return ok && yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

static int emit_ours(yaml_emitter_t *em, const char *base_model)
{
    static const char *const tags[] = {"nvfp4", "compressed-tensors", "vllm", "fp4forge", NULL};
    yaml_event_t ev;
    int ok = 1;
    if (base_model)
        ok = emit_str(em, "base_model") && emit_str(em, base_model);
    ok = ok && emit_str(em, "base_model_relation") && emit_str(em, "quantized") && emit_str(em, "tags") &&
         yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE) &&
         yaml_emitter_emit(em, &ev);
    for (int i = 0; ok && tags[i]; i++)
        ok = emit_str(em, tags[i]);
    /* transformers (with compressed-tensors) loads this format; the Hub
     * offers its "use this model" snippets, vLLM's among them, by it. */
    return ok && yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev) &&
           emit_str(em, "library_name") && emit_str(em, "transformers");
}

static int emit_carried(yaml_emitter_t *em, card_front *base)
{
    int ok = 1;
    for (int k = 0; ok && base && base->loaded && carried_keys[k]; k++) {
        yaml_node_t *v = top_value(&base->doc, carried_keys[k]);
        if (carriable(&base->doc, v, 0))
            ok = emit_str(em, carried_keys[k]) && emit_node(em, &base->doc, v);
    }
    return ok;
}

static int emit_document(yaml_emitter_t *em, const char *base_model, card_front *base)
{
    yaml_event_t ev;
    return yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(em, &ev) &&
           yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 0) && yaml_emitter_emit(em, &ev) &&
           yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) &&
           yaml_emitter_emit(em, &ev) && emit_ours(em, base_model) && emit_carried(em, base) &&
           yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev) &&
           yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(em, &ev) &&
           yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev) && yaml_emitter_flush(em);
}

int card_front_write(FILE *out, const char *base_model, card_front *base)
{
    yaml_emitter_t em;
    if (!yaml_emitter_initialize(&em))
        return -1;
    yaml_emitter_set_output_file(&em, out);
    yaml_emitter_set_unicode(&em, 1);
    /* no folding: a long license link stays one line for every reader */
    yaml_emitter_set_width(&em, -1);
    int ok = emit_document(&em, base_model, base);
    yaml_emitter_delete(&em);
    if (!ok)
        return -1;
    fputs("---\n", out);
    return 0;
}
