/* Placeholder: the inspect command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_inspect(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge inspect: not implemented yet\n");
    return 1;
}
