/* The model card's front matter from memory: any text as the base card's
 * front matter, parsed by libyaml, and ours written with its carried keys.
 * Property: what fp4forge writes is YAML again (libyaml reads it back), so
 * no base card can make the card's front matter invalid or inject a key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "card_front.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    card_front base;
    int parsed = card_front_parse(&base, (const char *)data, size) == 0;
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    if (!o)
        abort();
    int rc = card_front_write(o, "org/name", parsed ? &base : NULL);
    fclose(o);
    if (rc == 0) {
        /* between the opening '---' line and the closing one */
        const char *end = len >= 8 ? strstr(out + 4, "\n---\n") : NULL;
        card_front back;
        if (strncmp(out, "---\n", 4) != 0 || !end || card_front_parse(&back, out + 4, (size_t)(end + 1 - out - 4)))
            abort();
        card_front_free(&back);
    }
    free(out);
    card_front_free(&base);
    return 0;
}
