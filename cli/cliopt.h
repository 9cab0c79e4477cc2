/* One option parser for every command, so `fp4forge CMD --help` is generated
 * from the same table that parses, and the two cannot drift apart. */
#ifndef FF_CLIOPT_H
#define FF_CLIOPT_H

#include <stdint.h>
#include <stdio.h>

#include "ff_err.h"

typedef struct cli_opt {
    const char *name;     /* "--threads" */
    const char *arg;      /* "N", or NULL for a flag */
    const char *help;
} cli_opt;

typedef struct cli_spec {
    const char *cmd;      /* "quantize" */
    const char *usage;    /* "IN_DIR OUT_DIR" */
    const char *summary;  /* one paragraph */
    const cli_opt *opts;  /* terminated by {NULL} */
    int min_pos, max_pos;
    void (*more_help)(FILE *out);  /* generated help after the options (may be NULL) */
} cli_spec;

#define CLI_MAX_POS 8
#define CLI_MAX_VALS 64

typedef struct cli_args {
    const char *pos[CLI_MAX_POS];
    int npos;
    const char *name[CLI_MAX_VALS];
    const char *val[CLI_MAX_VALS];   /* "" for flags */
    int nval;
    int help;
    int version;          /* --version given to a command */
    /* the Hugging Face cache name ("org/name") positional i was resolved
     * from, NULL when it was given as a path (see cli_resolve_inputs) */
    const char *hf_repo[CLI_MAX_POS];
} cli_args;

/* The name in names[0..n) closest to word (two edits at most, or a word of
 * four letters or more that begins it), or NULL: for "did you mean". */
const char *cli_closest(const char *word, const char *const *names, size_t n);
/* argv[0] is the command name. On --help (--version), sets a->help
 * (a->version) and returns 0. */
int cli_parse(const cli_spec *s, int argc, char **argv, cli_args *a, ff_err *e);
void cli_print_help(const cli_spec *s, FILE *out);
/* Last value given for an option, or NULL. */
const char *cli_get(const cli_args *a, const char *name);
int cli_flag(const cli_args *a, const char *name);
/* Iterates repeated options: *it starts at 0. */
const char *cli_next(const cli_args *a, const char *name, int *it);
/* Parses sizes like "5GB", "4GiB", "512MB", "1e9" into bytes (finite, >= 0). */
int cli_parse_size(const char *s, double *bytes);

/* Strict numeric options: the whole text must be the number, finite and in
 * [lo, hi], else one usage line naming the option (exit 2). An absent
 * option leaves *out as it was (the default). */
int cli_int(const cli_args *a, const char *name, long long lo, long long hi, long long *out, ff_err *e);
int cli_real(const cli_args *a, const char *name, double lo, double hi, double *out, ff_err *e);
int cli_size(const cli_args *a, const char *name, double lo, double hi, double *out, ff_err *e);
/* --threads: 1 .. 8 x the CPUs online (0 = all cores when absent). */
int cli_threads(const cli_args *a, int *out, ff_err *e);
/* --shard-size: 1 kB .. 1 PB, default 5 GB. */
int cli_shard_size(const cli_args *a, uint64_t *out, ff_err *e);

#endif
