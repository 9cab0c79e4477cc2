/* Placeholder: the probe command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_probe(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge probe: not implemented yet\n");
    return 1;
}
