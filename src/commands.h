/* Every CLI command: int cmd_X(int argc, char **argv), argv[0] = "X".
 * Each prints its own output and returns the process exit status. */
#ifndef FF_COMMANDS_H
#define FF_COMMANDS_H

int cmd_quantize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_fit(int argc, char **argv);
int cmd_dequantize(int argc, char **argv);

typedef struct ff_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} ff_command;

extern const ff_command ff_commands[];

/* Prints "fp4forge CMD: message" on stderr and returns code: the one place a
 * command turns an ff_err into output. */
struct ff_err;
int cmd_report(const char *cmd, const struct ff_err *e);

#endif
