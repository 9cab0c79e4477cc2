/* Placeholder: the verify command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_verify(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge verify: not implemented yet\n");
    return 1;
}
