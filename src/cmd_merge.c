/* Placeholder: the merge command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_merge(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge merge: not implemented yet\n");
    return 1;
}
