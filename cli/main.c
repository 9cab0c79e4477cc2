/* The thin CLI: find the command in the table and dispatch it (parsing is
 * central, in commands.c). All work is in the library. */
#include <stdio.h>
#include <string.h>

#include "cliopt.h"
#include "commands.h"
#include "version.h"

static void usage(FILE *out)
{
    fprintf(out, "fp4forge %s: bf16 Hugging Face checkpoints -> vLLM NVFP4A16, with every silent failure made loud\n\n"
                 "usage: fp4forge COMMAND [ARGS] (fp4forge COMMAND --help for its options)\n\ncommands:\n",
            FP4FORGE_VERSION);
    int width = 0;
    for (const ff_command *c = ff_commands; c->spec; c++)
        width = (int)strlen(c->spec->cmd) > width ? (int)strlen(c->spec->cmd) : width;
    for (const ff_command *c = ff_commands; c->spec; c++)
        fprintf(out, "  %-*s %s\n", width, c->spec->cmd, c->summary);
}

/* An unknown command: the closest known one when it is a typo (quantise),
 * else the list. */
static int unknown_command(const char *name)
{
    const char *names[64];
    size_t n = 0;
    for (const ff_command *c = ff_commands; c->spec && n < 64; c++)
        names[n++] = c->spec->cmd;
    const char *near = cli_closest(name, names, n);
    if (near) {
        fprintf(stderr, "fp4forge: unknown command '%s'; did you mean '%s'? (fp4forge --help lists them)\n", name,
                near);
        return 2;
    }
    fprintf(stderr, "fp4forge: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}

/* fp4forge help [COMMAND]: the command's own help, as COMMAND --help. */
static int help(int argc, char **argv)
{
    if (argc < 3) {
        usage(stdout);
        return 0;
    }
    const ff_command *c = ff_command_find(argv[2]);
    if (!c)
        return unknown_command(argv[2]);
    cli_spec merged;
    cli_opt opts[FF_MAX_OPTS];
    cli_print_help(ff_command_spec(c, &merged, opts, FF_MAX_OPTS), stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "help"))
        return help(argc, argv);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
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
    return unknown_command(argv[1]);
}
