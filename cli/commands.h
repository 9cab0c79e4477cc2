/* The command table: each command's spec (name, positional arity, options,
 * help) and its entry point. main() parses argv against the spec once,
 * centrally, so arity, unknown options and --help are checked in one place
 * and a command's body starts with parsed arguments. */
#ifndef FF_COMMANDS_H
#define FF_COMMANDS_H

#include <stddef.h>

#include "cliopt.h"
#include "ff_err.h"

/* A command's body: returns the process exit status. */
typedef int (*ff_command_fn)(const cli_args *a);

/* Options a command takes from the library's tables (synth's family knobs):
 * fills buf with at most cap of them, returns how many. */
typedef size_t (*ff_more_opts_fn)(cli_opt *buf, size_t cap);

typedef struct ff_command {
    const cli_spec *spec;
    ff_command_fn run;
    const char *summary;      /* one line for `fp4forge --help` */
    int out_pos;              /* the positional that names the output folder; -1: none */
    /* NULL, or options spliced into spec's after its first more_at (the
     * library's tables hold them: adding a family adds its knobs here) */
    ff_more_opts_fn more_opts;
    size_t more_at;
} ff_command;

#define FF_MAX_OPTS 96
/* The command's spec with its more_opts spliced in (in --help order), built
 * in *tmp over buf (cap entries, terminator included); c->spec itself when
 * it has none. The one spec parse, --help and completion read. */
const cli_spec *ff_command_spec(const ff_command *c, cli_spec *tmp, cli_opt *buf, size_t cap);

#define FF_DECLARE_COMMAND(name)        \
    extern const cli_spec name##_spec;  \
    int cmd_##name(const cli_args *a)

FF_DECLARE_COMMAND(synth);
size_t synth_knob_opts(cli_opt *buf, size_t cap);
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
