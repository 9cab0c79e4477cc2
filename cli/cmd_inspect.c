/* fp4forge inspect: what is in a checkpoint, by family, headers only. */
#include <stdio.h>
#include <stdlib.h>

#include "cliopt.h"
#include "commands.h"
#include "inspect.h"

static const cli_opt options[] = {
    {"--json", NULL, "print the census as JSON"},
    {NULL, NULL, NULL},
};

const cli_spec inspect_spec = {
    "inspect", "DIR",
    "Reads config.json and the safetensors headers and prints the tensor table by family\n"
    "(dtype x suffix x count x bytes), shard sizes, the architecture class (dense / MoE,\n"
    "experts, layers, vision present), the quantization_config summary and whether input\n"
    "activations are quantized.",
    options, 1, 1, NULL,
};

int cmd_inspect(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    ckpt c;
    insp s = {0};
    int rc = ckpt_open_headers(&c, a.pos[0], 0, &e);   /* headers only: no shard is mapped */
    if (!rc)
        rc = insp_build(&s, &c, NULL, &e);
    if (!rc && cli_flag(&a, "--json")) {
        json_t *j = insp_to_json(&s);
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else if (!rc) {
        insp_print(&s, stdout);
    }
    insp_free(&s);
    ckpt_close(&c);
    return rc ? cmd_report("inspect", &e) : 0;
}
