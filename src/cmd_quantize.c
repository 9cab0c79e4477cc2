#include <stdio.h>

#include "commands.h"

int cmd_quantize(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge quantize: not implemented yet\n");
    return 1;
}
