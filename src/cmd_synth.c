#include <stdio.h>

#include "commands.h"

int cmd_synth(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge synth: not implemented yet\n");
    return 1;
}
