/* The command table: each command's spec (name, positional arity, options,
 * help) and its entry point. main() parses argv against the spec once,
 * centrally, so arity, unknown options and --help are checked in one place
 * and a command's body starts with parsed arguments. */
#ifndef FF_COMMANDS_H
#define FF_COMMANDS_H

#include "cliopt.h"
#include "ff_err.h"

/* A command's body: returns the process exit status. */
typedef int (*ff_command_fn)(const cli_args *a);

typedef struct ff_command {
    const cli_spec *spec;
    ff_command_fn run;
    const char *summary;      /* one line for `fp4forge --help` */
    int out_pos;              /* the positional that names the output folder; -1: none */
} ff_command;

#define FF_DECLARE_COMMAND(name)        \
    extern const cli_spec name##_spec;  \
    int cmd_##name(const cli_args *a)

FF_DECLARE_COMMAND(synth);
FF_DECLARE_COMMAND(plan);
FF_DECLARE_COMMAND(quantize);
FF_DECLARE_COMMAND(dequantize);
FF_DECLARE_COMMAND(inspect);
FF_DECLARE_COMMAND(verify);
FF_DECLARE_COMMAND(diff);
FF_DECLARE_COMMAND(doctor);
FF_DECLARE_COMMAND(merge);
FF_DECLARE_COMMAND(fit);
FF_DECLARE_COMMAND(probe);
FF_DECLARE_COMMAND(repair_scales);
FF_DECLARE_COMMAND(completion);

extern const ff_command ff_commands[];

/* Finds a command by name, or NULL. */
const ff_command *ff_command_find(const char *name);
/* Parses argv (argv[0] = the command's name) and runs it: the one place
 * usage errors and --help are handled. */
int ff_command_dispatch(const ff_command *c, int argc, char **argv);
/* Prints "fp4forge CMD: message" on stderr and returns the code: the one
 * place a command turns an ff_err into output. */
int cmd_report(const char *cmd, const ff_err *e);

#endif
