/* Placeholder: the doctor command is being built (see its issue). */
#include <stdio.h>

#include "commands.h"

int cmd_doctor(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "fp4forge doctor: not implemented yet\n");
    return 1;
}
