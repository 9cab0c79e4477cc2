/* The thin CLI: find the command in the table and dispatch it (parsing is
 * central, in commands.c). All work is in the library. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "version.h"

static void usage(FILE *out)
{
    fprintf(out, "fp4forge %s: bf16 Hugging Face checkpoints -> vLLM NVFP4A16, with every silent failure made loud\n\n"
                 "usage: fp4forge COMMAND [ARGS] (fp4forge COMMAND --help for its options)\n\ncommands:\n",
            FP4FORGE_VERSION);
    for (const ff_command *c = ff_commands; c->spec; c++)
        fprintf(out, "  %-10s %s\n", c->spec->cmd, c->summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("fp4forge %s\n", FP4FORGE_VERSION);
        return 0;
    }
    const ff_command *c = ff_command_find(argv[1]);
    if (c)
        return ff_command_dispatch(c, argc - 1, argv + 1);
    fprintf(stderr, "fp4forge: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
