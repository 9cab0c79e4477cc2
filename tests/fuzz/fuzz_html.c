/* The report pages from a result in memory (no file per input): any JSON
 * shaped like verify's or diff's result, drawn by verify_write_html and
 * diff_write_html into a memory stream. Names claiming huge layer or expert
 * indices, odd types, missing keys: the page is written or refused, never
 * a crash, and never larger than the maps' bounds allow. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "diff.h"
#include "verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    char *page = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&page, &len);
    if (o) {
        verify_write_html(j, o);
        diff_write_html(j, o);
        fclose(o);
    }
    /* 64 MB of page from an input of at most a few kB is a map that grew
     * with the indices in its names (issue 35, H2) */
    if (len > (64u << 20))
        abort();
    free(page);
    json_decref(j);
    return 0;
}
