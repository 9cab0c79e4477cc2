/* Placeholder: the diff command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_diff(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge diff: not implemented yet\n");
    return 1;
}
