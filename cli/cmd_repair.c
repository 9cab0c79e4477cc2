/* fp4forge repair-scales: one global scale per fused group of an existing
 * NVFP4 checkpoint (someone else's download), so vLLM's one scale per fused
 * GEMM is right for every piece. */
#include <stdio.h>
#include <stdlib.h>

#include "cliopt.h"
#include "commands.h"
#include "repair.h"

static const cli_opt options[] = {
    {"--against", "SRC_DIR", "the bf16 source: re-quantize the affected groups from it instead"},
    {"--shard-size", "SIZE", "target shard size, e.g. 5GB (default), 500MB"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {"--json", NULL, "print the report as JSON"},
    {NULL, NULL, NULL},
};

const cli_spec repair_scales_spec = {
    "repair-scales", "IN_DIR OUT_DIR",
    "Gives every fused group (q/k/v, gate/up, each expert's gate/up, as the family's rule table\n"
    "ties them) one global scale. Without --against: the group takes the smallest of its global\n"
    "scales and each other piece's FP8 block scales are re-expressed under it (FP4 codes\n"
    "unchanged; scales only shrink, so none can overflow 448); the report gives, per group and\n"
    "overall, the worst relative change of a decoded weight and the scales that underflowed.\n"
    "With --against SRC_DIR: the affected groups are quantized again from the bf16 source, as\n"
    "quantize does. Every other tensor is copied byte for byte, config.json and the other files\n"
    "are carried; IN_DIR is never written. A checkpoint with nothing to repair is copied and\n"
    "reported as such (exit 0). Exit 0 written, 1 bad input, 2 usage.",
    options, 2, 2, NULL,
};

int cmd_repair_scales(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    repair_opts o = {.against = cli_get(&a, "--against"), .force = cli_flag(&a, "--force")};
    if (cli_shard_size(&a, &o.shard_size, &e))
        return cmd_report("repair-scales", &e);
    json_t *r;
    if (repair_run(a.pos[0], a.pos[1], &o, &r, &e))
        return cmd_report("repair-scales", &e);
    if (cli_flag(&a, "--json")) {
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
    } else {
        repair_print(r, stdout);
    }
    json_decref(r);
    return 0;
}
