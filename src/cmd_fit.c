/* Placeholder: the fit command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_fit(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge fit: not implemented yet\n");
    return 1;
}
