#include <stdio.h>

#include "commands.h"

int cmd_plan(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge plan: not implemented yet\n");
    return 1;
}
