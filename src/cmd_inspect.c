/* fp4forge inspect: what is in a checkpoint, by family, headers only. */
#include <stdio.h>
#include <stdlib.h>

#include "cliopt.h"
#include "commands.h"
#include "inspect.h"

static const cli_opt inspect_opts[] = {
    {"--json", NULL, "print the census as JSON"},
    {NULL, NULL, NULL},
};

static const cli_spec inspect_spec = {
    "inspect", "DIR",
    "Reads config.json and the safetensors headers and prints the tensor table by family\n"
    "(dtype x suffix x count x bytes), shard sizes, the architecture class (dense / MoE,\n"
    "experts, layers, vision present), the quantization_config summary and whether input\n"
    "activations are quantized.",
    inspect_opts, 1, 1,
};

int cmd_inspect(int argc, char **argv)
{
    cli_args a;
    ff_err e = {0};
    if (cli_parse(&inspect_spec, argc, argv, &a, &e))
        return cmd_report("inspect", &e);
    if (a.help) {
        cli_print_help(&inspect_spec, stdout);
        return 0;
    }
    ckpt c;
    insp s = {0};
    int rc = ckpt_open(&c, a.pos[0], 0, &e);
    if (!rc)
        rc = insp_build(&s, &c, &e);
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
