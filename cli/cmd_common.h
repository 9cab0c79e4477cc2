/* Pieces several commands share: recipe options, opening + planning. */
#ifndef FF_CMD_COMMON_H
#define FF_CMD_COMMON_H

#include "cliopt.h"
#include "hfcache.h"
#include "plan.h"
#include "seat.h"

/* The recipe options (plan and quantize take the same ones). */
#define RECIPE_OPTS                                                                            \
    {"--ignore", "REGEX", "never quantize modules matching REGEX (repeatable)"},               \
    {"--only", "REGEX", "quantize only Linears matching REGEX (repeatable)"},                  \
    {"--fp8", "REGEX", "write matching Linears FP8 weight-only (channel-wise) instead of NVFP4 (repeatable)"}, \
    {"--allow-router-quantization", NULL, "let --only quantize MoE routers (they serve NaN)"}, \
    {"--allow-partial", NULL, "accept a quantize set smaller than the config implies"},        \
    FAMILY_OPTS

/* The family, where the config's model_type names none fp4forge knows. */
#define FAMILY_OPTS                                                                            \
    {"--family-file", "FILE", "the family as a description (docs/family-files.md), used as a built-in one"}, \
    {"--infer-family", NULL, "an unknown architecture: infer its description, used only when every invariant is derived"}

/* The seat options fit reads (fit takes these and more). */
#define SEAT_FIT_OPTS                                                                          \
    {"--gpu-free", "SIZE", "memory free on the GPU for this seat now (e.g. 19.9GiB)"},         \
    {"--gpu-total", "SIZE", "the GPU's total memory (e.g. 96GiB)"},                            \
    {"--utilization", "U", "--gpu-memory-utilization the seat would get (with --gpu-total)"}, \
    {"--context", "N", "tokens per sequence, vLLM's --max-model-len (default 262144)"},        \
    {"--kv-dtype", "T", "bf16 (default) or fp8"},                                              \
    {"--max-seqs", "N", "sequences that must each hold the full context at once (default 1)"}, \
    {"--text-only", NULL, "served with --language-model-only: no vision weights, no encoder reserve"}

/* A budget for plan and quantize: bytes, or what fit leaves on a seat. */
#define SEAT_OPTS                                                                              \
    {"--budget", "SIZE", "weight bytes the output may take (e.g. 133968845, 128MiB, 19.9GiB): the most sensitive Linears go FP8 or stay bf16 while it fits"}, \
    {"--fit", NULL, "the budget is what the seat leaves for the weights after vLLM's KV cache (fit's options)"}, \
    SEAT_FIT_OPTS

/* fit's options (the seat's and fit's own) into o, checked. */
int fit_opts_from_cli(const cli_args *a, fit_opts *o, ff_err *e);
/* --budget / --fit and the seat into s; threads for the measuring pass. */
int seat_from_cli(const cli_args *a, int threads, plan_seat *s, ff_err *e);

typedef struct recipe_args {
    const char *ignore[CLI_MAX_VALS];
    const char *only[CLI_MAX_VALS];
    const char *fp8[CLI_MAX_VALS];
    ff_family *family;       /* --family-file, loaded */
    plan_opts opts;
} recipe_args;

/* The recipe options into r; loads --family-file (recipe_free frees it). */
int recipe_from_cli(const cli_args *a, recipe_args *r, ff_err *e);
void recipe_free(recipe_args *r);
/* Prints the plan of dir (as `fp4forge plan`; JSON with json) and returns
 * its status: plan and quantize --dry-run share it. */
int plan_and_print(const char *dir, const recipe_args *r, const plan_seat *seat, int json, ff_err *e);
/* Checkpoint inputs given as Hugging Face cache names, resolved once for
 * every command (cli_resolve_inputs); owns the resolved paths. */
typedef struct cli_inputs {
    hf_ref refs[CLI_MAX_POS + 1];
    int nrefs;
    char *default_out;
} cli_inputs;

/* For cmd: replaces each positional (and option value) that names a
 * checkpoint folder and is an `org/name[@revision]` of the local cache with
 * its snapshot folder (a->hf_repo records the name), fills a missing output
 * folder with its default (quantize: ./<name>-NVFP4A16), refuses an
 * option that writes into its input (doctor --fix) on a cache name or path,
 * and a report file (verify, diff --html) inside a folder the command reads. */
int cli_resolve_inputs(const char *cmd, cli_args *a, cli_inputs *in, ff_err *e);
void cli_inputs_free(cli_inputs *in);

/* Writes a report page (verify --html, diff --html) to PATH with WRITER. */
int cmd_write_page(const char *path, int (*writer)(const json_t *, FILE *), const json_t *r, ff_err *e);

#endif
