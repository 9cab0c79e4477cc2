/* fp4forge diff: exit 0 same structure, 6 different, 5 classes differ. */
#include <stdio.h>
#include <stdlib.h>

#include "cliopt.h"
#include "cmd_common.h"
#include "commands.h"
#include "diff.h"

static const cli_opt options[] = {
    {"--allow-class-mismatch", NULL, "compare even when the architecture classes differ"},
    {"--values", NULL, "also compare the values of every tensor both hold (bytes; float tensors' relative difference)"},
    {"--json", NULL, "print the comparison as JSON"},
    {"--html", "FILE", "also write the comparison as one self-contained page"},
    {NULL, NULL, NULL},
};

const cli_spec diff_spec = {
    "diff", "A B",
    "Compares two checkpoints (headers and config; --values reads the data): architecture class\n"
    "first (dense vs MoE, expert count, layer count, vision) and refuses with exit 5 if they\n"
    "differ, since such a control cannot show the differences that matter; then the tensor table\n"
    "family by family and count by count, names, shapes and dtypes, the ignore lists (set\n"
    "differences by module name, grouped: '12 missing: ...layers.N.<module>'), and shard sizes.\n"
    "--values also compares the data of every tensor both hold (two outputs of one model: packed\n"
    "codes, FP8 and global scales byte for byte; float tensors' relative difference), worst first.\n"
    "Exit 0 same, 6 different, 5 class mismatch.",
    options, 2, 2, NULL,
};

int cmd_diff(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    json_t *r;
    int rc = diff_run(a.pos[0], a.pos[1], cli_flag(&a, "--allow-class-mismatch"), cli_flag(&a, "--values"), &r, &e);
    if (!r)
        return cmd_report("diff", &e);
    const char *html = cli_get(&a, "--html");
    if (html && cmd_write_page(html, diff_write_html, r, &e)) {
        json_decref(r);
        return cmd_report("diff", &e);
    }
    if (cli_flag(&a, "--json")) {
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
    } else {
        diff_print(r, stdout);
    }
    int same = json_is_true(json_object_get(r, "same"));
    json_decref(r);
    if (rc)
        return cmd_report("diff", &e);
    return same ? 0 : FF_EVERIFY;
}
